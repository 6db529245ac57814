//! Prometheus metrics of the pusher.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

const NS: &str = "midonet_kube_controllers";

#[derive(Clone)]
pub struct PusherMetrics {
    /// Reconcile duration by operation (apply, delete, unchanged).
    pub reconcile_duration: HistogramVec,
    /// Reconcile outcomes by result.
    pub reconciles: IntCounterVec,
    /// Reconciles running now.
    pub in_flight: IntGauge,
    /// Translations waiting for a retry after a failure (the retry queue's depth).
    pub retry_queue: IntGauge,
    /// Translations by sync state (ready, pending, not_ready, unknown, terminating; see
    /// [`super::sync_state`]).
    pub translations: IntGaugeVec,
    /// Translations by Translation version label (`none` for version-independent ones).
    pub translations_by_version: IntGaugeVec,
    /// Backend resources found missing and re-created by drift repair.
    pub drift_repaired: IntCounterVec,
    /// Backend resources MidoNet deleted (or cleared the filter references of) along with
    /// another Translation's, re-created.
    pub cascade_repaired: IntCounterVec,
    /// A version bump's phase: 1 for the current one (see [`super::rollout::Phase`]).
    pub rollout_phase: IntGaugeVec,
    /// A version bump's Translation counts, by what they count (see
    /// [`super::rollout::counts`]).
    pub rollout_translations: IntGaugeVec,
    /// Host interface bindings moved to a new Translation version's port.
    pub bindings_cut_over: IntCounter,
}

impl PusherMetrics {
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let m = PusherMetrics {
            reconcile_duration: HistogramVec::new(
                HistogramOpts::new(
                    "pusher_reconcile_duration_seconds",
                    "Duration of one pusher reconcile, by operation.",
                )
                .namespace(NS)
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
                &["operation"],
            )?,
            reconciles: IntCounterVec::new(
                Opts::new("pusher_reconciles_total", "Pusher reconciles, by result.").namespace(NS),
                &["result"],
            )?,
            in_flight: IntGauge::with_opts(
                Opts::new(
                    "pusher_reconciles_in_flight",
                    "Pusher reconciles running now.",
                )
                .namespace(NS),
            )?,
            retry_queue: IntGauge::with_opts(
                Opts::new(
                    "pusher_retry_queue_depth",
                    "Translations waiting for a retry after a failure.",
                )
                .namespace(NS),
            )?,
            translations: IntGaugeVec::new(
                Opts::new("translations", "Translations by sync state.").namespace(NS),
                &["state"],
            )?,
            translations_by_version: IntGaugeVec::new(
                Opts::new(
                    "translations_by_version",
                    "Translations by Translation version.",
                )
                .namespace(NS),
                &["version"],
            )?,
            drift_repaired: IntCounterVec::new(
                Opts::new(
                    "drift_repaired_resources_total",
                    "Backend resources found missing and re-created, by kind.",
                )
                .namespace(NS),
                &["kind"],
            )?,
            cascade_repaired: IntCounterVec::new(
                Opts::new(
                    "cascade_repaired_resources_total",
                    "Backend resources MidoNet deleted (or whose filter references it cleared) \
                     along with another Translation's resources (its cascade) and the pusher \
                     re-created, by kind.",
                )
                .namespace(NS),
                &["kind"],
            )?,
            rollout_phase: IntGaugeVec::new(
                Opts::new(
                    "rollout_phase",
                    "Phase of a Translation version bump: 1 for the current phase.",
                )
                .namespace(NS),
                &["phase"],
            )?,
            rollout_translations: IntGaugeVec::new(
                Opts::new(
                    "rollout_translations",
                    "Translations of a version bump: the new version's (total, unsettled, \
                     awaiting the cutover) and the old versions' (total, being deleted).",
                )
                .namespace(NS),
                &["count"],
            )?,
            bindings_cut_over: IntCounter::with_opts(
                Opts::new(
                    "rollout_bindings_cut_over_total",
                    "Host interface bindings moved to a new Translation version's port.",
                )
                .namespace(NS),
            )?,
        };
        registry.register(Box::new(m.reconcile_duration.clone()))?;
        registry.register(Box::new(m.rollout_phase.clone()))?;
        registry.register(Box::new(m.rollout_translations.clone()))?;
        registry.register(Box::new(m.bindings_cut_over.clone()))?;
        registry.register(Box::new(m.reconciles.clone()))?;
        registry.register(Box::new(m.in_flight.clone()))?;
        registry.register(Box::new(m.retry_queue.clone()))?;
        registry.register(Box::new(m.translations.clone()))?;
        registry.register(Box::new(m.translations_by_version.clone()))?;
        registry.register(Box::new(m.drift_repaired.clone()))?;
        registry.register(Box::new(m.cascade_repaired.clone()))?;
        Ok(m)
    }
}
