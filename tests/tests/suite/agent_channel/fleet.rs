//! How the fleet is drawn for the dashboard: health dots the monitor judged from each node's
//! latest `check_status` (MO-07, told to the agent channel by `health_changed`) and placement
//! from the latest `host_report`s (PV-15), read back over the operator API.

use super::PairedAgent;
use super::{Plane, TestAgent};
use capstan_bus::testsuite::read_stream;
use capstan_e2e::heard::heard;
use capstan_e2e::wait_for;
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{JobFinished, JobOutcome, NodeReported, PlacementChanged},
    Domain, RawEnvelope,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// Runs `primitive` on `node` through `agent`, which reports `outcome` with `result`.
async fn reading(
    plane: &Plane,
    agent: &TestAgent,
    node: i64,
    primitive: &str,
    outcome: &str,
    result: Value,
) -> i64 {
    let job = plane.queue(node, primitive, json!({})).await;
    let (status, claimed) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], job);
    let (status, answer) = agent
        .send(
            "result",
            &json!({"job_id": job, "outcome": outcome, "output": "", "result": result,
                    "reason": if outcome == "completed" { Value::Null } else { json!("it broke") }}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    job
}

async fn node(plane: &Plane, id: i64) -> Value {
    let (status, view) = plane
        .api(&plane.reader, "GET", &format!("/api/v1/nodes/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    view
}

/// Waits until the node's view has been judged from job `job` (its `last_check`) and its dot is
/// `dot`; answers the view.
async fn judged(plane: &Plane, id: i64, dot: &str) -> Value {
    wait_for(
        &format!("node {id}'s dot to be {dot}"),
        Duration::from_secs(30),
        || async move {
            let view = node(plane, id).await;
            (view["health"]["dot"] == dot).then_some(view)
        },
    )
    .await
}

/// Waits until the monitor has heard job `job` of `id` end (its `health_changed` was told, or
/// the dot it gave was already the one kept): the agent channel's `job_finished` is published
/// and the monitor has applied every event of that stream.
async fn monitor_read(plane: &Plane, id: i64, job: i64) {
    heard::<JobFinished>(
        &plane.bus,
        Domain::Monitor,
        "the monitor to read the job",
        |finished| (finished.node_id, finished.job_id) == (NodeId(id), job),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_07_the_health_dot_follows_the_latest_check() {
    let plane = Plane::start().await;
    let (agent, id) = plane.paired_agent("web-1").await;
    let view = node(&plane, id).await;
    assert_eq!(
        view["health"],
        json!({"dot": "gray", "reasons": ["never checked"]})
    );
    assert_eq!(view["last_check"], Value::Null);

    let full = json!({"disk": {"used_percent": 93.5}, "load": {"1m": 0.2},
                      "postgresql": {"answers": true}});
    let job = reading(
        &plane,
        &agent,
        id,
        "check_status",
        "completed",
        full.clone(),
    )
    .await;
    let view = judged(&plane, id, "red").await;
    assert_eq!(
        view["health"]["reasons"],
        json!(["disk 93.5% full (over 90%)"])
    );
    assert_eq!(view["last_check"]["job_id"], job);
    assert_eq!(view["last_check"]["outcome"], "completed");
    assert_eq!(view["last_check"]["result"], full);

    let busy = json!({"disk": {"used_percent": 50}, "load": {"1m": 7.25}});
    reading(&plane, &agent, id, "check_status", "completed", busy).await;
    judged(&plane, id, "yellow").await;

    let fine = json!({"disk": {"used_percent": 50}, "load": {"1m": 0.5},
                      "postgresql": {"answers": true}});
    let fine_job = reading(&plane, &agent, id, "check_status", "completed", fine).await;
    judged(&plane, id, "green").await;

    // A host report is not a check: the dot stays as the last check left it (the monitor has
    // read the report: its reading is kept, and the dot is what the last check made it).
    let report = reading(
        &plane,
        &agent,
        id,
        "host_report",
        "completed",
        json!({"docker": "absent"}),
    )
    .await;
    monitor_read(&plane, id, report).await;
    monitor_read(&plane, id, fine_job).await;
    let view = node(&plane, id).await;
    assert_eq!(view["health"]["dot"], "green");
    assert_eq!(view["last_report"]["result"], json!({"docker": "absent"}));

    reading(&plane, &agent, id, "check_status", "failed", json!({})).await;
    let view = judged(&plane, id, "red").await;
    assert_eq!(
        view["health"],
        json!({"dot": "red", "reasons": ["the last check failed"]})
    );

    // A check withdrawn on the plane says nothing about the node.
    let withdrawn = plane.queue(id, "check_status", json!({})).await;
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/jobs/{withdrawn}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The monitor has heard the withdrawal (its job is finished there) and kept the failed
    // check as the reading: the dot stays red.
    let heard_withdrawn = heard::<JobFinished>(
        &plane.bus,
        Domain::Monitor,
        "the monitor to hear the withdrawal",
        |finished| finished.job_id == withdrawn,
    )
    .await;
    assert_eq!(heard_withdrawn.data.outcome, JobOutcome::Withdrawn);
    assert_eq!(
        node(&plane, id).await["health"],
        json!({"dot": "red", "reasons": ["the last check failed"]}),
        "the withdrawn check is not the reading"
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_15_docker_hosts_carry_their_containers_and_everything_else_is_a_machine() {
    let plane = Plane::start().await;
    let (host_agent, host) = plane.paired_agent("box-1-host").await;
    let (site_agent, site) = plane.paired_agent("shop").await;
    let (_bare_agent, bare) = plane.paired_agent("relay").await;
    // The site's own host report: the kernel it runs on is its host's (issue 27).
    reading(
        &plane,
        &site_agent,
        site,
        "host_report",
        "completed",
        json!({"docker": "absent", "boot_id": "boot-box-1"}),
    )
    .await;
    // The test agent joins with no container; its claim names one, as a site's agent does.
    let (status, answer) = site_agent.claim(&json!({"container": "shop"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let placements = |nodes: &Value| -> Vec<(i64, Value)> {
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| (node["id"].as_i64().unwrap(), node["placement"].clone()))
            .collect()
    };
    let (_, nodes) = plane.api(&plane.reader, "GET", "/api/v1/nodes", None).await;
    assert!(
        placements(&nodes)
            .iter()
            .all(|(_, placement)| *placement == json!({"kind": "machine"})),
        "before any host report every node is a machine: {nodes}"
    );

    reading(
        &plane,
        &host_agent,
        host,
        "host_report",
        "completed",
        json!({"docker": "installed", "boot_id": "boot-box-1",
               "containers": [{"name": "shop", "state": "running", "status": "Up 2 days"}]}),
    )
    .await;
    let (_, nodes) = plane.api(&plane.reader, "GET", "/api/v1/nodes", None).await;
    let placed = placements(&nodes);
    let of = |id: i64| {
        placed
            .iter()
            .find(|(node, _)| *node == id)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(of(host), json!({"kind": "host"}));
    assert_eq!(of(site), json!({"kind": "container", "host_node_id": host}));
    assert_eq!(of(bare), json!({"kind": "machine"}));
    // Asked for alone, the container node finds its host too.
    assert_eq!(
        node(&plane, site).await["placement"],
        json!({"kind": "container", "host_node_id": host})
    );
    plane.stop().await;
}

/// A quiet claim stamps the node's `last_seen_at` at most every 30 seconds, and only that: its
/// facts unchanged, no job waiting, nothing else written (the heartbeat alone is one statement
/// without a transaction or a lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_claim_only_stamps_a_heartbeat_that_is_due() {
    let plane = Plane::start().await;
    let (agent, id) = plane.paired_agent("web-1").await;
    let (status, _) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let database = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    // What the operator API shows of the node: when it was last heard, and its version.
    let shown = &plane;
    let seen = move || async move {
        let view = node(shown, id).await;
        let at = view["last_seen_at"].as_str().unwrap();
        (
            chrono::DateTime::parse_from_rfc3339(at)
                .unwrap()
                .with_timezone(&chrono::Utc),
            view["agent_version"].as_str().unwrap().to_string(),
        )
    };
    // (No API moves the node's clock: the agent channel's own row is set back, as time passing
    // would leave it.)
    // Heard from 20 s ago: fresh, so a quiet claim writes nothing.
    let twenty_ago: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "UPDATE agent_channel.nodes SET last_seen_at = now() - interval '20 seconds' \
         WHERE id = $1 RETURNING last_seen_at",
    )
    .bind(id)
    .fetch_one(&database)
    .await
    .unwrap();
    agent.claim(&json!({})).await;
    assert_eq!(seen().await.0, twenty_ago);
    // Heard from a minute ago: due, so the quiet claim stamps it, and nothing else changes.
    let (_, version) = seen().await;
    sqlx::query(
        "UPDATE agent_channel.nodes SET last_seen_at = now() - interval '1 minute' WHERE id = $1",
    )
    .bind(id)
    .execute(&database)
    .await
    .unwrap();
    let before = chrono::Utc::now();
    let (status, answer) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["job"], Value::Null);
    let (stamped, still) = seen().await;
    assert!(
        stamped >= before - chrono::Duration::seconds(1),
        "{stamped} not after {before}"
    );
    assert_eq!(still, version);
    assert_eq!(
        node(&plane, id).await["last_seen_at"],
        json!(stamped.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
    );
    database.close().await;
}

/// The placements announced on the agent channel's stream, in order: `(node, host)`.
async fn announced_placements(plane: &Plane) -> (Vec<(i64, Option<i64>)>, Vec<RawEnvelope>) {
    let events: Vec<RawEnvelope> =
        read_stream(&plane.bus, &Domain::AgentChannel.events_stream(), 10_000)
            .await
            .iter()
            .map(|message| RawEnvelope::from_slice(&message.payload).unwrap())
            .collect();
    let placed = events
        .iter()
        .filter(|event| event.event_type == "capstan.agent_channel.placement_changed")
        .map(|event| {
            let changed = event.decode::<PlacementChanged>().unwrap().data;
            (changed.node_id.get(), changed.host_node_id.map(NodeId::get))
        })
        .collect();
    (placed, events)
}

/// PV-15, and issue 11's grouping: where a container node sits reaches other services as
/// `placement_changed`, once per change, from the facts that move it — the host's
/// `host_report` listing the container, the container agent's claim naming it or no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_15_a_containers_host_is_announced_once_each_time_it_changes() {
    let plane = Plane::start().await;
    let (host_agent, host) = plane.paired_agent("box-1-host").await;
    let (site_agent, site) = plane.paired_agent("shop").await;
    // The site's own host report: the kernel it runs on is its host's (issue 27).
    reading(
        &plane,
        &site_agent,
        site,
        "host_report",
        "completed",
        json!({"docker": "absent", "boot_id": "boot-box-1"}),
    )
    .await;
    // The site's agent names its container; no host lists it yet.
    let (status, _) = site_agent.claim(&json!({"container": "shop"})).await;
    assert_eq!(status, StatusCode::OK);
    let listing = json!({"docker": "installed", "boot_id": "boot-box-1",
                         "containers": [{"name": "shop", "state": "running"}]});
    reading(
        &plane,
        &host_agent,
        host,
        "host_report",
        "completed",
        listing.clone(),
    )
    .await;
    // The same report again moves nothing. Then a marker: a later claim of the site changing
    // another fact, whose node_reported follows anything the second report could have sent.
    reading(
        &plane,
        &host_agent,
        host,
        "host_report",
        "completed",
        listing,
    )
    .await;
    let (status, _) = site_agent
        .claim(&json!({"container": "shop", "log_access": "on"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let marked = |events: &[RawEnvelope]| {
        events.iter().any(|event| {
            event.event_type == "capstan.agent_channel.node_reported"
                && event
                    .decode::<NodeReported>()
                    .is_ok_and(|reported| reported.data.facts["log_access"] == "on")
        })
    };
    let placed = wait_for(
        "the marker claim's report",
        Duration::from_secs(30),
        || async {
            let (placed, events) = announced_placements(&plane).await;
            marked(&events).then_some(placed)
        },
    )
    .await;
    assert_eq!(placed, [(site, Some(host))], "announced once");
    assert_eq!(
        node(&plane, site).await["placement"],
        json!({"kind": "container", "host_node_id": host})
    );

    // The site's agent says it runs in no container any more: it sits on no host.
    let (status, _) = site_agent
        .claim(&json!({"container": null, "log_access": "on"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let placed = wait_for(
        "the second announcement",
        Duration::from_secs(30),
        || async {
            let (placed, _) = announced_placements(&plane).await;
            (placed.len() >= 2).then_some(placed)
        },
    )
    .await;
    assert_eq!(placed, [(site, Some(host)), (site, None)]);
    assert_eq!(
        node(&plane, site).await["placement"],
        json!({"kind": "machine"})
    );
    plane.stop().await;
}

/// Issue 27: container names are global, so a node whose `host_report` lists another node's
/// container does not place it there (folding its incidents, sharing its backup turn) unless
/// the contained node's own report corroborates it: it runs on that host's kernel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_naming_another_nodes_container_does_not_place_it() {
    let plane = Plane::start().await;
    // The claimer paired first: by name alone, the oldest listing host would win.
    let (claimer_agent, claimer) = plane.paired_agent("box-claimer").await;
    let (host_agent, host) = plane.paired_agent("box-real").await;
    let (site_agent, site) = plane.paired_agent("shop").await;
    reading(
        &plane,
        &site_agent,
        site,
        "host_report",
        "completed",
        json!({"docker": "absent", "boot_id": "boot-real"}),
    )
    .await;
    let (status, _) = site_agent.claim(&json!({"container": "shop"})).await;
    assert_eq!(status, StatusCode::OK);
    reading(
        &plane,
        &claimer_agent,
        claimer,
        "host_report",
        "completed",
        json!({"docker": "installed", "boot_id": "boot-claimer",
               "containers": [{"name": "shop", "state": "running"}]}),
    )
    .await;
    assert_eq!(
        node(&plane, claimer).await["placement"],
        json!({"kind": "host"})
    );
    assert_eq!(
        node(&plane, site).await["placement"],
        json!({"kind": "machine"}),
        "a listing the site does not corroborate places it nowhere"
    );
    // Its real host lists it too, and the site's own report shares that host's kernel.
    reading(
        &plane,
        &host_agent,
        host,
        "host_report",
        "completed",
        json!({"docker": "installed", "boot_id": "boot-real",
               "containers": [{"name": "shop", "state": "running"}]}),
    )
    .await;
    assert_eq!(
        node(&plane, site).await["placement"],
        json!({"kind": "container", "host_node_id": host})
    );
    // And what other services hear: placed under the real host, never the claimer.
    let placed = wait_for(
        "the placement announced",
        Duration::from_secs(30),
        || async {
            let (placed, _) = announced_placements(&plane).await;
            (!placed.is_empty()).then_some(placed)
        },
    )
    .await;
    assert_eq!(placed, [(site, Some(host))]);
    plane.stop().await;
}
