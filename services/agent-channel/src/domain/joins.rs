//! Joins: what a machine's request to be admitted must look like, and what the plane does when
//! a key asks (PROTOCOL.md "join"; spec AC-02..AC-07).

use capstan_events::agent_channel::{rpc::JoinState, UnknownState};
use capstan_signing::{Fingerprint, PublicKey};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::net::IpAddr;

use super::{
    auth::AgentError, MAX_PENDING_PER_NETWORK, MAX_PENDING_TOTAL, REJECTED_REOPENABLE_FOR,
};

/// At most this many addresses in a join.
pub const MAX_ADDRESSES: usize = 16;

#[derive(Deserialize)]
struct JoinBody {
    name: serde_json::Value,
    public_key: serde_json::Value,
    agent_version: serde_json::Value,
    #[serde(default)]
    site_root: serde_json::Value,
    #[serde(default)]
    container: serde_json::Value,
    #[serde(default)]
    addresses: serde_json::Value,
}

/// A join that passed every bound: only values that cannot be wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidJoin {
    pub name: String,
    pub public_key: PublicKey,
    pub fingerprint: Fingerprint,
    pub agent_version: String,
    pub site_root: Option<String>,
    pub container: Option<String>,
    pub addresses: Vec<IpAddr>,
}

fn invalid(message: impl Into<String>) -> AgentError {
    AgentError::InvalidRequest(message.into())
}

/// `^[a-z0-9][a-z0-9._-]{0,63}$`
pub fn valid_node_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(first) if first.is_ascii_lowercase() || first.is_ascii_digit())
        && name.len() <= 64
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

fn text(value: &serde_json::Value, field: &str, max: usize) -> Result<String, AgentError> {
    match value.as_str() {
        Some(text)
            if !text.is_empty() && text.len() <= max && !text.chars().any(char::is_control) =>
        {
            Ok(text.to_string())
        }
        Some(_) => Err(invalid(format!(
            "{field} must be 1 to {max} printable characters"
        ))),
        None => Err(invalid(format!("{field} must be a string"))),
    }
}

fn optional_text(
    value: &serde_json::Value,
    field: &str,
    max: usize,
) -> Result<Option<String>, AgentError> {
    match value {
        serde_json::Value::Null => Ok(None),
        other => text(other, field, max).map(Some),
    }
}

/// A site root as a join or a claim names it: null, or an absolute path of at most 4096
/// printable characters.
pub fn read_site_root(value: &serde_json::Value) -> Result<Option<String>, AgentError> {
    let site_root = optional_text(value, "site_root", 4096)?;
    if site_root
        .as_deref()
        .is_some_and(|root| !root.starts_with('/'))
    {
        return Err(invalid("site_root must be an absolute path"));
    }
    Ok(site_root)
}

/// Reads and bounds a join body. Every refusal names the field.
pub fn parse_join(body: &[u8]) -> Result<ValidJoin, AgentError> {
    let body: JoinBody = serde_json::from_slice(body)
        .map_err(|error| invalid(format!("the join body is not valid: {error}")))?;
    let name = text(&body.name, "name", 64)?;
    if !valid_node_name(&name) {
        return Err(invalid("name must match ^[a-z0-9][a-z0-9._-]{0,63}$"));
    }
    let public_key = PublicKey::from_base64(&text(&body.public_key, "public_key", 64)?)
        .map_err(|error| invalid(format!("public_key: {error}")))?;
    let agent_version = text(&body.agent_version, "agent_version", 64)?;
    let site_root = read_site_root(&body.site_root)?;
    let container = optional_text(&body.container, "container", 128)?;
    if container.as_deref().is_some_and(|name| {
        !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    }) {
        return Err(invalid(
            "container must be a container name (letters, digits, . _ -)",
        ));
    }
    let addresses = match &body.addresses {
        serde_json::Value::Null => Vec::new(),
        serde_json::Value::Array(items) if items.len() <= MAX_ADDRESSES => items
            .iter()
            .map(|item| {
                item.as_str()
                    .and_then(|text| text.parse::<IpAddr>().ok())
                    .ok_or_else(|| invalid(format!("addresses: {item} is not an IP address")))
            })
            .collect::<Result<_, _>>()?,
        serde_json::Value::Array(_) => {
            return Err(invalid(format!("addresses: at most {MAX_ADDRESSES}")))
        }
        _ => return Err(invalid("addresses must be a list of IP addresses")),
    };
    let fingerprint = public_key.fingerprint();
    Ok(ValidJoin {
        name,
        public_key,
        fingerprint,
        agent_version,
        site_root,
        container,
        addresses,
    })
}

/// A join request's state as the plane keeps it: the contract's [`JoinState`] and `retired`
/// (a rejection past its reopening window; operators and the node read it as rejected).
/// `pending` past its expiry reads as expired until the sweep writes it so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRecordState {
    Pending,
    Approved,
    Rejected,
    Expired,
    Retired,
}

impl JoinRecordState {
    pub const ALL: [JoinRecordState; 5] = [
        JoinRecordState::Pending,
        JoinRecordState::Approved,
        JoinRecordState::Rejected,
        JoinRecordState::Expired,
        JoinRecordState::Retired,
    ];

    /// The state as the table spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            JoinRecordState::Pending => "pending",
            JoinRecordState::Approved => "approved",
            JoinRecordState::Rejected => "rejected",
            JoinRecordState::Expired => "expired",
            JoinRecordState::Retired => "retired",
        }
    }

    /// The state as the contract shows it at `now`, for a request that expires at `expires_at`.
    pub fn shown(self, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> JoinState {
        match self {
            JoinRecordState::Pending if expires_at <= now => JoinState::Expired,
            JoinRecordState::Pending => JoinState::Pending,
            JoinRecordState::Approved => JoinState::Approved,
            JoinRecordState::Rejected | JoinRecordState::Retired => JoinState::Rejected,
            JoinRecordState::Expired => JoinState::Expired,
        }
    }
}

impl TryFrom<String> for JoinRecordState {
    type Error = UnknownState;

    fn try_from(text: String) -> Result<JoinRecordState, UnknownState> {
        JoinRecordState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or(UnknownState {
                kind: "join state",
                text,
            })
    }
}

/// What the plane already knows of a key that asks to join.
#[derive(Debug, Clone, PartialEq)]
pub enum KnownKey {
    /// Never seen, or only in requests that ended (approved then forgotten, expired long ago).
    Unknown,
    /// A node holds it.
    Paired,
    /// An open request exists.
    Pending,
    Rejected {
        rejected_at: DateTime<Utc>,
    },
    Retired,
}

/// What to do with a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinDecision {
    /// A new request (after the caps are checked).
    Create,
    /// The same request, one hour from now.
    Renew,
    /// Answer `state: "rejected"`: an operator may reopen it.
    AnswerRejected,
    AlreadyJoined,
    Retired,
}

/// AC-03, AC-07, decision 6.2-1: the same key renews its request; a rejected key is told so
/// for a day, then retired; a paired key never joins twice.
pub fn decide(known: &KnownKey, now: DateTime<Utc>) -> JoinDecision {
    match known {
        KnownKey::Unknown => JoinDecision::Create,
        KnownKey::Paired => JoinDecision::AlreadyJoined,
        KnownKey::Pending => JoinDecision::Renew,
        KnownKey::Rejected { rejected_at } if reopenable(*rejected_at, now) => {
            JoinDecision::AnswerRejected
        }
        KnownKey::Rejected { .. } | KnownKey::Retired => JoinDecision::Retired,
    }
}

/// AC-02: whether a new pending join may be lodged, given how many are pending from its source
/// network and in all. One network's share is a small part of the total, so a flood from one
/// network (an IPv6 /64 however many addresses it uses) is stopped long before the total.
pub fn pending_cap(from_network: i64, total: i64) -> Result<(), AgentError> {
    if from_network >= MAX_PENDING_PER_NETWORK {
        return Err(AgentError::TooManyPending(" from this network"));
    }
    if total >= MAX_PENDING_TOTAL {
        return Err(AgentError::TooManyPending(""));
    }
    Ok(())
}

/// Whether a key rejected at `rejected_at` may still be reopened.
pub fn reopenable(rejected_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now.signed_duration_since(rejected_at)
        .to_std()
        .unwrap_or_default()
        < REJECTED_REOPENABLE_FOR
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::NodeKey;
    use serde_json::json;

    fn body(overrides: serde_json::Value) -> Vec<u8> {
        let key = NodeKey::generate().public_key().to_base64();
        let mut body = json!({
            "name": "web-1", "public_key": key, "agent_version": "1.2.3",
            "site_root": "/var/www/site", "container": null, "addresses": ["203.0.113.7", "2001:db8::1"]
        });
        for (field, value) in overrides.as_object().unwrap() {
            body[field] = value.clone();
        }
        serde_json::to_vec(&body).unwrap()
    }

    #[test]
    fn a_well_formed_join_is_read_into_bounded_values() {
        let join = parse_join(&body(json!({}))).unwrap();
        assert_eq!(join.name, "web-1");
        assert_eq!(join.addresses.len(), 2);
        assert_eq!(join.fingerprint, join.public_key.fingerprint());
        assert_eq!(join.site_root.as_deref(), Some("/var/www/site"));
    }

    #[test]
    fn ac_02_each_bound_is_refused_naming_its_field() {
        let seventeen: Vec<String> = (1..=17).map(|n| format!("192.0.2.{n}")).collect();
        let cases = [
            (json!({"name": "Web"}), "name"),
            (json!({"name": "-web"}), "name"),
            (json!({"name": "a".repeat(65)}), "name"),
            (json!({"name": 7}), "name"),
            (json!({"public_key": "not base64!"}), "public_key"),
            (json!({"public_key": "AAAA"}), "public_key"),
            (json!({"addresses": ["example.com"]}), "addresses"),
            (json!({"addresses": seventeen}), "addresses"),
            (json!({"site_root": "relative/path"}), "site_root"),
            (json!({"container": "a b"}), "container"),
            (json!({"agent_version": ""}), "agent_version"),
        ];
        for (overrides, field) in cases {
            let error = parse_join(&body(overrides.clone())).unwrap_err();
            assert_eq!(error.code(), "invalid_request");
            assert!(error.to_string().contains(field), "{overrides}: {error}");
        }
        assert_eq!(
            parse_join(b"not json").unwrap_err().code(),
            "invalid_request"
        );
    }

    #[test]
    fn ac_02_a_flood_from_one_network_is_stopped_at_its_share_leaving_the_total_for_others() {
        assert!(pending_cap(MAX_PENDING_PER_NETWORK - 1, 0).is_ok());
        let refused = pending_cap(MAX_PENDING_PER_NETWORK, MAX_PENDING_PER_NETWORK).unwrap_err();
        assert_eq!(refused.code(), "too_many_pending");
        assert!(refused.to_string().contains("from this network"));
        // What one network can hold is a small share: more than a hundred networks' worth of
        // room stays for the others.
        let (share, total) = (MAX_PENDING_PER_NETWORK, MAX_PENDING_TOTAL);
        assert!(total >= 100 * share, "{share} of {total}");
        assert!(pending_cap(0, MAX_PENDING_PER_NETWORK).is_ok());
        assert!(pending_cap(0, MAX_PENDING_TOTAL).is_err());
    }

    #[test]
    fn a_join_state_is_read_only_from_its_own_spelling_and_retired_shows_as_rejected() {
        let now = Utc::now();
        for state in JoinRecordState::ALL {
            assert_eq!(
                JoinRecordState::try_from(state.as_str().to_string()),
                Ok(state)
            );
        }
        let unknown = JoinRecordState::try_from("withdrawn".to_string()).unwrap_err();
        assert_eq!(unknown.to_string(), "\"withdrawn\" is not a join state");
        let later = now + chrono::Duration::hours(1);
        assert_eq!(
            JoinRecordState::Pending.shown(later, now),
            JoinState::Pending
        );
        assert_eq!(JoinRecordState::Pending.shown(now, now), JoinState::Expired);
        assert_eq!(
            JoinRecordState::Retired.shown(later, now),
            JoinState::Rejected
        );
        assert_eq!(
            JoinRecordState::Approved.shown(now, now),
            JoinState::Approved
        );
    }

    #[test]
    fn ac_03_ac_07_the_same_key_renews_and_a_rejected_key_is_reopenable_for_a_day() {
        let now = Utc::now();
        assert_eq!(decide(&KnownKey::Unknown, now), JoinDecision::Create);
        assert_eq!(decide(&KnownKey::Pending, now), JoinDecision::Renew);
        assert_eq!(decide(&KnownKey::Paired, now), JoinDecision::AlreadyJoined);
        let yesterday_morning = now - chrono::Duration::hours(23);
        assert_eq!(
            decide(
                &KnownKey::Rejected {
                    rejected_at: yesterday_morning
                },
                now
            ),
            JoinDecision::AnswerRejected
        );
        let two_days_ago = now - chrono::Duration::hours(48);
        assert_eq!(
            decide(
                &KnownKey::Rejected {
                    rejected_at: two_days_ago
                },
                now
            ),
            JoinDecision::Retired
        );
        assert_eq!(decide(&KnownKey::Retired, now), JoinDecision::Retired);
    }
}
