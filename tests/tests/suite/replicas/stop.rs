//! A gateway stopping with open long polls (issue 17): on SIGTERM it answers each at once with
//! an empty claim and exits, and the claims the agent channel holds for them (in this process
//! or another replica) are released without being handed a job. Before, a stop waited out
//! every claim's `wait` (28 s of a 30 s grace period).

use super::fixture::{FleetAgent, Replicas};
use capstan_e2e::wait_for;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const AGENTS: usize = 3;
const LONG_POLLS: &str = "capstan_agent_long_polls";
/// What the issue asks of a stop.
const STOP_WITHIN: Duration = Duration::from_secs(2);

/// A long poll in flight: its answer (none if the connection dropped) and when it came.
type Poll = JoinHandle<(Option<(StatusCode, Value)>, Instant)>;

/// Each agent's claim held open for 30 s: (its answer, when it came).
fn open_long_polls(agents: &[FleetAgent]) -> Vec<Poll> {
    agents
        .iter()
        .cloned()
        .map(|agent| {
            tokio::spawn(async move {
                let answer = agent.claim(30, true).await;
                (answer, Instant::now())
            })
        })
        .collect()
}

/// Waits until `bases` together hold `count` long polls.
async fn held(plane: &Replicas, bases: &[String], count: f64) {
    wait_for(
        "the long polls to be held",
        Duration::from_secs(20),
        || async {
            let mut total = 0.0;
            for base in bases {
                total += plane.metric(base, LONG_POLLS).await?;
            }
            (total == count).then_some(())
        },
    )
    .await;
}

/// Every long poll was answered `200` with no job; the longest it took after `stopped_at`.
async fn all_answered_empty(polls: Vec<Poll>, stopped_at: Instant) -> Duration {
    let mut slowest = Duration::ZERO;
    for poll in polls {
        let (answer, at) = tokio::time::timeout(Duration::from_secs(10), poll)
            .await
            .expect("every long poll is answered soon after the stop")
            .unwrap();
        let (status, body) =
            answer.expect("the long poll got an HTTP answer, not a dropped connection");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body["job"].is_null(),
            "a stopping gateway hands out no job: {body}"
        );
        slowest = slowest.max(at.saturating_duration_since(stopped_at));
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_alone_stops_at_once_answering_its_long_polls() {
    let mut plane = Replicas::start(&[&["agent_channel"], &["gateway"]]).await;
    let (channel, gateway) = (
        plane.replicas[0].base.clone(),
        plane.replicas[1].base.clone(),
    );
    let mut agents = Vec::new();
    for index in 0..AGENTS {
        agents.push(plane.paired(&gateway, &format!("alone-{index}")).await);
    }
    let polls = open_long_polls(&agents);
    held(&plane, std::slice::from_ref(&channel), AGENTS as f64).await;

    let stopped_at = Instant::now();
    let (exited, code) = plane.replicas[1].sigterm().await;
    let answered = all_answered_empty(polls, stopped_at).await;
    eprintln!("gateway alone: exited {exited:?} after SIGTERM (code {code:?}), long polls answered within {answered:?}");
    assert!(
        exited < STOP_WITHIN,
        "the gateway took {exited:?} to stop\n{}",
        plane.logs()
    );
    assert_eq!(code, Some(0), "a clean stop\n{}", plane.logs());
    // The agent channel let go of the claims rather than waiting out their 30 s.
    wait_for(
        "the claims to be released",
        Duration::from_secs(5),
        || async { (plane.metric(&channel, LONG_POLLS).await? == 0.0).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_beside_another_stops_at_once_and_its_claims_are_released_without_a_job() {
    let mut plane = Replicas::start(&[&["all"], &["all"]]).await;
    let (stopping, staying) = (
        plane.replicas[0].base.clone(),
        plane.replicas[1].base.clone(),
    );
    let mut agents = Vec::new();
    for index in 0..AGENTS {
        agents.push(plane.paired(&stopping, &format!("beside-{index}")).await);
    }
    let polls = open_long_polls(&agents);
    // The queue group shares the claims between both replicas' agent channels.
    held(&plane, &[stopping.clone(), staying.clone()], AGENTS as f64).await;

    let stopped_at = Instant::now();
    let (exited, code) = plane.replicas[0].sigterm().await;
    let answered = all_answered_empty(polls, stopped_at).await;
    eprintln!("replica beside another: exited {exited:?} after SIGTERM (code {code:?}), long polls answered within {answered:?}");
    assert!(
        exited < STOP_WITHIN,
        "the replica took {exited:?} to stop\n{}",
        plane.logs()
    );
    assert_eq!(code, Some(0), "a clean stop\n{}", plane.logs());
    wait_for(
        "the other replica to release its claims",
        Duration::from_secs(5),
        || async { (plane.metric(&staying, LONG_POLLS).await? == 0.0).then_some(()) },
    )
    .await;

    // Had a released claim stayed held, the next job would have gone to it and nowhere: each
    // node's next claim, through the replica that stays, gets its job.
    let bases = vec![staying.clone()];
    for mut agent in agents {
        let job = plane.operator.queue(&bases, agent.node).await;
        agent.bases = bases.clone();
        let (status, claim) = agent
            .claim(5, true)
            .await
            .expect("the staying replica answers");
        assert_eq!(status, StatusCode::OK, "{claim}");
        assert_eq!(
            claim["job"]["id"].as_i64(),
            Some(job),
            "{claim}\n{}",
            plane.logs()
        );
    }
}
