use std::process::ExitCode;

use clap::{Parser, Subcommand};
use midonet_kube_controllers::config::{Config, RunArgs};

/// Kubernetes controllers that turn cluster objects into MidoNet backend resources.
///
/// Without a subcommand, `run` is assumed (with its settings from MIDONETKUBE_* variables).
#[derive(Parser)]
#[command(name = "midonet-kube-controllers", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers (the default).
    Run(Box<RunArgs>),
    /// Print the Translation CustomResourceDefinition as YAML.
    Crd,
    /// List backend resources of the tenant that no Translation claims (`KIND PATH` per
    /// line); with --delete, delete them. Takes the same settings as `run`.
    Sweep {
        #[command(flatten)]
        run: Box<RunArgs>,
        /// Delete the orphans found (default: only print them).
        #[arg(long)]
        delete: bool,
    },
    /// Run the MidoNet REST API simulator (for tests and demos) until Ctrl-C or SIGTERM.
    BackendSim(Box<midonet_kube_controllers::sim::SimArgs>),
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Validates the settings, sets up logging and runs `job` on a runtime: exit 2 for bad
/// settings, 1 for a failed job.
fn run_with<Fut, E>(args: RunArgs, job: impl FnOnce(Config) -> Fut) -> ExitCode
where
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    midonet_kube_controllers::run::init_logging(&cfg.log_level, cfg.log_json);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(job(cfg));
    // Background tasks (watches) must not hold up the exit.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "exiting");
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    run_with(args, midonet_kube_controllers::run::run)
}

fn sweep(args: RunArgs, delete: bool) -> ExitCode {
    run_with(args, move |cfg| {
        midonet_kube_controllers::sweep::run_cli(cfg, delete)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => {
            // `run` with settings from the environment only.
            match Cli::try_parse_from(["midonet-kube-controllers", "run"]) {
                Ok(Cli {
                    command: Some(Command::Run(args)),
                }) => run(*args),
                Ok(_) => ExitCode::FAILURE,
                Err(err) => err.exit(),
            }
        }
        Some(Command::Run(args)) => run(*args),
        Some(Command::Sweep { run, delete }) => sweep(*run, delete),
        Some(Command::BackendSim(args)) => {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(err) => {
                    eprintln!("error: cannot start the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(midonet_kube_controllers::sim::run_cli(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Crd) => match midonet_kube_controllers::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: cannot render the CRD: {err}");
                ExitCode::FAILURE
            }
        },
    }
}
