//! Joins (PROTOCOL.md "join", "join_status", "leave"; AC-02..AC-07, AC-37, AC-38).

use super::PairedAgent;
use super::{Plane, TestAgent};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_is_approved_by_an_operator_and_the_agent_learns_it_from_join_status() {
    let plane = Plane::start().await;
    let agent = TestAgent::new(&plane);
    let (status, asked) = agent.join("web-1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    assert_eq!(asked["state"], "pending");
    assert_eq!(asked["fingerprint"], agent.fingerprint());
    assert_eq!(asked["fingerprint"].as_str().unwrap().len(), 50);
    let request_id = asked["request_id"].as_str().unwrap().to_string();

    // AC-03: the same key asking again renews the same request.
    let (_, again) = agent.join("web-1").await;
    assert_eq!(again["request_id"], request_id.as_str());
    assert!(again["expires_at"].as_str().unwrap() >= asked["expires_at"].as_str().unwrap());

    let (status, pending) = agent
        .send("join_status", &json!({"request_id": request_id}))
        .await;
    assert_eq!(
        (status, pending["state"].as_str()),
        (StatusCode::OK, Some("pending"))
    );

    // A reader sees the join but may not approve it (the server refuses, not only the page).
    let (status, joins) = plane
        .api(&plane.reader, "GET", "/api/v1/joins?state=pending", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let join = &joins["joins"][0];
    for field in [
        "id",
        "name",
        "fingerprint",
        "source_address",
        "addresses",
        "agent_version",
        "state",
        "requested_at",
        "expires_at",
    ] {
        assert!(join.get(field).is_some(), "join view lacks {field}: {join}");
    }
    assert_eq!(join["source_address"], "127.0.0.1");
    let (status, _) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/joins/{request_id}/approve"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let node = plane.approve(&agent.fingerprint()).await;
    let (_, approved) = agent
        .send("join_status", &json!({"request_id": request_id}))
        .await;
    assert_eq!(approved, json!({"state": "approved", "node_id": node}));

    // AC-06: the empty site root is filled from the join.
    let (_, view) = plane
        .api(&plane.reader, "GET", &format!("/api/v1/nodes/{node}"), None)
        .await;
    assert_eq!(view["site_root"], "/var/www/site");
    assert_eq!(view["fingerprint"], agent.fingerprint());
    assert!(view["connected_at"].is_string());

    // A key already bound does not join twice.
    let (status, twice) = agent.join("web-1").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(twice["error"]["code"], "already_joined");
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac_07_a_rejected_key_is_told_so_and_an_operator_can_reopen_it() {
    let plane = Plane::start().await;
    let agent = TestAgent::new(&plane);
    let (_, asked) = agent.join("web-2").await;
    let id = asked["request_id"].as_str().unwrap().to_string();
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/joins/{id}/reject"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, rejected) = agent.join("web-2").await;
    assert_eq!(
        (status, rejected["state"].as_str()),
        (StatusCode::ACCEPTED, Some("rejected"))
    );
    assert_eq!(
        rejected["request_id"],
        id.as_str(),
        "the node keeps its key and its request"
    );
    let (_, listed) = plane
        .api(&plane.reader, "GET", "/api/v1/joins?state=rejected", None)
        .await;
    assert_eq!(listed["joins"][0]["fingerprint"], agent.fingerprint());

    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/joins/{id}/reopen"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, status_now) = agent.send("join_status", &json!({"request_id": id})).await;
    assert_eq!(status_now["state"], "pending");
    plane.approve(&agent.fingerprint()).await;
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_claiming_a_connected_nodes_name_is_shown_as_such_and_never_bound() {
    let plane = Plane::start().await;
    let (_first, node) = plane.paired_agent("web-3").await;
    let impostor = TestAgent::new(&plane);
    impostor.join("web-3").await;
    let (_, joins) = plane
        .api(&plane.reader, "GET", "/api/v1/joins?state=pending", None)
        .await;
    assert_eq!(joins["joins"][0]["name_taken_by"], node);
    // Approving it onto the paired node is refused; approving makes a new node instead.
    let id = joins["joins"][0]["id"].as_str().unwrap();
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/joins/{id}/approve"),
            Some(json!({"node_id": node})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_and_disconnect_both_forget_the_key_and_leave_records_when() {
    let plane = Plane::start().await;
    let (leaver, left_node) = plane.paired_agent("web-4").await;
    let (status, _) = leaver.send("leave", &json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) = leaver.claim(&json!({})).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unknown_key"))
    );
    let (_, view) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{left_node}"),
            None,
        )
        .await;
    assert!(view["left_at"].is_string());
    assert!(view["fingerprint"].is_null());

    let (cut, cut_node) = plane.paired_agent("web-5").await;
    let (status, _) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/nodes/{cut_node}/disconnect"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "disconnect needs level 10");
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/nodes/{cut_node}/disconnect"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = cut.claim(&json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, view) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{cut_node}"),
            None,
        )
        .await;
    assert!(view["left_at"].is_null(), "a disconnect records no leave");
    // A node without a paired agent takes no jobs.
    let (status, refused) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/nodes/{cut_node}/jobs"),
            Some(json!({"primitive": "check_status"})),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("not_paired"))
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_join_bodies_are_refused_naming_the_field_and_pending_joins_are_capped_per_address() {
    let plane = Plane::start().await;
    let agent = TestAgent::new(&plane);
    let (status, refused) = agent
        .send("join", &json!({"name": "Bad Name", "public_key": agent.key.public_key().to_base64(), "agent_version": "1"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["error"]["code"], "invalid_request");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("name"));

    // A join signed by a key other than the one it introduces.
    let other = TestAgent::new(&plane);
    let body = serde_json::to_vec(&json!({"name": "web-6", "public_key": other.key.public_key().to_base64(), "agent_version": "1"})).unwrap();
    let reply = agent.send_at("join", "", &body, super::now()).await;
    assert_eq!(reply.body["error"]["code"], "unknown_key");

    for n in 0..8 {
        let (status, _) = TestAgent::new(&plane).join(&format!("cap-{n}")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let (status, capped) = TestAgent::new(&plane).join("cap-9").await;
    assert_eq!(
        (status, capped["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_pending"))
    );
    plane.stop().await;
}

/// How many statements of this test's database wait on a lock now.
async fn lock_waiters(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn until_waiting(pool: &sqlx::PgPool, count: i64) {
    capstan_e2e::wait_for(
        &format!("{count} statements to wait on the request's lock"),
        std::time::Duration::from_secs(10),
        || async { (lock_waiters(pool).await >= count).then_some(()) },
    )
    .await;
}

/// AC-03, AC-04: a renewal that waits while an approval of the same request commits sees the
/// node the approval made (`already_joined`); it never files a second request for the key nor
/// sets the approved one back to pending. (Found when the agent's reopen test hung: the key's
/// node was looked for before the request was locked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_racing_an_approval_sees_the_node_it_made() {
    let plane = Plane::start().await;
    let agent = TestAgent::new(&plane);
    let (status, asked) = agent.join("web-1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{asked}");
    let request_id = asked["request_id"].as_str().unwrap().to_string();
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();

    // Hold the request's lock, queue the approval behind it, then the renewal behind that.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM agent_channel.joins WHERE id = $1::uuid FOR UPDATE")
        .bind(&request_id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let approve_path = format!("/api/v1/joins/{request_id}/approve");
    let approve = plane.api(&plane.admin, "POST", &approve_path, Some(json!({})));
    let renew = async {
        until_waiting(&pool, 1).await;
        agent.join("web-1").await
    };
    let release = async {
        until_waiting(&pool, 2).await;
        holder.rollback().await.unwrap();
    };
    let ((approved, answer), (renewed, renewal), ()) = tokio::join!(approve, renew, release);
    assert_eq!(approved, StatusCode::OK, "{answer}");
    assert_eq!(renewed, StatusCode::CONFLICT, "{renewal}");
    assert_eq!(renewal["error"]["code"], "already_joined");

    // The join requests of the key, as the operator API lists them (a day's worth, any state).
    let (status, joins) = plane
        .api(&plane.admin, "GET", "/api/v1/joins?state=all", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{joins}");
    let requests: Vec<&Value> = joins["joins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|join| join["fingerprint"] == agent.fingerprint().as_str())
        .map(|join| &join["state"])
        .collect();
    assert_eq!(requests, [&json!("approved")], "{joins}");
    pool.close().await;
    plane.stop().await;
}

// Issue 10, "join floods are contained per network": 125 machines of one IPv6 /64 (each its
// own address and key) hold at most the per-network share of pending joins; the rest are 429,
// and a machine of another network (an IPv4 address, another /64) still gets its join lodged.
// The source address is what a trusted proxy names, as behind a load balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_flood_from_one_ipv6_64_is_capped_as_one_network_and_others_still_join() {
    let plane = Plane::start_with(&[("CAPSTAN__GATEWAY__TRUSTED_PROXIES", "127.0.0.1")]).await;
    let mut lodged = 0;
    for host in 1..=125 {
        let reply = TestAgent::new(&plane)
            .join_from(&format!("flood-{host}"), &format!("2001:db8::{host:x}"))
            .await;
        match reply.status {
            StatusCode::ACCEPTED => lodged += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let code = reply.body["error"]["code"].as_str().unwrap_or_default();
                assert!(
                    ["too_many_pending", "rate_limited"].contains(&code),
                    "{}",
                    reply.body
                );
            }
            other => panic!("join {host} answered {other}: {}", reply.body),
        }
    }
    assert_eq!(lodged, 8, "one /64 holds one network's share");
    let (status, pending): (StatusCode, Vec<String>) = {
        let (status, joins) = plane
            .api(&plane.admin, "GET", "/api/v1/joins?state=pending", None)
            .await;
        let addresses = joins["joins"]
            .as_array()
            .map(|joins| {
                joins
                    .iter()
                    .map(|join| {
                        join["source_address"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default();
        (status, addresses)
    };
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pending.len(), 8);
    assert!(pending
        .iter()
        .all(|address| address.starts_with("2001:db8::")));
    for (name, client) in [
        ("elsewhere-v4", "192.0.2.10"),
        ("elsewhere-v6", "2001:db8:0:1::1"),
    ] {
        let reply = TestAgent::new(&plane).join_from(name, client).await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{client}: {}",
            reply.body
        );
    }
    plane.stop().await;
}
