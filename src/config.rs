//! Configuration of `midonet-kube-controllers run`: every setting is a flag with a
//! `MIDONETKUBE_`-prefixed environment variable, declared once in [`RunArgs`] with the
//! value parser that turns it into its type. An invalid value is refused while the
//! command line is read, with clap's message naming the flag and the variable; the
//! password is never printed.
//!
//! The original Go controller read a few settings under other names
//! ([`LEGACY_ENV`]). Operators upgrading keep their manifests, so those names are still
//! read when the current setting is not given, and each use is reported as deprecated:
//! silently ignoring them would run the controllers with default credentials.

use std::ffi::OsStr;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::Args;
use midonet_translators::model::Ipv4Cidr;
pub use midonet_translators::Secret;
use url::Url;

/// The controllers `--controllers` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Controller {
    /// Translates Nodes.
    Node,
    /// Translates Pods.
    Pod,
    /// Translates Services.
    Service,
    /// Translates Services' endpoints.
    Endpoints,
    /// Translates NetworkPolicies.
    NetworkPolicy,
    /// Pushes Translations to the backend.
    Pusher,
    /// Annotates Nodes with their MidoNet host ID.
    NodeAnnotator,
    /// Gives LoadBalancer Services addresses of the `--lb-pool` pools (none: off).
    LbIpam,
}

impl Controller {
    pub const ALL: [Controller; 8] = [
        Controller::Node,
        Controller::Pod,
        Controller::Service,
        Controller::Endpoints,
        Controller::NetworkPolicy,
        Controller::Pusher,
        Controller::NodeAnnotator,
        Controller::LbIpam,
    ];

    /// The name `--controllers` and the logs use.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Node => "node",
            Controller::Pod => "pod",
            Controller::Service => "service",
            Controller::Endpoints => "endpoints",
            Controller::NetworkPolicy => "networkpolicy",
            Controller::Pusher => "pusher",
            Controller::NodeAnnotator => "nodeannotator",
            Controller::LbIpam => "lbipam",
        }
    }

    pub fn from_name(name: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Talks to the backend (the others only to Kubernetes).
    pub fn needs_backend(self) -> bool {
        matches!(self, Controller::Pusher | Controller::NodeAnnotator)
    }

    /// Translates a kind into Translations.
    pub fn is_translator(self) -> bool {
        !matches!(
            self,
            Controller::Pusher | Controller::NodeAnnotator | Controller::LbIpam
        )
    }

    fn all_names() -> String {
        Controller::ALL.map(Controller::name).join(", ")
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings as given. Each value is parsed and checked by its clap value parser
/// ([`setting`]), so a bad one is refused while the command line is read, naming the
/// flag and its variable; what is left for [`RunArgs::validate`] is the original
/// controller's variables and reading the password file.
#[derive(Args, Clone)]
pub struct RunArgs {
    /// Log level or filter (e.g. info, debug, midonet_kube_controllers=debug).
    #[arg(
        long,
        env = "MIDONETKUBE_LOG_LEVEL",
        default_value = "info",
        value_parser = setting(parse_log_filter)
    )]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(
        long,
        env = "MIDONETKUBE_LOG_FORMAT",
        default_value = "text",
        value_parser = setting(parse_log_format)
    )]
    pub log_format: LogFormat,
    /// Controllers to run, comma-separated (node, pod, service, endpoints, networkpolicy,
    /// pusher, nodeannotator, lbipam). Default: all.
    // The path-qualified `Vec` makes clap take the whole list as one value.
    #[arg(long, env = "MIDONETKUBE_CONTROLLERS", value_parser = setting(parse_controllers))]
    pub controllers: Option<std::vec::Vec<Controller>>,
    /// Kubeconfig file. Default: in-cluster configuration, then ~/.kube/config.
    #[arg(long, env = "MIDONETKUBE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// MidoNet API base URL, including its path prefix.
    #[arg(
        long,
        env = "MIDONETKUBE_MIDONET_API",
        default_value = "http://127.0.0.1:8181/midonet-api",
        value_parser = setting(parse_api_url)
    )]
    pub midonet_api: Url,
    /// MidoNet API user name. Default: admin.
    #[arg(long, env = "MIDONETKUBE_USERNAME")]
    pub username: Option<String>,
    /// MidoNet API password (prefer --password-file).
    #[arg(
        long,
        env = "MIDONETKUBE_PASSWORD",
        hide_env_values = true,
        value_parser = setting(parse_secret)
    )]
    pub password: Option<Secret>,
    /// File holding the MidoNet API password (e.g. a mounted Secret).
    #[arg(long, env = "MIDONETKUBE_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// MidoNet API project (X-Auth-Project). Default: admin.
    #[arg(long, env = "MIDONETKUBE_PROJECT")]
    pub project: Option<String>,
    /// CA certificate file for an https MidoNet API.
    #[arg(long, env = "MIDONETKUBE_CA_FILE", value_parser = setting(parse_file))]
    pub ca_file: Option<PathBuf>,
    /// The edge toward the outside: a YAML or JSON file naming the gateway hosts' uplinks,
    /// their addresses and next hops, the pod networks and the external ranges (see
    /// docs/operations.md, "The edge"). Without it, only traffic that starts inside the
    /// cluster is served. A file that cannot be read or is invalid stops the start.
    #[arg(long, env = "MIDONETKUBE_EDGE_CONFIG", value_parser = setting(parse_edge_config))]
    pub edge_config: Option<std::sync::Arc<midonet_translators::config::Edge>>,
    /// MidoNet tenant owning the resources the controllers create.
    #[arg(
        long,
        env = "MIDONETKUBE_TENANT",
        default_value = "midonetkube",
        value_parser = setting(parse_non_empty)
    )]
    pub tenant: String,
    /// Address of the metrics and health endpoints (/metrics, /healthz, /readyz).
    #[arg(
        long,
        env = "MIDONETKUBE_METRICS_ADDRESS",
        default_value = ":9453",
        value_parser = setting(parse_listen)
    )]
    pub metrics_address: SocketAddr,
    /// Pusher workers (Translations pushed at the same time).
    #[arg(
        long,
        env = "MIDONETKUBE_PUSHER_WORKERS",
        default_value_t = 8,
        value_parser = setting(parse_at_least_one::<u16>)
    )]
    pub pusher_workers: u16,
    /// Workers per translator controller.
    #[arg(
        long,
        env = "MIDONETKUBE_TRANSLATOR_WORKERS",
        default_value_t = 4,
        value_parser = setting(parse_at_least_one::<u16>)
    )]
    pub translator_workers: u16,
    /// Threads that run the controllers' tasks. With 1, every task runs on one thread
    /// (tokio's current-thread runtime): the controllers wait on the apiserver and the
    /// backend far more than they compute, and one thread spends no CPU handing work
    /// between threads. More threads help only a controller that is CPU-bound.
    #[arg(
        long,
        env = "MIDONETKUBE_WORKER_THREADS",
        default_value_t = 1,
        value_parser = setting(parse_at_least_one::<u16>)
    )]
    pub worker_threads: u16,
    /// Full resync period (e.g. 10m); in-sync objects cost no backend request.
    #[arg(
        long,
        env = "MIDONETKUBE_RESYNC_PERIOD",
        default_value = "10m",
        value_parser = setting(parse_resync_period)
    )]
    pub resync_period: Duration,
    /// Timeout of one MidoNet API request.
    #[arg(
        long,
        env = "MIDONETKUBE_BACKEND_TIMEOUT",
        default_value = "10s",
        value_parser = setting(parse_duration)
    )]
    pub backend_timeout: Duration,
    /// Period of drift verification of pushed resources (0 disables it).
    // The path-qualified `Option` makes clap read it as one value that may say "off".
    #[arg(
        long,
        env = "MIDONETKUBE_VERIFY_PERIOD",
        default_value = "5m",
        value_parser = setting(parse_optional_period)
    )]
    pub verify_period: std::option::Option<Duration>,
    /// Backend GETs per second drift verification may spend at most.
    #[arg(long, env = "MIDONETKUBE_VERIFY_RATE", default_value_t = 50)]
    pub verify_rate: u32,
    /// Reset the managedFields of Translations Ready and older than this, once (0 disables
    /// it): a third of a fresh Translation in etcd.
    #[arg(
        long,
        env = "MIDONETKUBE_COMPACT_MANAGED_FIELDS_AFTER",
        default_value = "10m",
        value_parser = setting(parse_optional_period)
    )]
    pub compact_managed_fields_after: std::option::Option<Duration>,
    /// Kubernetes events written per second at most (they queue beyond that).
    #[arg(
        long,
        env = "MIDONETKUBE_EVENT_QPS",
        default_value_t = 20.0,
        value_parser = setting(parse_positive_rate)
    )]
    pub event_qps: f64,
    /// Kubernetes events written at once after a quiet period.
    #[arg(
        long,
        env = "MIDONETKUBE_EVENT_BURST",
        default_value_t = 100,
        value_parser = setting(parse_at_least_one::<u32>)
    )]
    pub event_burst: u32,
    /// Period of the orphan sweep (0 disables it).
    #[arg(
        long,
        env = "MIDONETKUBE_ORPHAN_SWEEP_PERIOD",
        default_value = "0",
        value_parser = setting(parse_optional_period)
    )]
    pub orphan_sweep_period: std::option::Option<Duration>,
    /// Delete the orphans the sweep finds (otherwise they are only reported).
    #[arg(long, env = "MIDONETKUBE_ORPHAN_SWEEP_DELETE", default_value_t = false)]
    pub orphan_sweep_delete: bool,
    /// After a pusher that did not stop cleanly, delete what its cut pushes left behind
    /// (see `recovery`).
    #[arg(long, env = "MIDONETKUBE_CRASH_RECOVERY", default_value_t = true, action = clap::ArgAction::Set)]
    pub crash_recovery: bool,
    /// Leader election: only the holder of the Lease runs controllers.
    #[arg(long, env = "MIDONETKUBE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "MIDONETKUBE_LEADER_ELECTION_NAME",
        default_value = "midonet-kube-controllers"
    )]
    pub leader_election_name: String,
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "MIDONETKUBE_LEADER_ELECTION_NAMESPACE",
        default_value = "kube-system"
    )]
    pub leader_election_namespace: String,
    /// Leader-election lease duration.
    #[arg(
        long,
        env = "MIDONETKUBE_LEASE_DURATION",
        default_value = "15s",
        value_parser = setting(parse_duration)
    )]
    pub lease_duration: Duration,
    /// Period after which, without any MidoNet API request, one GET of the API root checks
    /// that it still answers (readiness follows the answers).
    #[arg(
        long,
        env = "MIDONETKUBE_BACKEND_PROBE_PERIOD",
        default_value = "30s",
        value_parser = setting(parse_duration_at_least_100ms)
    )]
    pub backend_probe_period: Duration,
    /// Liveness: a reconcile running longer than this makes /healthz fail.
    #[arg(
        long,
        env = "MIDONETKUBE_LIVENESS_RECONCILE_LIMIT",
        default_value = "5m",
        value_parser = setting(parse_duration_at_least_100ms)
    )]
    pub liveness_reconcile_limit: Duration,
    /// Liveness: a controller with work queued that starts or finishes no reconcile for this
    /// long makes /healthz fail.
    #[arg(
        long,
        env = "MIDONETKUBE_LIVENESS_STALL_LIMIT",
        default_value = "5m",
        value_parser = setting(parse_duration_at_least_100ms)
    )]
    pub liveness_stall_limit: Duration,
    /// The Translation version, which seeds every name and backend ID (default: this
    /// release's). Changing it rebuilds the backend blue/green; see docs/operations.md,
    /// "Upgrading: a Translation version bump".
    #[arg(
        long,
        env = "MIDONETKUBE_TRANSLATION_VERSION",
        value_parser = setting(parse_translation_version)
    )]
    pub translation_version: Option<String>,
    /// How a version bump moves the host-interface bindings to the new version: host by
    /// host over a link between the two versions' cluster routers (pods apart for one
    /// host's batch at most), all at once, or host by host without the link (see
    /// docs/operations.md).
    #[arg(
        long,
        env = "MIDONETKUBE_BUMP_CUTOVER",
        value_enum,
        default_value_t = crate::pusher::CutoverOrder::Linked
    )]
    pub bump_cutover: crate::pusher::CutoverOrder,
    /// An address pool of the LB IPAM (an IPv4 CIDR; repeat the flag, or separate them by
    /// commas, for several pools, used in their order). No pool: the LB IPAM is off, for
    /// clusters where a cloud provider or another IPAM assigns LoadBalancer addresses.
    #[arg(
        long = "lb-pool",
        env = "MIDONETKUBE_LB_POOLS",
        value_delimiter = ',',
        value_parser = setting(parse_lb_pool)
    )]
    pub lb_pools: Vec<Ipv4Cidr>,
}

/// The log line format `--log-format` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Validated configuration.
#[derive(Clone)]
pub struct Config {
    pub log_level: String,
    pub log_json: bool,
    pub controllers: Vec<Controller>,
    pub kubeconfig: Option<PathBuf>,
    pub midonet_api: Url,
    pub username: String,
    pub password: Secret,
    pub project: String,
    pub ca_file: Option<PathBuf>,
    /// The edge (`--edge-config`), validated.
    pub edge: Option<std::sync::Arc<midonet_translators::config::Edge>>,
    pub tenant: String,
    pub metrics_address: SocketAddr,
    pub pusher_workers: u16,
    pub translator_workers: u16,
    pub worker_threads: u16,
    pub resync_period: Duration,
    pub backend_timeout: Duration,
    pub verify_period: Option<Duration>,
    pub verify_rate: u32,
    pub compact_managed_fields_after: Option<Duration>,
    pub event_limits: crate::events::EventLimits,
    pub orphan_sweep_period: Option<Duration>,
    pub orphan_sweep_delete: bool,
    pub crash_recovery: bool,
    pub leader_elect: bool,
    pub leader_election_name: String,
    pub leader_election_namespace: String,
    pub lease_duration: Duration,
    pub translation_version: String,
    pub bump_cutover: crate::pusher::CutoverOrder,
    /// The LB IPAM's pools; empty: off.
    pub lb_pools: crate::lbipam::decide::Pools,
    pub backend_probe_period: Duration,
    pub liveness: crate::health::LivenessLimits,
    /// Settings taken from the original controller's variable names, to report at startup.
    pub deprecated: Vec<DeprecatedUse>,
}

/// Variables of the original Go controller, with the setting each one stands for.
pub const LEGACY_ENV: [DeprecatedEnv; 4] = [
    DeprecatedEnv {
        old: "MIDONETKUBE_MIDONET_USERNAME",
        new: "MIDONETKUBE_USERNAME",
        setting: "--username",
    },
    DeprecatedEnv {
        old: "MIDONETKUBE_MIDONET_PASSWORD",
        new: "MIDONETKUBE_PASSWORD",
        setting: "--password",
    },
    DeprecatedEnv {
        old: "MIDONETKUBE_MIDONET_PROJECT",
        new: "MIDONETKUBE_PROJECT",
        setting: "--project",
    },
    DeprecatedEnv {
        old: "MIDONETKUBE_ENABLED_CONTROLLERS",
        new: "MIDONETKUBE_CONTROLLERS",
        setting: "--controllers",
    },
];

/// A variable of the original controller: its name and what replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeprecatedEnv {
    pub old: &'static str,
    pub new: &'static str,
    pub setting: &'static str,
}

/// How a deprecated variable was treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeprecatedUse {
    /// Its value was used: the current setting was not given.
    Used(DeprecatedEnv),
    /// Ignored: the current setting was given too.
    Ignored(DeprecatedEnv),
}

impl DeprecatedUse {
    /// Logs the deprecation (a WARN line naming both variables; never the value).
    pub fn log(&self) {
        match self {
            DeprecatedUse::Used(d) => tracing::warn!(
                deprecated = d.old,
                replacement = d.new,
                "{} is the original controller's name of {} and is deprecated; set {} instead",
                d.old,
                d.setting,
                d.new
            ),
            DeprecatedUse::Ignored(d) => tracing::warn!(
                deprecated = d.old,
                replacement = d.new,
                "{} is deprecated and ignored: {} is set too",
                d.old,
                d.setting
            ),
        }
    }
}

/// A setting the original controller's variable gave a bad value (the current settings
/// are refused by their value parsers), or a password file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {setting} ({env}): {message}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub env: &'static str,
    pub message: String,
}

fn bad(setting: &'static str, env: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        env,
        message: message.into(),
    }
}

/// The clap value parser of a setting: `parse` refuses a bad value with a message, and
/// the refusal names the setting's variable as well as its flag (clap names the flag),
/// since the value may have come from either.
#[derive(Clone, Copy)]
pub struct Setting<T>(fn(&str) -> Result<T, String>);

/// [`Setting`] from a parse function.
pub fn setting<T>(parse: fn(&str) -> Result<T, String>) -> Setting<T> {
    Setting(parse)
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Setting<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let parse = self.0;
        let env = arg
            .and_then(clap::Arg::get_env)
            .map(|e| e.to_string_lossy().into_owned());
        let named = move |s: &str| {
            parse(s).map_err(|message| match &env {
                Some(env) => format!("{message} [env: {env}]"),
                None => message,
            })
        };
        named.parse_ref(cmd, arg, value)
    }
}

/// Parses `500ms`, `30s`, `10m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 30s, 10m, 1h)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_duration_at_least(s: &str, min: Duration, shown: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min {
        Err(format!("must be at least {shown}"))
    } else {
        Ok(d)
    }
}

fn parse_duration_at_least_100ms(s: &str) -> Result<Duration, String> {
    parse_duration_at_least(s, Duration::from_millis(100), "100ms")
}

fn parse_resync_period(s: &str) -> Result<Duration, String> {
    parse_duration_at_least(s, Duration::from_secs(1), "1s")
}

/// A period where 0 means "never".
fn parse_optional_period(s: &str) -> Result<Option<Duration>, String> {
    let d = parse_duration(s)?;
    Ok((!d.is_zero()).then_some(d))
}

/// Parses `host:port`, `:port` (all interfaces) or `[v6]:port`.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    full.parse()
        .map_err(|_| format!("{s:?} is not an address like :9453 or 127.0.0.1:9453"))
}

/// Parses the controller list; an unknown name lists the valid ones.
pub fn parse_controllers(s: &str) -> Result<Vec<Controller>, String> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(controller) = Controller::from_name(name) else {
            return Err(format!(
                "unknown controller {name:?}; valid controllers: {}",
                Controller::all_names()
            ));
        };
        if !out.contains(&controller) {
            out.push(controller);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "no controller enabled; valid controllers: {}",
            Controller::all_names()
        ));
    }
    Ok(out)
}

fn parse_lb_pool(s: &str) -> Result<Ipv4Cidr, String> {
    use midonet_translators::addr::{parse_cidr, CidrError, CidrRules};
    parse_cidr(s, CidrRules::LB_POOL).map_err(|e| match e {
        CidrError::Ipv6 => format!("{s:?} is IPv6; MidoNet needs IPv4 pools"),
        _ => format!("{s:?} is not an IPv4 CIDR (a.b.c.d/n)"),
    })
}

fn parse_log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_log_format(s: &str) -> Result<LogFormat, String> {
    match s {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("{other:?}: use text or json")),
    }
}

fn parse_api_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("{s:?}: {e}"))?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        _ => Err(format!("{s:?}: must be an http(s) URL with a host")),
    }
}

fn parse_secret(s: &str) -> Result<Secret, String> {
    Ok(Secret::new(s))
}

fn parse_file(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} is not a readable file", path.display()))
    }
}

/// Reads and validates the edge settings file (YAML, so JSON too): every problem is
/// named by its field, and all of them are in the message.
pub fn parse_edge_config(
    s: &str,
) -> Result<std::sync::Arc<midonet_translators::config::Edge>, String> {
    let text = std::fs::read_to_string(s).map_err(|e| format!("cannot read {s}: {e}"))?;
    let spec: midonet_translators::edge_spec::EdgeSpec =
        serde_yaml::from_str(&text).map_err(|e| format!("{s} is not a valid edge file: {e}"))?;
    spec.validate()
        .map(std::sync::Arc::new)
        .map_err(|errors| format!("{s} is invalid: {}", errors.join("; ")))
}

fn parse_non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.to_string())
    }
}

fn parse_at_least_one<T: FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err(format!("{s:?}: must be a whole number of at least 1")),
    }
}

fn parse_positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{s:?}: must be a number greater than 0")),
    }
}

fn parse_translation_version(s: &str) -> Result<String, String> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Err("use lowercase letters, digits and '-'".into())
    } else {
        Ok(s.to_string())
    }
}

/// The value of a setting: given (flag or current variable), else the original
/// controller's variable parsed by `parse` (recorded in `deprecated`), else none.
fn with_legacy<T>(
    given: Option<T>,
    legacy: DeprecatedEnv,
    env: &dyn Fn(&str) -> Option<String>,
    deprecated: &mut Vec<DeprecatedUse>,
    parse: impl FnOnce(String) -> Result<T, ConfigError>,
) -> Result<Option<T>, ConfigError> {
    match (given, env(legacy.old)) {
        (Some(v), Some(_)) => {
            deprecated.push(DeprecatedUse::Ignored(legacy));
            Ok(Some(v))
        }
        (Some(v), None) => Ok(Some(v)),
        (None, Some(old)) => {
            deprecated.push(DeprecatedUse::Used(legacy));
            parse(old).map(Some)
        }
        (None, None) => Ok(None),
    }
}

/// The MidoNet API password: the password file's content (which counts as the password
/// given: the original variable is then ignored), else the setting or the original
/// variable, else none.
fn password(
    file: Option<&std::path::Path>,
    given: Option<Secret>,
    env: &dyn Fn(&str) -> Option<String>,
    deprecated: &mut Vec<DeprecatedUse>,
) -> Result<Secret, ConfigError> {
    let legacy = LEGACY_ENV[1];
    let Some(path) = file else {
        let given = with_legacy(given, legacy, env, deprecated, |old| Ok(Secret::new(old)))?;
        return Ok(given.unwrap_or_default());
    };
    if env(legacy.old).is_some() {
        deprecated.push(DeprecatedUse::Ignored(legacy));
    }
    std::fs::read_to_string(path)
        .map(|s| Secret::new(s.trim_end_matches(['\r', '\n']).to_string()))
        .map_err(|e| {
            bad(
                "--password-file",
                "MIDONETKUBE_PASSWORD_FILE",
                format!("cannot read {}: {e}", path.display()),
            )
        })
}

impl RunArgs {
    /// Completes the settings, reading the original controller's variables from the
    /// process environment.
    pub fn validate(self) -> Result<Config, ConfigError> {
        self.validate_with_env(&|name| std::env::var(name).ok())
    }

    /// [`Self::validate`] with the environment given as a lookup.
    pub fn validate_with_env(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut deprecated = Vec::new();
        let [legacy_username, _, legacy_project, legacy_controllers] = LEGACY_ENV;
        let username = with_legacy(self.username, legacy_username, env, &mut deprecated, Ok)?
            .unwrap_or_else(|| "admin".into());
        let password = password(
            self.password_file.as_deref(),
            self.password,
            env,
            &mut deprecated,
        )?;
        let project = with_legacy(self.project, legacy_project, env, &mut deprecated, Ok)?
            .unwrap_or_else(|| "admin".into());
        let controllers = with_legacy(
            self.controllers,
            legacy_controllers,
            env,
            &mut deprecated,
            |old| {
                parse_controllers(&old)
                    .map_err(|e| bad(legacy_controllers.setting, legacy_controllers.old, e))
            },
        )?
        .unwrap_or_else(|| Controller::ALL.to_vec());
        Ok(Config {
            log_level: self.log_level,
            log_json: self.log_format == LogFormat::Json,
            controllers,
            kubeconfig: self.kubeconfig,
            midonet_api: self.midonet_api,
            username,
            password,
            project,
            ca_file: self.ca_file,
            edge: self.edge_config,
            tenant: self.tenant,
            metrics_address: self.metrics_address,
            pusher_workers: self.pusher_workers,
            translator_workers: self.translator_workers,
            worker_threads: self.worker_threads,
            resync_period: self.resync_period,
            backend_timeout: self.backend_timeout,
            verify_period: self.verify_period,
            verify_rate: self.verify_rate.max(1),
            compact_managed_fields_after: self.compact_managed_fields_after,
            event_limits: crate::events::EventLimits {
                qps: self.event_qps,
                burst: self.event_burst,
            },
            orphan_sweep_period: self.orphan_sweep_period,
            orphan_sweep_delete: self.orphan_sweep_delete,
            crash_recovery: self.crash_recovery,
            leader_elect: self.leader_elect,
            leader_election_name: self.leader_election_name,
            leader_election_namespace: self.leader_election_namespace,
            lease_duration: self.lease_duration,
            translation_version: self
                .translation_version
                .unwrap_or_else(|| midonet_translators::TRANSLATION_VERSION.to_string()),
            bump_cutover: self.bump_cutover,
            lb_pools: crate::lbipam::decide::Pools::new(self.lb_pools),
            backend_probe_period: self.backend_probe_period,
            liveness: crate::health::LivenessLimits {
                reconcile: self.liveness_reconcile_limit,
                stall: self.liveness_stall_limit,
            },
            deprecated,
        })
    }
}

impl Config {
    pub fn enabled(&self, controller: Controller) -> bool {
        self.controllers.contains(&controller)
    }

    /// True when a controller that talks to the backend is enabled.
    pub fn needs_backend(&self) -> bool {
        self.controllers.iter().any(|c| c.needs_backend())
    }
}

impl fmt::Debug for Config {
    // Written out so that no secret can slip in with a new field.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("log_level", &self.log_level)
            .field("log_json", &self.log_json)
            .field("controllers", &self.controllers)
            .field("kubeconfig", &self.kubeconfig)
            .field("midonet_api", &self.midonet_api.as_str())
            .field("username", &self.username)
            .field("password", &self.password)
            .field("project", &self.project)
            .field("ca_file", &self.ca_file)
            .field("edge", &self.edge)
            .field("tenant", &self.tenant)
            .field("metrics_address", &self.metrics_address)
            .field("pusher_workers", &self.pusher_workers)
            .field("translator_workers", &self.translator_workers)
            .field("worker_threads", &self.worker_threads)
            .field("resync_period", &self.resync_period)
            .field("backend_timeout", &self.backend_timeout)
            .field("verify_period", &self.verify_period)
            .field(
                "compact_managed_fields_after",
                &self.compact_managed_fields_after,
            )
            .field("orphan_sweep_period", &self.orphan_sweep_period)
            .field("orphan_sweep_delete", &self.orphan_sweep_delete)
            .field("crash_recovery", &self.crash_recovery)
            .field("leader_elect", &self.leader_elect)
            .field("leader_election_name", &self.leader_election_name)
            .field("leader_election_namespace", &self.leader_election_namespace)
            .field("lease_duration", &self.lease_duration)
            .field("translation_version", &self.translation_version)
            .field("bump_cutover", &self.bump_cutover)
            .field("lb_pools", &self.lb_pools)
            .field("backend_probe_period", &self.backend_probe_period)
            .field("liveness", &self.liveness)
            .field("deprecated", &self.deprecated)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        parse_env(args, &[])
    }

    fn args(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut all = vec!["test"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
    }

    /// Parses flags with exactly these variables of the original controller set.
    fn parse_env(args_: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        args(args_)
            .unwrap()
            .run
            .validate_with_env(&|name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    /// The message clap refuses these flags with; it must name the first flag and its
    /// variable (`--resync-period`: `MIDONETKUBE_RESYNC_PERIOD`).
    fn refused(args_: &[&str]) -> String {
        let err = match args(args_) {
            Ok(_) => panic!("{args_:?} accepted"),
            Err(err) => err,
        };
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
        let flag = args_[0].split('=').next().unwrap_or_default();
        let env = format!(
            "MIDONETKUBE_{}",
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("'{flag} <")),
            "{flag} not in {message}"
        );
        assert!(message.contains(&env), "{env} not in {message}");
        message
    }

    #[test]
    fn original_variables_are_used_with_a_deprecation() {
        let c = parse_env(
            &[],
            &[
                ("MIDONETKUBE_MIDONET_USERNAME", "alice"),
                ("MIDONETKUBE_MIDONET_PASSWORD", "s3cret-pw"),
                ("MIDONETKUBE_MIDONET_PROJECT", "project-a"),
                ("MIDONETKUBE_ENABLED_CONTROLLERS", "pusher,nodeannotator"),
            ],
        )
        .unwrap();
        assert_eq!(c.username, "alice");
        assert_eq!(c.password.expose(), "s3cret-pw");
        assert_eq!(c.project, "project-a");
        assert_eq!(
            c.controllers,
            [Controller::Pusher, Controller::NodeAnnotator]
        );
        assert_eq!(
            c.deprecated,
            LEGACY_ENV.map(DeprecatedUse::Used).to_vec(),
            "each one reported"
        );
        assert!(!format!("{c:?}").contains("s3cret-pw"));
    }

    #[test]
    fn current_settings_win_over_the_original_variables() {
        let c = parse_env(
            &["--username", "bob", "--password-file", "/dev/null"],
            &[
                ("MIDONETKUBE_MIDONET_USERNAME", "alice"),
                ("MIDONETKUBE_MIDONET_PASSWORD", "old"),
            ],
        )
        .unwrap();
        assert_eq!(c.username, "bob");
        assert_eq!(c.password.expose(), "");
        assert_eq!(c.project, "admin");
        assert_eq!(
            c.deprecated,
            vec![
                DeprecatedUse::Ignored(LEGACY_ENV[0]),
                DeprecatedUse::Ignored(LEGACY_ENV[1])
            ]
        );
        assert!(parse(&[]).unwrap().deprecated.is_empty());
        let c = parse_env(
            &["--controllers", "pod", "--password", "new"],
            &[
                ("MIDONETKUBE_ENABLED_CONTROLLERS", "node,routers"),
                ("MIDONETKUBE_MIDONET_PASSWORD", "old"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.controllers,
            [Controller::Pod],
            "the bad original list unread"
        );
        assert_eq!(c.password.expose(), "new");
        assert_eq!(
            c.deprecated,
            vec![
                DeprecatedUse::Ignored(LEGACY_ENV[1]),
                DeprecatedUse::Ignored(LEGACY_ENV[3])
            ]
        );
    }

    #[test]
    fn an_unknown_original_controller_name_names_the_original_variable() {
        let err =
            parse_env(&[], &[("MIDONETKUBE_ENABLED_CONTROLLERS", "node,routers")]).unwrap_err();
        assert_eq!(err.env, "MIDONETKUBE_ENABLED_CONTROLLERS");
        assert!(err.to_string().contains("\"routers\""), "{err}");
    }

    #[test]
    fn liveness_and_probe_settings() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.liveness, crate::health::LivenessLimits::default());
        assert_eq!(c.backend_probe_period, Duration::from_secs(30));
        let message = refused(&["--liveness-reconcile-limit", "0"]);
        assert!(message.contains("at least 100ms"), "{message}");
        refused(&["--liveness-stall-limit", "soon"]);
        let c = parse(&["--liveness-stall-limit", "100ms"]).unwrap();
        assert_eq!(c.liveness.stall, Duration::from_millis(100));
    }

    #[test]
    fn defaults_are_valid() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.controllers.len(), 8);
        assert!(c.lb_pools.is_empty(), "the LB IPAM is off without pools");
        assert_eq!(c.metrics_address.port(), 9453);
        assert!(c.metrics_address.ip().is_unspecified());
        assert_eq!(c.tenant, "midonetkube");
        assert!(c.leader_elect);
        assert_eq!(c.resync_period, Duration::from_secs(600));
        assert_eq!(c.verify_period, Some(Duration::from_secs(300)));
        assert_eq!(c.orphan_sweep_period, None);
        assert_eq!(c.midonet_api.as_str(), "http://127.0.0.1:8181/midonet-api");
        assert!(!c.log_json);
        assert_eq!(c.worker_threads, 1);
    }

    #[test]
    fn lb_pools_repeat_or_are_comma_separated_and_must_be_ipv4_cidrs() {
        use crate::lbipam::decide::Pools;
        let cidr = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        let c = parse(&["--lb-pool", "192.0.2.0/24", "--lb-pool", "198.51.100.7/32"]).unwrap();
        let both = Pools::new(vec![cidr("192.0.2.0/24"), cidr("198.51.100.7/32")]);
        assert_eq!(c.lb_pools, both);
        let c = parse(&["--lb-pool", "192.0.2.9/24,198.51.100.7/32"]).unwrap();
        assert_eq!(c.lb_pools, both, "host bits cleared");
        let message = refused(&["--lb-pool", "2001:db8::/64"]);
        assert!(
            message.contains("IPv6") && message.contains("--lb-pool"),
            "{message}"
        );
        let message = refused(&["--lb-pool", "192.0.2.0"]);
        assert!(message.contains("not an IPv4 CIDR"), "{message}");
    }

    #[test]
    fn unknown_controller_lists_valid_ones() {
        let message = refused(&["--controllers", "pod,router"]);
        assert!(message.contains("nodeannotator"), "{message}");
        refused(&["--controllers", " , "]);
        let c = parse(&["--controllers", "pod, node,pod"]).unwrap();
        assert_eq!(c.controllers, [Controller::Pod, Controller::Node]);
    }

    #[test]
    fn malformed_url_names_the_setting() {
        refused(&["--midonet-api", "not a url"]);
        refused(&["--midonet-api", "ftp://x/y"]);
    }

    #[test]
    fn invalid_listen_address_names_the_setting() {
        let message = refused(&["--metrics-address", "9453"]);
        assert!(message.contains("\"9453\""), "{message}");
        let c = parse(&["--metrics-address", "127.0.0.1:8080"]).unwrap();
        assert_eq!(c.metrics_address, "127.0.0.1:8080".parse().unwrap());
    }

    #[test]
    fn invalid_durations_name_the_setting() {
        let message = refused(&["--resync-period", "3 weeks"]);
        assert!(message.contains("unknown unit"), "{message}");
        let message = refused(&["--resync-period", "500ms"]);
        assert!(message.contains("at least 1s"), "{message}");
        refused(&["--backend-timeout", "soon"]);
        refused(&["--orphan-sweep-period=-1m"]);
    }

    #[test]
    fn other_bad_values_name_the_setting() {
        refused(&["--pusher-workers", "0"]);
        refused(&["--worker-threads", "0"]);
        refused(&["--event-qps", "0"]);
        refused(&["--event-burst", "0"]);
        refused(&["--tenant", " "]);
        refused(&["--log-format", "xml"]);
        refused(&["--translation-version", "V2"]);
        refused(&["--ca-file", "/nonexistent/ca.pem"]);
        assert!(parse(&["--log-format", "json"]).unwrap().log_json);
    }

    #[test]
    fn an_edge_file_is_read_and_every_bad_field_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge.json");
        let good = r#"{"uplinks": [{"name": "a", "host": "6f1b1a52-1d27-4a3e-9b53-4f5e2c5b1a01",
            "interface": "eth1", "address": "192.0.2.2/24", "nextHops": ["192.0.2.1"]}],
            "clusterCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}"#;
        std::fs::write(&path, good).unwrap();
        let edge = parse_edge_config(path.to_str().unwrap()).unwrap();
        assert_eq!(edge.uplinks[0].name, "a");
        std::fs::write(
            &path,
            good.replace("192.0.2.1", "10.0.0.1").replace("eth1", ""),
        )
        .unwrap();
        let err = parse_edge_config(path.to_str().unwrap()).unwrap_err();
        assert!(err.contains("uplinks[0].interface \"\""), "{err}");
        assert!(err.contains("uplinks[0].nextHops[0] \"10.0.0.1\""), "{err}");
        std::fs::write(&path, "uplinks: [\nnope").unwrap();
        let err = parse_edge_config(path.to_str().unwrap()).unwrap_err();
        assert!(err.contains("is not a valid edge file"), "{err}");
        std::fs::write(&path, r#"{"uplink": []}"#).unwrap();
        let err = parse_edge_config(path.to_str().unwrap()).unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn missing_password_file_names_the_setting() {
        let err = parse(&["--password-file", "/nonexistent/pw"]).unwrap_err();
        assert_eq!(err.setting, "--password-file");
    }

    #[test]
    fn password_is_redacted() {
        let c = parse(&["--password", "hunter2-secret"]).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2-secret"));
        assert_eq!(c.password.expose(), "hunter2-secret");
        let message = refused(&["--pusher-workers", "0", "--password", "hunter2-secret"]);
        assert!(!message.contains("hunter2-secret"), "{message}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse(&["--verify-period", "0"])
            .unwrap()
            .verify_period
            .is_none());
        assert_eq!(
            parse(&["--orphan-sweep-period", "1h"])
                .unwrap()
                .orphan_sweep_period,
            Some(Duration::from_secs(3600))
        );
    }
}
