//! Kubernetes events on the objects the controllers work on.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use crate::authz::{Attempt, Authz};

/// Publishes events; a failure to publish is logged, never fatal.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    client: Client,
    controller: String,
    authz: Authz,
}

impl Events {
    pub fn new(client: Client, controller: &str, authz: Authz) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Events {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            controller: controller.to_string(),
            authz,
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

impl Events {
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
