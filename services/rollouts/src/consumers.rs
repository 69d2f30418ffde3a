//! What this service hears from others, each message applied once through the inbox: the
//! agent channel's node events (the `nodes` projection a plan reads) and its `job_finished`
//! for the jobs a rollout asked for (recorded, then the rollout is advanced in the same
//! transaction, so a step's result is stored before its next step starts); the incidents
//! service's `opened`, which a soaking stage watches.

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::JobFinished;
use capstan_events::incidents::IncidentOpened;
use capstan_events::{Domain, Envelope};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::PgConnection;
use chrono::Utc;
use futures::future::BoxFuture;
use std::time::Duration;

use crate::store::staged::{self as store, REQUESTED_BY};
use capstan_events::Word as _;

/// The durable consumers of this service: one per stream it reads (from `Domain::reach`).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Rollouts, max_deliver, ack_wait)
}

/// The events this service applies, from either stream.
pub(crate) struct Events;

/// The events this service reads (joins, queued and claimed jobs and check-ins are not this service's).
pub(crate) enum Heard {
    JobFinished(Envelope<JobFinished>),
    /// The node projection's events (the kit's `nodes` table).
    Node(NodeEvent),
    IncidentOpened(Envelope<IncidentOpened>),
}

impl Apply for Events {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        read_as(delivery, Heard::JobFinished)
            .or_else(|| NodeEvent::read(delivery, Heard::Node))
            .or_else(|| read_as(delivery, Heard::IncidentOpened))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        heard: Heard,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match heard {
                Heard::JobFinished(finished) => {
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
                }
                Heard::Node(event) => event.apply(connection).await.map_err(retry),
                Heard::IncidentOpened(opened) => {
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
                }
            }
        })
    }
}
