//! The optional snapshot file: the whole store as JSON, rewritten shortly after changes
//! and at shutdown, read at start, so the simulator survives its own restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::store::Store;
use super::{SimError, SimState};

/// Changes within this delay are written together.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Reads the snapshot; `None` if the file does not exist yet.
pub(crate) fn load(path: &Path) -> Result<Option<Store>, SimError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(SimError::Snapshot(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        SimError::Snapshot(format!(
            "{} is not a simulator snapshot: {e}",
            path.display()
        ))
    })
}

/// Writes the snapshot atomically (temporary file, then rename).
pub(crate) fn save(path: &Path, store: &Store) -> Result<(), SimError> {
    let fail = |e: &dyn std::fmt::Display| {
        SimError::Snapshot(format!("cannot write {}: {e}", path.display()))
    };
    let json = serde_json::to_vec_pretty(store).map_err(|e| fail(&e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, json).map_err(|e| fail(&e))?;
    std::fs::rename(&tmp, path).map_err(|e| fail(&e))
}

/// Writes the snapshot after every burst of changes until `stop` fires, then once more.
pub(crate) async fn writer(
    sim: Arc<SimState>,
    path: PathBuf,
    mut changes: watch::Receiver<u64>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                tokio::time::sleep(DEBOUNCE).await;
                changes.borrow_and_update();
                write(&sim, &path).await;
            }
            _ = &mut stop => break,
        }
    }
    write(&sim, &path).await;
}

async fn write(sim: &Arc<SimState>, path: &Path) {
    let store = sim.with_store(|s| s.clone());
    let path_buf = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || save(&path_buf, &store)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "snapshot not written"),
        Err(e) => tracing::error!(error = %e, "snapshot writer failed"),
    }
}
