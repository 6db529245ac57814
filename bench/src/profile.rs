//! A CPU profile of the kube-apiserver over one phase (`--apiserver-profile DIR`), to find
//! what the apiserver does in the sync beyond the floor's work.
//!
//! Go's `/debug/pprof/profile` samples for a fixed number of seconds and cannot be stopped
//! early. So a profile starts with its phase and runs longer than it; the bench waits for it
//! to end before the work that follows the phase (clearing a floor, the sync's confirming
//! LIST), which would otherwise be profiled too. The phase's own timings are taken before
//! that wait and do not change; the profile holds the phase and an idle tail. The files are
//! gzipped `profile.proto`, read with `go tool pprof` (e.g. `-top -diff_base`).

use std::path::PathBuf;

use futures::AsyncReadExt;
use kube::Client;
use tokio::task::JoinHandle;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub struct ApiserverProfile {
    name: String,
    task: JoinHandle<Res<()>>,
}

impl ApiserverProfile {
    /// Starts a profile of `seconds`, to be written to `DIR/NAME.pb.gz`; nothing without a
    /// directory.
    pub fn start(
        client: &Client,
        dir: Option<&PathBuf>,
        seconds: u64,
        name: &str,
    ) -> Option<ApiserverProfile> {
        let path = dir?.join(format!("{name}.pb.gz"));
        let client = client.clone();
        let task = tokio::spawn(async move {
            let request = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
                .body(Vec::new())?;
            let mut body = client.request_stream(request).await?;
            let mut bytes = Vec::new();
            body.read_to_end(&mut bytes).await?;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, bytes)?;
            Ok(())
        });
        Some(ApiserverProfile {
            name: name.to_string(),
            task,
        })
    }

    /// Waits for the profile to end and be written.
    pub async fn finish(self) -> Res<()> {
        eprintln!(
            "bench: waiting for the apiserver profile {:?} to end",
            self.name
        );
        self.task
            .await
            .map_err(|e| format!("apiserver profile {}: {e}", self.name))?
            .map_err(|e| format!("apiserver profile {}: {e}", self.name).into())
    }
}
