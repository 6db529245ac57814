use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kubernetes controllers that turn cluster objects into MidoNet backend resources.
#[derive(Parser)]
#[command(name = "midonet-kube-controllers", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print the Translation CustomResourceDefinition as YAML.
    Crd,
    /// Run the MidoNet REST API simulator (for tests and demos) until Ctrl-C or SIGTERM.
    BackendSim(Box<midonet_kube_controllers::sim::SimArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::BackendSim(args)) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("error: cannot start the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(midonet_kube_controllers::sim::run_cli(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Crd) | None => match midonet_kube_controllers::crd::crd_yaml() {
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
