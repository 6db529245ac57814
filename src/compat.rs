//! Which Kubernetes versions the controllers support, and what they say about the one they
//! talk to.
//!
//! Guarantees: [`support`] places an apiserver's `major.minor` against the supported range
//! ([`OLDEST_MINOR`]..=[`NEWEST_CHECKED_MINOR`], see `docs/kubernetes-versions.md` for what
//! was checked per release); [`log_apiserver_version`] logs the version once at start-up, as
//! a warning outside the range. Nothing is refused on the version alone: every API whose
//! presence differs between releases is chosen by discovery or with a fallback where it is
//! used (EndpointSlices in `translate::slices`, events in `events`), so an unlisted release
//! that serves those APIs works, and one that does not fails there with its own error.
//!
//! Assumes the apiserver's `/version` is readable (it is, to every authenticated client).
//! Leaves to others: the API choices themselves.

use kube::Client;

/// The oldest minor release of Kubernetes 1.x supported: the test world's (1.20.2), and
/// the first with every API the controllers need in a version they read
/// (`events.k8s.io/v1` since 1.19, `discovery.k8s.io` EndpointSlices served by default).
pub const OLDEST_MINOR: u32 = 20;
/// The newest minor release whose changelogs were read for every API, field and behaviour
/// the controllers use (`docs/kubernetes-versions.md`).
pub const NEWEST_CHECKED_MINOR: u32 = 35;

/// How long start-up waits for `/version`.
const VERSION_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where an apiserver's version falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Within the supported range.
    Supported,
    /// Older than [`OLDEST_MINOR`]: APIs the controllers read may be missing.
    TooOld,
    /// Newer than [`NEWEST_CHECKED_MINOR`]: expected to work (APIs are chosen by
    /// discovery), not yet checked against its changelog.
    NewerThanChecked,
    /// Not a `1.x` version the controllers can read.
    Unknown,
}

/// Places `major`/`minor` as `/version` reports them (`minor` may carry a suffix, as
/// `"20+"` on some distributions).
pub fn support(major: &str, minor: &str) -> Support {
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    match (major, digits.parse::<u32>()) {
        ("1", Ok(m)) if m < OLDEST_MINOR => Support::TooOld,
        ("1", Ok(m)) if m > NEWEST_CHECKED_MINOR => Support::NewerThanChecked,
        ("1", Ok(_)) => Support::Supported,
        _ => Support::Unknown,
    }
}

/// Logs the apiserver's version and where it falls; a failure to read it is logged and
/// otherwise ignored (see the module doc: nothing depends on it).
pub async fn log_apiserver_version(kube: &Client) {
    // Bounded: start-up must not wait on a slow apiserver for a log line.
    let read = tokio::time::timeout(VERSION_READ_TIMEOUT, kube.apiserver_version()).await;
    let info = match read {
        Ok(Ok(info)) => info,
        Ok(Err(error)) => {
            tracing::warn!(%error, "could not read the apiserver's version");
            return;
        }
        Err(_) => {
            tracing::warn!(timeout = ?VERSION_READ_TIMEOUT, "the apiserver's version was not read in time");
            return;
        }
    };
    let version = info.git_version.as_str();
    match support(&info.major, &info.minor) {
        Support::Supported => tracing::info!(version, "apiserver version supported"),
        Support::TooOld => tracing::warn!(
            version,
            oldest = %format!("1.{OLDEST_MINOR}"),
            "apiserver older than the oldest supported Kubernetes release; APIs the controllers read may be missing"
        ),
        Support::NewerThanChecked => tracing::warn!(
            version,
            newest_checked = %format!("1.{NEWEST_CHECKED_MINOR}"),
            "apiserver newer than the newest Kubernetes release checked; see docs/kubernetes-versions.md"
        ),
        Support::Unknown => tracing::warn!(
            version,
            major = %info.major,
            minor = %info.minor,
            "apiserver version not understood"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_test_worlds_release_to_the_newest_checked() {
        assert_eq!(support("1", "19"), Support::TooOld);
        assert_eq!(support("1", "20"), Support::Supported);
        assert_eq!(support("1", "33+"), Support::Supported);
        assert_eq!(support("1", "35"), Support::Supported);
        assert_eq!(support("1", "36"), Support::NewerThanChecked);
        assert_eq!(support("2", "0"), Support::Unknown);
        assert_eq!(support("1", ""), Support::Unknown);
    }
}
