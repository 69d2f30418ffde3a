//! Conditions: what a service judges to hold on a node, published for incidents to turn into
//! incidents (issue 28, "conditions are judged where the facts live"). The service that owns
//! the facts judges (the monitor says a site is down, backups that a backup failed) and writes
//! one [`ConditionChanged`] through its outbox in the transaction that changed the fact;
//! incidents keeps status × triage, reopening, grouping and signals (IN-*), and judges only its
//! own detectors (`plane:agent_silent`).
//!
//! Every condition travels on `capstan.conditions.<domain>.<name>`, in a stream of its own
//! ([`STREAM`]) that one durable consumer of incidents ([`DURABLE`]) reads whole. A domain's
//! bus user may publish only its own `capstan.conditions.<domain>.>`, so the subject proves who
//! judged. A new producing service declares its [`ConditionKind`]s in its contract module and
//! lists them in `catalog::CONDITIONS` (with its messages); nothing in incidents changes.

use crate::NodeId;
use crate::Word as _;
use chrono::{DateTime, SubsecRound, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::incidents::Severity;
use crate::rpc::InvalidInput;
use crate::{Domain, Envelope, EnvelopeError, RawEnvelope, SPEC_VERSION, SUBJECT_ROOT};

/// The stream every condition is kept in (limits retention, like the event streams).
pub const STREAM: &str = "CAPSTAN_CONDITIONS";
/// The subjects [`STREAM`] captures.
pub const SUBJECTS: &str = "capstan.conditions.>";
/// The CloudEvents `type` of every condition.
pub const EVENT_TYPE: &str = "capstan.conditions.changed";
/// The version of [`ConditionChanged`]'s shape.
pub const VERSION: u32 = 1;
/// The domain that reads every condition.
pub const READER: Domain = Domain::Incidents;
/// Its durable consumer over the whole of [`STREAM`].
pub const DURABLE: &str = "incidents_conditions";
/// The longest evidence kept; longer is cut at a character boundary by [`ConditionKind`].
pub const MAX_EVIDENCE_CHARS: usize = 4_000;

/// `capstan.conditions.monitor.>`: the conditions `domain` may publish.
pub fn subjects_of(domain: Domain) -> String {
    format!("{SUBJECT_ROOT}.conditions.{}.>", domain.as_str())
}

/// A condition a domain judges, declared once in its contract module: who judges it, its name
/// (shown as `plane:<name>`, an incident's source and kind), its severity and the plane's own
/// words for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionKind {
    pub domain: Domain,
    pub name: &'static str,
    pub severity: Severity,
    pub title: &'static str,
}

impl ConditionKind {
    /// `plane:site_down`.
    pub fn source(&self) -> String {
        format!("plane:{}", self.name)
    }

    /// `capstan.conditions.monitor.site_down`.
    pub fn subject(&self) -> String {
        subject_for(self.domain, self.name)
    }

    /// The condition holds on `node_id` since `since`, as `evidence` shows (cut to
    /// [`MAX_EVIDENCE_CHARS`]), judged at `observed_at`.
    pub fn happening(
        &self,
        node_id: NodeId,
        evidence: impl Into<String>,
        since: DateTime<Utc>,
        observed_at: DateTime<Utc>,
    ) -> ConditionChanged {
        let mut evidence: String = evidence.into();
        if let Some((cut, _)) = evidence.char_indices().nth(MAX_EVIDENCE_CHARS) {
            evidence.truncate(cut);
        }
        ConditionChanged {
            happening: true,
            evidence,
            since: Some(since.min(observed_at)),
            ..self.not_happening(node_id, observed_at)
        }
    }

    /// The condition no longer holds on `node_id` (or never did), judged at `observed_at`.
    pub fn not_happening(&self, node_id: NodeId, observed_at: DateTime<Utc>) -> ConditionChanged {
        ConditionChanged {
            domain: self.domain,
            name: self.name.to_string(),
            node_id,
            happening: false,
            severity: self.severity,
            title: self.title.to_string(),
            evidence: String::new(),
            since: None,
            observed_at,
        }
    }
}

/// `capstan.conditions.<domain>.<name>`.
pub fn subject_for(domain: Domain, name: &str) -> String {
    format!("{SUBJECT_ROOT}.conditions.{}.{name}", domain.as_str())
}

/// Whether `name` is shaped as a condition's name: 1 to 64 lowercase letters, digits and
/// underscores, a letter first.
pub fn is_condition_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(first) if first.is_ascii_lowercase())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A domain's judgement of one condition on one node: happening or not. Published whenever the
/// judgement changes (and may be published again unchanged: the reader keeps the newest by
/// `observed_at`). Public: add fields, never rename or repurpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConditionChanged {
    /// The domain that judged it; it alone may publish on its subject.
    pub domain: Domain,
    /// The condition's name within the plane (`site_down`), shown as `plane:site_down`.
    pub name: String,
    pub node_id: NodeId,
    /// Whether the condition holds now.
    pub happening: bool,
    pub severity: Severity,
    /// The plane's own words for the condition.
    pub title: String,
    /// What was seen, in the judge's words (empty when not happening).
    pub evidence: String,
    /// When it began, while happening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// When the judge looked.
    pub observed_at: DateTime<Utc>,
}

impl ConditionChanged {
    /// `plane:<name>`: the incident's source and kind.
    pub fn source(&self) -> String {
        format!("plane:{}", self.name)
    }

    /// The subject it is published on, `capstan.conditions.<domain>.<name>`.
    pub fn subject(&self) -> String {
        subject_for(self.domain, &self.name)
    }

    /// Refuses a condition whose name is not shaped as one, whose node is not a node, whose
    /// title is empty or whose evidence is too long, naming the field.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if !is_condition_name(&self.name) {
            return Err(InvalidInput::new(
                "name",
                "a condition's name is 1 to 64 lowercase letters, digits and underscores",
            ));
        }
        if self.node_id.get() <= 0 {
            return Err(InvalidInput::new("node_id", "must be a node's positive id"));
        }
        if self.title.trim().is_empty() {
            return Err(InvalidInput::new("title", "must not be empty"));
        }
        if self.evidence.chars().count() > MAX_EVIDENCE_CHARS {
            return Err(InvalidInput::new(
                "evidence",
                format!("must be at most {MAX_EVIDENCE_CHARS} characters"),
            ));
        }
        Ok(())
    }

    /// The envelope of this condition, ready for an outbox row: the judge's `source`, the
    /// node as its `subject`.
    pub fn envelope(self) -> RawEnvelope {
        Envelope {
            specversion: SPEC_VERSION.to_string(),
            id: Uuid::now_v7(),
            source: self.domain.source(),
            event_type: EVENT_TYPE.to_string(),
            time: Utc::now().trunc_subsecs(6),
            datacontenttype: "application/json".to_string(),
            subject: Some(format!("node/{}", self.node_id)),
            dataversion: VERSION,
            correlationid: None,
            causationid: None,
            data: serde_json::to_value(&self).expect("a condition serialises to JSON"),
        }
    }

    /// `envelope` read as a condition: `None` when it is not one, an error when its version or
    /// data are not a condition's.
    pub fn read(envelope: &RawEnvelope) -> Option<Result<ConditionChanged, EnvelopeError>> {
        if envelope.event_type != EVENT_TYPE {
            return None;
        }
        if envelope.dataversion != VERSION {
            return Some(Err(EnvelopeError::UnsupportedVersion {
                event_type: EVENT_TYPE.to_string(),
                found: envelope.dataversion,
                expected: VERSION,
            }));
        }
        Some(
            serde_json::from_value(envelope.data.clone()).map_err(|error| {
                EnvelopeError::InvalidData {
                    event_type: EVENT_TYPE.to_string(),
                    reason: error.to_string(),
                }
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{condition_kind as known, CONDITIONS as ALL};
    use chrono::TimeZone;

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn every_declared_condition_has_a_unique_well_shaped_name_and_its_domains_subject() {
        let mut names: Vec<&str> = ALL.iter().map(|kind| kind.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            ALL.len(),
            "a condition's name is the plane's, once"
        );
        for kind in ALL {
            assert!(is_condition_name(kind.name), "{}", kind.name);
            assert!(!kind.title.is_empty());
            assert_eq!(
                kind.subject(),
                format!("capstan.conditions.{}.{}", kind.domain.as_str(), kind.name)
            );
            assert!(kind
                .subject()
                .starts_with(subjects_of(kind.domain).trim_end_matches('>')));
        }
        assert_eq!(known("site_down").unwrap().source(), "plane:site_down");
        assert_eq!(known("nope"), None);
    }

    #[test]
    fn a_condition_travels_in_its_envelope_and_reads_back() {
        let condition = crate::monitor::SITE_DOWN.happening(NodeId(7), "HTTP 500", at(-60), at(0));
        let envelope = condition.clone().envelope();
        assert_eq!(envelope.event_type, EVENT_TYPE);
        assert_eq!(envelope.source, "capstan/monitor");
        assert_eq!(envelope.subject.as_deref(), Some("node/7"));
        assert_eq!(condition.subject(), "capstan.conditions.monitor.site_down");
        let back = ConditionChanged::read(&envelope).unwrap().unwrap();
        assert_eq!(back, condition);
        assert!(back.happening);
        assert_eq!(back.since, Some(at(-60)));
        assert_eq!(back.source(), "plane:site_down");
        let mut other = envelope.clone();
        other.event_type = "capstan.monitor.site_down".into();
        assert!(ConditionChanged::read(&other).is_none());
        let mut newer = envelope;
        newer.dataversion = 2;
        assert!(ConditionChanged::read(&newer).unwrap().is_err());
    }

    #[test]
    fn not_happening_carries_no_evidence_and_a_start_is_never_after_the_look() {
        let cleared = crate::monitor::SITE_DOWN.not_happening(NodeId(7), at(0));
        assert!(!cleared.happening);
        assert_eq!(cleared.evidence, "");
        assert_eq!(cleared.since, None);
        let early = crate::monitor::SITE_DOWN.happening(NodeId(7), "x", at(10), at(0));
        assert_eq!(early.since, Some(at(0)));
        let long = crate::monitor::SITE_DOWN.happening(NodeId(7), "é".repeat(5_000), at(0), at(0));
        assert_eq!(long.evidence.chars().count(), MAX_EVIDENCE_CHARS);
        assert!(long.check().is_ok());
    }

    #[test]
    fn a_condition_that_breaks_its_shape_is_refused_naming_the_field() {
        let good = crate::backups::BACKUP_FAILED.happening(NodeId(3), "Run 4 failed", at(0), at(0));
        assert!(good.check().is_ok());
        for (field, bad) in [
            (
                "name",
                ConditionChanged {
                    name: "Site-Down".into(),
                    ..good.clone()
                },
            ),
            (
                "name",
                ConditionChanged {
                    name: String::new(),
                    ..good.clone()
                },
            ),
            (
                "node_id",
                ConditionChanged {
                    node_id: NodeId(0),
                    ..good.clone()
                },
            ),
            (
                "title",
                ConditionChanged {
                    title: " ".into(),
                    ..good.clone()
                },
            ),
            (
                "evidence",
                ConditionChanged {
                    evidence: "x".repeat(4_001),
                    ..good.clone()
                },
            ),
        ] {
            assert_eq!(bad.check().unwrap_err().field, field);
        }
    }
}
