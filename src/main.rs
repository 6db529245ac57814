use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    BackendSim(Box<midonet_sim::SimArgs>),
    /// Trace a connection through the live MidoNet topology with the data-plane model.
    /// Exit 0 when delivered, 1 when dropped, 2 on error. Takes the same settings as `run`.
    Trace {
        #[command(flatten)]
        trace: netcheck::TraceArgs,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// Check every connection Kubernetes promises (pods, Services, nodes) on the live
    /// MidoNet topology. Exit 0 when all work, 1 on failures, 2 on error.
    Check {
        #[command(flatten)]
        check: netcheck::CheckArgs,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// Show what the controllers would do now (Translations, backend requests, interfaces
    /// rebound, duration) without doing it; with --translation-version, what that version
    /// bump would do. Reads only. Exit 0 when there is nothing to do, 1 when there is
    /// something to do, 2 on error (as `kubectl diff`). Takes the same settings as `run`.
    Plan {
        #[command(flatten)]
        plan: plancmd::PlanArgs,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
}

use midonet_kube_controllers::netcheck::cli as netcheck;
use midonet_kube_controllers::plancmd::cli as plancmd;

/// When invoked as `kubectl-midonet` (a symlink on PATH is enough), kubectl runs it for
/// `kubectl midonet …`; the subcommands are the same.
const KUBECTL_PLUGIN: &str = "kubectl-midonet";

fn invoked_as_plugin(argv0: Option<&std::ffi::OsStr>) -> bool {
    argv0
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == KUBECTL_PLUGIN)
}

/// Runs a read-only command (`trace`, `check`, `plan`): exit 2 for bad settings and
/// errors, else what `outcome` says about the result.
fn run_read_only<Fut, T, E>(
    args: RunArgs,
    job: impl FnOnce(Config) -> Fut,
    outcome: impl FnOnce(&T) -> ExitCode,
) -> ExitCode
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    // A command-line tool: the controllers' info logs would bury its answer.
    let level = if cfg.log_level == "info" {
        "warn"
    } else {
        cfg.log_level.as_str()
    };
    midonet_kube_controllers::run::init_logging(level, cfg.log_json);
    let rt = match runtime_for(&cfg) {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(job(cfg));
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(v) => outcome(&v),
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

/// The runtime of a subcommand that takes the controllers' settings: as many threads as
/// `--worker-threads` says (see there why one is the default).
fn runtime_for(cfg: &Config) -> std::io::Result<tokio::runtime::Runtime> {
    match cfg.worker_threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
    }
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
    let rt = match runtime_for(&cfg) {
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

/// Exits on a command-line error. Help and version go out as clap prints them; a refused
/// setting is one line (what a pod's log shows whole; clap's "try --help" hint means
/// nothing there), with clap's exit code.
fn exit_on(err: clap::Error) -> ! {
    if !err.use_stderr() {
        err.exit();
    }
    let text = err.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    eprintln!("{}", lines.join(" "));
    std::process::exit(err.exit_code());
}

/// jemalloc: the process holds hundreds of thousands of small allocations (the cached
/// Translations' strings), which glibc's and musl's allocators round up and pad more than
/// jemalloc's size classes do (the benchmark reports the heap either way). Its settings can be
/// changed with `_RJEM_MALLOC_CONF`. Without the `jemalloc` feature the system allocator
/// is used (for a heap profiler).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The command line, as `midonet-kube-controllers` or as the kubectl plugin; exits on a
/// command-line error.
fn parsed_cli() -> Cli {
    let mut argv = std::env::args_os();
    if invoked_as_plugin(argv.next().as_deref()) {
        let matches = Cli::command()
            .name(KUBECTL_PLUGIN)
            .bin_name("kubectl midonet")
            .try_get_matches()
            .unwrap_or_else(|err| exit_on(err));
        match Cli::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(err) => exit_on(err),
        }
    } else {
        Cli::try_parse().unwrap_or_else(|err| exit_on(err))
    }
}

/// `backend-sim`: the simulator until Ctrl-C or SIGTERM.
fn backend_sim(args: midonet_sim::SimArgs) -> ExitCode {
    // The simulator serves many clients at once (the demo, tests, benchmarks).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(midonet_sim::run_cli(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `crd`: the CustomResourceDefinition as YAML.
fn crd() -> ExitCode {
    match midonet_kube_controllers::crd::crd_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: cannot render the CRD: {err}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    match parsed_cli().command {
        None => {
            // `run` with settings from the environment only.
            match Cli::try_parse_from(["midonet-kube-controllers", "run"]) {
                Ok(Cli {
                    command: Some(Command::Run(args)),
                }) => run(*args),
                Ok(_) => ExitCode::FAILURE,
                Err(err) => exit_on(err),
            }
        }
        Some(Command::Run(args)) => run(*args),
        Some(Command::Sweep { run, delete }) => sweep(*run, delete),
        Some(Command::Trace { trace, run }) => run_read_only(
            *run,
            move |cfg| netcheck::run_trace(cfg, trace),
            |v| match v {
                midonet_dataplane::Verdict::Delivered => ExitCode::SUCCESS,
                midonet_dataplane::Verdict::Dropped | midonet_dataplane::Verdict::Rejected => {
                    ExitCode::FAILURE
                }
                // The model cannot tell: like an error, not a verdict on the network.
                midonet_dataplane::Verdict::Unsupported => ExitCode::from(3),
            },
        ),
        Some(Command::Check { check, run }) => run_read_only(
            *run,
            move |cfg| netcheck::run_check(cfg, check),
            |r: &midonet_dataplane::Report| {
                if r.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            },
        ),
        Some(Command::Plan { plan, run }) => run_read_only(
            *run,
            move |cfg| plancmd::run_plan(cfg, plan),
            |p: &midonet_kube_controllers::plancmd::Plan| {
                if p.nothing_to_do() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            },
        ),
        Some(Command::BackendSim(args)) => backend_sim(*args),
        Some(Command::Crd) => crd(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_name_is_recognised_whatever_the_directory() {
        let is = |s: &str| invoked_as_plugin(Some(std::ffi::OsStr::new(s)));
        assert!(is("kubectl-midonet"));
        assert!(is("/usr/local/bin/kubectl-midonet"));
        assert!(!is("midonet-kube-controllers"));
        assert!(!is("/bin/kubectl-midonet-x"));
        assert!(!invoked_as_plugin(None));
    }

    #[test]
    fn trace_and_check_parse_with_the_connection_settings() {
        let cli = Cli::try_parse_from([
            "x",
            "trace",
            "--from",
            "pod/a/b",
            "--to",
            "svc/a/web:http",
            "-o",
            "json",
            "--tenant",
            "t",
        ])
        .map_err(|e| e.to_string());
        assert!(
            matches!(&cli, Ok(Cli { command: Some(Command::Trace { trace, run }) })
                if trace.output == netcheck::TraceOutput::Json && run.tenant == "t"),
            "{:?}",
            cli.err()
        );
        let cli = Cli::try_parse_from([
            "x",
            "plan",
            "-o",
            "json",
            "--translation-version",
            "2",
            "--request-rate",
            "50",
        ])
        .map_err(|e| e.to_string());
        assert!(
            matches!(&cli, Ok(Cli { command: Some(Command::Plan { plan, run }) })
                if plan.output == plancmd::PlanOutput::Json
                    && plan.request_rate == 50.0
                    && run.translation_version.as_deref() == Some("2")),
            "{:?}",
            cli.err()
        );
        let cli = Cli::try_parse_from(["x", "check", "-o", "table"]).map_err(|e| e.to_string());
        assert!(matches!(
            cli,
            Ok(Cli {
                command: Some(Command::Check { .. })
            })
        ));
    }
}
