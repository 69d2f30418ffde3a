//! Commands from other services: `request_job` (the same idempotency key twice makes one job)
//! and `cancel_job`. A request the plane cannot route still becomes a job, ended `refused` by
//! the plane with the reason, so the asker always hears back through `job_finished`.
//!
//! And the monitor's events: `health_changed` kept as each node's dot (MO-07).

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::monitor::HealthChanged;
use capstan_events::{
    agent_channel::{primitives, rpc::JobState, CancelJob, JobOutcome, RequestJob},
    rpc::{ErrorCode, Level},
    Domain, Envelope, Message,
};
use capstan_runtime::{read_as, retry, Apply};
use capstan_store::PgConnection;
use futures::future::BoxFuture;
use std::time::Duration;

use crate::{
    actions::{self, Asker},
    store,
};

/// The durable consumer of this service's command stream.
pub fn spec(max_deliver: u32, ack_wait: Duration) -> ConsumerSpec {
    ConsumerSpec {
        domain: Domain::AgentChannel,
        stream: RequestJob::stream(),
        // The name the NATS permissions grant (libs/events `access`).
        durable: Domain::AgentChannel.commands_consumer(),
        filter_subject: Domain::AgentChannel.commands_subjects(),
        max_deliver,
        ack_wait,
    }
}

/// The durable consumers of other services' event streams (from `Domain::reach`, the table
/// the bus's permissions are made from): the monitor's.
pub fn event_specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::AgentChannel, max_deliver, ack_wait)
}

/// The monitor's events this service applies: each node's health dot.
pub struct MonitorEvents;

impl Apply for MonitorEvents {
    type Message = Envelope<HealthChanged>;

    /// Only the health dot (sites and certificates are the incidents service's).
    fn read(&self, delivery: &Delivery) -> Option<Result<Self::Message, HandlerError>> {
        read_as(delivery, std::convert::identity)
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        changed: Self::Message,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            let changed = changed.data;
            store::health::apply(
                connection,
                changed.node_id,
                &changed.health,
                changed.checked_at,
            )
            .await
            .map_err(retry)
        })
    }
}

pub struct Commands;

/// A command this service takes.
pub enum Command {
    Request(Envelope<RequestJob>),
    Cancel(Envelope<CancelJob>),
}

impl Apply for Commands {
    type Message = Command;

    /// Every command on this service's stream; one of a type it does not take is rejected.
    fn read(&self, delivery: &Delivery) -> Option<Result<Command, HandlerError>> {
        read_as(delivery, Command::Request)
            .or_else(|| read_as(delivery, Command::Cancel))
            .or_else(|| {
                Some(Err(HandlerError::Reject(format!(
                    "the agent channel takes no command {}",
                    delivery.envelope.event_type
                ))))
            })
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        command: Command,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match command {
                Command::Request(request) => request_job(connection, request).await,
                Command::Cancel(cancel) => cancel_job(connection, cancel).await,
            }
        })
    }
}

async fn request_job(
    connection: &mut PgConnection,
    envelope: Envelope<RequestJob>,
) -> Result<(), HandlerError> {
    let request = &envelope.data;
    let Some(node) = store::node_by_id(connection, request.node_id)
        .await
        .map_err(retry)?
    else {
        return Err(HandlerError::Reject(format!("no node {}", request.node_id)));
    };
    let asker = Asker {
        name: &request.requested_by,
        // A service asks with the authority of the plane; it checked its own operator's level.
        level: Level::Admin,
        idempotency_key: Some(&request.idempotency_key),
        correlation_id: envelope.correlationid.or(Some(envelope.id)),
    };
    match actions::create_job(
        connection,
        &node,
        &request.primitive,
        &request.params,
        &asker,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(error) if error.code == ErrorCode::Unavailable => {
            Err(HandlerError::Retry(error.message))
        }
        Err(error) => {
            let class =
                primitives::find(&request.primitive).map_or("read", |word| word.class.as_str());
            let refused = store::NewJob {
                node_id: node.id,
                primitive: &request.primitive,
                class,
                params: &request.params,
                requested_by: &request.requested_by,
                idempotency_key: Some(&request.idempotency_key),
                correlation_id: asker.correlation_id,
                budget_s: 0,
                state: JobState::Refused,
                reason: Some(&error.message),
            };
            if let Some(job) = store::insert_job(connection, &refused)
                .await
                .map_err(retry)?
            {
                actions::announce_finished(connection, &job)
                    .await
                    .map_err(retry)?;
            }
            Ok(())
        }
    }
}

async fn cancel_job(
    connection: &mut PgConnection,
    envelope: Envelope<CancelJob>,
) -> Result<(), HandlerError> {
    let Some(job) = store::job_by_key(connection, &envelope.data.idempotency_key)
        .await
        .map_err(retry)?
    else {
        return Ok(());
    };
    if job.state.is_terminal() {
        return Ok(());
    }
    let reason = format!("withdrawn by {}", envelope.data.requested_by);
    let ended = store::finish_job(
        connection,
        job.id,
        JobOutcome::Withdrawn,
        Some(&reason),
        None,
        None,
        Some(&envelope.data.requested_by),
    )
    .await
    .map_err(retry)?;
    actions::announce_all_finished(connection, ended.as_slice())
        .await
        .map_err(retry)
}
