//! What this service hears from others, each message applied once through the inbox: the
//! agent channel's node events (the `nodes` projection a plan reads) and its `job_finished`
//! for the jobs a rollout asked for (recorded, then the rollout is advanced in the same
//! transaction, so a step's result is stored before its next step starts); the incidents
//! service's `opened`, which a soaking stage watches.

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{
    JobFinished, NodeApproved, NodeDisconnected, NodeLeft, NodeReported, PlacementChanged,
};
use capstan_events::incidents::IncidentOpened;
use capstan_events::Domain;
use capstan_runtime::{decode, retry, Apply};
use capstan_store::PgConnection;
use chrono::Utc;
use futures::future::BoxFuture;
use std::time::Duration;

use crate::store::staged::{self as store, REQUESTED_BY};

/// The durable consumers of this service: one per stream it reads (from `Domain::reach`).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Rollouts, max_deliver, ack_wait)
}

/// The events this service applies, from either stream.
pub struct Events;

impl Apply for Events {
    /// The types `apply` reads (joins, queued and claimed jobs and check-ins are not this service's).
    fn applies(&self, delivery: &Delivery) -> bool {
        let envelope = &delivery.envelope;
        envelope.is::<JobFinished>()
            || envelope.is::<NodeApproved>()
            || envelope.is::<NodeReported>()
            || envelope.is::<PlacementChanged>()
            || envelope.is::<NodeLeft>()
            || envelope.is::<NodeDisconnected>()
            || envelope.is::<IncidentOpened>()
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            let envelope = &delivery.envelope;
            if envelope.is::<JobFinished>() {
                let finished = decode::<JobFinished>(delivery)?;
                let data = &finished.data;
                if data.requested_by != REQUESTED_BY {
                    return Ok(());
                }
                let Some(correlation) = data.correlation_id else {
                    return Ok(());
                };
                let now = Utc::now();
                let rollout = store::job_finished(
                    connection,
                    correlation,
                    data.job_id,
                    data.outcome.as_str(),
                    data.result.as_ref(),
                    data.reason.as_deref(),
                    now,
                )
                .await
                .map_err(retry)?;
                if let Some(rollout) = rollout {
                    store::advance(connection, rollout, now)
                        .await
                        .map_err(retry)?;
                }
                Ok(())
            } else if envelope.is::<NodeApproved>() {
                let approved = decode::<NodeApproved>(delivery)?;
                let data = &approved.data;
                store::node_approved(
                    connection,
                    data.node_id,
                    &data.name,
                    data.site_root.as_deref(),
                    data.container.as_deref(),
                )
                .await
                .map_err(retry)
            } else if envelope.is::<NodeReported>() {
                let reported = decode::<NodeReported>(delivery)?;
                let data = &reported.data;
                store::node_reported(
                    connection,
                    data.node_id,
                    &data.agent_version,
                    &data.vocabulary,
                )
                .await
                .map_err(retry)
            } else if envelope.is::<PlacementChanged>() {
                let placed = decode::<PlacementChanged>(delivery)?;
                store::placement_changed(connection, placed.data.node_id, placed.data.host_node_id)
                    .await
                    .map_err(retry)
            } else if envelope.is::<NodeLeft>() {
                let left = decode::<NodeLeft>(delivery)?;
                store::node_unpaired(connection, left.data.node_id)
                    .await
                    .map_err(retry)
            } else if envelope.is::<NodeDisconnected>() {
                let gone = decode::<NodeDisconnected>(delivery)?;
                store::node_unpaired(connection, gone.data.node_id)
                    .await
                    .map_err(retry)
            } else if envelope.is::<IncidentOpened>() {
                let opened = decode::<IncidentOpened>(delivery)?;
                let data = &opened.data;
                store::incident_opened(
                    connection,
                    data.incident_id,
                    data.node_id,
                    &data.source,
                    &data.title,
                    data.opened_at,
                )
                .await
                .map_err(retry)
            } else {
                Ok(())
            }
        })
    }
}
