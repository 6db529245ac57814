//! Kubernetes events on the objects the controllers work on.
//!
//! Publishing is asynchronous, as client-go's event broadcaster is: a reconcile queues its
//! event and goes on, and a background task writes the queue to the apiserver. An event
//! write therefore never sits on the path from a Kubernetes change to the backend, and a
//! slow or failing events API cannot stall reconciles. The queue is bounded; when it is
//! full, events are dropped (events are best effort by design) and the drop is logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;

use crate::authz::{Attempt, Authz};

/// Events waiting to be written; beyond this, new ones are dropped.
const QUEUE_CAPACITY: usize = 4096;
/// Event writes in flight at the same time.
const PUBLISHERS: usize = 4;

/// Queues events for publication; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<Queued>,
    dropped: Arc<AtomicU64>,
}

struct Queued {
    object: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
}

/// Writes events to the apiserver (the background side of [`Events`]).
struct Publisher {
    recorder: Recorder,
    client: Client,
    controller: String,
    authz: Authz,
}

impl Events {
    /// Starts the background publisher; must be called within a Tokio runtime.
    pub fn new(client: Client, controller: &str, authz: Authz) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let publisher = Arc::new(Publisher {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            controller: controller.to_string(),
            authz,
        });
        let (queue, rx) = mpsc::channel::<Queued>(QUEUE_CAPACITY);
        tokio::spawn(async move {
            crate::streams::bounded(rx)
                .for_each_concurrent(PUBLISHERS, |ev| {
                    let publisher = publisher.clone();
                    async move { publisher.publish(ev).await }
                })
                .await;
        });
        Events {
            queue,
            dropped: Arc::default(),
        }
    }

    pub async fn normal(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.enqueue(obj, EventType::Normal, reason, note)
    }

    pub async fn warning(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.enqueue(obj, EventType::Warning, reason, note)
    }

    fn enqueue(&self, obj: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let queued = Queued {
            object: obj.clone(),
            type_,
            reason: reason.to_string(),
            note,
        };
        if self.queue.try_send(queued).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
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
            return self.publish_core(obj, type_, reason, note).await;
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, obj).await {
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
                component: Some(self.controller.clone()),
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
