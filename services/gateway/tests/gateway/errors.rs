//! One mapping of errors to HTTP: the agent channel's rpc error codes, bad input naming its
//! field, and unknown routes, all in the documented JSON shape.

use capstan_events::rpc::{ErrorCode, Level, RpcError};
use serde_json::{json, Value};

use crate::harness::{error_of, Gateway};
use capstan_events::Word as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rpc_error_code_is_answered_with_its_status_and_the_services_words() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Admin).await;
    let expected = [
        (ErrorCode::InvalidRequest, 400),
        (ErrorCode::NotFound, 404),
        (ErrorCode::AlreadyExists, 409),
        (ErrorCode::Conflict, 409),
        (ErrorCode::Refused, 422),
        (ErrorCode::NeedsNewerAgent, 422),
        (ErrorCode::NotPaired, 422),
        (ErrorCode::Forbidden, 403),
        (ErrorCode::Unavailable, 503),
        (ErrorCode::Internal, 500),
    ];
    for (code, status) in expected {
        let words = format!("because {}", code.as_str());
        gateway.script.lock().unwrap().failure = Some(RpcError::new(code, words.clone()));
        let response = gateway
            .post(
                "/api/v1/nodes/5/jobs",
                &token,
                json!({"primitive": "restart_unit", "params": {"unit": "nginx"}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_of(response).await,
            (status, code.as_str().to_string(), words),
            "{code:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_query_values_and_body_fields_are_400_naming_the_field() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Admin).await;
    let cases = [
        (gateway.get("/api/v1/nodes/abc", &token), "node id"),
        (gateway.get("/api/v1/nodes/-3", &token), "node id"),
        (gateway.get("/api/v1/jobs/0", &token), "job id"),
        (
            gateway.post("/api/v1/joins/not-a-uuid/approve", &token, json!({})),
            "join id",
        ),
        (gateway.get("/api/v1/joins?state=odd", &token), "state"),
        (gateway.get("/api/v1/jobs?limit=many", &token), "limit"),
        (gateway.get("/api/v1/jobs?limit=0", &token), "limit"),
        (gateway.get("/api/v1/jobs?state=sleeping", &token), "state"),
        (gateway.get("/api/v1/jobs?node_id=x", &token), "node_id"),
        (gateway.get("/api/v1/jobs?bogus=1", &token), "bogus"),
        (
            gateway.get("/api/v1/jobs/4/output?offset=-1", &token),
            "offset",
        ),
        (
            gateway.get("/api/v1/nodes/4/refusals?window_secs=0", &token),
            "window_secs",
        ),
        (
            gateway.post("/api/v1/nodes/4/jobs", &token, json!({"primitive": 5})),
            "primitive",
        ),
        (
            gateway.post("/api/v1/nodes/4/jobs", &token, json!({"params": {}})),
            "primitive",
        ),
        (
            gateway.post(
                "/api/v1/nodes/4/jobs",
                &token,
                json!({"primitive": "x", "extra": 1}),
            ),
            "extra",
        ),
        (
            gateway.post(
                "/api/v1/joins/0190b5c2-7d1e-7a3c-9f00-000000000001/approve",
                &token,
                json!({"node_id": "x"}),
            ),
            "node_id",
        ),
    ];
    for (request, field) in cases {
        let (status, code, message) = error_of(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_request"),
            "{field}: {message}"
        );
        assert!(message.contains(field), "{message:?} names {field:?}");
    }
    assert!(
        gateway.asked_ops().is_empty(),
        "bad input never reaches the service: {:?}",
        gateway.asked_ops()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backups_policy_tier_that_is_no_count_is_400_naming_the_tier() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Admin).await;
    let fleet = |tier: &str, value: Value| {
        let mut body = json!({"enabled": true, "every_minutes": 1440, "window_start_hour": 0,
            "window_hours": 24, "mode": "chain", "keep_days": 7, "full_every_days": 7,
            "verify_every_days": 7, "keep_daily": 7, "keep_weekly": 4, "keep_monthly": 6});
        body[tier] = value;
        body
    };
    let cases = [
        (
            gateway.put(
                "/api/v1/backups/policy",
                &token,
                fleet("keep_weekly", json!(-1)),
            ),
            "keep_weekly",
        ),
        (
            gateway.put(
                "/api/v1/backups/policy",
                &token,
                fleet("keep_weekly", json!("four")),
            ),
            "keep_weekly",
        ),
        (
            gateway.put(
                "/api/v1/backups/policy",
                &token,
                fleet("keep_daily", json!(1.5)),
            ),
            "keep_daily",
        ),
        (
            gateway.put(
                "/api/v1/backups/policy",
                &token,
                fleet("keep_monthly", json!(null)),
            ),
            "keep_monthly",
        ),
        (
            gateway.put(
                "/api/v1/nodes/4/backups/policy",
                &token,
                json!({"position": "own", "keep_monthly": -2}),
            ),
            "keep_monthly",
        ),
    ];
    for (request, field) in cases {
        let (status, code, message) = error_of(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_request"),
            "{field}: {message}"
        );
        assert!(message.starts_with(field), "{message:?} names {field:?}");
    }
    assert!(
        gateway.asked_ops().is_empty(),
        "bad input never reaches the service: {:?}",
        gateway.asked_ops()
    );
    // Whole counts go through, and the tiers may be left out (none).
    for body in [fleet("keep_weekly", json!(52)), {
        let mut plain = fleet("keep_daily", json!(0));
        for tier in ["keep_daily", "keep_weekly", "keep_monthly"] {
            plain.as_object_mut().unwrap().remove(tier);
        }
        plain
    }] {
        let response = gateway
            .put("/api/v1/backups/policy", &token, body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_input_reaches_the_service_typed_and_its_answer_comes_back() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Read).await;
    let jobs: Value = gateway
        .get("/api/v1/jobs?node_id=3&state=running&limit=10", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(jobs["jobs"][0]["id"], 42);
    let output: Value = gateway
        .get("/api/v1/jobs/42/output?offset=7", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        output,
        json!({"state": "running", "new_output": "hello", "offset": 12})
    );
    let refusals: Value = gateway
        .get("/api/v1/nodes/3/refusals", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(refusals, json!({"node_id": 3, "refused": 3}));
    let created = gateway
        .post(
            "/api/v1/nodes/3/jobs",
            &token,
            json!({"primitive": "check_status"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(
        created.json::<Value>().await.unwrap(),
        json!({"id": 42, "state": "pending"})
    );

    let asked = gateway.script.lock().unwrap().asked.clone();
    let actor = json!({"name": "operator0-level7", "level": 7, "address": "127.0.0.1"});
    assert_eq!(
        asked[0],
        (
            "list_jobs".to_string(),
            json!({"actor": actor, "node_id": 3, "state": "running", "limit": 10})
        )
    );
    assert_eq!(
        asked[1],
        (
            "job_output".to_string(),
            json!({"actor": actor, "job_id": 42, "offset": 7})
        )
    );
    assert_eq!(
        asked[2],
        (
            "refusal_count".to_string(),
            json!({"actor": actor, "node_id": 3, "window_secs": 86400})
        )
    );
    assert_eq!(
        asked[3],
        (
            "create_job".to_string(),
            json!({"actor": actor, "node_id": 3, "primitive": "check_status", "params": null})
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods_are_answered_in_the_json_error_shape() {
    let gateway = Gateway::start().await;
    let (status, code, message) = error_of(
        gateway
            .client
            .get(format!("{}/api/v1/nonesuch", gateway.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(message.contains("/api/v1/nonesuch"), "{message}");
    let (status, code, _) = error_of(
        gateway
            .client
            .delete(format!("{}/api/v1/nodes", gateway.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (405, "method_not_allowed"));
    let (status, code, _) = error_of(
        gateway
            .client
            .get(format!("{}/api/v1/agent/claim", gateway.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (405, "method_not_allowed"));
}

/// Issue 27: a word the backups service owns is refused on the generic jobs route, at any
/// level, naming the backups route that makes it; the agent channel is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_word_on_the_generic_jobs_route_is_refused_naming_the_backups_route() {
    let gateway = Gateway::start().await;
    let reader = gateway.token(Level::Read).await;
    let admin = gateway.token(Level::Admin).await;
    let cases = [
        (
            &reader,
            json!({"primitive": "verify_backup", "params": {"seq": 1, "level": 3}}),
            "POST /api/v1/nodes/{id}/backups/verify",
        ),
        (
            &admin,
            json!({"primitive": "backup_run", "params": {"seq": 9007199254740992_i64, "kind": "full"}}),
            "POST /api/v1/nodes/{id}/backups/run",
        ),
        (
            &admin,
            json!({"primitive": "restore_project", "params": {"seq": 1}}),
            "POST /api/v1/nodes/{id}/backups/restore",
        ),
    ];
    for (token, body, route) in cases {
        let (status, code, message) = error_of(
            gateway
                .post("/api/v1/nodes/5/jobs", token, body.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, code.as_str()),
            (403, "forbidden"),
            "{body}: {message}"
        );
        assert!(message.contains("backups service"), "{message}");
        assert!(message.contains(route), "{message}");
    }
    assert!(
        gateway.script.lock().unwrap().asked.is_empty(),
        "the agent channel was asked"
    );
}

/// Issue 27: a rollouts word (a release's apply, its checks, a patch run) is refused on the
/// generic jobs route naming the rollouts route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_word_on_the_generic_jobs_route_is_refused_naming_the_rollouts_route() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    for body in [
        json!({"primitive": "apply_update", "params": {"version": "1.2.3"}}),
        json!({"primitive": "upgrade_preflight"}),
        json!({"primitive": "page_probe", "params": {"path": "/", "viewer": "anonymous"}}),
        json!({"primitive": "install_security_updates"}),
    ] {
        let (status, code, message) = error_of(
            gateway
                .post("/api/v1/nodes/5/jobs", &admin, body.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, code.as_str()),
            (403, "forbidden"),
            "{body}: {message}"
        );
        assert!(message.contains("rollouts service"), "{message}");
        assert!(message.contains("POST /api/v1/rollouts"), "{message}");
    }
    assert!(gateway.script.lock().unwrap().asked.is_empty());
}
