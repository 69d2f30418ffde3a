//! The plane under the generated NATS permissions: the agent channel and the gateway each run
//! as their own NATS user, and an agent's whole life (join, approval by an operator, a claim, a
//! 1 MiB result through the claim check, a job asked for by command) works without one
//! permission violation on the server.

use super::PairedAgent;
use super::Plane;
use capstan_bus::Outgoing;
use capstan_e2e::wait_for;
use capstan_events::NodeId;
use capstan_events::{agent_channel::RequestJob, Domain, Envelope};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plane_runs_under_the_generated_nats_permissions() {
    let plane = Plane::start_secured().await;
    // approve_join: an operator rpc, asked by the gateway's user.
    let (agent, node) = plane.paired_agent("web-1").await;
    let job = plane.queue(node, "check_status", json!({})).await;
    let (status, claimed) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], job);
    // A result larger than one NATS message: parked in the object store by the gateway's user,
    // collected by the agent channel's.
    let output = "x".repeat(1024 * 1024);
    let (status, ack) = agent.result(job, "completed", &output).await;
    assert_eq!((status, ack), (StatusCode::OK, json!({"ack": true})));
    assert_eq!(plane.finished(job).await["outcome"], "completed");

    // A command from another service (here `capstan all`'s user, on the monitor's subject),
    // consumed by the agent channel's durable consumer under its own user.
    let request = RequestJob {
        idempotency_key: "secured-1".into(),
        node_id: NodeId(node),
        primitive: "host_report".into(),
        params: json!({}),
        requested_by: "service/monitor".into(),
    };
    plane
        .bus
        .publish(Outgoing::command_from(
            Domain::Monitor,
            Envelope::new(request, None),
        ))
        .await
        .unwrap();
    wait_for("the requested job", Duration::from_secs(30), || {
        let plane = &plane;
        async move {
            let (_, jobs) = plane
                .api(
                    &plane.reader,
                    "GET",
                    &format!("/api/v1/jobs?node_id={node}&state=pending"),
                    None,
                )
                .await;
            jobs["jobs"]
                .as_array()
                .and_then(|jobs| {
                    jobs.iter()
                        .find(|job| job["requested_by"] == "service/monitor")
                })
                .cloned()
        }
    })
    .await;
    let violations = plane.nats_violations();
    plane.stop().await;
    assert_eq!(violations, Vec::<String>::new());
}
