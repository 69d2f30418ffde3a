//! The node's acceptance policy (PROTOCOL.md "The agent's side", AG-02): each class of word is
//! accepted, asked about (held until a person on the node approves) or refused. A missing file
//! means the shipped policy; a file that does not parse, or that another user could have
//! written, makes the node accept nothing until a person fixes it.

use capstan_events::agent_channel::PrimitiveClass;
use capstan_events::Word;
use serde_json::Value;

/// What the node does with a word of one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Acceptance {
    Accept,
    Ask,
    Refuse,
}

/// One acceptance per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub read: Acceptance,
    pub change: Acceptance,
    pub destructive: Acceptance,
}

/// The shipped policy (decision 6.1-1): `read: accept, change: accept, destructive: ask`.
pub const SHIPPED: Policy = Policy {
    read: Acceptance::Accept,
    change: Acceptance::Accept,
    destructive: Acceptance::Ask,
};

impl Policy {
    pub fn for_class(&self, class: PrimitiveClass) -> Acceptance {
        match class {
            PrimitiveClass::Read => self.read,
            PrimitiveClass::Change => self.change,
            PrimitiveClass::Destructive => self.destructive,
        }
    }

    /// Reads `policy.json`: an object whose keys are among `read`, `change`, `destructive`,
    /// each `accept`, `ask` or `refuse`. A class the file leaves out keeps the shipped answer.
    /// Anything else is refused whole, naming what is wrong: a policy half understood is not
    /// a policy.
    pub fn parse(bytes: &[u8]) -> Result<Policy, PolicyRefusal> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| format!("policy.json is not valid JSON: {error}"))?;
        let Value::Object(fields) = value else {
            return Err("policy.json must be a JSON object".into());
        };
        let mut policy = SHIPPED;
        for (class, answer) in &fields {
            let acceptance = answer.as_str().and_then(Acceptance::parse).ok_or_else(|| {
                format!("policy.json: {class} must be \"accept\", \"ask\" or \"refuse\"")
            })?;
            match class.as_str() {
                "read" => policy.read = acceptance,
                "change" => policy.change = acceptance,
                "destructive" => policy.destructive = acceptance,
                other => {
                    return Err(format!(
                        "policy.json: {other:?} is not a class (read, change, destructive)"
                    )
                    .into())
                }
            }
        }
        Ok(policy)
    }

    pub fn describe(&self) -> String {
        format!(
            "read {}, change {}, destructive {}",
            self.read.as_str(),
            self.change.as_str(),
            self.destructive.as_str()
        )
    }
}

/// The policy as the node found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyState {
    /// No `policy.json`: the shipped policy applies.
    Shipped,
    /// A trusted file that parsed.
    File(Policy),
    /// A file the node will not act on; every job is refused with this reason.
    Untrusted(String),
}

crate::domain::refusal!(
    /// `policy.json` refused whole, or why the node accepts nothing: the fault named.
    PolicyRefusal
);

impl PolicyState {
    /// The node's answer for a class, or the reason it accepts nothing at all.
    pub fn decide(&self, class: PrimitiveClass) -> Result<Acceptance, PolicyRefusal> {
        match self {
            PolicyState::Shipped => Ok(SHIPPED.for_class(class)),
            PolicyState::File(policy) => Ok(policy.for_class(class)),
            PolicyState::Untrusted(reason) => Err(format!(
                "the node accepts nothing until a person fixes its policy file: {reason}"
            )
            .into()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PolicyState::Shipped => format!("{} (shipped default)", SHIPPED.describe()),
            PolicyState::File(policy) => format!("{} (policy.json)", policy.describe()),
            PolicyState::Untrusted(reason) => format!("NOTHING IS ACCEPTED: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PrimitiveClass::*;

    #[test]
    fn ag_02_a_missing_file_means_the_shipped_policy() {
        let state = PolicyState::Shipped;
        assert_eq!(state.decide(Read), Ok(Acceptance::Accept));
        assert_eq!(state.decide(Change), Ok(Acceptance::Accept));
        assert_eq!(state.decide(Destructive), Ok(Acceptance::Ask));
    }

    #[test]
    fn a_class_the_file_leaves_out_keeps_the_shipped_answer() {
        let policy = Policy::parse(br#"{"change": "refuse"}"#).unwrap();
        assert_eq!(policy.read, Acceptance::Accept);
        assert_eq!(policy.change, Acceptance::Refuse);
        assert_eq!(policy.destructive, Acceptance::Ask);
        let all =
            Policy::parse(br#"{"read":"ask","change":"ask","destructive":"refuse"}"#).unwrap();
        assert_eq!(all.for_class(Read), Acceptance::Ask);
        assert_eq!(all.for_class(Destructive), Acceptance::Refuse);
    }

    #[test]
    fn a_policy_file_half_understood_is_refused_whole_naming_the_fault() {
        let cases: [(&[u8], &str); 5] = [
            (b"not json", "not valid JSON"),
            (b"[]", "must be a JSON object"),
            (br#"{"read": "yes"}"#, "read must be"),
            (br#"{"read": true}"#, "read must be"),
            (br#"{"admin": "accept"}"#, "\"admin\" is not a class"),
        ];
        for (bytes, expected) in cases {
            let error = Policy::parse(bytes).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn ag_02_an_untrusted_policy_accepts_nothing_of_any_class() {
        let state = PolicyState::Untrusted("policy.json has mode 666".into());
        for class in [Read, Change, Destructive] {
            let reason = state.decide(class).unwrap_err();
            assert!(reason.contains("accepts nothing until a person fixes"));
            assert!(reason.contains("mode 666"));
        }
    }
}
