//! The status cadence end to end (MO-05, MO-06): the real monitor asks the real agent channel
//! for `check_status` and `host_report` through `request_job`, and a stale node gets one job of
//! each per window however many passes run. "Not twice" is proved against the monitor's own
//! pass counter (the marker), never a sleep.

use capstan_e2e::heard::heard;
use capstan_e2e::plane::Plane;
use capstan_e2e::wait_for;
use capstan_events::NodeId;
use capstan_events::{agent_channel::JobFinished, Domain};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::agent_channel::{PairedAgent, TestAgent};
use crate::incidents::PATIENCE;

/// The monitor's status passes so far: its own counter, in its own schema (no API shows how
/// many passes ran, and nothing else marks "a pass ran and asked nothing").
async fn passes(plane: &Plane) -> i64 {
    let store = capstan_store::Store::connect(plane.database.url(), "monitor", 1)
        .await
        .unwrap();
    let passes: i64 = sqlx::query_scalar("SELECT passes FROM status_passes")
        .fetch_one(store.pool())
        .await
        .unwrap();
    store.close().await;
    passes
}

/// Waits until `more` passes have run after now.
async fn more_passes(plane: &Plane, more: i64) {
    let from = passes(plane).await;
    wait_for(
        &format!("{more} more status passes"),
        PATIENCE,
        || async move { (passes(plane).await >= from + more).then_some(()) },
    )
    .await;
}

/// The node's jobs the monitor asked for.
async fn asked(plane: &Plane, node: i64) -> Vec<Value> {
    let (status, jobs) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/jobs?node_id={node}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|job| job["requested_by"] == "service/monitor")
        .cloned()
        .collect()
}

fn of<'a>(jobs: &'a [Value], primitive: &str) -> Vec<&'a Value> {
    jobs.iter()
        .filter(|job| job["primitive"] == primitive)
        .collect()
}

/// MO-05, MO-06: a paired node whose agent offers both words gets one `check_status` and one
/// `host_report` from the first pass; while they are queued, and then once the check completed
/// inside the window, many more passes ask nothing more. A node whose agent lacks the words is
/// never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_05_a_stale_node_gets_one_check_status_per_window_however_many_passes_run() {
    let plane = Plane::start_with(&[("CAPSTAN__MONITOR__STATUS_PASS_SECS", "1")]).await;
    let (agent, node) = plane.paired_agent("web-stale").await;
    // This agent reports a vocabulary without either word in its first claim.
    let other = TestAgent::new(&plane);
    let (status, _) = other.join("web-lacking").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let lacking = plane.approve(&other.fingerprint()).await;
    let (status, claimed) = other.claim(&json!({"vocabulary": ["restart_unit"]})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");

    let jobs = wait_for("the monitor's jobs", PATIENCE, || async {
        let jobs = asked(&plane, node).await;
        (!of(&jobs, "check_status").is_empty() && !of(&jobs, "host_report").is_empty())
            .then_some(jobs)
    })
    .await;
    assert_eq!(of(&jobs, "check_status").len(), 1, "{jobs:?}");
    assert_eq!(of(&jobs, "host_report").len(), 1, "{jobs:?}");
    let mut ids: Vec<i64> = jobs.iter().map(|job| job["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();

    // Queued is cover: three more passes ask nothing more.
    more_passes(&plane, 3).await;
    let jobs = asked(&plane, node).await;
    assert_eq!(of(&jobs, "check_status").len(), 1, "{jobs:?}");
    assert_eq!(of(&jobs, "host_report").len(), 1, "{jobs:?}");

    // The agent runs both, one claim each.
    let mut ran = Vec::new();
    for _ in 0..2 {
        let (status, claimed) = agent.claim(&json!({})).await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        let job = claimed["job"]["id"].as_i64().expect("a job to run");
        let (status, answer) = agent.result(job, "completed", "ok").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        ran.push(job);
    }
    ran.sort_unstable();
    assert_eq!(ran, ids);
    // Completed inside the window is cover: three more passes after the monitor heard both.
    for job in &ids {
        heard::<JobFinished>(
            &plane.bus,
            Domain::Monitor,
            "the monitor to hear the jobs ended",
            |finished| finished.job_id == *job,
        )
        .await;
    }
    more_passes(&plane, 3).await;
    let jobs = asked(&plane, node).await;
    assert_eq!(of(&jobs, "check_status").len(), 1, "{jobs:?}");
    assert_eq!(of(&jobs, "host_report").len(), 1, "{jobs:?}");

    // The agent that lacks the words was never asked.
    assert_eq!(asked(&plane, lacking).await, Vec::<Value>::new());
    plane.stop().await;
}

/// When the monitor's latest status pass ran (its own schema: no API shows it).
async fn last_pass_at(plane: &Plane) -> Option<chrono::DateTime<chrono::Utc>> {
    let store = capstan_store::Store::connect(plane.database.url(), "monitor", 1)
        .await
        .unwrap();
    let at: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT last_pass_at FROM status_passes")
            .fetch_one(store.pool())
            .await
            .unwrap();
    store.close().await;
    at
}

/// Waits until a status pass has run at or after `at` (the marker for "nothing more was
/// asked by then").
async fn a_pass_after(plane: &Plane, at: chrono::DateTime<chrono::Utc>) {
    wait_for(
        &format!("a status pass after {at}"),
        PATIENCE,
        || async move { last_pass_at(plane).await.filter(|last| *last >= at) },
    )
    .await;
}

/// MO-05: the cover rule itself, across windows. With a three-second window, a job the agent
/// never claims stays queued for four windows, and queued is cover: the node still has one
/// `check_status` and one `host_report`, although each new window would make a new job (a new
/// idempotency key) if the rule let the pass ask again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_05_a_queued_job_is_cover_across_windows_so_a_stale_node_is_asked_once() {
    let window_secs = 3;
    let plane = Plane::start_with(&[
        ("CAPSTAN__MONITOR__STATUS_PASS_SECS", "1"),
        ("CAPSTAN__MONITOR__STATUS_REFRESH_SECS", "3"),
    ])
    .await;
    let (_agent, node) = plane.paired_agent("web-queued").await;
    let jobs = wait_for("the monitor's jobs", PATIENCE, || async {
        let jobs = asked(&plane, node).await;
        (!of(&jobs, "check_status").is_empty() && !of(&jobs, "host_report").is_empty())
            .then_some(jobs)
    })
    .await;
    let first = chrono::Utc::now();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    a_pass_after(&plane, first + chrono::Duration::seconds(4 * window_secs)).await;
    let jobs = asked(&plane, node).await;
    assert_eq!(of(&jobs, "check_status").len(), 1, "{jobs:?}");
    assert_eq!(of(&jobs, "host_report").len(), 1, "{jobs:?}");
    for job in &jobs {
        assert_eq!(job["state"], "pending", "{job}");
    }
    plane.stop().await;
}

/// Runs the node's next job, which must be of `primitive`, completing it with `result`.
async fn run_next(agent: &TestAgent, primitive: &str, result: Value) -> i64 {
    let (status, claimed) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["primitive"], primitive, "{claimed}");
    let job = claimed["job"]["id"].as_i64().expect("a job to run");
    let (status, answer) = agent
        .send(
            "result",
            &json!({"job_id": job, "outcome": "completed", "output": "", "result": result,
                    "reason": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    job
}

/// MO-06: while a node's last host report says its data root is being encrypted, it is asked
/// for a host_report on the short window (here two seconds; five minutes by default) although
/// the hour has not passed; once a report says the data root is mounted, the hour rules again
/// and passes well past the short window ask nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_06_a_data_root_being_encrypted_is_reported_on_the_short_window_then_hourly() {
    let plane = Plane::start_with(&[
        ("CAPSTAN__MONITOR__STATUS_PASS_SECS", "1"),
        ("CAPSTAN__MONITOR__DATA_ROOT_REFRESH_SECS", "2"),
    ])
    .await;
    let (agent, node) = plane.paired_agent("web-encrypting").await;
    wait_for("the monitor's first jobs", PATIENCE, || async {
        (asked(&plane, node).await.len() == 2).then_some(())
    })
    .await;
    let report = |run: &str| json!({"boot_id": "boot-1", "data_root": {"path": "/srv/data", "state": "mounted", "run": run}});
    // The first jobs in the order asked: check_status, then host_report.
    run_next(&agent, "check_status", json!({})).await;
    run_next(&agent, "host_report", report("encrypting")).await;
    // A second host_report inside the hour.
    wait_for("a host_report on the short window", PATIENCE, || async {
        (of(&asked(&plane, node).await, "host_report").len() == 2).then_some(())
    })
    .await;
    run_next(&agent, "host_report", report("encrypting")).await;
    wait_for(
        "a third host_report on the short window",
        PATIENCE,
        || async { (of(&asked(&plane, node).await, "host_report").len() == 3).then_some(()) },
    )
    .await;
    run_next(&agent, "host_report", report("none")).await;
    let done = chrono::Utc::now();
    // The monitor heard the last report before a pass well past the short window.
    heard::<JobFinished>(
        &plane.bus,
        Domain::Monitor,
        "the monitor to read the last report",
        |finished| {
            finished.node_id == NodeId(node)
                && finished.primitive == "host_report"
                && finished
                    .result
                    .as_ref()
                    .is_some_and(|result| result["data_root"]["run"] == "none")
        },
    )
    .await;
    a_pass_after(&plane, done + chrono::Duration::seconds(6)).await;
    let jobs = asked(&plane, node).await;
    assert_eq!(of(&jobs, "host_report").len(), 3, "{jobs:?}");
    assert_eq!(of(&jobs, "check_status").len(), 1, "{jobs:?}");
    plane.stop().await;
}
