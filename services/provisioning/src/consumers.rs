//! What this service hears from the agent channel, each message applied once through the inbox:
//! the node facts auto-approval and the inventory read (the kit's `nodes` projection), and the
//! joins (`join_requested`, then `node_approved` or `join_rejected`) kept in `joins`. A join
//! heard wakes auto-approval at once (AC-08: "every minute and on each join"); the judging itself
//! asks the provider, so it runs outside the consumer's transaction (`tasks::approval`).

use std::sync::Arc;
use std::time::Duration;

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{JoinRejected, JoinRequested};
use capstan_events::{Domain, Envelope};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::PgConnection;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::store;

/// The durable consumers of this service (from `Domain::reach`).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Provisioning, max_deliver, ack_wait)
}

/// The agent channel's events this service applies; `joined` wakes auto-approval.
pub struct Events {
    pub joined: Arc<Notify>,
}

pub enum Heard {
    Node(NodeEvent),
    JoinRequested(Envelope<JoinRequested>),
    JoinRejected(Envelope<JoinRejected>),
}

impl Apply for Events {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        NodeEvent::read(delivery, Heard::Node)
            .or_else(|| read_as(delivery, Heard::JoinRequested))
            .or_else(|| read_as(delivery, Heard::JoinRejected))
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
                        store::join_approved(
                            connection,
                            approved.data.request_id,
                            approved.data.node_id,
                        )
                        .await
                        .map_err(retry)?;
                    }
                    Ok(())
                }
                Heard::JoinRequested(event) => {
                    store::join_heard(connection, &event.data, event.time)
                        .await
                        .map_err(retry)?;
                    self.joined.notify_one();
                    Ok(())
                }
                Heard::JoinRejected(event) => {
                    store::join_rejected(connection, event.data.request_id)
                        .await
                        .map_err(retry)
                }
            }
        })
    }
}
