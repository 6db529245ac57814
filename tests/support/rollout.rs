//! Reading a version bump's progress off the controllers' metrics endpoint.

/// A series' value on the metrics endpoint at `port` (`series` is the name with its labels
/// and the space before the value), `None` while not exposed or unreachable.
pub async fn metric(port: u16, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The `rollout_phase` series of `phase` (1 while the bump is in it).
pub fn phase_series(phase: &str) -> String {
    format!("midonet_kube_controllers_rollout_phase{{phase=\"{phase}\"}} ")
}
