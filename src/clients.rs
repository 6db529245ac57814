//! The clients the configuration describes: Kubernetes and the MidoNet API. Every
//! subcommand that talks to either (`run`, `sweep`, `trace`, `check`) builds them here.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use prometheus::Registry;

use crate::backend::{BackendClient, BackendConfig};
use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("Kubernetes client configuration: {0}")]
    KubeConfig(String),
    #[error("MidoNet client: {0}")]
    Backend(#[from] crate::backend::BackendError),
}

/// The Kubernetes client: the configured kubeconfig, else in-cluster, else ~/.kube/config.
pub async fn kube_client(cfg: &Config) -> Result<Client, ClientError> {
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| ClientError::KubeConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| ClientError::KubeConfig(format!("{}: {e}", path.display())))?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => kube::Config::from_kubeconfig(&KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    ClientError::KubeConfig(format!(
                        "not in a cluster and no usable ~/.kube/config: {e}"
                    ))
                })?,
        },
    };
    Client::try_from(config).map_err(|e| ClientError::KubeConfig(e.to_string()))
}

/// The MidoNet API client per the configuration, its metrics registered in `registry`.
pub fn backend_client(cfg: &Config, registry: &Registry) -> Result<BackendClient, ClientError> {
    Ok(BackendClient::new(
        BackendConfig {
            url: cfg.midonet_api.clone(),
            username: cfg.username.clone(),
            password: cfg.password.clone(),
            project: cfg.project.clone(),
            ca_file: cfg.ca_file.clone(),
            timeout: cfg.backend_timeout,
            retry_max_elapsed: Duration::from_secs(30),
        },
        registry,
    )?)
}
