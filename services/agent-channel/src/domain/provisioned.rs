//! The provisioning service's three questions (issue 29), as pure rules: what a registration
//! may say (a node made before its agent exists), when a provisioned join may be bound to the
//! node made for it (AC-08's last word is the agent channel's: the join still pending, its key
//! the one the install recorded, AC-10, and the node with no agent yet), and how the record
//! names provisioning as the one who decided.

use capstan_events::rpc::InvalidInput;
use std::net::IpAddr;

use super::joins::valid_node_name;

/// The longest reference a registration may carry (`provision:42`).
pub const REFERENCE_MAX_CHARS: usize = 100;
/// The most addresses a registered node may have (a provider gives one IPv4 and one IPv6).
pub const REGISTERED_ADDRESSES_MAX: usize = 8;
/// The longest reason a refused join may carry.
pub const REFUSAL_REASON_MAX_CHARS: usize = 300;

/// A registration that passed every bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub reference: String,
    pub name: String,
    /// Each address as written back by its parse (`2001:db8::7`, never `2001:DB8:0::7`).
    pub addresses: Vec<String>,
}

/// Checks a registration, or says what was wrong with it (naming the field).
pub fn registration(
    reference: &str,
    name: &str,
    addresses: &[String],
) -> Result<Registration, InvalidInput> {
    if reference.is_empty()
        || reference.chars().count() > REFERENCE_MAX_CHARS
        || reference
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(InvalidInput::new(
            "reference",
            format!("must be 1 to {REFERENCE_MAX_CHARS} characters without spaces"),
        ));
    }
    if !valid_node_name(name) {
        return Err(InvalidInput::new(
            "name",
            format!(
                "{name:?} is not a node name (a lower-case letter or digit, then lower-case \
                 letters, digits, '.', '_' or '-', at most 64)"
            ),
        ));
    }
    if addresses.len() > REGISTERED_ADDRESSES_MAX {
        return Err(InvalidInput::new(
            "addresses",
            format!(
                "at most {REGISTERED_ADDRESSES_MAX}, not {}",
                addresses.len()
            ),
        ));
    }
    let mut parsed = Vec::with_capacity(addresses.len());
    for address in addresses {
        let ip: IpAddr = address.parse().map_err(|_| {
            InvalidInput::new("addresses", format!("{address:?} is not an IP address"))
        })?;
        let written = ip.to_string();
        if !parsed.contains(&written) {
            parsed.push(written);
        }
    }
    Ok(Registration {
        reference: reference.to_string(),
        name: name.to_string(),
        addresses: parsed,
    })
}

/// What [`provisioned_approval`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionedJoin<'a> {
    /// Pending and not yet expired.
    pub pending: bool,
    /// The key the join asks with.
    pub fingerprint: &'a str,
    /// The key the install recorded (AC-10).
    pub expected: &'a str,
    /// The node made for the provision has an agent paired already.
    pub node_paired: bool,
    /// The join's key is paired with a node already (any node).
    pub key_in_use: bool,
}

/// Why a provisioned join may not be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalRefused {
    /// The join is approved, rejected or expired.
    NotPending,
    /// The join's key is not the one the install recorded.
    KeyDiffers { asked: String, expected: String },
    /// The key is paired with a node already (AC-08 (3): "has not been used").
    KeyInUse,
    /// The node has an agent already (AC-08 (5)).
    NodePaired,
}

/// AC-08's conditions that are the agent channel's to hold at the moment of binding: the join
/// is still pending, its key is the expected one and unused, and the node has no agent yet.
/// The first that fails is the answer.
pub fn provisioned_approval(join: ProvisionedJoin<'_>) -> Result<(), ApprovalRefused> {
    if !join.pending {
        return Err(ApprovalRefused::NotPending);
    }
    if join.fingerprint != join.expected {
        return Err(ApprovalRefused::KeyDiffers {
            asked: join.fingerprint.to_string(),
            expected: join.expected.to_string(),
        });
    }
    if join.key_in_use {
        return Err(ApprovalRefused::KeyInUse);
    }
    if join.node_paired {
        return Err(ApprovalRefused::NodePaired);
    }
    Ok(())
}

/// Who approved, as `node_approved` and the join's record say it.
pub fn approved_by(provision_id: i64) -> String {
    format!("provisioning (provision {provision_id})")
}

/// The reason a refused join carries, or what is wrong with it.
pub fn refusal_reason(reason: &str) -> Result<&str, InvalidInput> {
    let reason = reason.trim();
    if reason.is_empty()
        || reason.chars().count() > REFUSAL_REASON_MAX_CHARS
        || reason.chars().any(char::is_control)
    {
        return Err(InvalidInput::new(
            "reason",
            format!("must be 1 to {REFUSAL_REASON_MAX_CHARS} printable characters"),
        ));
    }
    Ok(reason)
}

/// Who rejected, as `join_rejected` and the join's record say it (AC-11).
pub fn rejected_by(reason: &str) -> String {
    format!("provisioning: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_names_a_reference_a_node_name_and_ip_addresses() {
        let ok = registration(
            "provision:42",
            "shop-1",
            &[
                "203.0.113.7".into(),
                "2001:DB8:0::7".into(),
                "203.0.113.7".into(),
            ],
        )
        .unwrap();
        assert_eq!(ok.addresses, vec!["203.0.113.7", "2001:db8::7"]);
        for (reference, name, addresses, says) in [
            ("", "shop-1", vec![], "reference"),
            ("provision 42", "shop-1", vec![], "reference"),
            ("provision:42", "Shop", vec![], "not a node name"),
            ("provision:42", "", vec![], "not a node name"),
            (
                "provision:42",
                "shop-1",
                vec!["example.com".to_string()],
                "not an IP",
            ),
            (
                "provision:42",
                "shop-1",
                vec!["10.0.0.1".to_string(); 9],
                "at most 8",
            ),
        ] {
            let error = registration(reference, name, &addresses)
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{reference} {name}: {error}");
        }
        let long = "p".repeat(REFERENCE_MAX_CHARS + 1);
        assert!(registration(&long, "shop-1", &[]).is_err());
    }

    fn join<'a>() -> ProvisionedJoin<'a> {
        ProvisionedJoin {
            pending: true,
            fingerprint: "SHA256:abc",
            expected: "SHA256:abc",
            node_paired: false,
            key_in_use: false,
        }
    }

    #[test]
    fn ac_08_a_pending_join_with_the_expected_unused_key_binds_to_a_node_without_agent() {
        assert_eq!(provisioned_approval(join()), Ok(()));
    }

    #[test]
    fn ac_08_each_condition_of_the_binding_failing_is_named() {
        let not_pending = ProvisionedJoin {
            pending: false,
            ..join()
        };
        assert_eq!(
            provisioned_approval(not_pending),
            Err(ApprovalRefused::NotPending)
        );
        let other_key = ProvisionedJoin {
            fingerprint: "SHA256:xyz",
            ..join()
        };
        assert_eq!(
            provisioned_approval(other_key),
            Err(ApprovalRefused::KeyDiffers {
                asked: "SHA256:xyz".into(),
                expected: "SHA256:abc".into()
            })
        );
        let used = ProvisionedJoin {
            key_in_use: true,
            ..join()
        };
        assert_eq!(provisioned_approval(used), Err(ApprovalRefused::KeyInUse));
        let paired = ProvisionedJoin {
            node_paired: true,
            ..join()
        };
        assert_eq!(
            provisioned_approval(paired),
            Err(ApprovalRefused::NodePaired)
        );
    }

    #[test]
    fn ac_11_provisioning_is_named_as_the_one_who_decided() {
        assert_eq!(approved_by(42), "provisioning (provision 42)");
        assert_eq!(
            rejected_by(refusal_reason("  second join from 203.0.113.7 ").unwrap()),
            "provisioning: second join from 203.0.113.7"
        );
        assert!(refusal_reason(" ").is_err());
        assert!(refusal_reason("a\nb").is_err());
        assert!(refusal_reason(&"r".repeat(REFUSAL_REASON_MAX_CHARS + 1)).is_err());
    }
}
