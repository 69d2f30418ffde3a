//! What this service hears from others, each message applied once through the inbox: the
//! agent channel's node events, kept as the `nodes` projection (names, addresses, container,
//! pairing, vocabulary), and its jobs of the words kept current (`status_jobs`, `readings`).
//! A node's check row is made when it is first paired. A finished `check_status` is judged
//! into the node's health dot there and then; a changed dot is told (`health_changed`) in the
//! same transaction (MO-07).

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{JobClaimed, JobFinished, JobOutcome, JobQueued};
use capstan_events::{Domain, Envelope};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::{PgConnection, StoreError};
use futures::future::BoxFuture;
use std::time::Duration;

use crate::domain::health;
use crate::store::{self, status};

/// The durable consumers of this service: one per stream it reads (from `Domain::reach`, the
/// table the bus's permissions are made from).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Monitor, max_deliver, ack_wait)
}

/// The agent channel's events this service applies.
pub(crate) struct NodeEvents;

/// The agent channel's events this service reads (joins, placements and check-ins are not this
/// service's).
pub(crate) enum Heard {
    /// The node projection's events (the kit's `nodes` table).
    Node(NodeEvent),
    Queued(Envelope<JobQueued>),
    Claimed(Envelope<JobClaimed>),
    Finished(Envelope<JobFinished>),
}

impl Apply for NodeEvents {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        NodeEvent::read(delivery, Heard::Node)
            .or_else(|| read_as(delivery, Heard::Queued))
            .or_else(|| read_as(delivery, Heard::Claimed))
            .or_else(|| read_as(delivery, Heard::Finished))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        heard: Heard,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match heard {
                Heard::Node(event) => {
                    event.apply(connection).await.map_err(retry)?;
                    if let NodeEvent::Approved(approved) = &event {
                        store::check_made(connection, approved.data.node_id)
                            .await
                            .map_err(retry)?;
                    }
                    Ok(())
                }
                Heard::Queued(queued) => {
                    let at = queued.time;
                    let queued = queued.data;
                    if status::reboots(&queued.primitive) {
                        return status::reboot_asked(connection, queued.node_id, at)
                            .await
                            .map_err(retry);
                    }
                    if !status::kept(&queued.primitive) {
                        return Ok(());
                    }
                    status::job_queued(connection, queued.job_id, queued.node_id, &queued.primitive)
                        .await
                        .map_err(retry)
                }
                Heard::Claimed(claimed) => {
                    let claimed = claimed.data;
                    if !status::kept(&claimed.primitive) {
                        return Ok(());
                    }
                    status::job_claimed(
                        connection,
                        claimed.job_id,
                        claimed.node_id,
                        &claimed.primitive,
                    )
                    .await
                    .map_err(retry)
                }
                Heard::Finished(finished) => {
                    job_finished(connection, &finished.data, finished.time)
                        .await
                        .map_err(retry)
                }
            }
        })
    }
}

/// A kept word's job finished at `at`: it becomes the node's reading, and a `check_status`
/// reading judges the node's dot anew (MO-07), told when it changed.
async fn job_finished(
    connection: &mut PgConnection,
    finished: &JobFinished,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    if status::data_root_job(&finished.primitive) && finished.outcome != JobOutcome::Withdrawn {
        return status::data_root_job_ended(connection, finished.node_id, at).await;
    }
    if !status::kept(&finished.primitive) {
        return Ok(());
    }
    let newest = status::job_finished(
        connection,
        finished.job_id,
        finished.node_id,
        &finished.primitive,
        finished.outcome,
        finished.result.as_ref(),
        at,
    )
    .await?;
    if !newest || finished.primitive != capstan_events::agent_channel::primitives::CHECK_STATUS {
        return Ok(());
    }
    let judged = health::health(Some((finished.outcome, finished.result.as_ref())));
    if status::health(connection, finished.node_id).await?.as_ref() != Some(&judged) {
        status::set_health(connection, finished.node_id, &judged, at).await?;
    }
    Ok(())
}

#[cfg(test)]
mod install_states;
