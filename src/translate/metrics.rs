//! Prometheus metrics of the translator controllers.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

const NS: &str = "midonet_kube_controllers";

#[derive(Clone)]
pub struct TranslatorMetrics {
    /// Reconcile duration by kind.
    pub reconcile_duration: HistogramVec,
    /// Reconciles by kind and result (unchanged, written, waiting, error).
    pub reconciles: IntCounterVec,
    /// Translation writes by kind and operation (create, update, delete).
    pub writes: IntCounterVec,
    /// Translation warnings (bad input) by kind and reason.
    pub warnings: IntCounterVec,
    /// Global Translations restored after they were deleted or edited, by cause.
    pub globals_restored: IntCounterVec,
}

impl TranslatorMetrics {
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let m = TranslatorMetrics {
            reconcile_duration: HistogramVec::new(
                HistogramOpts::new(
                    "translator_reconcile_duration_seconds",
                    "Duration of one translator reconcile, by kind.",
                )
                .namespace(NS)
                .buckets(vec![0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]),
                &["kind"],
            )?,
            reconciles: IntCounterVec::new(
                Opts::new(
                    "translator_reconciles_total",
                    "Translator reconciles, by kind and result.",
                )
                .namespace(NS),
                &["kind", "result"],
            )?,
            writes: IntCounterVec::new(
                Opts::new(
                    "translator_translation_writes_total",
                    "Translation writes to the apiserver, by kind and operation.",
                )
                .namespace(NS),
                &["kind", "operation"],
            )?,
            warnings: IntCounterVec::new(
                Opts::new(
                    "translator_warnings_total",
                    "Parts of objects skipped because of bad input, by kind and reason.",
                )
                .namespace(NS),
                &["kind", "reason"],
            )?,
            globals_restored: IntCounterVec::new(
                Opts::new(
                    "global_translations_restored_total",
                    "Global Translations restored after they were deleted or edited, by cause (deleted, edited).",
                )
                .namespace(NS),
                &["cause"],
            )?,
        };
        registry.register(Box::new(m.reconcile_duration.clone()))?;
        registry.register(Box::new(m.reconciles.clone()))?;
        registry.register(Box::new(m.writes.clone()))?;
        registry.register(Box::new(m.warnings.clone()))?;
        registry.register(Box::new(m.globals_restored.clone()))?;
        Ok(m)
    }
}
