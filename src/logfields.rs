//! The structured fields of per-object log lines, named the same everywhere:
//!
//! | field | meaning |
//! |---|---|
//! | `controller` | the controller working on the object (`pusher`, `pod`, `nodeannotator`, …) |
//! | `kind` | the Kubernetes kind (`Translation`, `Pod`, `Node`, …) |
//! | `namespace`, `object` | the object's namespace (none for cluster-scoped objects) and name |
//! | `translation` | a Translation's name (with `namespace`, the Translation's namespace) |
//! | `backend_kind`, `backend_path` | a MidoNet resource: its kind and item path (`/bridges/{id}`) |
//!
//! A reconcile runs inside [`object_span`], so every line it logs, including those of the
//! clients it calls, carries the object's fields without repeating them. The object's name
//! is `object`, not `name`: JSON logs put a span's own name under `name`.

use kube::{Resource, ResourceExt};
use tracing::field::Empty;
use tracing::Span;

use crate::crd::Translation;

/// The span of one piece of work on `obj` by `controller`. Translations also get
/// `translation`.
///
/// Created at ERROR level so that it is enabled whenever any line inside is: a span below
/// the configured level would be dropped, and the lines inside would lose its fields.
pub fn object_span<K: Resource<DynamicType = ()>>(controller: &'static str, obj: &K) -> Span {
    let kind = K::kind(&());
    let name = obj.name_any();
    let span = tracing::error_span!(
        "reconcile",
        controller,
        kind = %kind,
        namespace = Empty,
        object = %name,
        translation = Empty,
    );
    if let Some(ns) = obj.meta().namespace.as_deref() {
        span.record("namespace", tracing::field::display(ns));
    }
    if kind == Translation::kind(&()) {
        span.record("translation", tracing::field::display(&name));
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TranslationSpec;
    use k8s_openapi::api::core::v1::Node;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// Captures what a JSON subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn json_lines(log: impl FnOnce()) -> Vec<serde_json::Value> {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_inside_carry_the_objects_fields() {
        let tr = Translation::new("pod.1.web-1", "demo", TranslationSpec::default());
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-1"}
        }))
        .unwrap();
        let lines = json_lines(|| {
            object_span("pusher", &tr).in_scope(|| tracing::warn!("inside"));
            object_span("nodeannotator", &node).in_scope(|| tracing::warn!("inside"));
        });
        let span = &lines[0]["span"];
        assert_eq!(span["controller"], "pusher");
        assert_eq!(span["kind"], "Translation");
        assert_eq!(span["namespace"], "demo");
        assert_eq!(span["object"], "pod.1.web-1");
        assert_eq!(span["translation"], "pod.1.web-1");
        let span = &lines[1]["span"];
        assert_eq!(span["kind"], "Node");
        assert_eq!(span["object"], "node-1");
        assert!(span.get("namespace").is_none() && span.get("translation").is_none());
    }
}
