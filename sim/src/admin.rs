//! The simulator's admin API (`/_sim/…`): its JSON shapes and a typed client for tests,
//! the benchmark and the demo.
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | GET | `/_sim/state` | | [`StateDump`] |
//! | GET | `/_sim/requests` | | [`RequestCounts`] |
//! | POST | `/_sim/requests/reset` | | 204 |
//! | GET | `/_sim/faults` | | [`Faults`] |
//! | PUT | `/_sim/faults` | [`Faults`] | [`Faults`] |
//! | GET | `/_sim/hosts` | | `[HostSeed]` |
//! | POST | `/_sim/hosts` | `[HostSeed]` | `[HostSeed]` (all hosts) |
//! | POST | `/_sim/wipe[?hosts=true]` | | 204 |
//! | GET | `/_sim/tokens` | | `["<token>", …]` (valid session tokens; a test aid) |
//! | POST | `/_sim/tokens/expire` | | 204 |
//! | GET | `/_sim/health` | | 200 `ok` |
//! | POST | `/_sim/trace` | [`TraceRequest`] | `midonet_dataplane::Trace` of the stored topology; 400 bad request, 422 untraceable |

use std::collections::BTreeMap;

use midonet_dataplane::{Attachment, ProbeRequest, Trace};
use midonet_translators::model::{Kind, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;
use uuid::Uuid;

/// One stored resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateEntry {
    /// Translation kind name (`Bridge`, `MACPort`, …).
    pub kind: String,
    /// Item path below the API base, as `Resource::item_path` computes it.
    pub path: String,
    /// Parent id as in a Translation entry (`""` for top-level kinds).
    pub parent: String,
    /// The resource as a GET of its path answers it.
    pub body: Value,
}

/// Everything the simulator stores.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateDump {
    /// Grouped by kind; within a kind sorted by path, except rules, listed chain by chain
    /// in evaluation order.
    pub resources: Vec<StateEntry>,
    /// Rule ids of every chain, in evaluation order.
    pub rule_order: BTreeMap<String, Vec<String>>,
}

impl StateDump {
    /// Item paths a Translation can own: all but the seeded Hosts and the `Local` routes
    /// the backend makes itself for router ports.
    pub fn translation_paths(&self) -> std::collections::BTreeSet<String> {
        self.resources
            .iter()
            .filter(|e| e.kind != Kind::Host.name())
            .filter(|e| {
                !(e.kind == Kind::Route.name()
                    && e.body.get("type").and_then(|t| t.as_str())
                        == Some(midonet_translators::model::RouteType::Local.as_str()))
            })
            .map(|e| e.path.clone())
            .collect()
    }

    /// Entries of one kind.
    pub fn entries_of(&self, kind: Kind) -> Vec<&StateEntry> {
        self.resources
            .iter()
            .filter(|e| e.kind == kind.name())
            .collect()
    }

    /// Item paths of one kind.
    pub fn paths_of(&self, kind: Kind) -> Vec<String> {
        self.entries_of(kind)
            .into_iter()
            .map(|e| e.path.clone())
            .collect()
    }

    /// Number of stored resources of one kind.
    pub fn count(&self, kind: Kind) -> usize {
        self.entries_of(kind).len()
    }

    /// The entry at an item path.
    pub fn get(&self, path: &str) -> Option<&StateEntry> {
        self.resources.iter().find(|e| e.path == path)
    }

    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// Rule ids of a chain in evaluation order (empty if the chain does not exist).
    pub fn rules_of(&self, chain: Uuid) -> Vec<Uuid> {
        self.rule_order
            .get(&chain.to_string())
            .map(|ids| ids.iter().filter_map(|s| Uuid::parse_str(s).ok()).collect())
            .unwrap_or_default()
    }

    /// Total number of stored resources (hosts included).
    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// Every stored resource in the typed model, rules chain by chain in evaluation order
    /// (what `midonet_dataplane::RuleOrder::Listed` wants). The first entry that does not
    /// parse is an error: the store only keeps bodies it validated, so it is a bug.
    pub fn typed_resources(&self) -> Result<Vec<Resource>, String> {
        typed_entries(&self.resources)
    }
}

/// `entries` in the typed model; the first that does not parse is an error.
pub(crate) fn typed_entries(entries: &[StateEntry]) -> Result<Vec<Resource>, String> {
    {
        entries
            .iter()
            .map(|e| {
                let kind = Kind::from_name(&e.kind)
                    .ok_or_else(|| format!("{}: unknown kind {:?}", e.path, e.kind))?;
                let parent =
                    if e.parent.is_empty() {
                        None
                    } else {
                        Some(Uuid::parse_str(&e.parent).map_err(|err| {
                            format!("{}: bad parent {:?}: {err}", e.path, e.parent)
                        })?)
                    };
                Resource::from_body(kind, parent, e.body.clone())
                    .map_err(|err| format!("{}: {err}", e.path))
            })
            .collect()
    }
}

/// `POST /_sim/trace`: a connection to trace through the stored topology. The simulator
/// does not know Kubernetes, so the workloads behind the bound interfaces come with the
/// request (`midonet_dataplane::Cluster::attachments` derives them from Kubernetes
/// objects).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceRequest {
    #[serde(default)]
    pub attachments: Vec<Attachment>,
    /// The connection: `from`, `to` and the options of [`ProbeRequest`].
    #[serde(flatten)]
    pub probe: ProbeRequest,
}

impl TraceRequest {
    /// A TCP connection from `from` to `to` (`IP:PORT`), with the defaults.
    pub fn new(
        attachments: Vec<Attachment>,
        from: impl Into<String>,
        to: impl Into<String>,
    ) -> Self {
        TraceRequest {
            attachments,
            probe: ProbeRequest::new(from, to),
        }
    }
}

/// API requests received since start or the last reset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestCounts {
    /// Every request under the API prefix, logins and faulted ones included.
    pub total: u64,
    /// `/login` requests (not in `byMethod` nor `byKind`).
    pub login: u64,
    /// Method (`POST`, …) → count.
    pub by_method: BTreeMap<String, u64>,
    /// Kind name → method → count. Paths that name no kind count as `unknown`, the API
    /// root as `Application`.
    pub by_kind: BTreeMap<String, BTreeMap<String, u64>>,
    /// HTTP status answered → count (dropped connections are not answered).
    pub by_status: BTreeMap<String, u64>,
    /// Requests answered by fault injection (error, down) or dropped.
    pub faults_injected: u64,
}

impl RequestCounts {
    /// Requests of one kind with one method.
    pub fn get(&self, kind: Kind, method: &str) -> u64 {
        self.by_kind
            .get(kind.name())
            .and_then(|m| m.get(&method.to_ascii_uppercase()))
            .copied()
            .unwrap_or(0)
    }

    /// Requests of one kind, any method.
    pub fn of_kind(&self, kind: Kind) -> u64 {
        self.by_kind
            .get(kind.name())
            .map(|m| m.values().sum())
            .unwrap_or(0)
    }

    /// Requests with one method, any kind (logins excluded).
    pub fn of_method(&self, method: &str) -> u64 {
        self.by_method
            .get(&method.to_ascii_uppercase())
            .copied()
            .unwrap_or(0)
    }

    /// Answers with one status.
    pub fn of_status(&self, status: u16) -> u64 {
        self.by_status
            .get(&status.to_string())
            .copied()
            .unwrap_or(0)
    }
}

/// Faults injected into API requests (never into the admin API). Checked in this order:
/// drop, down, error; the latency applies first to every request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// Added to every API request before it is handled.
    pub latency_ms: u64,
    /// Every API request (login included) is answered 503.
    pub down: bool,
    /// Method (`POST`, or `*` for any) → probability in [0, 1] of answering
    /// `errorStatus` instead of handling the request.
    pub error_rate: BTreeMap<String, f64>,
    /// Status of injected errors; 0 means 503.
    pub error_status: u16,
    /// The next this-many API requests are answered `errorStatus`, whatever their method.
    pub fail_next: u32,
    /// Probability in [0, 1] of closing the connection without answering.
    pub drop_rate: f64,
    /// The next this-many API requests get their connection closed without an answer.
    pub drop_next: u32,
}

/// A host the simulator knows: what `GET /hosts` lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSeed {
    pub name: String,
    pub id: Uuid,
}

impl HostSeed {
    pub fn new(name: impl Into<String>, id: Uuid) -> HostSeed {
        HostSeed {
            name: name.into(),
            id,
        }
    }
}

/// Errors of [`AdminClient`].
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin API request failed: {0}")]
    Http(String),
    #[error("admin API answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("cannot decode the admin API answer: {0}")]
    Decode(String),
}

/// Typed client of the admin API.
#[derive(Clone, Debug)]
pub struct AdminClient {
    http: reqwest::Client,
    base: Url,
}

impl AdminClient {
    /// `admin_url` is the admin API base, e.g. `http://127.0.0.1:8181/_sim/`
    /// ([`SimHandle::admin_url`](crate::SimHandle::admin_url)).
    pub fn new(admin_url: Url) -> Result<AdminClient, AdminError> {
        let mut base = admin_url;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| AdminError::Http(e.to_string()))?;
        Ok(AdminClient { http, base })
    }

    fn url(&self, path: &str) -> Result<Url, AdminError> {
        self.base
            .join(path)
            .map_err(|e| AdminError::Http(format!("bad admin path {path}: {e}")))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<String, AdminError> {
        let resp = req
            .send()
            .await
            .map_err(|e| AdminError::Http(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| AdminError::Http(e.to_string()))?;
        if !status.is_success() {
            return Err(AdminError::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(body)
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, AdminError> {
        let body = self.send(self.http.get(self.url(path)?)).await?;
        serde_json::from_str(&body).map_err(|e| AdminError::Decode(e.to_string()))
    }

    async fn post(&self, path: &str) -> Result<(), AdminError> {
        self.send(self.http.post(self.url(path)?)).await.map(|_| ())
    }

    /// Everything stored.
    pub async fn state(&self) -> Result<StateDump, AdminError> {
        self.get_json("state").await
    }

    /// API request counters.
    pub async fn requests(&self) -> Result<RequestCounts, AdminError> {
        self.get_json("requests").await
    }

    pub async fn reset_requests(&self) -> Result<(), AdminError> {
        self.post("requests/reset").await
    }

    /// The faults in force.
    pub async fn faults(&self) -> Result<Faults, AdminError> {
        self.get_json("faults").await
    }

    /// Replaces the faults in force.
    pub async fn set_faults(&self, faults: Faults) -> Result<Faults, AdminError> {
        let body = self
            .send(self.http.put(self.url("faults")?).json(&faults))
            .await?;
        serde_json::from_str(&body).map_err(|e| AdminError::Decode(e.to_string()))
    }

    /// Removes every fault.
    pub async fn clear_faults(&self) -> Result<(), AdminError> {
        self.set_faults(Faults::default()).await.map(|_| ())
    }

    /// Adds (or renames) hosts; returns every host.
    pub async fn add_hosts(&self, hosts: &[HostSeed]) -> Result<Vec<HostSeed>, AdminError> {
        let body = self
            .send(self.http.post(self.url("hosts")?).json(hosts))
            .await?;
        serde_json::from_str(&body).map_err(|e| AdminError::Decode(e.to_string()))
    }

    pub async fn hosts(&self) -> Result<Vec<HostSeed>, AdminError> {
        self.get_json("hosts").await
    }

    /// Forgets every resource but the hosts.
    pub async fn wipe(&self) -> Result<(), AdminError> {
        self.post("wipe").await
    }

    /// Forgets every resource and every host.
    pub async fn wipe_all(&self) -> Result<(), AdminError> {
        self.post("wipe?hosts=true").await
    }

    /// The session tokens currently valid (to check they never leak into logs).
    pub async fn tokens(&self) -> Result<Vec<String>, AdminError> {
        self.get_json("tokens").await
    }

    /// Invalidates every session token, as if they had expired.
    pub async fn expire_tokens(&self) -> Result<(), AdminError> {
        self.post("tokens/expire").await
    }

    /// Traces a connection through the stored topology with the data-plane model.
    pub async fn trace(&self, request: &TraceRequest) -> Result<Trace, AdminError> {
        let body = self
            .send(self.http.post(self.url("trace")?).json(request))
            .await?;
        serde_json::from_str(&body).map_err(|e| AdminError::Decode(e.to_string()))
    }
}
