//! Authorization errors: a request the API server refused because RBAC does not grant it.
//!
//! Without this, a missing rule in `deploy/rbac.yaml` looks like a hang: a denied list or
//! watch is retried by the watcher's backoff and a denied write by the reconcile's retry,
//! both logged as generic failures. Every Kubernetes error path hands its errors to
//! [`Authz`], which recognises a denial and logs one ERROR line naming the verb, the
//! resource and the namespace, and which role of `deploy/rbac.yaml` must grant it. It also
//! counts denials in `midonet_kube_controllers_authorization_errors_total{verb,resource}`.
//! Nothing stops: callers keep retrying, so restoring the rule heals the controller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::core::Status;
use kube::runtime::watcher;
use prometheus::{IntCounterVec, Opts, Registry};

/// The same denial (verb and resource) is logged at most once per this period; retries in
/// between are counted and reported with the next line.
pub const LOG_PERIOD: Duration = Duration::from_secs(60);

/// The Role of `deploy/rbac.yaml` that grants Lease access (leader election); every other
/// rule is in the ClusterRole.
const LEASE_ROLE: &str = "the Role midonet-kube-controllers-leader-election in deploy/rbac.yaml";
const CLUSTER_ROLE: &str = "the ClusterRole midonet-kube-controllers in deploy/rbac.yaml";

/// What a request tried to do, as the caller knows it. Used when the API server's message
/// does not say it (the message, when it does, is what the authorizer actually checked).
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    /// The Kubernetes verb: get, list, watch, create, patch, update, delete.
    pub verb: &'a str,
    /// The resource, with its subresource if any: `translations/status`, `pods`.
    pub resource: &'a str,
    /// The namespace of the request; `None` for cluster-wide requests.
    pub namespace: Option<&'a str>,
}

impl<'a> Attempt<'a> {
    pub fn new(verb: &'a str, resource: &'a str, namespace: Option<&'a str>) -> Self {
        Attempt {
            verb,
            resource,
            namespace: namespace.filter(|ns| !ns.is_empty()),
        }
    }
}

/// Whether a watcher error is a 403, which [`Authz::report_watch`] reports: callers that log
/// watcher errors themselves skip these instead of logging them on every retry.
pub fn is_forbidden_watch(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 403,
        watcher::Error::WatchError(status) => status.code == 403,
        _ => false,
    }
}

/// Whether `status` is an API server that has just started refusing a request because its
/// admission caches have not synced yet (a 403 whose message ends "not yet ready to handle
/// request", from NamespaceLifecycle and other admission plugins after a restart). It is not
/// an authorization denial: the same request succeeds once the caches are warm, so callers
/// retry it like an unavailable API server.
pub fn is_not_ready_yet(status: &Status) -> bool {
    status.code == 403 && status.message.ends_with("not yet ready to handle request")
}

/// A refused request: what was refused, and the API server's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub verb: String,
    pub resource: String,
    /// API group; empty for the core group or when unknown.
    pub group: String,
    pub namespace: Option<String>,
    pub message: String,
}

impl Denial {
    /// The denial `status` reports, if it is one. A 403 is an authorization denial unless
    /// admission refused the request (a namespace being deleted answers 403 too).
    pub fn from_status(status: &Status, attempt: Attempt<'_>) -> Option<Denial> {
        if status.code != 403 {
            return None;
        }
        if let Some(parsed) = parse_forbidden(&status.message) {
            return Some(parsed);
        }
        let terminating = status.message.contains("because it is being terminated")
            || status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"));
        if terminating || is_not_ready_yet(status) {
            return None;
        }
        Some(Denial {
            verb: attempt.verb.to_string(),
            resource: attempt.resource.to_string(),
            group: status
                .details
                .as_ref()
                .map(|d| d.group.clone())
                .unwrap_or_default(),
            namespace: attempt.namespace.map(str::to_string),
            message: status.message.clone(),
        })
    }

    /// Where the denied request applied: `in namespace X` or `cluster-wide`.
    fn scope(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "cluster-wide".to_string(),
        }
    }

    /// The part of `deploy/rbac.yaml` that must grant it.
    fn granted_by(&self) -> &'static str {
        if self.resource == "leases" || self.resource.starts_with("leases/") {
            LEASE_ROLE
        } else {
            CLUSTER_ROLE
        }
    }
}

/// Parses the API server's authorization message, e.g. `translations.midonet.org "t" is
/// forbidden: User "u" cannot patch resource "translations/status" in API group
/// "midonet.org" in the namespace "ns"` (or `... at the cluster scope`). This is the
/// wording of the apiserver's authorization filter whatever the authorizer (RBAC, webhook).
fn parse_forbidden(message: &str) -> Option<Denial> {
    let rest = &message[message.find(" cannot ")? + " cannot ".len()..];
    let (verb, rest) = rest.split_once(" resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(" in API group \"")?;
    let (group, rest) = rest.split_once('"')?;
    let namespace = match rest.strip_prefix(" in the namespace \"") {
        Some(ns) => Some(ns.split_once('"')?.0.to_string()),
        None => None,
    };
    if verb.is_empty() || verb.contains(' ') || resource.is_empty() {
        return None;
    }
    Some(Denial {
        verb: verb.to_string(),
        resource: resource.to_string(),
        group: group.to_string(),
        namespace,
        message: message.to_string(),
    })
}

/// Reports authorization denials: one ERROR line per (verb, resource) and [`LOG_PERIOD`],
/// and a counter per denial. Cheap to clone; one per process, passed through the contexts.
#[derive(Clone)]
pub struct Authz {
    errors: IntCounterVec,
    logged: Arc<Mutex<HashMap<(String, String), Logged>>>,
}

/// When a denial was last logged, and how often it recurred since.
struct Logged {
    at: Instant,
    repeats: u64,
}

impl Authz {
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let errors = IntCounterVec::new(
            Opts::new(
                "midonet_kube_controllers_authorization_errors_total",
                "Kubernetes API requests refused for lack of RBAC rights, by verb and resource.",
            ),
            &["verb", "resource"],
        )?;
        registry.register(Box::new(errors.clone()))?;
        Ok(Authz {
            errors,
            logged: Arc::default(),
        })
    }

    /// Reports `err` if the API server refused `attempt` for lack of rights; returns whether
    /// it did (the caller still retries as for any other error).
    pub fn report(&self, attempt: Attempt<'_>, err: &kube::Error) -> bool {
        match err {
            kube::Error::Api(status) => self.report_status(attempt, status),
            _ => false,
        }
    }

    /// Reports a watcher error on `resource` (cluster-wide list and watch): the initial list
    /// is a `list`, the rest `watch`.
    pub fn report_watch(&self, resource: &str, err: &watcher::Error) -> bool {
        match err {
            watcher::Error::InitialListFailed(e) => {
                self.report(Attempt::new("list", resource, None), e)
            }
            watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
                self.report(Attempt::new("watch", resource, None), e)
            }
            watcher::Error::WatchError(status) => {
                self.report_status(Attempt::new("watch", resource, None), status)
            }
            watcher::Error::NoResourceVersion => false,
        }
    }

    fn report_status(&self, attempt: Attempt<'_>, status: &Status) -> bool {
        let Some(denial) = Denial::from_status(status, attempt) else {
            return false;
        };
        self.errors
            .with_label_values(&[&denial.verb, &denial.resource])
            .inc();
        if let Some(repeats) = self.due(&denial, Instant::now()) {
            tracing::error!(
                verb = %denial.verb,
                resource = %denial.resource,
                api_group = %denial.group,
                namespace = denial.namespace.as_ref().map(tracing::field::display),
                repeats,
                "not authorized: cannot {} {} {} ({} must grant it): {}",
                denial.verb,
                denial.resource,
                denial.scope(),
                denial.granted_by(),
                denial.message,
            );
        }
        true
    }

    /// Whether this denial is to be logged now; if so, how many times it recurred unlogged
    /// since the last line.
    fn due(&self, denial: &Denial, now: Instant) -> Option<u64> {
        let key = (denial.verb.clone(), denial.resource.clone());
        let mut logged = crate::locks::lock(&self.logged);
        match logged.get_mut(&key) {
            Some(last) if now.duration_since(last.at) < LOG_PERIOD => {
                last.repeats += 1;
                None
            }
            Some(last) => {
                let repeats = last.repeats;
                *last = Logged {
                    at: now,
                    repeats: 0,
                };
                Some(repeats)
            }
            None => {
                logged.insert(
                    key,
                    Logged {
                        at: now,
                        repeats: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> Status {
        Status {
            code,
            message: message.to_string(),
            reason: "Forbidden".into(),
            ..Status::default()
        }
    }

    const NAMESPACED: &str = r#"translations.midonet.org "t1" is forbidden: User "system:serviceaccount:kube-system:midonet-kube-controllers" cannot patch resource "translations/status" in API group "midonet.org" in the namespace "demo""#;
    const CLUSTER: &str = r#"endpoints is forbidden: User "alice" cannot list resource "endpoints" in API group "" at the cluster scope"#;

    #[test]
    fn parses_the_apiserver_message_over_the_callers_guess() {
        let guess = Attempt::new("patch", "translations", Some("other"));
        let d = Denial::from_status(&status(403, NAMESPACED), guess).unwrap();
        assert_eq!(
            (d.verb.as_str(), d.resource.as_str(), d.group.as_str()),
            ("patch", "translations/status", "midonet.org")
        );
        assert_eq!(d.namespace.as_deref(), Some("demo"));
        assert_eq!(d.scope(), "in namespace demo");
        assert_eq!(d.granted_by(), CLUSTER_ROLE);

        let d = Denial::from_status(&status(403, CLUSTER), guess).unwrap();
        assert_eq!(
            (d.verb.as_str(), d.resource.as_str()),
            ("list", "endpoints")
        );
        assert_eq!(d.namespace, None);
        assert_eq!(d.scope(), "cluster-wide");
    }

    #[test]
    fn falls_back_to_the_attempt_and_skips_what_is_not_rbac() {
        let attempt = Attempt::new("update", "leases", Some("kube-system"));
        let d = Denial::from_status(&status(403, "forbidden by policy"), attempt).unwrap();
        assert_eq!((d.verb.as_str(), d.resource.as_str()), ("update", "leases"));
        assert_eq!(d.namespace.as_deref(), Some("kube-system"));
        assert_eq!(d.granted_by(), LEASE_ROLE);

        let terminating = r#"translations.midonet.org "t" is forbidden: unable to create new content in namespace demo because it is being terminated"#;
        assert_eq!(
            Denial::from_status(&status(403, terminating), attempt),
            None
        );
        let warming_up = r#"pods "p" is forbidden: not yet ready to handle request"#;
        assert!(is_not_ready_yet(&status(403, warming_up)));
        assert!(!is_not_ready_yet(&status(403, NAMESPACED)));
        assert_eq!(Denial::from_status(&status(403, warming_up), attempt), None);
        assert_eq!(Denial::from_status(&status(409, CLUSTER), attempt), None);
        assert_eq!(Denial::from_status(&status(401, CLUSTER), attempt), None);
    }

    #[test]
    fn counts_every_denial_but_logs_each_verb_and_resource_once_per_period() {
        let registry = Registry::new();
        let authz = Authz::new(&registry).unwrap();
        let err = kube::Error::Api(Box::new(status(403, CLUSTER)));
        let attempt = Attempt::new("list", "endpoints", None);
        for _ in 0..3 {
            assert!(authz.report(attempt, &err));
        }
        assert!(!authz.report(attempt, &kube::Error::Api(Box::new(status(500, "boom")))));
        assert_eq!(
            authz.errors.with_label_values(&["list", "endpoints"]).get(),
            3
        );

        let d = Denial::from_status(&status(403, NAMESPACED), attempt).unwrap();
        let t0 = Instant::now();
        assert_eq!(authz.due(&d, t0), Some(0));
        assert_eq!(authz.due(&d, t0 + Duration::from_secs(1)), None);
        assert_eq!(authz.due(&d, t0 + Duration::from_secs(30)), None);
        assert_eq!(authz.due(&d, t0 + LOG_PERIOD), Some(2));
        assert_eq!(authz.due(&d, t0 + LOG_PERIOD * 2), Some(0));
        // Another resource has its own period.
        let other = Denial::from_status(&status(403, CLUSTER), attempt).unwrap();
        assert!(authz.due(&other, t0 + LOG_PERIOD * 2).is_some());
    }

    #[test]
    fn watcher_errors_name_list_or_watch() {
        let registry = Registry::new();
        let authz = Authz::new(&registry).unwrap();
        let denied = || kube::Error::Api(Box::new(status(403, "no")));
        assert!(authz.report_watch("pods", &watcher::Error::InitialListFailed(denied())));
        assert!(authz.report_watch("pods", &watcher::Error::WatchStartFailed(denied())));
        assert!(authz.report_watch(
            "pods",
            &watcher::Error::WatchError(Box::new(status(403, "no")))
        ));
        assert!(!authz.report_watch("pods", &watcher::Error::NoResourceVersion));
        let count = |verb: &str| authz.errors.with_label_values(&[verb, "pods"]).get();
        assert_eq!((count("list"), count("watch")), (1, 2));
    }
}
