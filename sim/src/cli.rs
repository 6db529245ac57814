//! The `backend-sim` subcommand.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

use super::{start, SimAuth, SimConfig, SimError};
use midonet_translators::Secret;

/// Run the MidoNet API simulator until Ctrl-C or SIGTERM.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Address to listen on (port 0 picks a free port). The API is served under
    /// /midonet-api, the admin API under /_sim/.
    #[arg(long, default_value = "127.0.0.1:8181")]
    pub listen: SocketAddr,

    /// Require logins with this user name (enables authentication; needs a password).
    #[arg(long, requires = "password_source")]
    pub username: Option<String>,

    /// Password of --username.
    #[arg(
        long,
        env = "MIDONET_SIM_PASSWORD",
        hide_env_values = true,
        group = "password_source"
    )]
    pub password: Option<String>,

    /// File holding the password of --username (trailing newline ignored).
    #[arg(long, value_name = "FILE", group = "password_source")]
    pub password_file: Option<PathBuf>,

    /// Project a login must name in X-Auth-Project (default: any project).
    #[arg(long)]
    pub project: Option<String>,

    /// Lifetime of session tokens, in seconds.
    #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
    pub token_ttl: u64,

    /// A host GET /hosts lists, as NAME=UUID, or NAME alone for an id derived from the
    /// name. Repeatable.
    #[arg(long = "host", value_name = "NAME[=UUID]")]
    pub hosts: Vec<String>,

    /// File of hosts: a JSON array of {"name", "id"}, or one NAME[=UUID] per line
    /// (# starts a comment).
    #[arg(long, value_name = "FILE")]
    pub hosts_file: Option<PathBuf>,

    /// Keep the state in this JSON file across restarts (written shortly after every
    /// change and at shutdown).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
}

impl SimArgs {
    /// The simulator configuration these arguments describe.
    pub fn to_config(&self) -> Result<SimConfig, SimError> {
        let auth = match &self.username {
            None => {
                if self.password.is_some() || self.password_file.is_some() {
                    return Err(SimError::Args(
                        "a password needs --username to enable authentication".into(),
                    ));
                }
                None
            }
            Some(username) => {
                let password = match (&self.password, &self.password_file) {
                    (Some(p), _) => p.clone(),
                    (None, Some(file)) => std::fs::read_to_string(file)
                        .map_err(|e| {
                            SimError::Args(format!(
                                "cannot read the password file {}: {e}",
                                file.display()
                            ))
                        })?
                        .trim_end_matches(['\n', '\r'])
                        .to_string(),
                    (None, None) => {
                        return Err(SimError::Args(
                            "--username needs --password or --password-file".into(),
                        ))
                    }
                };
                Some(SimAuth {
                    username: username.clone(),
                    password: Secret::new(password),
                    project: self.project.clone().unwrap_or_default(),
                    token_ttl: Duration::from_secs(self.token_ttl),
                })
            }
        };
        let mut hosts = Vec::new();
        for spec in &self.hosts {
            hosts.push(parse_host(spec)?);
        }
        if let Some(file) = &self.hosts_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| SimError::Hosts(format!("cannot read {}: {e}", file.display())))?;
            hosts.extend(parse_hosts_file(&text)?);
        }
        Ok(SimConfig {
            listen: self.listen,
            auth,
            hosts,
            snapshot: self.snapshot.clone(),
            ..SimConfig::default()
        })
    }
}

/// The id of a host given by name only: stable across runs.
pub fn host_id_for_name(name: &str) -> Uuid {
    let namespace = Uuid::new_v5(
        &Uuid::NAMESPACE_URL,
        b"midonet-kube-controllers/backend-sim/host",
    );
    Uuid::new_v5(&namespace, name.as_bytes())
}

/// `NAME=UUID` or `NAME`.
fn parse_host(spec: &str) -> Result<(String, Uuid), SimError> {
    let (name, id) = match spec.split_once('=') {
        Some((name, id)) => {
            let id = Uuid::parse_str(id.trim())
                .map_err(|_| SimError::Hosts(format!("{spec:?}: {id:?} is not a UUID")))?;
            (name.trim(), id)
        }
        None => (spec.trim(), host_id_for_name(spec.trim())),
    };
    if name.is_empty() {
        return Err(SimError::Hosts(format!("{spec:?}: the host name is empty")));
    }
    Ok((name.to_string(), id))
}

fn parse_hosts_file(text: &str) -> Result<Vec<(String, Uuid)>, SimError> {
    if text.trim_start().starts_with('[') {
        let seeds: Vec<super::admin::HostSeed> = serde_json::from_str(text)
            .map_err(|e| SimError::Hosts(format!("not a JSON array of {{name, id}}: {e}")))?;
        return Ok(seeds.into_iter().map(|h| (h.name, h.id)).collect());
    }
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(parse_host)
        .collect()
}

/// Serves until Ctrl-C or SIGTERM, then shuts down cleanly (writing the snapshot).
pub async fn run_cli(args: SimArgs) -> Result<(), SimError> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let cfg = args.to_config()?;
    let handle = start(cfg).await?;
    println!(
        "MidoNet API simulator: API {} admin API {}",
        handle.api_url(),
        handle.admin_url()
    );
    wait_for_termination().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

async fn wait_for_termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops"),
        }
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "cannot watch Ctrl-C; stopping now");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: SimArgs,
    }

    fn parse(argv: &[&str]) -> Result<SimConfig, String> {
        let w = Wrapper::try_parse_from(std::iter::once("sim").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        w.args.to_config().map_err(|e| e.to_string())
    }

    #[test]
    fn hosts_from_flags_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(
            &file,
            "# nodes\nnode2=22222222-2222-4222-8222-222222222222\n\nnode3 # by name\n",
        )
        .unwrap();
        let cfg = parse(&[
            "--host",
            "node1=11111111-1111-4111-8111-111111111111",
            "--hosts-file",
            file.to_str().unwrap(),
        ])
        .unwrap();
        let names: Vec<&str> = cfg.hosts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["node1", "node2", "node3"]);
        assert_eq!(cfg.hosts[2].1, host_id_for_name("node3"));
        assert!(cfg.auth.is_none());

        std::fs::write(
            &file,
            r#"[{"name": "n", "id": "33333333-3333-4333-8333-333333333333"}]"#,
        )
        .unwrap();
        let cfg = parse(&["--hosts-file", file.to_str().unwrap()]).unwrap();
        assert_eq!(cfg.hosts[0].0, "n");
        assert!(parse(&["--host", "x=not-a-uuid"]).is_err());
        assert!(parse(&["--host", "=11111111-1111-4111-8111-111111111111"]).is_err());
    }

    #[test]
    fn authentication_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let cfg = parse(&[
            "--username",
            "admin",
            "--password-file",
            file.to_str().unwrap(),
            "--project",
            "p",
        ])
        .unwrap();
        let auth = cfg.auth.unwrap();
        assert_eq!(auth.password.expose(), "s3cret");
        assert_eq!(auth.project, "p");
        assert!(parse(&["--username", "admin"]).is_err());
        assert!(parse(&["--password", "x"]).is_err());
        assert!(parse(&["--username", "a", "--password", "x", "--password-file", "f"]).is_err());
        // The password never shows in the configuration's Debug output.
        let cfg = parse(&["--username", "admin", "--password", "hunter22"]).unwrap();
        assert!(!format!("{cfg:?}").contains("hunter22"));
    }
}
