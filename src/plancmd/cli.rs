//! The I/O of `plan`: list the Kubernetes objects and the Translations once (no watch), plan,
//! print. Nothing is written, to the apiserver or to the backend. Exit codes are decided by
//! `main`: 0 nothing to do, 1 something to do, 2 error (as `kubectl diff`).

use std::io::Write;

use kube::api::{Api, ListParams};
use midonet_translators::TranslatorConfig;

use super::{desired, plan, Enabled, Plan, DEFAULT_REQUEST_RATE};
use crate::config::{Config, Controller};
use crate::crd::Translation;
use crate::netcheck::cli::{load_cluster, NetcheckError};

/// `plan -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
}

/// Arguments of `plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: PlanOutput,
    /// Backend requests per second for the duration estimate (default: the rate of the
    /// benchmark's version bump, see docs/benchmark.md).
    #[arg(long, default_value_t = DEFAULT_REQUEST_RATE)]
    pub request_rate: f64,
}

impl Default for PlanArgs {
    fn default() -> Self {
        PlanArgs {
            output: PlanOutput::Text,
            request_rate: DEFAULT_REQUEST_RATE,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Cluster(#[from] NetcheckError),
    #[error("cannot list translations: {0}")]
    Translations(#[source] kube::Error),
    #[error("cannot write the output: {0}")]
    Output(String),
}

/// The controllers `cfg` enables, as far as translation goes.
pub fn enabled(cfg: &Config) -> Enabled {
    Enabled {
        node: cfg.enabled(Controller::Node),
        pod: cfg.enabled(Controller::Pod),
        service: cfg.enabled(Controller::Service),
        endpoints: cfg.enabled(Controller::Endpoints),
        network_policy: cfg.enabled(Controller::NetworkPolicy),
    }
}

/// Lists the cluster and its Translations and plans for the configured Translation version
/// (`--translation-version`, the setting `run` takes, so the plan is for what `run` with the
/// same settings would do). Reads only.
pub async fn compute(cfg: &Config, request_rate: f64) -> Result<Plan, PlanError> {
    if !(request_rate.is_finite() && request_rate > 0.0) {
        return Err(PlanError::Usage(format!(
            "--request-rate must be a positive number, not {request_rate}"
        )));
    }
    let version = cfg.translation_version.clone();
    let kube = crate::clients::kube_client(cfg)
        .await
        .map_err(|e| PlanError::Setup(e.to_string()))?;
    let cluster = load_cluster(&kube).await?;
    let existing = Api::<Translation>::all(kube)
        .list(&ListParams::default())
        .await
        .map_err(PlanError::Translations)?
        .items;
    let tcfg = TranslatorConfig {
        tenant: cfg.tenant.clone(),
        version: version.clone(),
        edge: cfg.edge.clone(),
    };
    let (want, scope) = desired(&tcfg, &cluster, &enabled(cfg));
    Ok(plan(
        &version,
        &want,
        &existing,
        &scope,
        request_rate,
        cfg.bump_cutover,
    ))
}

/// `plan`: prints the plan; answers it for the exit code.
pub async fn run_plan(cfg: Config, args: PlanArgs) -> Result<Plan, PlanError> {
    let p = compute(&cfg, args.request_rate).await?;
    let text = match args.output {
        PlanOutput::Text => p.render_text(),
        PlanOutput::Json => {
            let mut s =
                serde_json::to_string_pretty(&p).map_err(|e| PlanError::Output(e.to_string()))?;
            s.push('\n');
            s
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| PlanError::Output(e.to_string()))?;
    Ok(p)
}
