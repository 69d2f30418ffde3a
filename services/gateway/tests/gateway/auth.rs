//! Operator identity at the door: bearer tokens (401), levels from the route table (403),
//! and the audit record of every act.

use capstan_events::{
    agent_channel::rpc as ops,
    rpc::Rpc,
    rpc::{ErrorCode, Level, RpcError},
};
use capstan_gateway::{
    route::{Access, Method},
    routes::ROUTES,
};
use serde_json::{json, Value};

use crate::harness::{body_for, concrete_path, error_of, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_a_wrong_one_and_a_revoked_one_are_401_and_a_live_one_passes() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Read).await;
    let nodes = format!("{}/api/v1/nodes", gateway.url);

    let bare = gateway.client.get(&nodes).send().await.unwrap();
    assert_eq!(
        bare.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"capstan\"")
    );
    let (status, code, message) = error_of(bare).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert!(message.contains("Bearer"), "{message}");

    let unknown = format!("cap_{}", "A".repeat(43));
    for wrong in [unknown.as_str(), "cap_short", "not-a-token"] {
        let (status, code, message) =
            error_of(gateway.get("/api/v1/nodes", wrong).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (401, "unauthorized"), "{wrong}");
        assert!(
            !message.contains(wrong),
            "the token is not repeated: {message}"
        );
    }
    let basic = gateway
        .client
        .get(&nodes)
        .basic_auth("ada", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);

    let live = gateway.get("/api/v1/nodes", &token).send().await.unwrap();
    assert_eq!(live.status(), 200);
    let nodes: Value = live.json().await.unwrap();
    assert_eq!(nodes["nodes"][0]["id"], 17);

    let hash: [u8; 32] = sha2_of(&token);
    assert!(capstan_gateway::store::revoke_token(&gateway.store, &hash)
        .await
        .unwrap());
    let (status, code, message) =
        error_of(gateway.get("/api/v1/nodes", &token).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert!(!message.contains(&token));
    assert_eq!(
        gateway.asked_ops(),
        vec![ops::ListNodes::OP],
        "only the live token reached the service"
    );
}

fn sha2_of(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_7_token_is_403_on_approve_disconnect_and_cancel_and_nothing_is_asked() {
    let gateway = Gateway::start().await;
    let reader = gateway.token(Level::Read).await;
    for path in [
        "/api/v1/joins/0190b5c2-7d1e-7a3c-9f00-000000000001/approve",
        "/api/v1/nodes/5/disconnect",
        "/api/v1/jobs/5/cancel",
    ] {
        let (status, code, message) =
            error_of(gateway.post(path, &reader, json!({})).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (403, "forbidden"), "{path}");
        assert!(message.contains("needs level"), "{message}");
    }
    assert!(gateway.asked_ops().is_empty(), "{:?}", gateway.asked_ops());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_in_the_table_is_reachable_only_at_its_level() {
    let gateway = Gateway::start().await;
    let tokens = [
        (Level::Read, gateway.token(Level::Read).await),
        (Level::Change, gateway.token(Level::Change).await),
        (Level::Admin, gateway.token(Level::Admin).await),
    ];
    let mut checked = 0;
    for route in ROUTES.iter() {
        let path = concrete_path(route.path);
        let send = |token: Option<&str>| {
            let url = format!("{}{path}", gateway.url);
            let request = match route.method {
                Method::Get => gateway.client.get(url),
                Method::Post => gateway.client.post(url).json(&body_for(route.path)),
                Method::Put => gateway.client.put(url).json(&body_for(route.path)),
                Method::Delete => gateway.client.delete(url),
            };
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
        };
        match route.access {
            // The UI's doors are checked route by route in `ui_routes.rs`.
            Access::Session(_) | Access::PreSession => {}
            Access::Public | Access::AgentSigned if route.is_ui() => {}
            Access::Public | Access::AgentSigned => {
                let status = send(None).send().await.unwrap().status().as_u16();
                assert!(
                    ![401, 403, 404, 405].contains(&status),
                    "{} {path}: {status}",
                    route.method.as_ref()
                );
            }
            Access::Operator(needed) => {
                let status = send(None).send().await.unwrap().status().as_u16();
                assert_eq!(
                    status,
                    401,
                    "{} {path} without a token",
                    route.method.as_ref()
                );
                for (level, token) in &tokens {
                    let status = send(Some(token)).send().await.unwrap().status().as_u16();
                    if *level < needed {
                        assert_eq!(
                            status,
                            403,
                            "{} {path} at level {}",
                            route.method.as_ref(),
                            *level as u8
                        );
                    } else {
                        assert!(
                            (200..300).contains(&status),
                            "{} {path} at level {}: {status}",
                            route.method.as_ref(),
                            *level as u8
                        );
                    }
                }
            }
        }
        checked += 1;
    }
    assert_eq!(checked, ROUTES.len());
}

async fn audit_rows(
    gateway: &Gateway,
) -> Vec<(
    String,
    i16,
    Option<String>,
    String,
    Option<String>,
    String,
    Value,
)> {
    sqlx::query_as(
        "SELECT operator, level, address, action, target, outcome, detail FROM audit_log ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_audited_with_who_from_where_what_and_how_they_ended() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let reader = gateway.token(Level::Read).await;
    let join = "0190b5c2-7d1e-7a3c-9f00-000000000001";
    let approve = format!("/api/v1/joins/{join}/approve");

    let approved = gateway
        .post(&approve, &admin, json!({"node_id": 9}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    assert_eq!(
        approved.json::<Value>().await.unwrap(),
        json!({"node_id": 9})
    );
    let (_, asked) = gateway.script.lock().unwrap().asked[0].clone();
    assert_eq!(asked["join_id"], join);
    assert_eq!(asked["node_id"], 9);
    assert_eq!(
        asked["actor"],
        json!({"name": "operator0-level10", "level": 10, "address": "127.0.0.1"})
    );

    assert_eq!(
        gateway
            .post(&approve, &reader, json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    gateway.script.lock().unwrap().failure =
        Some(RpcError::new(ErrorCode::Conflict, "the join expired"));
    assert_eq!(
        gateway
            .post(&approve, &admin, json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        409
    );
    // A read is not an act: it leaves no row.
    let _ = gateway.get("/api/v1/joins", &admin).send().await.unwrap();

    let rows = audit_rows(&gateway).await;
    let target = Some(format!("join/{join}"));
    let localhost = Some("127.0.0.1".to_string());
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert_eq!(
        rows[0],
        (
            "operator0-level10".into(),
            10,
            localhost.clone(),
            "approve_join".into(),
            target.clone(),
            "ok".into(),
            json!({"requested_node_id": 9, "node_id": 9})
        )
    );
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1, rows[1].5.as_str()),
        ("operator1-level7", 7, "forbidden")
    );
    assert_eq!(rows[1].4, target);
    assert_eq!(
        (rows[2].5.as_str(), &rows[2].6),
        ("conflict", &json!({"message": "the join expired"}))
    );
}

/// GW-07: behind a trusted proxy the client address header names who acted (and where an
/// agent's request came from); from any other peer the header is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_names_the_client_and_anyone_else_is_not_believed() {
    let trusted = capstan_gateway::ClientAddresses {
        trusted: std::sync::Arc::from(vec!["127.0.0.0/8".parse::<ipnet::IpNet>().unwrap()]),
        header: axum::http::HeaderName::from_static("x-forwarded-for"),
    };
    let join = "0190b5c2-7d1e-7a3c-9f00-000000000001";
    let approve = format!("/api/v1/joins/{join}/approve");
    for (client_addresses, expected) in [
        (trusted, "203.0.113.7"),
        (capstan_gateway::ClientAddresses::default(), "127.0.0.1"),
    ] {
        let gateway = Gateway::start_behind(client_addresses).await;
        let admin = gateway.token(Level::Admin).await;
        let approved = gateway
            .post(&approve, &admin, json!({}))
            .header("x-forwarded-for", "198.51.100.1, 203.0.113.7")
            .send()
            .await
            .unwrap();
        assert_eq!(approved.status(), 200);
        let (_, asked) = gateway.script.lock().unwrap().asked[0].clone();
        assert_eq!(asked["actor"]["address"], expected);
        assert_eq!(audit_rows(&gateway).await[0].2.as_deref(), Some(expected));

        let agent = gateway
            .client
            .post(format!("{}/api/v1/agent/claim", gateway.url))
            .header("content-type", "application/json")
            .header("x-forwarded-for", "203.0.113.7")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(agent.status(), 200);
        let (request, _) = gateway.script.lock().unwrap().agent_requests.pop().unwrap();
        assert_eq!(request.source_address, expected);
    }
}

/// The periodic sweep deletes sessions past their idle timeout or lifetime and sign-in failures
/// older than a day, and keeps live ones; one replica sweeps at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_forgets_ended_sessions_and_old_sign_in_failures() {
    let gateway = Gateway::start_alone().await;
    gateway.token(Level::Read).await;
    let pool = gateway.store.pool();
    let operator: i64 = sqlx::query_scalar("SELECT id FROM operators LIMIT 1")
        .fetch_one(pool)
        .await
        .unwrap();
    for (tag, created, seen) in [
        (1u8, "now()", "now()"),
        (2, "now()", "now() - interval '2 hours'"),
        (3, "now() - interval '13 hours'", "now()"),
    ] {
        sqlx::query(&format!(
            "INSERT INTO sessions (operator_id, session_sha256, csrf_token, created_at, last_seen_at)
             VALUES ($1, $2, $3, {created}, {seen})"
        ))
        .bind(operator)
        .bind(vec![tag; 32])
        .bind("c".repeat(43))
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO sign_in_failures (name, address, at)
         VALUES ('ada', '192.0.2.1', now()), ('ada', '192.0.2.1', now() - interval '25 hours')",
    )
    .execute(pool)
    .await
    .unwrap();

    let idle = std::time::Duration::from_secs(30 * 60);
    let lifetime = std::time::Duration::from_secs(12 * 3600);
    // Another replica holding the sweep's lock: this one sweeps nothing.
    let mut other = gateway.store.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('capstan-gateway-sweep'))")
        .execute(&mut *other)
        .await
        .unwrap();
    assert_eq!(
        capstan_gateway::tasks::sweep(&gateway.store, idle, lifetime)
            .await
            .unwrap(),
        (0, 0)
    );
    other.rollback().await.unwrap();

    assert_eq!(
        capstan_gateway::tasks::sweep(&gateway.store, idle, lifetime)
            .await
            .unwrap(),
        (2, 1)
    );
    let left: Vec<Vec<u8>> = sqlx::query_scalar("SELECT session_sha256 FROM sessions")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(left, vec![vec![1u8; 32]]);
}
