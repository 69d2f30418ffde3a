//! Who may touch which subject: one NATS user per service, with exactly the subjects its code
//! uses, and `all` (the union) for `capstan all`, which runs every service in one process. The
//! permissions are generated from the contract (`Domain::ALL`, each domain's subjects and
//! streams, and its [`Reach`](capstan_events::access::Reach)) together with what this crate
//! does on the wire: the JetStream API subjects of ensuring a stream, consuming through a
//! durable pull consumer and acknowledging, and the object store of large rpc bodies
//! ([`crate::bodies`]). [`authorization`] renders the `authorization { ... }` block of a
//! `nats-server` configuration (what `capstan admin nats-config` prints).
//!
//! What a service's user may do:
//! * serve its own rpc subjects `capstan.rpc.<own>.>`, only as its queue group `<own>`, and
//!   answer the questions it receives (`allow_responses`, so it can publish to no other inbox);
//! * ask the domains its reach names (the gateway: every domain) and its own `health`;
//! * publish to its own event, command and dead-letter subjects, and to the command subjects
//!   of the domains its reach names that name it as the sender
//!   (`capstan.cmd.<domain>.<name>.<own>`), never another sender's;
//! * publish its own conditions, `capstan.conditions.<own>.>` (incidents alone reads them);
//! * create and update its own streams and the shared dead-letter and conditions streams, consume its own
//!   commands and the events its reach names, through durable consumers of those names only;
//! * read its own replies, under `_INBOX.<own>.>` only: no user reads another's answers.
//!
//! Outside programs that follow the events get a [`Subscriber`] user each, named by the
//! operator (`capstan admin nats-config --subscriber NAME`): read-only — it may read the event
//! subjects, keep one durable consumer named as itself on each event stream, pull and
//! acknowledge through it, and read its replies under `_INBOX.<name>.>`; it publishes nothing
//! else (no `capstan.*`, no stream or consumer deletion).

use std::collections::BTreeSet;

use capstan_events::{conditions, Domain, DEAD_LETTER_STREAM, SUBJECT_ROOT};

use crate::bodies::BODY_BUCKET;
use capstan_events::Word as _;

/// The user of `capstan all`: every service's permissions together.
pub const ALL_IN_ONE_USER: &str = "all";

/// A NATS user of the plane: one service, or all of them in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusUser {
    Service(Domain),
    AllInOne,
}

impl BusUser {
    /// Every user the generated configuration defines: each service, then `all`.
    pub fn every() -> Vec<BusUser> {
        Domain::ALL
            .into_iter()
            .map(BusUser::Service)
            .chain([BusUser::AllInOne])
            .collect()
    }

    /// The user name: the domain (`agent_channel`), or `all`.
    pub fn name(self) -> &'static str {
        match self {
            BusUser::Service(domain) => domain.as_str(),
            BusUser::AllInOne => ALL_IN_ONE_USER,
        }
    }

    /// The environment variable the generated configuration reads this user's secret from:
    /// `CAPSTAN_NATS_PASSWORD_AGENT_CHANNEL` (or `CAPSTAN_NATS_NKEY_...`, a public key).
    pub fn secret_variable(self, auth: Auth) -> String {
        let kind = match auth {
            Auth::Password => "PASSWORD",
            Auth::Nkey => "NKEY",
        };
        format!("CAPSTAN_NATS_{kind}_{}", self.name().to_ascii_uppercase())
    }

    /// What this user may publish and subscribe to.
    pub fn permissions(self) -> Permissions {
        match self {
            BusUser::Service(domain) => service_permissions(domain),
            BusUser::AllInOne => {
                let mut union = Permissions::default();
                for domain in Domain::ALL {
                    let own = service_permissions(domain);
                    union.publish.extend(own.publish);
                    union.subscribe.extend(own.subscribe);
                }
                union
            }
        }
    }
}

/// An outside program's read-only user of the event streams: its name is also its durable
/// consumer's name on each event stream and its reply prefix (`_INBOX.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    name: String,
}

/// The longest subscriber name.
pub const SUBSCRIBER_NAME_MAX: usize = 32;

impl Subscriber {
    /// A subscriber named `name`: a lower-case letter, then lower-case letters, digits or
    /// `_`, at most [`SUBSCRIBER_NAME_MAX`] characters (a NATS consumer name and one subject
    /// token), and not the name of a plane user or of a service's durable consumer, whose
    /// messages it would otherwise take.
    pub fn new(name: &str) -> Result<Subscriber, String> {
        let mut characters = name.chars();
        let well_formed = characters
            .next()
            .is_some_and(|first| first.is_ascii_lowercase())
            && characters.all(|character| {
                character.is_ascii_lowercase() || character.is_ascii_digit() || character == '_'
            })
            && name.len() <= SUBSCRIBER_NAME_MAX;
        if !well_formed {
            return Err(format!(
                "subscriber {name:?}: must be a lower-case letter, then lower-case letters, digits \
                 or '_', at most {SUBSCRIBER_NAME_MAX} characters"
            ));
        }
        let taken = BusUser::every().iter().any(|user| user.name() == name)
            || Domain::ALL.into_iter().any(|domain| {
                domain.commands_consumer() == name
                    || domain
                        .reach()
                        .consumes
                        .iter()
                        .any(|subscription| subscription.durable == name)
            })
            || name == conditions::DURABLE;
        if taken {
            return Err(format!(
                "subscriber {name:?}: is the name of a plane user or consumer; choose another"
            ));
        }
        Ok(Subscriber {
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The environment variable the generated configuration reads its password from:
    /// `CAPSTAN_NATS_PASSWORD_<NAME>`.
    pub fn secret_variable(&self, auth: Auth) -> String {
        let kind = match auth {
            Auth::Password => "PASSWORD",
            Auth::Nkey => "NKEY",
        };
        format!("CAPSTAN_NATS_{kind}_{}", self.name.to_ascii_uppercase())
    }

    /// The reply prefix its client must use (`_INBOX.<name>`): it may read no other.
    pub fn inbox_prefix(&self) -> String {
        format!("_INBOX.{}", self.name)
    }

    /// What it may publish and subscribe to: the event subjects, and on each domain's event
    /// stream its own durable consumer only (look the stream up, create or update the
    /// consumer, read it, pull, acknowledge).
    pub fn permissions(&self) -> Permissions {
        let name = &self.name;
        let mut publish = BTreeSet::new();
        let streams = Domain::ALL
            .into_iter()
            .map(Domain::events_stream)
            .chain([conditions::STREAM.to_string()]);
        for stream in streams {
            consume(&mut publish, &stream, name);
            publish.insert(js_api(&format!("CONSUMER.DURABLE.CREATE.{stream}.{name}")));
        }
        let subscribe = BTreeSet::from([
            format!("{SUBJECT_ROOT}.events.>"),
            conditions::SUBJECTS.to_string(),
            format!("{}.>", self.inbox_prefix()),
        ]);
        Permissions { publish, subscribe }
    }
}

/// A password for a NATS user: a letter, then 39 letters or digits (about 238 bits).
/// nats-server reads a `$VARIABLE`'s value as configuration, not as text: a value that begins
/// with a digit can read as a number (`12345`, `1k`) or fail to parse (`1e5…`: "variable
/// reference … could not be parsed") and stop the server; one that begins with a letter and
/// holds only letters and digits always reads as a string.
pub fn generate_password() -> String {
    use rand::distr::{Alphanumeric, Distribution, Uniform};
    let mut random = rand::rng();
    let letters = Uniform::new_inclusive(b'a', b'z').expect("a to z is a range");
    let mut password = String::with_capacity(40);
    password.push(char::from(letters.sample(&mut random)));
    password.extend(
        Alphanumeric
            .sample_iter(&mut random)
            .take(39)
            .map(char::from),
    );
    password
}

/// How the users of the generated configuration prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// A user name and a password (`CAPSTAN__NATS__USER`, `CAPSTAN__NATS__PASSWORD`).
    Password,
    /// An nkey: the server holds the public key, the service its seed
    /// (`CAPSTAN__NATS__NKEY_SEED_FILE`).
    Nkey,
}

/// A user's subjects. A subscribe entry may name a queue group after a space
/// (`capstan.rpc.billing.> billing`): then only that group may subscribe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    pub publish: BTreeSet<String>,
    pub subscribe: BTreeSet<String>,
}

impl Permissions {
    /// Whether this user may publish to the literal `subject`.
    pub fn may_publish(&self, subject: &str) -> bool {
        self.publish
            .iter()
            .any(|pattern| subject_matches(pattern, subject))
    }

    /// Whether this user may subscribe to `subject`, in queue group `queue` when given.
    pub fn may_subscribe(&self, subject: &str, queue: Option<&str>) -> bool {
        self.subscribe.iter().any(|entry| {
            let (pattern, group) = match entry.split_once(' ') {
                Some((pattern, group)) => (pattern, Some(group)),
                None => (entry.as_str(), None),
            };
            subject_matches(pattern, subject) && (group.is_none() || group == queue)
        })
    }
}

/// NATS subject matching: `*` is one token, a final `>` one or more.
fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject_tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (literal, Some(actual)) if literal == actual => {}
            _ => return false,
        }
    }
    subject_tokens.next().is_none()
}

fn js_api(rest: &str) -> String {
    format!("$JS.API.{rest}")
}

/// The JetStream subjects of reading `stream` through the durable pull consumer `durable`:
/// looking the stream up, creating (or updating) the consumer with its filter, asking for
/// messages, and acknowledging them.
fn consume(publish: &mut BTreeSet<String>, stream: &str, durable: &str) {
    publish.extend([
        js_api(&format!("STREAM.INFO.{stream}")),
        js_api(&format!("CONSUMER.CREATE.{stream}.{durable}")),
        js_api(&format!("CONSUMER.CREATE.{stream}.{durable}.>")),
        js_api(&format!("CONSUMER.INFO.{stream}.{durable}")),
        js_api(&format!("CONSUMER.MSG.NEXT.{stream}.{durable}")),
        format!("$JS.ACK.{stream}.{durable}.>"),
    ]);
}

/// The stream behind the object store bucket of large rpc bodies.
pub fn body_stream() -> String {
    format!("OBJ_{BODY_BUCKET}")
}

fn service_permissions(domain: Domain) -> Permissions {
    let own = domain.as_str();
    let reach = domain.reach();
    let mut publish = BTreeSet::new();
    let mut subscribe = BTreeSet::new();

    // rpc: serve its own subjects as its queue group, read its own replies, ask its own
    // health (a probe run with this service's credentials) and whatever its reach names.
    subscribe.insert(format!("{SUBJECT_ROOT}.rpc.{own}.> {own}"));
    for op in reach.every_replica {
        subscribe.insert(format!("{SUBJECT_ROOT}.rpc.{own}.{op}"));
    }
    subscribe.insert(format!("{}.>", domain.inbox_prefix()));
    let health = capstan_events::rpc::HEALTH;
    publish.insert(format!("{SUBJECT_ROOT}.rpc.{own}.{health}"));
    for asked in reach.asks {
        publish.insert(format!("{SUBJECT_ROOT}.rpc.{}.>", asked.as_str()));
    }
    for (asker, asked, op) in capstan_events::access::SERVICE_QUESTIONS {
        if *asker == domain {
            publish.insert(format!("{SUBJECT_ROOT}.rpc.{}.{op}", asked.as_str()));
        }
    }

    // Its own messages: events, conditions, commands to itself, dead letters; commands to its
    // reach.
    publish.insert(domain.events_subjects());
    publish.insert(conditions::subjects_of(domain));
    publish.insert(domain.commands_subjects());
    publish.insert(format!("{SUBJECT_ROOT}.dlq.{own}.>"));
    for commanded in reach.commands {
        publish.insert(commanded.commands_subjects_from(domain));
    }

    // Its streams (and the shared dead-letter stream), ensured at every start.
    for stream in [
        domain.events_stream(),
        domain.commands_stream(),
        DEAD_LETTER_STREAM.to_string(),
        conditions::STREAM.to_string(),
    ] {
        for action in ["CREATE", "UPDATE", "INFO"] {
            publish.insert(js_api(&format!("STREAM.{action}.{stream}")));
        }
    }

    // Its own command stream, and the event streams its reach names.
    let (commands, consumer) = (domain.commands_stream(), domain.commands_consumer());
    consume(&mut publish, &commands, &consumer);
    for subscription in reach.consumes {
        consume(
            &mut publish,
            &subscription.from.events_stream(),
            subscription.durable,
        );
    }
    // Every domain's conditions, for the one domain that reads them.
    if domain == conditions::READER {
        consume(&mut publish, conditions::STREAM, conditions::DURABLE);
    }

    // The claim check of large rpc bodies: any service may ask or answer with one. Putting an
    // object publishes its chunks and its meta; getting one reads the meta and the chunks
    // through an ordered push consumer (flow control answered on `$JS.FC`); deleting purges.
    let bodies = body_stream();
    publish.insert(format!("$O.{BODY_BUCKET}.>"));
    let on_stream =
        "STREAM.INFO STREAM.CREATE STREAM.MSG.GET STREAM.PURGE DIRECT.GET CONSUMER.CREATE";
    for action in on_stream.split(' ') {
        publish.insert(js_api(&format!("{action}.{bodies}")));
    }
    for action in "DIRECT.GET CONSUMER.CREATE CONSUMER.DELETE CONSUMER.INFO".split(' ') {
        publish.insert(js_api(&format!("{action}.{bodies}.>")));
    }
    publish.insert(format!("$JS.FC.{bodies}.>"));

    Permissions { publish, subscribe }
}

/// The `authorization { ... }` block of a `nats-server` configuration: every user of
/// [`BusUser::every`] with its permissions, its secret read from the server's environment
/// (`$CAPSTAN_NATS_PASSWORD_<USER>`, so the file holds none and a missing one stops the server
/// at start). With no user connected without credentials, an anonymous client is refused.
pub fn authorization(auth: Auth) -> String {
    authorization_with(auth, &[])
}

/// As [`authorization`], with the read-only users of `subscribers` after the plane's.
pub fn authorization_with(auth: Auth, subscribers: &[Subscriber]) -> String {
    let mut out = String::new();
    out.push_str(
        "# Generated by `capstan admin nats-config` from libs/events and libs/bus; do not\n",
    );
    out.push_str(
        "# edit. One user per service with only its own subjects, and `all` for `capstan all`.\n",
    );
    out.push_str("# Each user's secret comes from the server's environment:\n");
    let users: Vec<(String, String, Permissions, bool)> = BusUser::every()
        .into_iter()
        .map(|user| {
            let name = user.name().to_string();
            (name, user.secret_variable(auth), user.permissions(), true)
        })
        .chain(subscribers.iter().map(|subscriber| {
            (
                subscriber.name().to_string(),
                subscriber.secret_variable(auth),
                subscriber.permissions(),
                false,
            )
        }))
        .collect();
    for (_, variable, _, _) in &users {
        out.push_str(&format!("#   {variable}\n"));
    }
    if !subscribers.is_empty() {
        out.push_str(
            "# The users after the plane's are read-only subscribers of the events (docs/subscribing.md).\n",
        );
    }
    out.push_str("authorization {\n  users = [\n");
    for (name, variable, permissions, answers) in &users {
        out.push_str("    {\n");
        match auth {
            Auth::Password => {
                out.push_str(&format!("      user: \"{name}\"\n"));
                out.push_str(&format!("      password: ${variable}\n"));
            }
            Auth::Nkey => {
                out.push_str(&format!("      # {name}\n"));
                out.push_str(&format!("      nkey: ${variable}\n"));
            }
        }
        out.push_str("      permissions: {\n");
        out.push_str("        publish: { allow: [\n");
        for subject in &permissions.publish {
            out.push_str(&format!("          \"{subject}\"\n"));
        }
        out.push_str("        ] }\n");
        out.push_str("        subscribe: { allow: [\n");
        for subject in &permissions.subscribe {
            out.push_str(&format!("          \"{subject}\"\n"));
        }
        out.push_str("        ] }\n");
        if *answers {
            out.push_str(
                "        # Answers to the questions this user serves, on the asker's inbox.\n",
            );
            out.push_str("        allow_responses: true\n");
        }
        out.push_str("      }\n    }\n");
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::{
        agent_channel::rpc::{AgentRequest, ApproveJoin},
        rollouts::rpc::{ArtifactRequest, ListReleases, PublishRelease},
        rpc::Rpc,
    };

    fn user(domain: Domain) -> Permissions {
        BusUser::Service(domain).permissions()
    }

    #[test]
    fn only_the_gateway_may_ask_an_operator_rpc() {
        let approve = ApproveJoin::subject();
        assert!(user(Domain::Gateway).may_publish(&approve));
        for domain in Domain::ALL {
            if domain != Domain::Gateway {
                assert!(!user(domain).may_publish(&approve), "{domain} may approve");
            }
        }
    }

    #[test]
    fn the_agent_channel_may_ask_rollouts_for_an_artifact_and_nothing_else_of_it() {
        let channel = user(Domain::AgentChannel);
        assert!(channel.may_publish(&ArtifactRequest::subject()));
        assert!(!channel.may_publish(&PublishRelease::subject()));
        assert!(!channel.may_publish(&ListReleases::subject()));
        assert!(!user(Domain::Incidents).may_publish(&ArtifactRequest::subject()));
    }

    #[test]
    fn only_the_owner_may_serve_its_rpc_and_only_as_its_queue_group() {
        let claim = AgentRequest::subject();
        let owner = user(Domain::AgentChannel);
        assert!(owner.may_subscribe(&claim, Some("agent_channel")));
        assert!(!owner.may_subscribe(&claim, None));
        assert!(!owner.may_subscribe(&claim, Some("thief")));
        for domain in Domain::ALL {
            if domain != Domain::AgentChannel {
                assert!(
                    !user(domain).may_subscribe(&claim, Some("agent_channel")),
                    "{domain} may answer claims"
                );
            }
        }
    }

    #[test]
    fn a_user_reads_only_its_own_replies() {
        let gateway = user(Domain::Gateway);
        assert!(gateway.may_subscribe("_INBOX.gateway.abc.*", None));
        assert!(!gateway.may_subscribe("_INBOX.agent_channel.abc.*", None));
        assert!(!gateway.may_subscribe("_INBOX.>", None));
        for domain in Domain::ALL {
            assert!(!user(domain).may_publish("_INBOX.gateway.abc.1"));
        }
    }

    #[test]
    fn a_service_publishes_its_own_events_and_no_one_elses() {
        let billing = user(Domain::Billing);
        assert!(billing.may_publish("capstan.events.billing.paid"));
        assert!(!billing.may_publish("capstan.events.agent_channel.job_finished"));
        assert!(!billing.may_publish("capstan.cmd.agent_channel.request_job"));
        assert!(billing.may_publish("capstan.dlq.billing.anything"));
        assert!(!billing.may_publish("capstan.dlq.agent_channel.anything"));
    }

    /// Issue 27: a sender's commands travel on a subject naming it, and its user may publish
    /// no other sender's, nor the bare subject.
    #[test]
    fn a_service_sends_commands_only_on_the_subjects_naming_it() {
        use capstan_events::agent_channel::{CancelJob, RequestJob};
        use capstan_events::command_subject_from;
        for sender in [Domain::Monitor, Domain::Backups, Domain::Rollouts] {
            let permissions = user(sender);
            assert!(permissions.may_publish(&command_subject_from::<RequestJob>(sender)));
            assert!(permissions.may_publish(&command_subject_from::<CancelJob>(sender)));
            assert!(!permissions.may_publish("capstan.cmd.agent_channel.request_job"));
            assert!(!permissions.may_publish("capstan.cmd.agent_channel.cancel_job"));
            for other in Domain::ALL {
                if other != sender {
                    assert!(
                        !permissions.may_publish(&command_subject_from::<RequestJob>(other)),
                        "{sender} may send as {other}"
                    );
                }
            }
        }
        let monitor = user(Domain::Monitor);
        assert!(!monitor.may_publish("capstan.cmd.agent_channel.request_job.backups"));
        assert!(!monitor.may_publish("capstan.cmd.agent_channel.request_job.monitor.x"));
    }

    #[test]
    fn a_service_consumes_its_own_commands_through_its_own_durable_only() {
        let owner = user(Domain::AgentChannel);
        let stream = Domain::AgentChannel.commands_stream();
        assert!(owner.may_publish(&format!(
            "$JS.API.CONSUMER.CREATE.{stream}.agent_channel_commands.capstan.cmd.agent_channel.>"
        )));
        assert!(owner.may_publish(&format!(
            "$JS.API.CONSUMER.MSG.NEXT.{stream}.agent_channel_commands"
        )));
        assert!(owner.may_publish(&format!(
            "$JS.ACK.{stream}.agent_channel_commands.1.2.3.4.5"
        )));
        assert!(!owner.may_publish(&format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.other")));
        assert!(!user(Domain::Billing).may_publish(&format!(
            "$JS.API.CONSUMER.MSG.NEXT.{stream}.agent_channel_commands"
        )));
        assert!(!owner.may_publish(&format!("$JS.API.STREAM.DELETE.{stream}")));
    }

    #[test]
    fn the_all_in_one_user_holds_every_services_permissions() {
        let all = BusUser::AllInOne.permissions();
        for domain in Domain::ALL {
            let own = user(domain);
            assert!(own.publish.is_subset(&all.publish));
            assert!(own.subscribe.is_subset(&all.subscribe));
        }
    }

    #[test]
    fn a_subscriber_reads_the_events_through_its_own_durable_and_publishes_nothing_else() {
        let reader = Subscriber::new("warehouse").unwrap();
        let allowed = reader.permissions();
        let stream = Domain::Monitor.events_stream();
        for subject in [
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.warehouse"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.warehouse.capstan.events.monitor.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.warehouse"),
            format!("$JS.API.CONSUMER.INFO.{stream}.warehouse"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.warehouse"),
            format!("$JS.ACK.{stream}.warehouse.1.2.3.4.5"),
        ] {
            assert!(allowed.may_publish(&subject), "{subject}");
        }
        for subject in [
            "capstan.events.monitor.site_down".to_string(),
            "capstan.cmd.agent_channel.request_job".to_string(),
            "capstan.rpc.gateway.health".to_string(),
            format!("$JS.API.STREAM.DELETE.{stream}"),
            format!("$JS.API.STREAM.PURGE.{stream}"),
            format!("$JS.API.STREAM.UPDATE.{stream}"),
            format!("$JS.API.CONSUMER.DELETE.{stream}.warehouse"),
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.monitor_agent_channel_events"),
            format!(
                "$JS.API.CONSUMER.CREATE.{}.warehouse",
                Domain::Monitor.commands_stream()
            ),
            "_INBOX.gateway.abc".to_string(),
        ] {
            assert!(!allowed.may_publish(&subject), "{subject}");
        }
        assert!(allowed.may_subscribe("capstan.events.agent_channel.job_finished", None));
        assert!(allowed.may_subscribe("_INBOX.warehouse.abc.1", None));
        assert!(!allowed.may_subscribe("_INBOX.gateway.abc.1", None));
        assert!(!allowed.may_subscribe("capstan.cmd.agent_channel.request_job", None));
        assert!(!allowed.may_subscribe("capstan.rpc.gateway.health", None));
    }

    #[test]
    fn a_subscriber_may_not_take_a_plane_users_or_consumers_name() {
        for taken in ["gateway", "all", "agent_channel"] {
            assert!(Subscriber::new(taken).is_err(), "{taken}");
        }
        for domain in Domain::ALL {
            let name = domain.commands_consumer();
            assert!(Subscriber::new(&name).is_err(), "{name}");
            for subscription in domain.reach().consumes {
                assert!(Subscriber::new(subscription.durable).is_err());
            }
        }
        for bad in [
            "",
            "Warehouse",
            "1st",
            "ware.house",
            "ware-house",
            "a b",
            "x>",
        ] {
            let error = Subscriber::new(bad).unwrap_err();
            assert!(error.contains("lower-case letter"), "{bad}: {error}");
        }
        assert!(Subscriber::new(&"a".repeat(33)).is_err());
        assert_eq!(
            Subscriber::new("warehouse")
                .unwrap()
                .secret_variable(Auth::Password),
            "CAPSTAN_NATS_PASSWORD_WAREHOUSE"
        );
    }

    #[test]
    fn the_configuration_lists_subscribers_after_the_plane_without_answering_rights() {
        let reader = Subscriber::new("warehouse").unwrap();
        let config = authorization_with(Auth::Password, std::slice::from_ref(&reader));
        assert!(config.starts_with(&authorization(Auth::Password)[..200]));
        let at = config
            .find("user: \"warehouse\"")
            .expect("the subscriber is listed");
        assert!(config[..at].contains("user: \"all\""));
        assert!(config.contains("password: $CAPSTAN_NATS_PASSWORD_WAREHOUSE"));
        assert!(config.contains("#   CAPSTAN_NATS_PASSWORD_WAREHOUSE"));
        assert!(!config[at..].contains("allow_responses"));
    }

    #[test]
    fn a_generated_password_begins_with_a_letter_and_holds_only_letters_and_digits() {
        let passwords: Vec<String> = (0..2000).map(|_| generate_password()).collect();
        for password in &passwords {
            assert_eq!(password.len(), 40);
            assert!(password.starts_with(|first: char| first.is_ascii_lowercase()));
            assert!(password
                .chars()
                .all(|character| character.is_ascii_alphanumeric()));
        }
        let distinct: BTreeSet<&String> = passwords.iter().collect();
        assert_eq!(distinct.len(), passwords.len());
    }

    #[test]
    fn subjects_match_as_nats_matches_them() {
        assert!(subject_matches("a.>", "a.b.c"));
        assert!(!subject_matches("a.>", "a"));
        assert!(subject_matches("a.*.c", "a.b.c"));
        assert!(!subject_matches("a.*", "a.b.c"));
        assert!(!subject_matches("a.b", "a.b.c"));
    }

    /// docker-compose.yml and deploy/k8s serve this file to their NATS server: it fails when
    /// the file no longer says what the code generates. `CAPSTAN_WRITE_DOCS=1` rewrites it.
    #[test]
    fn deploy_nats_auth_conf_matches_the_code() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats/auth.conf");
        let generated = authorization(Auth::Password);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != generated && std::env::var_os("CAPSTAN_WRITE_DOCS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        assert!(
            current == generated,
            "deploy/nats/auth.conf drifted from the code; run `CAPSTAN_WRITE_DOCS=1 cargo test -p \
             capstan-bus --lib deploy_nats` (or `capstan admin nats-config > deploy/nats/auth.conf`) \
             and commit the result"
        );
    }

    #[test]
    fn the_configuration_names_every_user_and_no_secret() {
        let config = authorization(Auth::Password);
        for user in BusUser::every() {
            assert!(config.contains(&format!("user: \"{}\"", user.name())));
            assert!(config.contains(&format!(
                "password: ${}",
                user.secret_variable(Auth::Password)
            )));
        }
        let nkeys = authorization(Auth::Nkey);
        assert!(nkeys.contains("nkey: $CAPSTAN_NATS_NKEY_GATEWAY"));
        assert!(!nkeys.contains("password"));
    }
}
