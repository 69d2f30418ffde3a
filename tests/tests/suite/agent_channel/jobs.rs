//! Jobs over the wire (PROTOCOL.md "claim", "result", "job_status"; AC-16..AC-36).

use super::PairedAgent;
use super::{Plane, VOCABULARY};
use reqwest::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_queued_claimed_once_reported_and_read_back() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let (_, view) = plane
        .api(&plane.reader, "GET", &format!("/api/v1/nodes/{node}"), None)
        .await;
    assert_eq!(
        view["vocabulary"],
        json!(VOCABULARY),
        "AC-18: the claim's vocabulary is stored"
    );
    assert_eq!(view["online"], true);

    let job = plane.queue(node, "check_status", json!({})).await;
    let (status, claimed) = agent.claim(&json!({"future_field": 1})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(claimed["ignored_fields"], json!(["future_field"]), "AC-17");
    assert_eq!(claimed["job"]["id"], job);
    assert_eq!(claimed["job"]["primitive"], "check_status");
    assert_eq!(claimed["job"]["class"], "read");
    assert_eq!(claimed["job"]["budget_s"], 300);
    assert_eq!(plane.job(job).await["state"], "running");

    // AC-25: one running job per node, and a job is never handed out twice.
    let second = plane.queue(node, "host_report", json!({})).await;
    let (_, nothing) = agent.claim(&json!({})).await;
    assert_eq!(nothing["job"], serde_json::Value::Null);

    let (status, ack) = agent.result(job, "completed", "all well\n").await;
    assert_eq!((status, ack), (StatusCode::OK, json!({"ack": true})));
    let (status, again) = agent.result(job, "completed", "all well\n").await;
    assert_eq!(
        (status, again),
        (StatusCode::OK, json!({"ack": true})),
        "a repeated result is acknowledged"
    );
    let (status, differs) = agent.result(job, "failed", "").await;
    assert_eq!(
        (status, differs["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("not_running"))
    );

    let done = plane.job(job).await;
    assert_eq!(done["state"], "completed");
    assert_eq!(done["outcome"], "completed");
    assert_eq!(done["result"], json!({"ok": true}));
    assert_eq!(done["requested_by"], "ada");
    for field in [
        "id",
        "node_id",
        "primitive",
        "params",
        "reason",
        "created_at",
        "claimed_at",
        "finished_at",
    ] {
        assert!(done.get(field).is_some(), "job view lacks {field}");
    }
    let (_, output) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/jobs/{job}/output?offset=4"),
            None,
        )
        .await;
    assert_eq!(
        output,
        json!({"state": "completed", "new_output": "well\n", "offset": 9})
    );

    let (_, next) = agent.claim(&json!({})).await;
    assert_eq!(
        next["job"]["id"], second,
        "the node is free for its next job"
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_for_another_nodes_job_is_409_and_job_status_is_404() {
    let plane = Plane::start().await;
    let (first, first_node) = plane.paired_agent("web-1").await;
    let (second, _) = plane.paired_agent("web-2").await;
    let job = plane.queue(first_node, "check_status", json!({})).await;
    first.claim(&json!({})).await;
    let (status, refused) = second.result(job, "completed", "").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("not_running"))
    );
    let (status, refused) = second.send("job_status", &json!({"job_id": job})).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (_, running) = first.send("job_status", &json!({"job_id": job})).await;
    assert_eq!(running, json!({"state": "running"}));
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_lost_by_an_idle_claim_by_budget_and_by_an_operator_never_resent() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;

    // AC-28: the agent restarted mid-job and says it is idle.
    let idle = plane.queue(node, "check_status", json!({})).await;
    agent.claim(&json!({})).await;
    let (_, after) = agent.claim(&json!({"idle": true})).await;
    assert_eq!(
        after["job"],
        serde_json::Value::Null,
        "a lost job is never handed out again"
    );
    let lost = plane.job(idle).await;
    assert_eq!(
        (lost["state"].as_str(), lost["outcome"].as_str()),
        (Some("lost"), Some("lost"))
    );
    assert!(lost["reason"].as_str().unwrap().contains("unknown"));

    // AC-29: the claim budget runs out (time moved on by setting the claim an hour back, in the
    // agent channel's own table: no API moves a clock).
    let stale = plane.queue(node, "host_report", json!({})).await;
    agent.claim(&json!({})).await;
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    sqlx::query(
        "UPDATE agent_channel.jobs SET claimed_at = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(stale)
    .execute(&pool)
    .await
    .unwrap();
    agent.claim(&json!({})).await;
    assert_eq!(plane.job(stale).await["outcome"], "lost");
    let (status, late) = agent.result(stale, "completed", "").await;
    assert_eq!(
        (status, late["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("not_running"))
    );

    // AC-30: an operator marks a running job failed.
    let marked = plane.queue(node, "check_status", json!({})).await;
    agent.claim(&json!({})).await;
    let (status, _) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/jobs/{marked}/mark-failed"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/jobs/{marked}/mark-failed"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let job = plane.job(marked).await;
    assert_eq!(job["outcome"], "lost");
    assert!(job["reason"]
        .as_str()
        .unwrap()
        .contains("marked as failed by chris"));
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_wakes_as_soon_as_a_job_is_queued() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let started = Instant::now();
    let body =
        serde_json::to_vec(&json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY})).unwrap();
    let waiting = tokio::spawn(async move {
        let reply = agent
            .send_at("claim", "?wait=20", &body, super::now())
            .await;
        (reply, agent)
    });
    capstan_e2e::wait_parked(1).await;
    let job = plane.queue(node, "check_status", json!({})).await;
    let (reply, _agent) = waiting.await.unwrap();
    assert_eq!(reply.body["job"]["id"], job);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "woken by the job, not by the end of the wait"
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_of_one_node_hand_a_job_out_once() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let job = plane.queue(node, "check_status", json!({})).await;
    let agent = std::sync::Arc::new(agent);
    let claims: Vec<_> = (0..8)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move { agent.claim(&json!({})).await })
        })
        .collect();
    let mut handed = 0;
    for claim in claims {
        let (status, body) = claim.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        if body["job"]["id"] == job {
            handed += 1;
        }
    }
    assert_eq!(handed, 1);
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_refused_for_missing_words_low_levels_bad_params_and_oversize() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let create = |token: String, primitive: &'static str, params: serde_json::Value| {
        let plane = &plane;
        async move {
            plane
                .api(
                    &token,
                    "POST",
                    &format!("/api/v1/nodes/{node}/jobs"),
                    Some(json!({"primitive": primitive, "params": params})),
                )
                .await
        }
    };
    let (status, refused) = create(
        plane.admin.clone(),
        "unit_journal",
        json!({"unit": "nginx"}),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("needs_newer_agent"))
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unit_journal"),
        "AC-21 names the word"
    );
    let (status, _) = create(
        plane.reader.clone(),
        "restart_unit",
        json!({"unit": "nginx"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a change word needs level 8");
    let (status, created) = create(
        plane.changer.clone(),
        "restart_unit",
        json!({"unit": "nginx"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, refused) = create(
        plane.admin.clone(),
        "restart_unit",
        json!({"unit": "sshd; rm -rf /"}),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );

    // AC-16: a node reporting a small claim_bytes is not handed a job that does not fit.
    let (_, _) = agent.claim(&json!({"claim_bytes": 1024})).await; // takes restart_unit (small)
    agent
        .result(created["id"].as_i64().unwrap(), "completed", "")
        .await;
    // (apply_update, the word with free text, is the rollouts service's since issue 27.) Every
    // door refuses params this large, so the agent channel's own row is grown in place.
    let big = plane
        .queue(node, "restart_unit", json!({"unit": "nginx"}))
        .await;
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    sqlx::query("UPDATE agent_channel.jobs SET params = jsonb_build_object('unit', repeat('9', 2000)) WHERE id = $1")
        .bind(big)
        .execute(&pool)
        .await
        .unwrap();
    let (_, nothing) = agent.claim(&json!({"claim_bytes": 1024})).await;
    assert_eq!(nothing["job"], serde_json::Value::Null);
    let refused = plane.job(big).await;
    assert_eq!(refused["state"], "refused");
    assert!(refused["reason"].as_str().unwrap().contains("larger than"));
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_reads_withdrawn_and_refusals_are_counted() {
    let plane = Plane::start().await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let cancelled = plane.queue(node, "check_status", json!({})).await;
    let (status, _) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/jobs/{cancelled}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, state) = agent
        .send("job_status", &json!({"job_id": cancelled}))
        .await;
    assert_eq!(state, json!({"state": "withdrawn"}));

    let refused = plane
        .queue(node, "restart_unit", json!({"unit": "nginx"}))
        .await;
    agent.claim(&json!({})).await;
    let (status, _) = agent
        .send("result", &json!({"job_id": refused, "outcome": "refused", "reason": "class change is refused by policy"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let job = plane.job(refused).await;
    assert_eq!(
        job["reason"], "Refused by the node: class change is refused by policy",
        "AC-26"
    );
    let (_, count) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{node}/refusals?window_secs=3600"),
            None,
        )
        .await;
    assert_eq!(count["refused"], 1, "AC-27");
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifact_requests_name_a_kind_never_a_path() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let (status, refused) = agent
        .send("artifact", &json!({"kind": "../../etc/passwd"}))
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_kind"))
    );
    let (status, refused) = agent
        .send("artifact", &json!({"kind": "binary", "arch": "sparc"}))
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_arch"))
    );
    let (status, missing) = agent
        .send(
            "artifact",
            &json!({"kind": "binary", "arch": "linux-amd64", "version": "9.9.9"}),
        )
        .await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let stranger = super::TestAgent::new(&plane);
    let (status, _) = stranger
        .send("artifact", &json!({"kind": "manifest"}))
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "artifact requests are signed by a paired node"
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_long_polls_instead_of_waiting_them_out() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let body =
        serde_json::to_vec(&json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY})).unwrap();
    let polling = tokio::spawn(async move {
        agent
            .send_at("claim", "?wait=30", &body, super::now())
            .await
    });
    capstan_e2e::wait_parked(1).await;
    let stopping = Instant::now();
    plane.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "the 30 s poll did not hold the stop"
    );
    polling.abort();
}
