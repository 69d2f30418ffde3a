//! What this service hears from the agent channel, each message applied once through the inbox:
//! the node facts auto-approval, the inventory, hosts, the transfer watch and the cleanup read
//! (the kit's `nodes` projection), and the joins (`join_requested`, then `node_approved` or
//! `join_rejected`) kept in `joins`. A join heard wakes auto-approval at once (AC-08: "every
//! minute and on each join"); the judging itself asks the provider, so it runs outside the
//! consumer's transaction (`tasks::approval`). A node approved or reporting links the host
//! record at its address to it (PV-14); a `host_report` job's result gives the node's OS
//! (PV-54's colours).

use std::sync::Arc;
use std::time::Duration;

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{JobFinished, JobOutcome, JoinRejected, JoinRequested};
use capstan_events::{Domain, Envelope, NodeId};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::{PgConnection, StoreError};
use futures::future::BoxFuture;
use serde_json::Value;
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
    JobFinished(Envelope<JobFinished>),
}

impl Apply for Events {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        NodeEvent::read(delivery, Heard::Node)
            .or_else(|| read_as(delivery, Heard::JoinRequested))
            .or_else(|| read_as(delivery, Heard::JoinRejected))
            .or_else(|| read_as(delivery, Heard::JobFinished))
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
                    if matches!(event, NodeEvent::Approved(_) | NodeEvent::Reported(_)) {
                        link_host(connection, event.node_id())
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
                Heard::JobFinished(event) => {
                    job_finished(connection, &event.data).await.map_err(retry)
                }
            }
        })
    }
}

/// PV-14: a paired node that is not a container site links the live host record at its own
/// address (the first it reported), unless a live link to another node holds it.
pub async fn link_host(connection: &mut PgConnection, node: NodeId) -> Result<(), StoreError> {
    let Some(row) = store::machines::node(connection, node).await? else {
        return Ok(());
    };
    if !row.paired || row.container.is_some() {
        return Ok(());
    }
    let Some(own) = row.addresses.0.first() else {
        return Ok(());
    };
    crate::rpc::hosts::link_at(connection, std::slice::from_ref(own), Some(node)).await?;
    Ok(())
}

/// The OS a `host_report` names: its `os.pretty_name`, else its id and version.
pub fn reported_os(result: &Value) -> Option<String> {
    let os = result.get("os")?;
    let text = |key: &str| {
        os.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    text("pretty_name").or_else(|| {
        let id = text("id")?;
        Some(format!("{id} {}", text("version_id").unwrap_or_default()))
    })
}

async fn job_finished(connection: &mut PgConnection, job: &JobFinished) -> Result<(), StoreError> {
    if job.primitive != "host_report" || job.outcome != JobOutcome::Completed {
        return Ok(());
    }
    let Some(os) = job.result.as_ref().and_then(reported_os) else {
        return Ok(());
    };
    store::machines::set_os(connection, job.node_id, &os).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pv_54_the_os_is_read_from_a_host_reports_pretty_name_or_its_id_and_version() {
        assert_eq!(
            reported_os(&json!({"os": {"pretty_name": "Ubuntu 20.04.6 LTS", "id": "ubuntu"}})),
            Some("Ubuntu 20.04.6 LTS".into())
        );
        assert_eq!(
            reported_os(&json!({"os": {"id": "debian", "version_id": "12"}})),
            Some("debian 12".into())
        );
        assert_eq!(reported_os(&json!({"os": null})), None);
        assert_eq!(reported_os(&json!({})), None);
    }
}
