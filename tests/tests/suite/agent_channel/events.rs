//! The agent channel's events, read back from JetStream as CloudEvents, and its commands.

use super::PairedAgent;
use super::{Plane, TestAgent};
use capstan_bus::{
    testsuite::{consumer_settled, read_stream},
    Outgoing,
};
use capstan_e2e::wait_for;
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{JobFinished, RequestJob},
    Domain, Envelope, RawEnvelope,
};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_is_published_as_a_cloudevent_and_request_job_is_idempotent() {
    let plane = Plane::start().await;
    // join_requested, node_approved, node_reported, job_queued, job_claimed, job_finished
    let (agent, node) = plane.paired_agent("web-1").await;
    let job = plane.queue(node, "check_status", json!({})).await;
    agent.claim(&json!({})).await;
    agent.result(job, "completed", "ok").await;
    // A claim that changes nothing writes nothing, so no second node_reported.
    agent.claim(&json!({})).await;
    // join_rejected
    let rejected = TestAgent::new(&plane);
    let (_, asked) = rejected.join("web-2").await;
    plane
        .api(
            &plane.admin,
            "POST",
            &format!(
                "/api/v1/joins/{}/reject",
                asked["request_id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    // node_left and node_disconnected
    let (leaver, _) = plane.paired_agent("web-3").await;
    leaver.send("leave", &json!({})).await;
    let (_, cut) = plane.paired_agent("web-4").await;
    plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/nodes/{cut}/disconnect"),
            None,
        )
        .await;

    // Another service asks for a job twice with one idempotency key: one job.
    for _ in 0..2 {
        let request = RequestJob {
            idempotency_key: "monitor-status-7".into(),
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
    }
    let (_, jobs) = wait_for("the requested job", Duration::from_secs(30), || {
        let plane = &plane;
        async move {
            let (status, jobs) = plane
                .api(
                    &plane.reader,
                    "GET",
                    &format!("/api/v1/jobs?node_id={node}&state=pending"),
                    None,
                )
                .await;
            (jobs["jobs"].as_array().is_some_and(|jobs| !jobs.is_empty())).then_some((status, jobs))
        }
    })
    .await;
    // Both commands taken and acknowledged: the second had every chance to make a job.
    wait_for("both commands applied", Duration::from_secs(30), || {
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
    let (_, all) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/jobs?node_id={node}"),
            None,
        )
        .await;
    let requested: Vec<_> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|job| job["requested_by"] == "service/monitor")
        .collect();
    assert_eq!(
        requested.len(),
        1,
        "one job for one idempotency key: {jobs}"
    );

    let stream = Domain::AgentChannel.events_stream();
    let events = wait_for("every kind of event", Duration::from_secs(30), || {
        let bus = plane.bus.clone();
        let stream = stream.clone();
        async move {
            let events: Vec<RawEnvelope> = read_stream(&bus, &stream, 1000)
                .await
                .iter()
                .map(|message| RawEnvelope::from_slice(&message.payload).unwrap())
                .collect();
            let kinds = [
                "join_requested",
                "node_approved",
                "join_rejected",
                "node_disconnected",
                "node_left",
                "node_reported",
                "job_queued",
                "job_claimed",
                "job_finished",
            ];
            kinds
                .iter()
                .all(|kind| {
                    events
                        .iter()
                        .any(|event| event.event_type == format!("capstan.agent_channel.{kind}"))
                })
                .then_some(events)
        }
    })
    .await;
    for event in &events {
        assert_eq!(event.specversion, "1.0");
        assert_eq!(event.source, "capstan/agent-channel");
        assert_eq!(event.datacontenttype, "application/json");
        assert_eq!(event.id.get_version_num(), 7);
        assert!(event.subject.is_some(), "{event:?}");
    }
    let reported_for_node = events
        .iter()
        .filter(|event| {
            event.event_type == "capstan.agent_channel.node_reported"
                && event.subject.as_deref() == Some(&format!("node/{node}"))
        })
        .count();
    assert_eq!(reported_for_node, 1, "an unchanged claim published nothing");
    let finished = events
        .iter()
        .find(|event| event.event_type == "capstan.agent_channel.job_finished")
        .unwrap()
        .decode::<JobFinished>()
        .unwrap();
    assert_eq!(
        (finished.data.job_id, finished.data.node_id),
        (job, NodeId(node))
    );
    assert_eq!(finished.data.requested_by, "ada");
    assert_eq!(finished.data.result, Some(json!({"ok": true})));
    plane.stop().await;
}
