//! What this service hears from others, each message applied once through the inbox: the
//! agent channel's node events, kept as the `nodes` projection (names, addresses, container,
//! pairing). A node's check row is made when it is first paired.

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{NodeApproved, NodeDisconnected, NodeLeft};
use capstan_events::Domain;
use capstan_runtime::{decode, retry, Apply};
use capstan_store::PgConnection;
use futures::future::BoxFuture;
use std::time::Duration;

use crate::store;

/// The durable consumers of this service: one per stream it reads (from `Domain::reach`, the
/// table the bus's permissions are made from).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    Domain::Monitor
        .reach()
        .consumes
        .iter()
        .map(|subscription| ConsumerSpec {
            domain: Domain::Monitor,
            stream: subscription.from.events_stream(),
            durable: subscription.durable.to_string(),
            filter_subject: subscription.from.events_subjects(),
            max_deliver,
            ack_wait,
        })
        .collect()
}

/// The agent channel's events this service applies.
pub struct NodeEvents;

impl Apply for NodeEvents {
    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            let envelope = &delivery.envelope;
            if envelope.is::<NodeApproved>() {
                let approved = decode::<NodeApproved>(delivery)?;
                let data = &approved.data;
                store::node_approved(
                    connection,
                    data.node_id,
                    &data.name,
                    &data.addresses,
                    data.container.as_deref(),
                )
                .await
                .map_err(retry)
            } else if envelope.is::<NodeLeft>() {
                let left = decode::<NodeLeft>(delivery)?;
                store::node_unpaired(connection, left.data.node_id)
                    .await
                    .map_err(retry)
            } else if envelope.is::<NodeDisconnected>() {
                let disconnected = decode::<NodeDisconnected>(delivery)?;
                store::node_unpaired(connection, disconnected.data.node_id)
                    .await
                    .map_err(retry)
            } else {
                // Jobs, joins and check-ins are not this service's business.
                Ok(())
            }
        })
    }
}
