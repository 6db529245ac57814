//! Kubernetes events on the objects the controllers work on.
//!
//! Publishing is asynchronous, as client-go's event broadcaster is: a reconcile queues its
//! event and goes on, and one background task per process writes the queue to the
//! apiserver. An event write therefore never sits on the path from a Kubernetes change to
//! the backend, and a slow or failing events API cannot stall reconciles.
//!
//! Event writes are rate limited (`--event-qps`, `--event-burst`): on a busy apiserver
//! they would otherwise compete with the writes that matter (Translations and their
//! status), and an initial sync queues two events per Translation. The queue is bounded;
//! when it is full, events are dropped (events are best effort by design), counted in
//! `midonet_kube_controllers_events_dropped_total`, and the drop is logged. Warnings have
//! a queue of their own and go first.
//!
//! Only warnings go through a recorder that remembers what it published, so that a
//! failure repeated on every retry becomes a count on one event (`series`) instead of a
//! new event each time. kube-rs's recorder keeps every event it published for six
//! minutes to do that, which for the thousands of routine events of an initial sync would
//! be a large part of the heap. A routine event is published without that memory: each
//! one is its own event, with its own note (a repeat folded into a series would keep the
//! first note, e.g. the first push's count of changes).
//!
//! **Caveat**: an event is never a guarantee (dropped when the queue is full, lost when
//! the process stops first); what must be seen is also logged, counted or in a status.
//! Every reason is named once, in [`reason`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use prometheus::{IntCounter, Registry};
use tokio::sync::mpsc;

use crate::authz::{Attempt, Authz};

/// The reasons of the events the controllers publish, in one place: a reason is an
/// interface (alerts, `kubectl get events --field-selector reason=…`), so each is named
/// once. The translators' Warning reasons come with their warnings
/// (`midonet_translators::Warning`).
pub mod reason {
    /// A translator created a Translation (Normal, on its owner).
    pub const TRANSLATION_CREATED: &str = "TranslationCreated";
    /// A translator updated a Translation (Normal, on its owner).
    pub const TRANSLATION_UPDATED: &str = "TranslationUpdated";
    /// A translator deleted a stale Translation (Normal, on its owner).
    pub const TRANSLATION_DELETED: &str = "TranslationDeleted";
    /// A global Translation deleted or edited by hand was restored (Warning, on it).
    pub const GLOBAL_TRANSLATION_RESTORED: &str = "GlobalTranslationRestored";
    /// No MidoNet host has the Node's name (yet) (Warning, on the Node).
    pub const HOST_NOT_FOUND: &str = "MidoNetHostNotFound";
    /// The MidoNet hosts could not be listed (Warning, on the Node).
    pub const HOST_LOOKUP_FAILED: &str = "MidoNetHostLookupFailed";
    /// The LB IPAM gave a LoadBalancer Service an address (Normal, on the Service).
    pub const LB_IP_ASSIGNED: &str = "LoadBalancerIPAssigned";
    /// The LB IPAM took a pool address back from a Service (Normal, on the Service).
    pub const LB_IP_RELEASED: &str = "LoadBalancerIPReleased";
    /// Every address of the LB pools is taken (Warning, on the Service left without one).
    pub const LB_POOL_EXHAUSTED: &str = "LoadBalancerPoolExhausted";
    /// The `spec.loadBalancerIP` asked for is invalid, in no pool or held by another
    /// Service (Warning, on the Service).
    pub const LB_IP_UNAVAILABLE: &str = "LoadBalancerIPUnavailable";

    // The pusher's, on the Translation it pushed or deleted; named as the original
    // controller named them, since alerts written for it select on them.
    /// A push changed the backend (Normal).
    pub const TRANSLATION_UPDATE_PUSHED: &str = "TranslationUpdatePushed";
    /// A push failed or left the Translation not Ready (Warning).
    pub const TRANSLATION_UPDATE_ERROR: &str = "TranslationUpdateError";
    /// A deleted Translation's backend resources are gone and its finalizer removed (Normal).
    pub const TRANSLATION_DELETION_PUSHED: &str = "TranslationDeletionPushed";
    /// A backend deletion failed; the finalizer stays (Warning).
    pub const TRANSLATION_DELETION_ERROR: &str = "TranslationDeletionError";
    /// The backend is clean but the finalizer could not be removed (Warning).
    pub const TRANSLATION_DELETION_FINALIZER_ERROR: &str = "TranslationDeletionFinalizerError";
    /// Resources deleted out of band were re-created (Warning).
    pub const BACKEND_DRIFT_REPAIRED: &str = "BackendDriftRepaired";
    /// Resources MidoNet deleted along with another Translation's were re-created (Normal).
    pub const BACKEND_CASCADE_REPAIRED: &str = "BackendCascadeRepaired";

    // A version bump's phases, one event per phase entered (Normal, on a global
    // Translation of the configured version).
    pub const VERSION_BUMP_BUILDING: &str = "VersionBumpBuilding";
    pub const VERSION_BUMP_CUTTING_OVER: &str = "VersionBumpCuttingOver";
    pub const VERSION_BUMP_RETIRING: &str = "VersionBumpRetiring";
    pub const VERSION_BUMP_COMPLETE: &str = "VersionBumpComplete";
}

/// Normal events waiting to be written; beyond this, new ones are dropped.
const QUEUE_CAPACITY: usize = 4096;
/// Warnings have their own queue and go first: a failure must not wait behind the
/// thousands of routine events of a large sync.
const WARNING_QUEUE_CAPACITY: usize = 1024;
/// Event writes in flight at the same time.
const PUBLISHERS: usize = 4;

/// How fast events may be written.
#[derive(Clone, Copy, Debug)]
pub struct EventLimits {
    /// Sustained writes per second.
    pub qps: f64,
    /// Writes allowed at once after a quiet period.
    pub burst: u32,
}

/// The process's event queue and its background writer; hands out [`Events`] per
/// controller.
#[derive(Clone)]
pub struct EventPublisher {
    queues: Queues,
    client: Client,
    dropped: IntCounter,
}

/// One controller's events; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    queues: Queues,
    dropped: IntCounter,
    source: Arc<Source>,
}

/// Who reports an event. `warnings` keeps the controller's recent warnings, so a repeat
/// becomes a count on the same event rather than a new one; routine events are written
/// by a recorder made for each (see the module doc).
struct Source {
    warnings: Recorder,
    client: Client,
    reporter: Reporter,
    controller: String,
}

impl Source {
    async fn publish(&self, event: &Event, obj: &ObjectReference) -> kube::Result<()> {
        match event.type_ {
            EventType::Warning => self.warnings.publish(event, obj).await,
            EventType::Normal => {
                Recorder::new(self.client.clone(), self.reporter.clone())
                    .publish(event, obj)
                    .await
            }
        }
    }
}

#[derive(Clone)]
struct Queues {
    normal: mpsc::Sender<Queued>,
    warning: mpsc::Sender<Queued>,
}

struct Queued {
    source: Arc<Source>,
    object: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
}

/// Writes events to the apiserver (the background side of [`Events`]).
struct Publisher {
    client: Client,
    authz: Authz,
}

/// A token bucket: `acquire` waits until a write is allowed.
struct TokenBucket {
    limits: EventLimits,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    fn new(limits: EventLimits) -> Self {
        TokenBucket {
            limits,
            tokens: f64::from(limits.burst.max(1)),
            refilled: Instant::now(),
        }
    }

    /// Takes a token at `now` if there is one; otherwise says how long until there is.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let capacity = f64::from(self.limits.burst.max(1));
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limits.qps).min(capacity);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - self.tokens) / self.limits.qps.max(f64::MIN_POSITIVE);
        Err(Duration::from_secs_f64(wait.min(60.0)))
    }

    async fn acquire(&mut self) {
        while let Err(wait) = self.take(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
}

impl EventPublisher {
    /// Starts the background writer; must be called within a Tokio runtime.
    pub fn start(
        client: Client,
        authz: Authz,
        limits: EventLimits,
        registry: &Registry,
    ) -> prometheus::Result<Self> {
        let dropped = IntCounter::new(
            "midonet_kube_controllers_events_dropped_total",
            "Kubernetes events dropped because the event queue was full.",
        )?;
        registry.register(Box::new(dropped.clone()))?;
        let publisher = Arc::new(Publisher {
            client: client.clone(),
            authz,
        });
        let (normal, normal_rx) = mpsc::channel::<Queued>(QUEUE_CAPACITY);
        let (warning, warning_rx) = mpsc::channel::<Queued>(WARNING_QUEUE_CAPACITY);
        // Each event takes a token as it leaves the queues, one at a time, warnings first.
        let limited = futures::stream::unfold(
            (warning_rx, normal_rx, TokenBucket::new(limits)),
            |(mut warning_rx, mut normal_rx, mut bucket)| async move {
                let ev = tokio::select! {
                    biased;
                    Some(ev) = warning_rx.recv() => ev,
                    Some(ev) = normal_rx.recv() => ev,
                    else => return None,
                };
                bucket.acquire().await;
                Some((ev, (warning_rx, normal_rx, bucket)))
            },
        );
        tokio::spawn(async move {
            limited
                .for_each_concurrent(PUBLISHERS, |ev| {
                    let publisher = publisher.clone();
                    async move { publisher.publish(ev).await }
                })
                .await;
        });
        Ok(EventPublisher {
            queues: Queues { normal, warning },
            client,
            dropped,
        })
    }

    /// The events of one controller, reported under its name.
    pub fn for_controller(&self, controller: &str) -> Events {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Events {
            queues: self.queues.clone(),
            dropped: self.dropped.clone(),
            source: Arc::new(Source {
                warnings: Recorder::new(self.client.clone(), reporter.clone()),
                client: self.client.clone(),
                reporter,
                controller: controller.to_string(),
            }),
        }
    }
}

impl Events {
    pub async fn normal(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.enqueue(obj, EventType::Normal, reason, note)
    }

    pub async fn warning(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.enqueue(obj, EventType::Warning, reason, note)
    }

    fn enqueue(&self, obj: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let queue = match type_ {
            EventType::Warning => &self.queues.warning,
            EventType::Normal => &self.queues.normal,
        };
        let queued = Queued {
            source: self.source.clone(),
            object: obj.clone(),
            type_,
            reason: reason.to_string(),
            note,
        };
        if queue.try_send(queued).is_err() {
            self.dropped.inc();
            let dropped = self.dropped.get();
            // Logged at 1, 2, 4, 8, … drops, so a flood does not flood the log too.
            if dropped.is_power_of_two() {
                tracing::warn!(
                    reason,
                    object = obj.name.as_deref().unwrap_or(""),
                    dropped,
                    "event queue full; dropping events"
                );
            }
        }
    }
}

impl Publisher {
    async fn publish(&self, ev: Queued) {
        let Queued {
            source,
            object: obj,
            type_,
            reason,
            note,
        } = ev;
        let obj = &obj;
        let reason = reason.as_str();
        // The events API caps the note at 1 kB.
        let note = truncate(note, 1000);
        if obj.namespace.as_deref().unwrap_or("").is_empty() {
            // Older apiservers (v1.20) reject events.k8s.io/v1 events about cluster-scoped
            // objects (Nodes); a core/v1 Event in `default` is what they accept.
            return self
                .publish_core(&source.controller, obj, type_, reason, note)
                .await;
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(err) = source.publish(&event, obj).await {
            // The recorder creates an event, or patches it to count a repeat; the API
            // server's message says which of the two was refused.
            let attempt = Attempt::new("create", "events", obj.namespace.as_deref());
            if !self.authz.report(attempt, &err) {
                tracing::warn!(
                    reason,
                    kind = obj.kind.as_deref().unwrap_or(""),
                    namespace = obj.namespace.as_deref().unwrap_or(""),
                    object = obj.name.as_deref().unwrap_or(""),
                    error = %err,
                    "cannot publish event"
                );
            }
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

impl Publisher {
    async fn publish_core(
        &self,
        controller: &str,
        obj: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let name = format!(
            "{}.{:016x}",
            obj.name.as_deref().unwrap_or("object"),
            rand::random::<u64>()
        );
        let event = k8s_openapi::api::core::v1::Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: obj.clone(),
            reason: Some(reason.to_string()),
            message: Some(note),
            type_: Some(match type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(controller.to_string()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        let api: kube::Api<k8s_openapi::api::core::v1::Event> =
            kube::Api::namespaced(self.client.clone(), "default");
        if let Err(err) = api.create(&kube::api::PostParams::default(), &event).await {
            let attempt = Attempt::new("create", "events", Some("default"));
            if !self.authz.report(attempt, &err) {
                tracing::warn!(
                    reason,
                    kind = obj.kind.as_deref().unwrap_or(""),
                    object = obj.name.as_deref().unwrap_or(""),
                    error = %err,
                    "cannot publish event"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let mut bucket = TokenBucket::new(EventLimits {
            qps: 10.0,
            burst: 3,
        });
        let t0 = bucket.refilled;
        for _ in 0..3 {
            assert_eq!(bucket.take(t0), Ok(()));
        }
        let wait = bucket.take(t0).expect_err("burst used up");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        // A tenth of a second later, one more; a long pause refills only up to the burst.
        assert_eq!(bucket.take(t0 + Duration::from_millis(100)), Ok(()));
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }
}
