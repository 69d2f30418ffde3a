//! Commands from other services: `request_job` (the same idempotency key twice makes one job)
//! and `cancel_job`, each on a subject naming its sender (`...request_job.<service>`, which the
//! bus lets only that service publish). A request for a word its sender may not ask for (issue
//! 27: the catalog's `issuer`), or on a subject naming no sender, is dead-lettered with the
//! reason and queues nothing. A request the plane cannot route still becomes a job, ended
//! `refused` by the plane with the reason, so the asker always hears back through
//! `job_finished`.
//!
//! And other services' events: the monitor's `health_changed` kept as each node's dot (MO-07),
//! provisioning's `install_state_changed` as each node's install state (PV-01).

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::monitor::HealthChanged;
use capstan_events::provisioning::InstallStateChanged;
use capstan_events::{
    agent_channel::{primitives, rpc::JobState, CancelJob, JobOutcome, RequestJob},
    command_sender,
    rpc::Level,
    Command as BusCommand, Domain, Envelope, Message,
};
use capstan_runtime::{read_as, retry, Apply, ServiceError};
use capstan_store::PgConnection;
use futures::future::BoxFuture;
use std::time::Duration;

use crate::{
    actions::{self, Asker},
    domain::jobs::{self, Door},
    store,
};
use capstan_events::Word as _;

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
/// the bus's permissions are made from): the monitor's, and provisioning's install states.
pub fn event_specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::AgentChannel, max_deliver, ack_wait)
}

/// Other services' events this service applies.
pub struct OtherEvents;

/// An event of another service this service applies.
pub enum Heard {
    /// The monitor's dot for a node (sites and certificates are the incidents service's).
    Health(Envelope<HealthChanged>),
    /// Provisioning's install state of a node.
    Install(Envelope<InstallStateChanged>),
}

impl Apply for OtherEvents {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        read_as(delivery, Heard::Health).or_else(|| read_as(delivery, Heard::Install))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        heard: Heard,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match heard {
                Heard::Health(changed) => {
                    let changed = changed.data;
                    store::health::apply(
                        connection,
                        changed.node_id,
                        &changed.health,
                        changed.checked_at,
                    )
                    .await
                    .map_err(retry)
                }
                Heard::Install(changed) => {
                    store::install_state_changed(connection, &changed.data)
                        .await
                        .map_err(retry)?;
                    Ok(())
                }
            }
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
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match command {
                Command::Request(request) => {
                    let sender = sender_of::<RequestJob>(delivery)?;
                    request_job(connection, sender, request).await
                }
                Command::Cancel(cancel) => {
                    let sender = sender_of::<CancelJob>(delivery)?;
                    cancel_job(connection, sender, cancel).await
                }
            }
        })
    }
}

/// The service a command came from, by the subject it came on (issue 27): only that service's
/// bus user may publish it. A command on a subject naming no sender is rejected.
fn sender_of<M: BusCommand>(delivery: &Delivery) -> Result<Domain, HandlerError> {
    command_sender::<M>(&delivery.subject).ok_or_else(|| {
        HandlerError::Reject(format!(
            "{} came on {}, which names no sending service: another service sends it on {}.<service>",
            M::NAME,
            delivery.subject,
            M::subject()
        ))
    })
}

async fn request_job(
    connection: &mut PgConnection,
    sender: Domain,
    envelope: Envelope<RequestJob>,
) -> Result<(), HandlerError> {
    let request = &envelope.data;
    // Issue 27: a word its sender may not ask for queues nothing, not even a refused job.
    if let Some(word) = primitives::find(&request.primitive) {
        jobs::may_ask(word, Door::Service(sender))
            .map_err(|refusal| HandlerError::Reject(refusal.to_string()))?;
    }
    let Some(node) = store::node_by_id(connection, request.node_id)
        .await
        .map_err(retry)?
    else {
        return Err(HandlerError::Reject(format!("no node {}", request.node_id)));
    };
    let asker = Asker {
        name: &request.requested_by,
        // A service asks with the authority of the plane; it checked its own operator's level.
        // What it may ask for is its door's.
        level: Level::Admin,
        door: Door::Service(sender),
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
        // The store (or the bus) failed: the command is tried again.
        Err(failed @ (ServiceError::Store(_) | ServiceError::Bus(_))) => {
            Err(HandlerError::Retry(failed.to_string()))
        }
        Err(ServiceError::Refused(error)) => {
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
    sender: Domain,
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
    // A sender withdraws only a job of a word it may ask for (issue 27).
    let word = primitives::find(&job.primitive);
    if !word.is_some_and(|word| word.requestable_by(sender)) {
        return Err(HandlerError::Reject(format!(
            "{} may not withdraw job {}: {} is not its word",
            sender.service_name(),
            job.id,
            job.primitive
        )));
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
