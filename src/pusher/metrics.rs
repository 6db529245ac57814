//! Prometheus metrics of the pusher.

use prometheus::{
    Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
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
    /// The longest batch of the last cutover, in seconds: with a linked cutover, the
    /// longest any two pods were apart.
    pub cutover_longest_batch: Gauge,
    /// managedFields resets of settled Translations, by result (see [`super::compaction`]).
    pub managed_fields_compactions: IntCounterVec,
}

impl PusherMetrics {
    /// The pusher's metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let r = Registered(registry);
        Ok(PusherMetrics {
            reconcile_duration: r.add(HistogramVec::new(
                HistogramOpts::new(
                    "pusher_reconcile_duration_seconds",
                    "Duration of one pusher reconcile, by operation.",
                )
                .namespace(NS)
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
                &["operation"],
            )?)?,
            reconciles: r.add(IntCounterVec::new(
                opts("pusher_reconciles_total", "Pusher reconciles, by result."),
                &["result"],
            )?)?,
            in_flight: r.add(IntGauge::with_opts(opts(
                "pusher_reconciles_in_flight",
                "Pusher reconciles running now.",
            ))?)?,
            retry_queue: r.add(IntGauge::with_opts(opts(
                "pusher_retry_queue_depth",
                "Translations waiting for a retry after a failure.",
            ))?)?,
            translations: r.add(IntGaugeVec::new(
                opts("translations", "Translations by sync state."),
                &["state"],
            )?)?,
            translations_by_version: r.add(IntGaugeVec::new(
                opts(
                    "translations_by_version",
                    "Translations by Translation version.",
                ),
                &["version"],
            )?)?,
            drift_repaired: r.add(IntCounterVec::new(
                opts(
                    "drift_repaired_resources_total",
                    "Backend resources found missing and re-created, by kind.",
                ),
                &["kind"],
            )?)?,
            cascade_repaired: r.add(IntCounterVec::new(
                opts(
                    "cascade_repaired_resources_total",
                    "Backend resources MidoNet deleted (or whose filter references it cleared) \
                     along with another Translation's resources (its cascade) and the pusher \
                     re-created, by kind.",
                ),
                &["kind"],
            )?)?,
            rollout_phase: r.add(IntGaugeVec::new(
                opts(
                    "rollout_phase",
                    "Phase of a Translation version bump: 1 for the current phase.",
                ),
                &["phase"],
            )?)?,
            rollout_translations: r.add(IntGaugeVec::new(
                opts(
                    "rollout_translations",
                    "Translations of a version bump: the new version's (total, unsettled, \
                     awaiting the cutover) and the old versions' (total, being deleted).",
                ),
                &["count"],
            )?)?,
            bindings_cut_over: r.add(IntCounter::with_opts(opts(
                "rollout_bindings_cut_over_total",
                "Host interface bindings moved to a new Translation version's port.",
            ))?)?,
            cutover_longest_batch: r.add(Gauge::with_opts(opts(
                "rollout_cutover_longest_batch_seconds",
                "The longest batch of the last version bump's cutover (one host's with \
                 --bump-cutover linked or host-by-host, every binding's with all-at-once).",
            ))?)?,
            managed_fields_compactions: r.add(IntCounterVec::new(
                opts(
                    "managed_fields_compactions_total",
                    "managedFields resets of settled Translations, by result (compacted; \
                     changed since seen, left for the next pass; failed).",
                ),
                &["result"],
            )?)?,
        })
    }
}

/// The options of the metric `name` in the process's namespace.
fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NS)
}

/// A registry that hands back what it registered.
struct Registered<'a>(&'a Registry);

impl Registered<'_> {
    fn add<M: prometheus::core::Collector + Clone + 'static>(
        &self,
        metric: M,
    ) -> prometheus::Result<M> {
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }
}
