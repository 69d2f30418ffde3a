//! The contract between Capstan's services and everyone who listens to them: the CloudEvents
//! envelope, the names of subjects and streams, and the typed events, commands and rpc
//! replies. No I/O lives here; `capstan-bus` moves these types, `capstan-store` keeps them in
//! outboxes.
#![forbid(unsafe_code)]

pub mod access;
pub mod agent_channel;
pub mod backups;
pub mod catalog;
pub mod conditions;
mod domain;
mod envelope;
pub mod gateway;
pub mod incidents;
pub mod monitor;
mod node_id;
pub mod rollouts;
pub mod rpc;
mod words;

pub use domain::{Domain, UnknownDomain, SUBJECT_ROOT};
pub use envelope::{Envelope, EnvelopeError, RawEnvelope, MAX_MESSAGE_BYTES, SPEC_VERSION};
pub use node_id::NodeId;
pub use words::Word;

use schemars::JsonSchema;
use serde::{de::DeserializeOwned, Serialize};

/// Whether a message states a fact (public, kept) or asks its owner to act (work queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Event,
    Command,
}

/// A message that travels on the bus. Implement it through [`Event`] or [`Command`]; the
/// subject, stream and CloudEvents `type` are all derived from `DOMAIN`, `NAME` and `KIND`
/// here and nowhere else.
pub trait Message: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The domain (owning service) the message belongs to.
    const DOMAIN: Domain;
    /// The message's name within its domain, `snake_case` and past tense for events.
    const NAME: &'static str;
    /// Event or command.
    const KIND: Kind;
    /// The version of `data`'s shape; a breaking change is a new version.
    const VERSION: u32 = 1;

    /// The NATS subject, `capstan.events.<domain>.<name>` or `capstan.cmd.<domain>.<name>`.
    fn subject() -> String {
        subject_for(Self::KIND, Self::DOMAIN, Self::NAME)
    }

    /// The CloudEvents `type`, `capstan.<domain>.<name>`.
    fn event_type() -> String {
        type_for(Self::DOMAIN, Self::NAME)
    }

    /// The JetStream stream the subject falls into.
    fn stream() -> String {
        match Self::KIND {
            Kind::Event => Self::DOMAIN.events_stream(),
            Kind::Command => Self::DOMAIN.commands_stream(),
        }
    }
}

/// `capstan.events.<domain>.<name>` or `capstan.cmd.<domain>.<name>`.
pub fn subject_for(kind: Kind, domain: Domain, name: &str) -> String {
    let middle = match kind {
        Kind::Event => "events",
        Kind::Command => "cmd",
    };
    format!("{SUBJECT_ROOT}.{middle}.{}.{name}", domain.as_str())
}

/// The CloudEvents `type` of a message: `capstan.<domain>.<name>`.
pub fn type_for(domain: Domain, name: &str) -> String {
    format!("{SUBJECT_ROOT}.{}.{name}", domain.as_str())
}

/// `capstan.cmd.<domain>.<name>.<sender>`: a command one service sends another, on a subject
/// that names the sender. Each service's bus user may publish only its own (`access`), so the
/// subject, unlike anything in the message, proves who sent it, and the owner can hold the
/// sender to what it may ask (issue 27). It stays inside the owner's command stream.
pub fn command_subject_from<M: Command>(sender: Domain) -> String {
    format!("{}.{}", M::subject(), sender.as_str())
}

/// The sender a command's bus subject names (`capstan.cmd.<domain>.<name>.<sender>`), or
/// `None` when the subject names none, or none of the plane's domains.
pub fn command_sender<M: Command>(subject: &str) -> Option<Domain> {
    let sender = subject.strip_prefix(&M::subject())?.strip_prefix('.')?;
    Domain::ALL
        .into_iter()
        .find(|domain| domain.as_str() == sender)
}

/// `capstan.rpc.<domain>.<op>`: the subject of a request/reply question.
pub fn rpc_subject(domain: Domain, op: &str) -> String {
    format!("{SUBJECT_ROOT}.rpc.{}.{op}", domain.as_str())
}

/// `capstan.dlq.<domain>.<consumer>`: where a consumer puts what it could not take.
pub fn dead_letter_subject(domain: Domain, consumer: &str) -> String {
    format!("{SUBJECT_ROOT}.dlq.{}.{consumer}", domain.as_str())
}

/// The stream that keeps every dead letter of every consumer.
pub const DEAD_LETTER_STREAM: &str = "CAPSTAN_DEAD_LETTERS";
/// The subjects [`DEAD_LETTER_STREAM`] captures.
pub const DEAD_LETTER_SUBJECTS: &str = "capstan.dlq.>";

/// Declares `$type` a [`Message`] of `$domain`: `message!(Domain::Incidents, Event,
/// IncidentOpened, "opened")` — the kind is `Event` or `Command`, the name its last subject
/// segment. Every domain's contract module declares its messages with it.
#[macro_export]
macro_rules! message {
    ($domain:expr, $kind:ident, $type:ty, $name:literal) => {
        impl $crate::Message for $type {
            const DOMAIN: $crate::Domain = $domain;
            const NAME: &'static str = $name;
            const KIND: $crate::Kind = $crate::Kind::$kind;
        }
        impl $crate::$kind for $type {}
    };
}

/// A fact, past tense, public: other systems may subscribe, so its fields are a contract.
pub trait Event: Message {}
/// A request for the owning service to act; consumed only by that service.
pub trait Command: Message {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_streams_and_types_are_derived_from_one_place() {
        assert_eq!(
            subject_for(Kind::Event, Domain::AgentChannel, "job_finished"),
            "capstan.events.agent_channel.job_finished"
        );
        assert_eq!(
            subject_for(Kind::Command, Domain::AgentChannel, "request_job"),
            "capstan.cmd.agent_channel.request_job"
        );
        assert_eq!(
            type_for(Domain::Dns, "zone_changed"),
            "capstan.dns.zone_changed"
        );
        assert_eq!(
            rpc_subject(Domain::Billing, "health"),
            "capstan.rpc.billing.health"
        );
        assert_eq!(
            dead_letter_subject(Domain::Incidents, "intake"),
            "capstan.dlq.incidents.intake"
        );
    }

    #[test]
    fn a_command_from_another_service_names_its_sender_in_the_subject_and_reads_back() {
        use crate::agent_channel::{CancelJob, RequestJob};
        let subject = command_subject_from::<RequestJob>(Domain::Monitor);
        assert_eq!(subject, "capstan.cmd.agent_channel.request_job.monitor");
        assert_eq!(
            command_sender::<RequestJob>(&subject),
            Some(Domain::Monitor)
        );
        assert_eq!(
            command_sender::<RequestJob>("capstan.cmd.agent_channel.request_job"),
            None
        );
        assert_eq!(
            command_sender::<RequestJob>("capstan.cmd.agent_channel.request_job.nobody"),
            None
        );
        assert_eq!(
            command_sender::<RequestJob>("capstan.cmd.agent_channel.request_job.monitor.x"),
            None
        );
        assert_eq!(
            command_sender::<RequestJob>("capstan.cmd.agent_channel.request_jobs.monitor"),
            None
        );
        assert_eq!(
            command_sender::<RequestJob>(&command_subject_from::<CancelJob>(Domain::Backups)),
            None
        );
    }
}
