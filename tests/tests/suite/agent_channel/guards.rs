//! Issue 27, the plane's guards on who asks for a word: a service's words (backups' runs,
//! verifies and restores; rollouts' applies, checks and patch runs) are never made on the
//! generic jobs route, and a service's `request_job` is held to the words it may ask for, by
//! the subject it came on.

use super::{PairedAgent, Plane, VOCABULARY};
use capstan_bus::{
    testsuite::{consumer_settled, read_stream},
    Outgoing,
};
use capstan_e2e::wait_for;
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{
        rpc::{CreateJob, JobCreated},
        RequestJob,
    },
    rpc::{Actor, ErrorCode, Level, RpcError},
    Domain, Envelope, DEAD_LETTER_STREAM,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// Every word a test node reports here: the test agent's and the services' words.
fn everything() -> Vec<&'static str> {
    let mut words = VOCABULARY.to_vec();
    words.extend([
        "backup_run",
        "verify_backup",
        "restore_project",
        "upgrade_preflight",
        "install_security_updates",
    ]);
    words
}

/// The jobs the plane holds for `node`, through the API.
async fn jobs_of(plane: &Plane, node: i64) -> Vec<Value> {
    let (status, jobs) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/jobs?node_id={node}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    jobs["jobs"].as_array().cloned().unwrap_or_default()
}

/// Asks the agent channel itself (behind the gateway) for a job as a level-10 operator.
async fn ask_agent_channel(plane: &Plane, node: i64, primitive: &str, params: Value) -> RpcError {
    let request = CreateJob {
        actor: Actor {
            name: "root-of-all".into(),
            level: Level::Admin,
            address: None,
        },
        node_id: NodeId(node),
        primitive: primitive.into(),
        params,
    };
    let answer: Result<JobCreated, RpcError> =
        plane.bus.ask(&request, Duration::from_secs(10)).await;
    answer.expect_err("the agent channel refuses a service's word to an operator")
}

/// Posts `primitive` to the generic route as `token`: the refusal's status, code and words.
async fn post_job(plane: &Plane, token: &str, node: i64, body: Value) -> (StatusCode, Value) {
    plane
        .api(
            token,
            "POST",
            &format!("/api/v1/nodes/{node}/jobs"),
            Some(body),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_words_are_refused_on_the_generic_jobs_route_naming_the_backups_routes_and_nothing_is_queued(
) {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-guarded").await;
    agent.claim(&json!({"vocabulary": everything()})).await;

    // A level-7 operator's level-3 verify (a read word) skips the one job per machine.
    let (status, refused) = post_job(
        &plane,
        &plane.reader,
        node,
        json!({"primitive": "verify_backup", "params": {"seq": 1, "level": 3}}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let words = refused["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("POST /api/v1/nodes/{id}/backups/verify"),
        "{words}"
    );
    // A level-8 operator's hand-made run with a sequence number no run could follow.
    let (status, refused) = post_job(
        &plane,
        &plane.changer,
        node,
        json!({"primitive": "backup_run", "params": {"seq": 1_i64 << 53, "kind": "full"}}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let words = refused["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("POST /api/v1/nodes/{id}/backups/run"),
        "{words}"
    );
    // The agent channel holds to it on its own, whoever asks it, at any level.
    let refused = ask_agent_channel(&plane, node, "restore_project", json!({"seq": 1})).await;
    assert_eq!(refused.code, ErrorCode::Forbidden, "{refused}");
    assert!(
        refused
            .message
            .contains("POST /api/v1/nodes/{id}/backups/restore"),
        "{refused}"
    );
    assert_eq!(jobs_of(&plane, node).await, Vec::<Value>::new());
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_words_are_refused_on_the_generic_jobs_route_naming_the_rollouts_route_and_nothing_is_queued(
) {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-guarded").await;
    agent.claim(&json!({"vocabulary": everything()})).await;

    let (status, refused) = post_job(
        &plane,
        &plane.admin,
        node,
        json!({"primitive": "apply_update", "params": {"version": "1.2.3"}}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let words = refused["error"]["message"].as_str().unwrap();
    assert!(words.contains("POST /api/v1/rollouts"), "{words}");
    for word in ["upgrade_preflight", "install_security_updates"] {
        let refused = ask_agent_channel(&plane, node, word, json!({})).await;
        assert_eq!(refused.code, ErrorCode::Forbidden, "{word}: {refused}");
        assert!(
            refused.message.contains("POST /api/v1/rollouts"),
            "{refused}"
        );
    }
    assert_eq!(jobs_of(&plane, node).await, Vec::<Value>::new());
    plane.stop().await;
}

/// Issue 27, item 2: a command on the monitor's subject asks with the monitor's authority and
/// nothing more. Its status word is queued; a restore on the same subject, or a request on a
/// subject naming no sender, queues nothing and is dead-lettered with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_subject_command_for_restore_project_queues_nothing() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-guarded").await;
    agent.claim(&json!({"vocabulary": everything()})).await;

    let request = |key: &str, primitive: &str, params: Value| RequestJob {
        idempotency_key: key.into(),
        node_id: NodeId(node),
        primitive: primitive.into(),
        params,
        requested_by: "service/monitor".into(),
    };
    let commands = [
        Outgoing::command_from(
            Domain::Monitor,
            Envelope::new(
                request("monitor-restore", "restore_project", json!({"seq": 1})),
                None,
            ),
        ),
        Outgoing::of(Envelope::new(
            request("no-sender", "check_status", json!({})),
            None,
        )),
        // The control: the monitor's own word on its subject is queued.
        Outgoing::command_from(
            Domain::Monitor,
            Envelope::new(request("monitor-status", "check_status", json!({})), None),
        ),
    ];
    for command in commands {
        plane.bus.publish(command).await.unwrap();
    }
    wait_for("every command applied", Duration::from_secs(30), || {
        let bus = plane.bus.clone();
        async move {
            consumer_settled(
                &bus,
                &Domain::AgentChannel.commands_stream(),
                &Domain::AgentChannel.commands_consumer(),
            )
            .await
            .then_some(())
        }
    })
    .await;
    let jobs = jobs_of(&plane, node).await;
    let words: Vec<&str> = jobs
        .iter()
        .map(|job| job["primitive"].as_str().unwrap())
        .collect();
    assert_eq!(words, vec!["check_status"], "{jobs:?}");

    let reasons = wait_for(
        "both refusals dead-lettered",
        Duration::from_secs(30),
        || {
            let bus = plane.bus.clone();
            async move {
                let reasons: Vec<String> = read_stream(&bus, DEAD_LETTER_STREAM, 100)
                    .await
                    .iter()
                    .filter_map(|letter| letter.headers.get("Capstan-Dead-Letter-Reason").cloned())
                    .collect();
                (reasons.len() >= 2).then_some(reasons)
            }
        },
    )
    .await;
    assert!(
        reasons.iter().any(|reason| reason
            .contains("restore_project is not a word the monitor service may ask for")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|reason| reason.contains("names no sending service")),
        "{reasons:?}"
    );
    plane.stop().await;
}
