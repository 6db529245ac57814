//! The floors measured again after the sync (`--only-initial`), and how the sync compares
//! with the mean of before and after. The floor before the sync met a younger etcd and
//! apiserver than the sync did; measured again after it (and after the costs), the mean of
//! the two stands where the sync ran. Also the unwatched sync's own rows.

use std::time::Duration;

use serde_json::{json, Value};

use crate::converge::UnwatchedSync;
use crate::floor::{self, FloorRun, FloorWrites, Owned};
use crate::initial::Initial;
use crate::report::{merge, row, secs, Row};
use crate::{Bench, Res};

/// The rows and JSON keys of the floors after the sync and of the unwatched sync, in the
/// table's order: the watched floor, the status floor again, the unwatched sync.
pub async fn rows_and_json(
    bench: &Bench,
    wanted: &[Owned],
    initial: &Initial<'_>,
) -> Res<(Vec<Row>, Value)> {
    let only_initial = bench.args.only_initial;
    if only_initial {
        // The floors measured again below start from a clear cluster, and each leaves it so.
        floor::clear(&bench.client, &bench.admin, wanted).await?;
    }
    let mut rows = Vec::new();
    let mut result = json!({});
    if let Some(before) = &initial.floors.watched {
        let after = if only_initial {
            eprintln!("bench: measuring the floor with a status write and a second watch again");
            let profile = bench.profile("floor-watched-after");
            let writes = FloorWrites::CreateAndStatus;
            Some(floor::measured(bench, wanted, writes, true, profile).await?)
        } else {
            None
        };
        let runs: Vec<&FloorRun> = std::iter::once(before).chain(after.as_ref()).collect();
        let (r, j) = watched(initial, &runs);
        rows.extend(r);
        merge(&mut result, j);
    }
    if only_initial {
        eprintln!("bench: measuring the floor with a status write again");
        let profile = bench.profile("floor-status-after");
        let writes = FloorWrites::CreateAndStatus;
        let after = floor::measured(bench, wanted, writes, false, profile).await?;
        let (r, j) = status_again(initial, &after);
        rows.extend(r);
        merge(&mut result, j);
    }
    if let Some(u) = &initial.sync.unwatched {
        let (r, j) = unwatched(u);
        rows.push(r);
        merge(&mut result, j);
    }
    Ok((rows, result))
}

/// The watched floor's runs (before the sync, and after it with `--only-initial`): the
/// sync over their mean.
fn watched(initial: &Initial, runs: &[&FloorRun]) -> (Vec<Row>, Value) {
    let time = runs.iter().map(|r| r.time).sum::<Duration>() / runs.len() as u32;
    let cpu = runs.iter().map(|r| r.cpu).sum::<Duration>() / runs.len() as u32;
    let ratio = initial.over(time);
    let times: Vec<String> = runs.iter().map(|r| secs(r.time)).collect();
    let rows = vec![
        row(
            "floor with a status write and a second watch",
            times.join(", then "),
            "-",
        ),
        row(
            "convergence / that floor (its apiserver CPU per Tr.)",
            format!("{ratio:.2} ({:.2} ms)", initial.per_translation(cpu)),
            "<= 1.05",
        ),
    ];
    let runs_json: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({"seconds": r.time.as_secs_f64(),
                   "apiserverCpuSeconds": r.cpu.as_secs_f64(),
                   "benchCpuSeconds": r.client_cpu.as_secs_f64(),
                   "timeline": r.timeline})
        })
        .collect();
    let result = json!({
        "floorWatchedSeconds": time.as_secs_f64(),
        "floorWatchedRuns": runs_json,
        "convergenceOverFloorWatched": ratio,
        "apiserverCpuSecondsFloorWatched": cpu.as_secs_f64(),
    });
    (rows, result)
}

/// The status floor measured again after the sync: the sync over the mean of the two.
fn status_again(initial: &Initial, after: &FloorRun) -> (Vec<Row>, Value) {
    let before = &initial.floors.status;
    let time = (before.time + after.time) / 2;
    let cpu = (before.cpu + after.cpu) / 2;
    let mean_ratio = initial.over(time);
    let rows = vec![
        row(
            "floor with a status write, again after the sync",
            format!(
                "{} ({:.2} ms apiserver CPU per Tr.)",
                secs(after.time),
                initial.per_translation(after.cpu)
            ),
            "-",
        ),
        row(
            "convergence / mean of the two floors with a status write",
            format!("{mean_ratio:.2}"),
            "<= 1.05",
        ),
    ];
    let result = json!({
        "floorWithStatusAfterSeconds": after.time.as_secs_f64(),
        "apiserverCpuSecondsFloorWithStatusAfter": after.cpu.as_secs_f64(),
        "floorWithStatusMeanSeconds": time.as_secs_f64(),
        "apiserverCpuSecondsFloorWithStatusMean": cpu.as_secs_f64(),
        "convergenceOverFloorWithStatusMean": mean_ratio,
    });
    (rows, result)
}

/// How the unwatched sync was timed.
fn unwatched(u: &UnwatchedSync) -> (Row, Value) {
    let r = row(
        "unwatched sync: converged after / timed at",
        format!(
            "{} / {:?} ({} LISTs, the last {})",
            secs(u.not_before),
            u.timed_at,
            u.lists,
            secs(u.confirming_list)
        ),
        "-",
    );
    let result = json!({"unwatchedSync": {
        "notBeforeSeconds": u.not_before.as_secs_f64(),
        "doneBySeconds": u.done_by.as_secs_f64(),
        "timedAt": u.timed_at,
        "confirmingListSeconds": u.confirming_list.as_secs_f64(),
        "lists": u.lists,
    }});
    (r, result)
}
