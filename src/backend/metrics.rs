//! Prometheus metrics of the MidoNet API client, named as the original controller named
//! them: `midonet_kube_controllers_midonet_client_{request_duration_seconds,requests_total,errors_total}`.
//!
//! Labels: `method` is the lowercase HTTP method; `resource` is the media type of the
//! resource involved (the kind's vendor type, or its collection type for lists, `login`
//! for logins), as the original labelled it; `code` is the HTTP status.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

const NAMESPACE: &str = "midonet_kube_controllers";
const SUBSYSTEM: &str = "midonet_client";

/// The client's metric families, registered in a caller-provided registry.
#[derive(Clone)]
pub struct ClientMetrics {
    duration: HistogramVec,
    requests: IntCounterVec,
    errors: IntCounterVec,
}

impl ClientMetrics {
    pub fn register(registry: &Registry) -> Result<ClientMetrics, prometheus::Error> {
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "request_duration_seconds",
                "Duration of MidoNet API requests that got an answer",
            )
            .namespace(NAMESPACE)
            .subsystem(SUBSYSTEM),
            &["method", "resource", "code"],
        )?;
        let requests = IntCounterVec::new(
            Opts::new("requests_total", "MidoNet API requests that got an answer")
                .namespace(NAMESPACE)
                .subsystem(SUBSYSTEM),
            &["method", "resource", "code"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "errors_total",
                "MidoNet API requests that got no answer (connection or timeout errors)",
            )
            .namespace(NAMESPACE)
            .subsystem(SUBSYSTEM),
            &["method", "resource"],
        )?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        Ok(ClientMetrics {
            duration,
            requests,
            errors,
        })
    }

    pub(crate) fn answered(&self, method: &str, resource: &str, code: u16, seconds: f64) {
        let code = code.to_string();
        let labels = [method, resource, code.as_str()];
        self.duration.with_label_values(&labels).observe(seconds);
        self.requests.with_label_values(&labels).inc();
    }

    pub(crate) fn failed(&self, method: &str, resource: &str) {
        self.errors.with_label_values(&[method, resource]).inc();
    }
}
