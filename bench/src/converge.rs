//! When a phase has converged: every Translation Ready, the tracked ones what the phase
//! asks for, and the simulator holding exactly the item paths they ask for. The pusher
//! marks a Translation Ready only once the backend confirmed, and removes a finalizer only
//! after the backend deletes, so this is the state a user waits for.
//!
//! Two ways of timing it: with the bench's Translation watch ([`wait_converged`], exact to
//! the watch event that completed the phase), or without it ([`wait_converged_unwatched`],
//! for a sync that must run under as many Translation watchers as the floors). A phase that
//! has not converged within [`timeout`] is an error saying what was still missing.

use std::time::{Duration, Instant};

use kube::Client;
use midonet_sim::admin::AdminClient;

use crate::controllers::Controllers;
use crate::controlplane::apiserver_and_bench_cpu;
use crate::profile::ApiserverProfile;
use crate::tracker::{self, ReadyTracker, Snapshot, Want};
use crate::Res;

/// How long a phase over `translations` Translations may take before it is an error:
/// generous, so that a slow machine reports a slow phase rather than fails it.
pub fn timeout(translations: usize) -> Duration {
    Duration::from_secs(900).max(Duration::from_millis(100) * translations as u32)
}

/// Waits until every Translation is Ready, the tracked ones are what `want` asks for, and
/// the simulator holds exactly the item paths they ask for; returns the time from `since`
/// to the watch event that completed it.
pub async fn wait_converged(
    tracker: &ReadyTracker,
    admin: &AdminClient,
    want: &Want<'_>,
    since: Instant,
    what: &str,
) -> Res<Duration> {
    let mut last_report = Instant::now();
    loop {
        let now = tracker.snapshot(want);
        let why = match unconverged(&now, want) {
            Some(why) => why,
            None => {
                let actual = admin.state().await?.translation_paths();
                if actual == now.expected_paths {
                    let done = now.last_change.unwrap_or(since);
                    return Ok(done.saturating_duration_since(since));
                }
                format!(
                    "{} backend paths missing, {} extra",
                    now.expected_paths.difference(&actual).count(),
                    actual.difference(&now.expected_paths).count()
                )
            }
        };
        let watch = now
            .last_error
            .map(|e| format!(" (watch: {e})"))
            .unwrap_or_default();
        let waited = Waited {
            what,
            since,
            timeout: timeout(want.count),
        };
        waited.still_waiting(&format!("{why}{watch}"), &mut last_report)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What keeps the tracked Translations from being what `want` asks for, if anything (the
/// backend aside).
fn unconverged(now: &Snapshot, want: &Want) -> Option<String> {
    Some(if now.count < want.count {
        format!("{} Translations, want at least {}", now.count, want.count)
    } else if now.expected_paths.len() < want.paths {
        format!(
            "{} backend paths asked for, want at least {}",
            now.expected_paths.len(),
            want.paths
        )
    } else if now.missing > 0 {
        format!("{} of the phase's new Translations missing", now.missing)
    } else if now.left > 0 {
        format!("{} of the phase's deleted Translations left", now.left)
    } else if now.not_ready > 0 {
        format!("{} Translations not Ready", now.not_ready)
    } else if now.stale > 0 {
        format!(
            "{} Translations of version {:?} left",
            now.stale, want.stale_version
        )
    } else {
        return None;
    })
}

/// A phase being waited for.
struct Waited<'a> {
    what: &'a str,
    since: Instant,
    timeout: Duration,
}

impl Waited<'_> {
    /// Fails once `since` is `timeout` ago; every 10 s, says why the phase has not
    /// converged yet.
    fn still_waiting(&self, why: &str, last_report: &mut Instant) -> Res<()> {
        let (what, timeout) = (self.what, self.timeout);
        if self.since.elapsed() > timeout {
            return Err(format!("{what}: not converged in {timeout:?}: {why}").into());
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("bench: {what}: not converged yet: {why}");
            *last_report = Instant::now();
        }
        Ok(())
    }
}

/// When a sync timed without a watch converged, seen from `since`: `done_by` is the time
/// reported, `not_before` the start of the last poll or LIST that found it unfinished.
pub struct UnwatchedSync {
    pub done_by: Duration,
    pub not_before: Duration,
    /// What `done_by` is: the poll that read the final count of pushes, when the LIST
    /// proves that count complete; else the end of the confirming LIST.
    pub timed_at: UnwatchedEnd,
    /// The apiserver's and the bench's CPU time at `done_by`: the confirming LIST after
    /// it is not the sync's work.
    pub apiserver_cpu: Duration,
    pub bench_cpu: Duration,
    pub confirming_list: Duration,
    pub lists: usize,
}

#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UnwatchedEnd {
    PushCount,
    List,
}

/// One poll of the controllers' count of pushes in [`wait_converged_unwatched`].
struct Poll {
    /// When its answer was read.
    read: Instant,
    pushed: f64,
    /// The apiserver's and the bench's CPU time when it was read.
    cpu_at_read: (Duration, Duration),
}

/// Waits, without a watch, until every Translation is Ready and the simulator holds
/// exactly the item paths they ask for.
///
/// Polls the controllers' count of pushes every 100 ms. The pusher counts a push once
/// its Ready status is written, and in an initial sync every Translation is new, so each
/// needs at least one push. Once the count reaches `count`, a LIST of the Translations and
/// the simulator's state decide ([`confirmed_by_list`]). A LIST of every Translation is
/// heavy work for the apiserver, so there is none before the count is reached; nor before
/// `profile`, the apiserver's over the sync, has ended.
pub async fn wait_converged_unwatched(
    client: &Client,
    admin: &AdminClient,
    ctl: &Controllers,
    want: &Want<'_>,
    since: Instant,
    mut profile: Option<ApiserverProfile>,
) -> Res<UnwatchedSync> {
    let count = want.count;
    let waited = Waited {
        what: "initial sync",
        since,
        timeout: timeout(count),
    };
    let mut not_before = since;
    let mut lists = 0;
    let mut last_report = Instant::now();
    loop {
        let sent = Instant::now();
        // The metrics endpoint is not up at once; an error is reported as not converged.
        let why = match pushes(ctl).await {
            Err(e) => format!("controllers' metrics: {e}"),
            Ok(pushed) if pushed < count as f64 => {
                format!("{pushed} pushes, want at least {count}")
            }
            Ok(pushed) => {
                let poll = Poll {
                    read: Instant::now(),
                    pushed,
                    cpu_at_read: apiserver_and_bench_cpu()?,
                };
                if let Some(profile) = profile.take() {
                    profile.finish().await?;
                }
                lists += 1;
                match confirmed_by_list(client, admin, ctl, want, &poll).await? {
                    Ok(c) => {
                        return Ok(UnwatchedSync {
                            done_by: c.done.saturating_duration_since(since),
                            not_before: not_before.saturating_duration_since(since),
                            timed_at: c.timed_at,
                            apiserver_cpu: c.cpu.0,
                            bench_cpu: c.cpu.1,
                            confirming_list: c.confirming_list,
                            lists,
                        })
                    }
                    Err((listing, why)) => {
                        // The LIST's snapshot, taken after it started, was not converged.
                        not_before = listing;
                        tokio::time::sleep(Duration::from_millis(150)).await;
                        why
                    }
                }
            }
        };
        not_before = not_before.max(sent);
        waited.still_waiting(&why, &mut last_report)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The controllers' count of pushes.
async fn pushes(ctl: &Controllers) -> Res<f64> {
    ctl.metric_by_label("midonet_kube_controllers_pusher_reconciles_total", "result")
        .await
        .map(|by_result| by_result.get("pushed").copied().unwrap_or(0.0))
}

/// A sync the LIST confirmed.
struct Confirmed {
    done: Instant,
    timed_at: UnwatchedEnd,
    cpu: (Duration, Duration),
    confirming_list: Duration,
}

/// After `poll` read at least `want.count` pushes: a LIST of the Translations and the
/// simulator's state confirm the sync, or say why not (with when the LIST started).
///
/// If they confirm, and the count is still what that poll read and equals the
/// Translations listed, every Translation was pushed exactly once and by that poll: the
/// sync is timed there, to within the poll period. Otherwise (a Translation pushed twice)
/// it is timed at the end of the LIST.
async fn confirmed_by_list(
    client: &Client,
    admin: &AdminClient,
    ctl: &Controllers,
    want: &Want<'_>,
    poll: &Poll,
) -> Res<Result<Confirmed, (Instant, String)>> {
    let listing = Instant::now();
    let now = tracker::list_snapshot(client).await?;
    let listed = Instant::now();
    let why = if let Some(why) = unconverged(&now, want) {
        why
    } else {
        let actual = admin.state().await?.translation_paths();
        if actual == now.expected_paths {
            let exact = pushes(ctl).await? == poll.pushed && poll.pushed == now.count as f64;
            let (timed_at, done, cpu) = if exact {
                (UnwatchedEnd::PushCount, poll.read, poll.cpu_at_read)
            } else {
                (UnwatchedEnd::List, listed, apiserver_and_bench_cpu()?)
            };
            return Ok(Ok(Confirmed {
                done,
                timed_at,
                cpu,
                confirming_list: listed.saturating_duration_since(listing),
            }));
        }
        format!(
            "{} backend paths missing, {} extra",
            now.expected_paths.difference(&actual).count(),
            actual.difference(&now.expected_paths).count()
        )
    };
    Ok(Err((listing, why)))
}
