//! A cloud account as an operator adds it (PV-12, PV-58, issue 29's `{"provider", "label",
//! "flag", "token"}`): read at the edge into words and a checked label; the token is only
//! checked to be something a provider could have issued, and goes on sealed.

use capstan_events::provisioning::{AccountFlag, CloudProvider};
use capstan_events::rpc::InvalidInput;
use capstan_events::Word as _;

/// The longest label.
pub const MAX_LABEL: usize = 100;
/// The longest token taken (Linode's are 64 characters, Hetzner's 64).
pub const MAX_TOKEN: usize = 512;

/// An account to add, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAccount {
    pub provider: CloudProvider,
    pub label: String,
    pub flag: AccountFlag,
}

/// Checks the operator's input; the token is checked and not kept here.
pub fn check(
    provider: &str,
    label: &str,
    flag: &str,
    token: &str,
) -> Result<NewAccount, InvalidInput> {
    let provider = CloudProvider::parse(provider.trim())
        .ok_or_else(|| InvalidInput::new("provider", "must be one of: linode, hetzner"))?;
    let flag = AccountFlag::parse(flag.trim())
        .ok_or_else(|| InvalidInput::new("flag", "must be main or test"))?;
    let label = label.trim();
    if label.is_empty() || label.chars().count() > MAX_LABEL {
        return Err(InvalidInput::new(
            "label",
            format!("must be 1 to {MAX_LABEL} characters"),
        ));
    }
    if label.chars().any(char::is_control) {
        return Err(InvalidInput::new(
            "label",
            "must not hold control characters",
        ));
    }
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(InvalidInput::new(
            "token",
            format!("must be 1 to {MAX_TOKEN} characters"),
        ));
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        // Never echoes the token: only what is wrong with it.
        return Err(InvalidInput::new(
            "token",
            "must be printable ASCII without spaces (paste the token alone)",
        ));
    }
    Ok(NewAccount {
        provider,
        label: label.to_string(),
        flag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pv_12_an_account_is_linode_or_hetzner_flagged_main_or_test() {
        assert_eq!(
            check("linode", " Ours ", "test", "abc123"),
            Ok(NewAccount {
                provider: CloudProvider::Linode,
                label: "Ours".into(),
                flag: AccountFlag::Test,
            })
        );
        assert_eq!(
            check("aws", "x", "main", "t").unwrap_err().field,
            "provider"
        );
        assert_eq!(
            check("hetzner", "x", "spare", "t").unwrap_err().field,
            "flag"
        );
        assert_eq!(
            check("hetzner", "  ", "main", "t").unwrap_err().field,
            "label"
        );
        assert_eq!(
            check("hetzner", &"x".repeat(101), "main", "t")
                .unwrap_err()
                .field,
            "label"
        );
    }

    #[test]
    fn a_bad_token_is_refused_without_echoing_it() {
        let refused = check("linode", "x", "main", "secret part\n").unwrap_err();
        assert_eq!(refused.field, "token");
        assert!(!refused.to_string().contains("secret"), "{refused}");
        assert_eq!(check("linode", "x", "main", "").unwrap_err().field, "token");
    }
}
