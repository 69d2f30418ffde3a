//! The questions asked of the provisioning service (`capstan.rpc.provisioning.*`), each from
//! the gateway with the operator's [`Actor`]: our cloud accounts (level 10, PV-12, PV-58; the
//! token is write-only, sealed at rest and never shown again) and what an account's provider
//! sells in each region (the offer a provision's form is drawn from, PV-23).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{AccountFlag, CloudProvider};
use crate::rpc::Actor;

// The rpcs under `capstan.rpc.provisioning.`: each op's name, request and answer, once.
crate::rpc! { crate::Domain::Provisioning;
    // `GET /api/v1/provisioning/accounts` (level 10).
    "list_accounts": ListAccounts => Accounts,
    // `POST /api/v1/provisioning/accounts` (level 10, audited).
    "add_account": AddAccount => AccountView,
    // `DELETE /api/v1/provisioning/accounts/{id}` (level 10, audited).
    "delete_account": DeleteAccount => AccountView,
    // `GET /api/v1/provisioning/accounts/{id}/offer` (level 10): regions and their sizes.
    "account_offer": AccountOffer => Offer,
}

/// `GET /api/v1/provisioning/accounts` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListAccounts {
    pub actor: Actor,
}

/// One of our cloud accounts as the API shows it: never its token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AccountView {
    pub id: i64,
    pub provider: CloudProvider,
    pub label: String,
    pub flag: AccountFlag,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

/// `GET /api/v1/provisioning/accounts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Accounts {
    pub accounts: Vec<AccountView>,
    /// Whether the seal key is set (`CAPSTAN__PROVISIONING__SEAL_KEY_FILE`): without it no
    /// account can be added or used.
    pub seal_key_set: bool,
}

/// `POST /api/v1/provisioning/accounts` (level 10, audited): `{"provider", "label", "flag",
/// "token"}`. The token is sealed at rest and never shown again; it is left out of `Debug`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddAccount {
    pub actor: Actor,
    /// `linode` or `hetzner`.
    pub provider: String,
    pub label: String,
    /// `main` or `test`.
    pub flag: String,
    pub token: String,
}

impl std::fmt::Debug for AddAccount {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AddAccount")
            .field("actor", &self.actor)
            .field("provider", &self.provider)
            .field("label", &self.label)
            .field("flag", &self.flag)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `DELETE /api/v1/provisioning/accounts/{id}` (level 10, audited): answers the account as it
/// was. Refused while a provision in flight uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteAccount {
    pub actor: Actor,
    pub account_id: i64,
}

/// `GET /api/v1/provisioning/accounts/{id}/offer` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AccountOffer {
    pub actor: Actor,
    pub account_id: i64,
}

/// A size a region sells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeOffer {
    /// The provider's name of the size (`g6-standard-2`, `cx22`).
    pub id: String,
    pub vcpus: u32,
    pub memory_mb: u64,
    pub disk_gb: u64,
}

/// A region and the sizes it sells (PV-23: "sizes are the plans that region sells").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegionOffer {
    pub id: String,
    pub sizes: Vec<SizeOffer>,
}

/// What an account's provider sells, as it said so just now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Offer {
    pub account_id: i64,
    pub provider: CloudProvider,
    pub regions: Vec<RegionOffer>,
}
