//! Staged rollouts through the whole plane (issue 16): the rollouts service as a process of its
//! own (so it can be killed with SIGKILL), the real agent channel and gateway, and agents that
//! sign their requests as PROTOCOL.md says. The agents here are written in the test: they
//! report the rollout words and answer each job with the structured result the test chooses,
//! which is what the engine judges. (The agent binary's own site-release words are their own
//! work; these tests pin the plane's side.)

use capstan_events::NodeId;
use std::time::Duration;

use capstan_e2e::heard::{heard, published, settled};
use capstan_e2e::{plane::Plane, process::ServiceProcess, wait_for};
use capstan_events::{
    agent_channel::{JobFinished, NodeReported},
    Domain,
};
use capstan_signing::{sign_request, NodeKey};
use reqwest::StatusCode;
use serde_json::{json, Value};

const VOCABULARY: &[&str] = &[
    "check_status",
    "apply_update",
    "upgrade_preflight",
    "page_probe",
];

/// An agent written in the test: a key, a node, and the signed requests it sends.
pub(crate) struct SimAgent {
    key: NodeKey,
    pub(crate) node: i64,
    base: String,
    http: reqwest::Client,
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl SimAgent {
    async fn signed(&self, endpoint: &str, query: &str, body: &Value) -> (u16, Value) {
        signed(&self.http, &self.base, &self.key, endpoint, query, body).await
    }

    /// Joins with a site, is approved, and reports its words once.
    pub(crate) async fn enrol(plane: &Plane, name: &str) -> SimAgent {
        let key = NodeKey::generate();
        let http = reqwest::Client::new();
        let (status, joined) = signed(
            &http,
            &plane.base,
            &key,
            "join",
            "",
            &json!({"name": name, "public_key": key.public_key().to_base64(),
                    "agent_version": "99.0.0", "site_root": "/var/www/site",
                    "container": null, "addresses": []}),
        )
        .await;
        assert_eq!(status, 202, "{joined}");
        let node = plane.approve(key.public_key().fingerprint().as_ref()).await;
        let agent = SimAgent {
            key,
            node,
            base: plane.base.clone(),
            http,
        };
        let (status, claimed) = agent.claim_once(0).await;
        assert_eq!(status, 200, "{claimed}");
        agent
    }

    pub(crate) async fn claim_once(&self, wait: u32) -> (u16, Value) {
        self.signed(
            "claim",
            &format!("?wait={wait}"),
            &json!({"agent_version": "99.0.0", "vocabulary": VOCABULARY}),
        )
        .await
    }

    /// Claims until a job comes (long polls of a second).
    pub(crate) async fn next_job(&self) -> Value {
        wait_for(
            &format!("a job for node {}", self.node),
            Duration::from_secs(60),
            || async {
                let (status, answer) = self.claim_once(1).await;
                assert_eq!(status, 200, "{answer}");
                Some(answer["job"].clone()).filter(|job| !job.is_null())
            },
        )
        .await
    }

    pub(crate) async fn answer(&self, job: &Value, outcome: &str, result: Value) {
        let (status, body) = self
            .signed(
                "result",
                "",
                &json!({"job_id": job["id"], "outcome": outcome, "output": "",
                        "result": result, "reason": null}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

async fn signed(
    http: &reqwest::Client,
    base: &str,
    key: &NodeKey,
    endpoint: &str,
    query: &str,
    body: &Value,
) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let path = format!("/api/v1/agent/{endpoint}");
    let headers = sign_request(key, "POST", &path, &bytes, unix_now());
    let response = http
        .post(format!("{base}{path}{query}"))
        .header("content-type", "application/json")
        .header("content-digest", headers.content_digest)
        .header("signature-input", headers.signature_input)
        .header("signature", headers.signature)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Publishes a site release of one small file as `version` (`POST /api/v1/site-releases`, level
/// 10), signed here: the plane refuses a rollout of a version it never published. The agents
/// here never fetch it; they answer with the result the test chooses.
pub(crate) async fn publish_release(plane: &Plane, version: &str) {
    use base64::{engine::general_purpose::STANDARD, Engine as _};
    use capstan_signing::manifest::{signature_file, write_archive, FileManifest};
    let page = format!("<html><body>{version}</body></html>");
    let files = [("public/index.html", 0o644, page.as_bytes())];
    let manifest = FileManifest::describe(files).unwrap().to_bytes();
    let signatures = signature_file(&manifest, &NodeKey::from_secret_bytes(&[12; 32]).unwrap());
    let (status, published) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/site-releases",
            Some(json!({
                "version": version,
                "manifest": String::from_utf8(manifest).unwrap(),
                "signatures": String::from_utf8(signatures).unwrap(),
                "archive": STANDARD.encode(write_archive(files)),
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{published}");
}

pub(crate) fn applied(version: &str) -> Value {
    json!({"completed": true, "deploy_tier_passed": true, "version": version, "rolled_back": false})
}

fn tier_failed(version: &str) -> Value {
    json!({"completed": true, "deploy_tier_passed": false, "version": version, "rolled_back": true})
}

/// Waits until the rollouts service knows every node offers `apply_update`: the agent
/// channel has published a `node_reported` naming the word for each, and the rollouts service
/// has applied every event of that stream.
pub(crate) async fn projected(plane: &Plane, nodes: &[i64]) {
    for node in nodes {
        published::<NodeReported>(&plane.bus, "the node's words", |reported| {
            reported.node_id == NodeId(*node)
                && reported
                    .vocabulary
                    .iter()
                    .any(|word| word == "apply_update")
        })
        .await;
    }
    settled(&plane.bus, Domain::Rollouts, Domain::AgentChannel).await;
}

/// Asks the plane to start a rollout as a level-8 operator; its status and answer.
pub(crate) async fn ask_start(plane: &Plane, body: Value) -> (StatusCode, Value) {
    plane
        .api(&plane.changer, "POST", "/api/v1/rollouts", Some(body))
        .await
}

/// Starts a rollout as a level-8 operator; its id.
pub(crate) async fn start_rollout(plane: &Plane, body: Value) -> i64 {
    let (status, started) = ask_start(plane, body).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    started["id"].as_i64().unwrap()
}

pub(crate) async fn rollout(plane: &Plane, id: i64) -> Value {
    let (status, view) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/rollouts/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    view
}

pub(crate) async fn wait_state(plane: &Plane, id: i64, state: &str) -> Value {
    wait_for(
        &format!("rollout {id} to be {state}"),
        // Real agents whose requests met a stopped rollouts service ask again for up to three
        // minutes (docs/site-releases.md); a loaded machine can take most of a minute before.
        Duration::from_secs(180),
        || async {
            let view = rollout(plane, id).await;
            (view["state"] == state).then_some(view)
        },
    )
    .await
}

/// RO-12, RO-13 and the durable-workflow decision: a five-node, two-stage rollout whose
/// rollouts service is killed with SIGKILL while the second stage's applies are out on their
/// nodes; the nodes answer while it is down, it starts again, and the rollout finishes with
/// each node applied exactly once (the operator API's job listing proves it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_12_a_two_stage_rollout_survives_a_kill_9_mid_stage_and_applies_each_node_once() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let mut service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let mut agents = Vec::new();
    for index in 0..5 {
        agents.push(SimAgent::enrol(&plane, &format!("site-{index}")).await);
    }
    let nodes: Vec<i64> = agents.iter().map(|agent| agent.node).collect();
    projected(&plane, &nodes).await;

    publish_release(&plane, "2.1.0").await;
    let (status, started) = ask_start(
        &plane,
        json!({"version": "2.1.0",
                        "stages": [{"nodes": [nodes[0]]}, {"nodes": nodes[1..]}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_i64().unwrap();
    assert_eq!(started["state"], "running");

    // Stage one: the first node alone.
    let first = agents[0].next_job().await;
    assert_eq!(first["primitive"], "upgrade_preflight", "{first}");
    agents[0]
        .answer(
            &first,
            "completed",
            json!({"checks": [{"name": "lock", "pass": true}]}),
        )
        .await;
    let apply = agents[0].next_job().await;
    assert_eq!(apply["primitive"], "apply_update");
    assert_eq!(apply["params"]["version"], "2.1.0");
    // Stage two starts only when stage one has passed: nothing for the others yet.
    for agent in &agents[1..] {
        let (_, nothing) = agent.claim_once(0).await;
        assert!(nothing["job"].is_null(), "{nothing}");
    }
    agents[0]
        .answer(&apply, "completed", applied("2.1.0"))
        .await;

    // Stage two: every node's readiness, then every apply, at once (each its own machine).
    let mut applies = Vec::new();
    for agent in &agents[1..] {
        let preflight = agent.next_job().await;
        assert_eq!(preflight["primitive"], "upgrade_preflight");
        agent
            .answer(
                &preflight,
                "completed",
                json!({"checks": [{"name": "lock", "pass": true}]}),
            )
            .await;
    }
    for agent in &agents[1..] {
        let apply = agent.next_job().await;
        assert_eq!(apply["primitive"], "apply_update");
        applies.push(apply);
    }

    // The service dies while the applies are out; the nodes finish while it is down.
    service.kill9().await;
    for (agent, apply) in agents[1..].iter().zip(&applies) {
        agent.answer(apply, "completed", applied("2.1.0")).await;
    }
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;

    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(done["passed"], 5, "{done}");
    assert_eq!(done["failed"], 0, "{done}");
    let once: Vec<(i64, i64)> = nodes.iter().map(|node| (*node, 1)).collect();
    assert_eq!(plane.jobs_per_node("apply_update").await, once);
    assert_eq!(plane.jobs_per_node("upgrade_preflight").await, once);
}

/// RO-11, RO-14: a node whose deploy tier fails halts the rollout naming it; the nodes after
/// it are never started. With a budget of one, the same miss is held and the stage carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_14_the_first_miss_halts_naming_the_node_and_a_budget_of_one_carries_on() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let mut agents = Vec::new();
    for index in 0..3 {
        agents.push(SimAgent::enrol(&plane, &format!("web-{index}")).await);
    }
    let nodes: Vec<i64> = agents.iter().map(|agent| agent.node).collect();
    projected(&plane, &nodes).await;

    publish_release(&plane, "3.0.0").await;
    let one_a_stage: Vec<Value> = nodes.iter().map(|node| json!({"nodes": [node]})).collect();
    let (status, started) =
        ask_start(&plane, json!({"version": "3.0.0", "stages": one_a_stage})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_i64().unwrap();
    for (index, agent) in agents[..2].iter().enumerate() {
        let preflight = agent.next_job().await;
        agent
            .answer(
                &preflight,
                "completed",
                json!({"checks": [{"name": "lock", "pass": true}]}),
            )
            .await;
        let apply = agent.next_job().await;
        let result = if index == 1 {
            tier_failed("3.0.0")
        } else {
            applied("3.0.0")
        };
        agent.answer(&apply, "completed", result).await;
    }
    let halted = wait_state(&plane, id, "halted").await;
    assert_eq!(halted["halted_at_node"], nodes[1], "{halted}");
    assert!(
        halted["halt_reason"]
            .as_str()
            .unwrap()
            .contains("deploy tier did not pass"),
        "{halted}"
    );
    let third = &halted["steps"][2];
    assert_eq!(third["verdict"], "skipped", "{halted}");
    assert!(
        !plane
            .jobs_per_node("upgrade_preflight")
            .await
            .iter()
            .any(|(node, _)| *node == nodes[2]),
        "the node after the miss was never started"
    );

    // One rollout at a time: a new one while that one is halted may start; with a budget of
    // one the same miss is held and the stage carries on to the end.
    let (status, started) = ask_start(
        &plane,
        json!({"version": "3.0.0",
                        "stages": [{"nodes": nodes, "max_failed": 1}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_i64().unwrap();
    for (index, agent) in agents.iter().enumerate() {
        let preflight = agent.next_job().await;
        agent
            .answer(
                &preflight,
                "completed",
                json!({"checks": [{"name": "lock", "pass": true}]}),
            )
            .await;
        let apply = agent.next_job().await;
        let result = if index == 1 {
            tier_failed("3.0.0")
        } else {
            applied("3.0.0")
        };
        agent.answer(&apply, "completed", result).await;
    }
    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(
        (done["passed"].clone(), done["failed"].clone()),
        (json!(2), json!(1))
    );
}

/// RO-15, RO-16 and pause/resume: a second rollout is refused while one runs; a paused rollout
/// asks for nothing new until resumed; Stop ends it at once and nothing further is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_15_ro_16_one_at_a_time_pause_resume_and_stop() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let mut agents = Vec::new();
    for index in 0..3 {
        agents.push(SimAgent::enrol(&plane, &format!("app-{index}")).await);
    }
    let nodes: Vec<i64> = agents.iter().map(|agent| agent.node).collect();
    projected(&plane, &nodes).await;
    let stages: Vec<Value> = nodes.iter().map(|node| json!({"nodes": [node]})).collect();
    // A version never published is refused (409) naming it, and nothing starts.
    let (status, refused) = ask_start(&plane, json!({"version": "4.0.0", "stages": stages})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("site release 4.0.0 was never published"),
        "{refused}"
    );
    publish_release(&plane, "4.0.0").await;
    let (status, started) = ask_start(&plane, json!({"version": "4.0.0", "stages": stages})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started["id"].as_i64().unwrap();

    let (status, refused) = ask_start(
        &plane,
        json!({"version": "4.0.0", "stages": [{"nodes": [nodes[2]]}]}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("one rollout runs at a time"));
    let (status, _) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/rollouts/{id}/pause"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "level 7 cannot pause");

    // Paused while the first node checks its readiness: its apply is not asked for.
    let preflight = agents[0].next_job().await;
    let (status, paused) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/rollouts/{id}/pause"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["state"], "paused");
    agents[0]
        .answer(
            &preflight,
            "completed",
            json!({"checks": [{"name": "lock", "pass": true}]}),
        )
        .await;
    // Once the answer is recorded (the same transaction that would have asked for the apply),
    // the step still stands at its readiness check.
    // (The rollouts service has applied the job's `job_finished`.)
    heard::<JobFinished>(
        &plane.bus,
        Domain::Rollouts,
        "the readiness answer",
        |finished| Some(finished.job_id) == preflight["id"].as_i64(),
    )
    .await;
    let view = rollout(&plane, id).await;
    assert_eq!(view["steps"][0]["phase"], "preflight", "{view}");
    assert_eq!(plane.jobs_per_node("apply_update").await, vec![]);
    // The marker that nothing was asked meanwhile: resume, and the apply comes as the first job.
    let (status, _) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/rollouts/{id}/resume"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let apply = agents[0].next_job().await;
    assert_eq!(apply["primitive"], "apply_update");
    assert_eq!(
        plane.jobs_per_node("apply_update").await,
        vec![(nodes[0], 1)]
    );

    // Stop while the first node applies: it finishes there, nothing further is queued.
    let (status, stopped) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/rollouts/{id}/stop"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{stopped}");
    assert_eq!(stopped["state"], "stopped");
    agents[0]
        .answer(&apply, "completed", applied("4.0.0"))
        .await;
    wait_for(
        "the running apply to be recorded",
        Duration::from_secs(30),
        || async {
            let view = rollout(&plane, id).await;
            (view["steps"][0]["verdict"] == "passed").then_some(view)
        },
    )
    .await;
    let view = rollout(&plane, id).await;
    assert_eq!(view["steps"][1]["verdict"], "skipped", "{view}");
    assert_eq!(view["steps"][2]["verdict"], "skipped", "{view}");
    assert_eq!(plane.jobs_per_node("upgrade_preflight").await.len(), 1);
    let (status, again) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/rollouts/{id}/stop"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
}
