//! A restart storm does not bury work (issue 10): when a whole fleet renews its long polls at
//! once, a claim that moves a job along (a node with a job waiting, a long poll woken for one)
//! is answered ahead of the plain renewals queued for the agent slots, and none of those is
//! lost (AC-25: one job at a time per node, handed out once).

use super::{PairedAgent, Plane, TestAgent, VOCABULARY};
use capstan_e2e::wait_for;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::{sync::Arc, time::Duration};

/// Quiet nodes renewing at once: more than the plain lane's slots. The test plane's pool of 8
/// connections gives 5 agent slots (2 are reserved, 1 is the arrivals'), 4 of them for plain
/// requests.
const RENEWALS: usize = 12;
/// Statements of the renewals held at the test's row locks before the work is sent: every
/// plain slot is then taken and the rest of the renewals wait for one.
const HELD: i64 = 4;
/// How long a claim with work waiting may take while the renewals are stuck.
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

fn claim_body() -> Vec<u8> {
    serde_json::to_vec(
        &json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY, "claim_bytes": 1048576}),
    )
    .unwrap()
}

/// A long poll of `wait` seconds, answered in the background.
fn long_poll(agent: Arc<TestAgent>, wait: u64) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    tokio::spawn(async move {
        let reply = agent
            .send_at(
                "claim",
                &format!("?wait={wait}"),
                &claim_body(),
                super::now(),
            )
            .await;
        (reply.status, reply.body)
    })
}

async fn open_long_polls(plane: &Plane) -> f64 {
    let text = plane
        .http
        .get(format!("{}/metrics", plane.base))
        .bearer_auth(&plane.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("capstan_agent_long_polls "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Statements waiting for a row lock in the test's database.
async fn waiting_for_locks(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

// Every quiet node's renewal is held in the database (its heartbeat is due, and the test holds
// its node's row), so the renewals take every plain slot and the rest queue behind them, as a
// storm of 10,000 does for seconds. A job queued then for a node whose long poll is parked,
// and one for a node that claims only now, each reach their agent while the renewals are still
// stuck; then the renewals all end 200 with no job. Before the work lane, both claims waited
// behind the renewals for a slot and the gateway gave up on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_with_work_waiting_is_answered_before_a_backlog_of_plain_renewals() {
    let plane = Plane::start().await;
    let (parked, parked_node) = plane.paired_agent("parked").await;
    let (late, late_node) = plane.paired_agent("late").await;
    let mut quiet = Vec::new();
    let mut quiet_nodes = Vec::new();
    for index in 0..RENEWALS {
        let (agent, node) = plane.paired_agent(&format!("quiet-{index}")).await;
        quiet.push(Arc::new(agent));
        quiet_nodes.push(node);
    }
    let parked_poll = long_poll(Arc::new(parked), 20);
    wait_for("the parked long poll", Duration::from_secs(10), || async {
        (open_long_polls(&plane).await >= 1.0).then_some(())
    })
    .await;

    // The storm: every quiet node's heartbeat is due and its row held, so each renewal's
    // database work waits while it holds its slot.
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    sqlx::query(
        "UPDATE agent_channel.nodes SET last_seen_at = now() - interval '1 hour' WHERE id = ANY($1)",
    )
    .bind(&quiet_nodes)
    .execute(&pool)
    .await
    .unwrap();
    let mut holding = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM agent_channel.nodes WHERE id = ANY($1) FOR UPDATE")
        .bind(&quiet_nodes)
        .fetch_all(&mut *holding)
        .await
        .unwrap();
    let renewals: Vec<_> = quiet
        .iter()
        .map(|agent| long_poll(agent.clone(), 20))
        .collect();
    wait_for(
        "the renewals to take every plain slot",
        Duration::from_secs(10),
        || async { (waiting_for_locks(&pool).await >= HELD).then_some(()) },
    )
    .await;

    // Work arrives during the storm.
    let woken_job = plane.queue(parked_node, "check_status", json!({})).await;
    let late_job = plane.queue(late_node, "check_status", json!({})).await;
    let late_claim = tokio::time::timeout(ANSWERED_WITHIN, late.claim(&json!({})))
        .await
        .expect("a claim for a node with a job waiting is answered while the renewals are stuck");
    assert_eq!(
        late_claim.0,
        StatusCode::OK,
        "the claim for a node with a job waiting waited behind the renewals: {}",
        late_claim.1
    );
    assert_eq!(late_claim.1["job"]["id"], late_job, "{}", late_claim.1);
    let (status, woken) = tokio::time::timeout(ANSWERED_WITHIN, parked_poll)
        .await
        .expect("a long poll woken for a job is answered while the renewals are stuck")
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{woken}");
    assert_eq!(woken["job"]["id"], woken_job, "{woken}");
    assert!(
        waiting_for_locks(&pool).await >= HELD,
        "the renewals were still held when the work was answered"
    );

    // The storm passes: every renewal is taken, none handed a job, none lost.
    holding.rollback().await.unwrap();
    wait_for(
        "every renewal to be parked",
        Duration::from_secs(15),
        || async { (open_long_polls(&plane).await >= RENEWALS as f64).then_some(()) },
    )
    .await;
    for (job, node) in [(woken_job, parked_node), (late_job, late_node)] {
        let view = plane.job(job).await;
        assert_eq!(
            (view["state"].as_str(), view["node_id"].as_i64()),
            (Some("running"), Some(node)),
            "job {job} handed out once, to its node: {view}"
        );
    }
    pool.close().await;
    // A stop answers the parked renewals at once, each with no job.
    plane.stop().await;
    for renewal in renewals {
        let (status, body) = renewal.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["job"].is_null(), "{body}");
    }
}
