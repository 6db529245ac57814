//! Kubernetes events on the objects the controllers work on.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

/// Publishes events; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    pub async fn normal(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.publish(obj, EventType::Normal, reason, note).await
    }

    pub async fn warning(&self, obj: &ObjectReference, reason: &str, note: String) {
        self.publish(obj, EventType::Warning, reason, note).await
    }

    async fn publish(&self, obj: &ObjectReference, type_: EventType, reason: &str, note: String) {
        // The events API caps the note at 1 kB.
        let note = truncate(note, 1000);
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, obj).await {
            tracing::warn!(
                reason,
                object = obj.name.as_deref().unwrap_or(""),
                namespace = obj.namespace.as_deref().unwrap_or(""),
                error = %err,
                "cannot publish event"
            );
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
