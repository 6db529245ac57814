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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
