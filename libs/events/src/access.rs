//! Who may say what on the bus: for each domain, which other domains' events it consumes (with
//! the durable consumer it reads them through), which domains it sends commands to and which it
//! asks over rpc. This table is the one source the NATS permissions are generated from
//! (`capstan admin nats-config`); everything else a service may touch is its own (its rpc
//! subjects, its streams, its dead letters). A service that starts consuming, commanding or
//! asking another adds its row here, or the server refuses it.

use crate::Domain;

use crate::words::Word;

/// A durable consumer one service keeps on another's event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSubscription {
    /// The domain whose events are read.
    pub from: Domain,
    /// The durable consumer's name (shared by every replica of the consuming service).
    pub durable: &'static str,
    /// The one event of that domain it reads (its `Message::NAME`), or `None` for all of them:
    /// the consumer's filter subject is then `capstan.events.<domain>.<name>`, so the other
    /// events of the stream never reach it.
    pub only: Option<&'static str>,
}

impl EventSubscription {
    /// The subject the durable consumer filters on.
    pub fn filter_subject(&self) -> String {
        match self.only {
            Some(name) => crate::subject_for(crate::Kind::Event, self.from, name),
            None => self.from.events_subjects(),
        }
    }
}

/// What a domain reaches beyond its own subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// Other domains' event streams this domain consumes.
    pub consumes: &'static [EventSubscription],
    /// Domains this domain sends commands to, each on a subject naming this domain as the
    /// sender (`capstan.cmd.<domain>.<name>.<sender>`, issue 27): the bus lets it publish no
    /// other, so the commanded domain knows who asked and holds it to what it may ask.
    pub commands: &'static [Domain],
    /// Domains this domain asks questions of (`capstan.rpc.<domain>.>`). Every domain may also
    /// ask its own `health` (what `capstan health <service>` runs with that service's user).
    pub asks: &'static [Domain],
    /// Its own rpc ops that every replica answers (outside its queue group), such as the agent
    /// channel's `release_claims`, asked of every replica when a gateway stops.
    pub every_replica: &'static [&'static str],
}

impl Reach {
    const OWN_ONLY: Reach = Reach {
        consumes: &[],
        commands: &[],
        asks: &[],
        every_replica: &[],
    };
}

/// Single questions one service asks another, outside the operator questions only the gateway
/// sends: each is one rpc subject, never the asked domain's every op, and carries no actor.
/// The agent channel asks rollouts for the artifact an authenticated agent requested (the
/// bytes are rollouts' to keep; the agent verifies them against its own keys).
/// The agent channel asks backups for presigned URLs (the broker) for a node whose signed
/// request it verified, naming the node and its running job.
pub const SERVICE_QUESTIONS: &[(Domain, Domain, &str)] = &[
    (
        Domain::AgentChannel,
        Domain::Rollouts,
        <crate::rollouts::rpc::ArtifactRequest as crate::rpc::Rpc>::OP,
    ),
    (
        Domain::AgentChannel,
        Domain::Backups,
        <crate::backups::rpc::BackupUrls as crate::rpc::Rpc>::OP,
    ),
    // Provisioning makes the node of a machine it provisions, approves that machine's join
    // when AC-08's five conditions hold, and refuses a second join from its address (AC-11);
    // the agent channel answers these three to the provisioning service's actor alone.
    (
        Domain::Provisioning,
        Domain::AgentChannel,
        <crate::agent_channel::rpc::RegisterNode as crate::rpc::Rpc>::OP,
    ),
    (
        Domain::Provisioning,
        Domain::AgentChannel,
        <crate::agent_channel::rpc::ApproveProvisionedJoin as crate::rpc::Rpc>::OP,
    ),
    (
        Domain::Provisioning,
        Domain::AgentChannel,
        <crate::agent_channel::rpc::RefuseJoin as crate::rpc::Rpc>::OP,
    ),
];

impl Domain {
    /// What this domain reaches beyond its own subjects.
    ///
    /// Operator questions (approve a join, disconnect a node, create a job...) trust the actor
    /// named in the request because only the gateway may send them: the gateway alone asks
    /// every domain, and no other domain asks any.
    pub const fn reach(self) -> Reach {
        // A subscription to a domain's events under a durable name (a macro, not a function,
        // so the lists stay constants promoted to `'static`).
        macro_rules! from {
            ($domain:expr, $durable:literal) => {
                EventSubscription {
                    from: $domain,
                    durable: $durable,
                    only: None,
                }
            };
            ($domain:expr, $durable:literal, only $event:ty) => {
                EventSubscription {
                    from: $domain,
                    durable: $durable,
                    only: Some(<$event as crate::Message>::NAME),
                }
            };
        }
        // Provisioning's install states (PV-01), which every service embedding the node
        // projection keeps beside its nodes (`NodeEvent::InstallChanged`) to skip the
        // non-operational ones.
        type InstallStates = crate::provisioning::InstallStateChanged;
        match self {
            Domain::Gateway => Reach {
                consumes: &[],
                commands: &[],
                asks: &Domain::ALL,
                every_replica: &[],
            },
            // The node facts and cases it projects, and who a signal tells; and every
            // domain's conditions (`crate::conditions`, its own stream and consumer).
            Domain::Incidents => Reach {
                consumes: &[
                    from!(Domain::AgentChannel, "incidents_agent_channel"),
                    from!(Domain::Gateway, "incidents_gateway"),
                    from!(Domain::Provisioning, "incidents_provisioning", only InstallStates),
                    // Every other service's conditions come on a stream of their own, read
                    // through `conditions::DURABLE`; no row here per producer.
                ],
                commands: &[],
                asks: &[],
                every_replica: &[],
            },
            // The monitor's health dots (MO-07), kept for the node views and listing; and
            // provisioning's install states, which the node views show (PV-01).
            Domain::AgentChannel => Reach {
                consumes: &[
                    from!(Domain::Monitor, "agent_channel_monitor"),
                    from!(
                        Domain::Provisioning,
                        "agent_channel_provisioning",
                        only InstallStates
                    ),
                ],
                every_replica: &[
                    <crate::agent_channel::rpc::ReleaseClaims as crate::rpc::Rpc>::OP,
                    <crate::agent_channel::rpc::ReleasePoll as crate::rpc::Rpc>::OP,
                ],
                ..Reach::OWN_ONLY
            },
            // The node facts its checks need (names, addresses, vocabulary, the status jobs);
            // and the status jobs it asks for on a cadence (MO-05, MO-06).
            Domain::Monitor => Reach {
                consumes: &[
                    from!(Domain::AgentChannel, "monitor_agent_channel"),
                    from!(Domain::Provisioning, "monitor_provisioning", only InstallStates),
                ],
                commands: &[Domain::AgentChannel],
                ..Reach::OWN_ONLY
            },
            // The node facts a plan needs and the jobs it asked for (agent channel), the
            // incidents that halt a soak; its steps' jobs are commands to the agent channel.
            Domain::Rollouts => Reach {
                consumes: &[
                    from!(Domain::AgentChannel, "rollouts_agent_channel"),
                    from!(Domain::Incidents, "rollouts_incidents"),
                    from!(Domain::Provisioning, "rollouts_provisioning", only InstallStates),
                ],
                commands: &[Domain::AgentChannel],
                ..Reach::OWN_ONLY
            },
            // The node facts its schedule needs and the jobs it asked for (agent channel);
            // its backups, verifies and restores are commands to the agent channel.
            Domain::Backups => Reach {
                consumes: &[
                    from!(Domain::AgentChannel, "backups_agent_channel"),
                    from!(Domain::Provisioning, "backups_provisioning", only InstallStates),
                ],
                commands: &[Domain::AgentChannel],
                ..Reach::OWN_ONLY
            },
            // The joins and node facts auto-approval judges (AC-08) and the machines
            // inventory and cleanup read (PV-53, PV-55), from the agent channel's events
            // (join_requested, node_approved, node_left, ...). The three questions it asks the
            // agent channel (register a node, approve a provisioned join, refuse a join) are
            // `SERVICE_QUESTIONS`, not every op.
            Domain::Provisioning => Reach {
                consumes: &[from!(Domain::AgentChannel, "provisioning_agent_channel")],
                ..Reach::OWN_ONLY
            },
            Domain::Dns | Domain::Billing => Reach::OWN_ONLY,
        }
    }

    /// The durable consumer of this domain's own command stream: `agent_channel_commands`.
    pub fn commands_consumer(self) -> String {
        format!("{}_commands", self.as_str())
    }

    /// The prefix of the reply subjects this domain's connections use, `_INBOX.agent_channel`:
    /// each user may read only its own replies, never another service's answers.
    pub fn inbox_prefix(self) -> String {
        format!("_INBOX.{}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_gateway_asks_other_domains() {
        for domain in Domain::ALL {
            let asks = domain.reach().asks;
            if domain == Domain::Gateway {
                assert_eq!(asks.len(), Domain::ALL.len());
            } else {
                assert!(
                    asks.iter().all(|asked| *asked == domain),
                    "{domain} asks {asks:?}: operator rpcs are the gateway's alone"
                );
            }
        }
    }

    #[test]
    fn a_durable_consumer_on_another_stream_is_named_after_its_reader() {
        for domain in Domain::ALL {
            for subscription in domain.reach().consumes {
                assert_ne!(subscription.from, domain);
                assert!(
                    subscription.durable.starts_with(domain.as_str()),
                    "{domain} reads {:?} through {}",
                    subscription.from,
                    subscription.durable
                );
            }
        }
    }

    // PV-01: every service that embeds the node projection hears provisioning's install
    // states, and only them, from provisioning's stream.
    #[test]
    fn every_node_projection_hears_install_states_and_nothing_else_of_provisioning() {
        for domain in [
            Domain::Incidents,
            Domain::Monitor,
            Domain::Rollouts,
            Domain::Backups,
            Domain::AgentChannel,
        ] {
            let install_states: Vec<_> = domain
                .reach()
                .consumes
                .iter()
                .filter(|subscription| subscription.from == Domain::Provisioning)
                .collect();
            assert_eq!(install_states.len(), 1, "{domain}");
            assert_eq!(
                install_states[0].filter_subject(),
                "capstan.events.provisioning.install_state_changed"
            );
        }
        let joins = Domain::Provisioning.reach().consumes[0];
        assert_eq!(joins.from, Domain::AgentChannel);
        assert_eq!(joins.filter_subject(), "capstan.events.agent_channel.>");
    }

    #[test]
    fn own_names_follow_the_domain() {
        assert_eq!(
            Domain::AgentChannel.commands_consumer(),
            "agent_channel_commands"
        );
        assert_eq!(Domain::Gateway.inbox_prefix(), "_INBOX.gateway");
    }
}
