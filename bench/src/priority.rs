//! The flow probe's share of the CPU during a bump.
//!
//! The probe stands for midolman on every host, which in production runs on the hosts
//! beside the workloads, not on the cores of the control plane and the controllers. Here
//! they all share two cores, and while a bump's cutover moves the bindings the
//! controllers, the apiserver and the simulator keep both busy: a sample then lasts as long
//! as the scheduler's share allows, and an outage reads as long as the sample that saw it
//! end. So the probe's thread runs at [`PROBE_NICE`] by default (`--probe-nice`; the
//! threads it judges on are created by it and inherit the value): what it resolves is the
//! data plane, not its CPU share. It takes that share from the controllers while it
//! judges: the cutover it measures is slower than without it, and so are its outages.
//!
//! **Assumed**: Linux, where a nice value belongs to a thread (`setpriority(2)`, "BUGS"),
//! `/proc/thread-self` names the calling thread, and `renice(1)` is installed. Raising a
//! priority needs `CAP_SYS_NICE` (root has it); without it the probe runs at the default
//! value and the report says why ([`Priority`]).

use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use midonet_testkit::probe::ResourceSource;
use serde::Serialize;

/// The probe thread's nice value by default (0 is any thread's; -10 weighs about nine
/// times as much as that in the kernel's fair scheduler).
pub const PROBE_NICE: i32 = -10;

/// What setting the probe thread's priority gave.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Priority {
    /// The nice value the probe ran at.
    pub nice: i32,
    /// Why it is not the value asked for, if it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The calling thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn this_thread_id() -> Result<String, String> {
    let link = std::fs::read_link("/proc/thread-self").map_err(|e| e.to_string())?;
    let tid = link.file_name().and_then(|n| n.to_str());
    tid.map(str::to_string)
        .ok_or_else(|| format!("/proc/thread-self names no thread: {}", link.display()))
}

/// Sets the calling thread's nice value to `nice`.
fn renice_this_thread(nice: i32) -> Result<(), String> {
    let tid = this_thread_id()?;
    let out = Command::new("renice")
        .args(["-n", &nice.to_string(), "-p", &tid])
        .output()
        .map_err(|e| format!("renice: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "renice {nice} of thread {tid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `source`, which on its first call (on the probe's thread: the probe calls its source
/// there, before it samples) sets that thread's nice value to `nice` (0: leaves it);
/// `outcome` says what that gave once it was tried.
pub fn at_probe_priority(
    mut source: ResourceSource,
    nice: i32,
    outcome: Arc<Mutex<Option<Priority>>>,
) -> ResourceSource {
    let mut tried = false;
    Box::new(move || {
        if !tried {
            tried = true;
            let set = if nice == 0 {
                Ok(())
            } else {
                renice_this_thread(nice)
            };
            let priority = match set {
                Ok(()) => Priority {
                    nice,
                    refused: None,
                },
                Err(why) => Priority {
                    nice: 0,
                    refused: Some(why),
                },
            };
            *outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(priority);
        }
        source()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice value of the calling thread, from `/proc/thread-self/stat` (field 19).
    fn nice_of_this_thread() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn the_source_sets_its_threads_priority_once_and_says_what_it_got() {
        let outcome = Arc::new(Mutex::new(None));
        let calls = Arc::new(Mutex::new(0));
        let counted = calls.clone();
        let source: ResourceSource = Box::new(move || {
            *counted.lock().unwrap() += 1;
            Ok(Vec::new())
        });
        let mut source = at_probe_priority(source, PROBE_NICE, outcome.clone());
        let before = nice_of_this_thread();
        // On a thread of its own, as the probe's, so that this test's thread keeps its value.
        let nice = std::thread::spawn(move || {
            source().unwrap();
            source().unwrap();
            nice_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(*calls.lock().unwrap(), 2);
        let got = outcome.lock().unwrap().clone().unwrap();
        match &got.refused {
            // Raised: the thread runs at the value said.
            None => assert_eq!((got.nice, nice), (PROBE_NICE, PROBE_NICE)),
            // Refused (no CAP_SYS_NICE): the thread kept its value, and the reason is told.
            Some(why) => assert!(
                got.nice == 0 && nice == before && !why.is_empty(),
                "{got:?}"
            ),
        }
        // This thread was not changed.
        assert_eq!(nice_of_this_thread(), before);
    }
}
