//! The I/O of `trace` and `check`: list the Kubernetes objects and the Translations, read
//! the backend, run the model, print. Exit codes are decided by `main`.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use midonet_dataplane::{
    check, trace, Cluster, Probe, Protocol, Report, RuleOrder, Topology, Trace, Verdict,
};

use super::{backend::read_topology, resolve, Destination, Owners, Source, Target, Via};
use crate::backend::{BackendClient, BackendError};
use crate::config::Config;
use crate::crd::Translation;
use crate::translate::slices::{discover, EndpointSliceV1Beta1, EndpointsSource};

/// `--protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Tcp,
    Udp,
}

impl From<ProtocolArg> for Protocol {
    fn from(p: ProtocolArg) -> Protocol {
        match p {
            ProtocolArg::Tcp => Protocol::Tcp,
            ProtocolArg::Udp => Protocol::Udp,
        }
    }
}

/// `trace -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceOutput {
    Text,
    Json,
}

/// `check -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckOutput {
    Table,
    Json,
}

/// Arguments of `trace`.
#[derive(Clone, Debug, clap::Args)]
pub struct TraceArgs {
    /// Where the connection starts: pod/NAMESPACE/NAME, node/NAME, or external/IP[/UPLINK]
    /// (a client outside the cluster at IP, entering through the edge's uplink UPLINK, the
    /// first one if not given; needs --edge-config).
    #[arg(long)]
    pub from: String,
    /// Where it goes: svc/NAMESPACE/NAME:PORT (the Service port, number or name),
    /// pod/NAMESPACE/NAME:PORT or IP:PORT.
    #[arg(long)]
    pub to: String,
    /// Which address of the Service svc/… goes to: cluster-ip (default), external-ip (the
    /// first of spec.externalIPs), lb (the first status.loadBalancer.ingress IP), or one of
    /// the Service's addresses, e.g. 203.0.113.7.
    #[arg(long, value_parser = Via::parse, default_value = "cluster-ip")]
    pub via: Via,
    /// L4 protocol (default: the Service port's, else tcp).
    #[arg(long, value_enum)]
    pub protocol: Option<ProtocolArg>,
    /// The client's source port.
    #[arg(long, default_value_t = midonet_dataplane::check::CLIENT_PORT)]
    pub src_port: u16,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: TraceOutput,
}

/// Arguments of `check`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: CheckOutput,
}

#[derive(Debug, thiserror::Error)]
pub enum NetcheckError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Setup(String),
    #[error("cannot list {what}: {source}")]
    Kube {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read the topology from the MidoNet API: {0}")]
    Backend(#[from] BackendError),
    #[error("cannot trace: {0}")]
    Trace(#[from] midonet_dataplane::TraceError),
    #[error("cannot write the output: {0}")]
    Output(String),
}

/// What `trace` and `check` run on.
pub struct Live {
    pub cluster: Cluster,
    pub topology: Topology,
    pub owners: Owners,
}

async fn list_all<K>(kube: &kube::Client, what: &'static str) -> Result<Vec<K>, NetcheckError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(kube.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| NetcheckError::Kube { what, source })
}

/// Reads the cluster ([`load_cluster`] and the Translations) and the tenant's topology, and
/// builds the model; with `edge`, the upstream behind its uplinks included.
pub async fn load(
    kube: &kube::Client,
    backend: &BackendClient,
    tenant: &str,
    edge: Option<std::sync::Arc<midonet_translators::config::Edge>>,
) -> Result<Live, NetcheckError> {
    let mut cluster = load_cluster(kube).await?;
    // The upstream behind the uplinks are workloads of the topology too.
    cluster.edge = edge;
    let translations = list_all::<Translation>(kube, "translations").await?;
    let resources = read_topology(backend, tenant).await?;
    // MidoNet lists a chain's rules in evaluation order.
    let topology = Topology::new(resources, RuleOrder::Listed, cluster.attachments());
    Ok(Live {
        cluster,
        topology,
        owners: Owners::from_translations(&translations),
    })
}

/// Lists the Kubernetes objects the model reads: nodes, pods, Services, the endpoints from
/// EndpointSlices or Endpoints as API discovery picks them, namespaces, NetworkPolicies.
pub async fn load_cluster(kube: &kube::Client) -> Result<Cluster, NetcheckError> {
    let nodes = Api::<Node>::all(kube.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| NetcheckError::Kube {
            what: "nodes",
            source,
        })?
        .items;
    // The controllers read endpoints from the source discovery picks; so does the check.
    let source = discover(kube).await.map_err(|source| NetcheckError::Kube {
        what: "the discovery.k8s.io API group",
        source,
    })?;
    let (endpoints, endpoint_slices) = match source {
        EndpointsSource::SlicesV1 => (
            Vec::new(),
            Some(list_all::<EndpointSlice>(kube, "endpointslices").await?),
        ),
        EndpointsSource::SlicesV1Beta1 => (
            Vec::new(),
            Some(
                list_all::<EndpointSliceV1Beta1>(kube, "endpointslices")
                    .await?
                    .into_iter()
                    .map(EndpointSlice::from)
                    .collect(),
            ),
        ),
        EndpointsSource::Endpoints => (list_all::<Endpoints>(kube, "endpoints").await?, None),
    };
    let cluster = Cluster {
        nodes,
        pods: list_all::<Pod>(kube, "pods").await?,
        services: list_all::<Service>(kube, "services").await?,
        endpoints,
        endpoint_slices,
        namespaces: Api::<Namespace>::all(kube.clone())
            .list(&ListParams::default())
            .await
            .map_err(|source| NetcheckError::Kube {
                what: "namespaces",
                source,
            })?
            .items,
        network_policies: list_all::<NetworkPolicy>(kube, "networkpolicies").await?,
        // The caller sets the edge from its settings.
        edge: None,
    };
    Ok(cluster)
}

/// Traces `from` → `to` on the live model (a Service at its cluster IP).
pub fn trace_live(
    live: &Live,
    from: &str,
    to: &str,
    protocol: Option<Protocol>,
    src_port: u16,
) -> Result<(Trace, Destination), NetcheckError> {
    trace_live_via(live, from, to, Via::ClusterIp, protocol, src_port)
}

/// Traces `from` → `to` on the live model, a Service at the address `via` picks.
pub fn trace_live_via(
    live: &Live,
    from: &str,
    to: &str,
    via: Via,
    protocol: Option<Protocol>,
    src_port: u16,
) -> Result<(Trace, Destination), NetcheckError> {
    let source = Source::parse(from).map_err(NetcheckError::Usage)?;
    let target = Target::parse(to).map_err(NetcheckError::Usage)?;
    let dest = resolve(&live.cluster, &target, to, protocol, via).map_err(NetcheckError::Usage)?;
    let (from, src_ip) = source
        .attachment(&live.cluster)
        .map_err(NetcheckError::Usage)?;
    let mut probe = Probe::new(from, dest.address, dest.protocol, src_port);
    probe.src_ip = src_ip;
    probe.host_forward = host_forwards(&live.topology, &probe.from, dest.address.ip);
    let t = trace(&live.topology, &probe)?;
    Ok((t, dest))
}

/// A node's host "sending" to one of its own addresses is the host path of a node port:
/// the host forwards what reached its interface into MidoNet (`docs/operations.md`,
/// "NodePort on a node's own interface"); its own stack would never put it on the wire.
fn host_forwards(topo: &midonet_dataplane::Topology, from: &str, dst: std::net::Ipv4Addr) -> bool {
    from.starts_with("node/") && topo.attachment_named(from).is_some_and(|a| a.owns(dst))
}

async fn clients(cfg: &Config) -> Result<(kube::Client, BackendClient), NetcheckError> {
    let kube = crate::clients::kube_client(cfg)
        .await
        .map_err(|e| NetcheckError::Setup(e.to_string()))?;
    let backend = crate::clients::backend_client(cfg, &prometheus::Registry::new())
        .map_err(|e| NetcheckError::Setup(e.to_string()))?;
    Ok((kube, backend))
}

fn print(text: &str) -> Result<(), NetcheckError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| NetcheckError::Output(e.to_string()))
}

/// `trace`: prints the trace; answers the verdict.
pub async fn run_trace(cfg: Config, args: TraceArgs) -> Result<Verdict, NetcheckError> {
    // Parse before any request: a typo is not worth a round trip.
    Source::parse(&args.from).map_err(NetcheckError::Usage)?;
    let target = Target::parse(&args.to).map_err(NetcheckError::Usage)?;
    if args.via != Via::ClusterIp && !matches!(target, Target::Service { .. }) {
        return Err(NetcheckError::Usage(format!(
            "--via applies to svc/NAMESPACE/NAME:PORT, not {:?}",
            args.to
        )));
    }
    let (kube, backend) = clients(&cfg).await?;
    let live = load(&kube, &backend, &cfg.tenant, cfg.edge.clone()).await?;
    let (t, dest) = trace_live_via(
        &live,
        &args.from,
        &args.to,
        args.via,
        args.protocol.map(Protocol::from),
        args.src_port,
    )?;
    let text = match args.output {
        TraceOutput::Text => super::trace_text(&t, &dest, &live.topology, &live.owners),
        TraceOutput::Json => {
            let v = super::trace_json(&t, &dest, &live.topology, &live.owners);
            let mut s = serde_json::to_string_pretty(&v)
                .map_err(|e| NetcheckError::Output(e.to_string()))?;
            s.push('\n');
            s
        }
    };
    print(&text)?;
    Ok(super::verdict(&t))
}

/// What [`check_system`] found, and how long reading and evaluating took.
pub struct Checked {
    pub report: Report,
    /// Listing the cluster and reading the backend.
    pub read: Duration,
    /// Running the model over every flow.
    pub evaluated: Duration,
}

/// Reads the cluster and the backend `cfg` names and checks every promised connection;
/// `progress(done, total)` is called as flows are evaluated. What `check` runs.
pub async fn check_system(
    cfg: &Config,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Checked, NetcheckError> {
    let started = Instant::now();
    let (kube, backend) = clients(cfg).await?;
    let live = load(&kube, &backend, &cfg.tenant, cfg.edge.clone()).await?;
    let read = started.elapsed();
    let started = Instant::now();
    let report = check(&live.topology, &live.cluster, progress);
    Ok(Checked {
        report,
        read,
        evaluated: started.elapsed(),
    })
}

/// `check`: prints the report; answers whether it passed.
pub async fn run_check(cfg: Config, args: CheckArgs) -> Result<Report, NetcheckError> {
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let checked = check_system(&cfg, &mut |done, total| {
        if tty {
            let width = 30;
            let filled = (done * width)
                .checked_div(total)
                .unwrap_or(width)
                .min(width);
            eprint!(
                "\r[{}{}] {done}/{total} flows",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
            if done == total {
                eprintln!();
            }
        }
    })
    .await?;
    let report = checked.report;
    let elapsed = started.elapsed();
    let text = match args.output {
        CheckOutput::Table => super::check_table(&report, elapsed),
        CheckOutput::Json => {
            let mut s = serde_json::to_string_pretty(&report)
                .map_err(|e| NetcheckError::Output(e.to_string()))?;
            s.push('\n');
            s
        }
    };
    print(&text)?;
    if args.output == CheckOutput::Json {
        // stdout carries only the JSON; the time goes to stderr.
        eprintln!("checked in {:.1}s", elapsed.as_secs_f64());
    }
    Ok(report)
}
