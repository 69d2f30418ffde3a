//! The outside systems: the cloud providers behind one seam (PV-57), with two real drivers
//! written against the published APIs — Linode API v4 (`linode`) and Hetzner Cloud (`hetzner`)
//! — over one HTTP half (`api`: time bounds, retries, the token kept out of every text); and the
//! sealing of account tokens at rest (`seal`).
//!
//! The seam covers what the spec relies on: create (region, type, image, disk encryption,
//! swap), get (running? at which addresses), list, power, the sizes each region sells, reverse
//! DNS, the account's company name, tags, and deleting servers and unattached volumes; address
//! swap and firewalls are declared for the site-copy work that comes later (PV-36).

pub mod api;
pub mod hetzner;
pub mod linode;
pub mod seal;
pub mod ssh;

use std::net::IpAddr;
use std::time::Duration;

use capstan_events::provisioning::rpc::RegionOffer;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use secrecy::SecretString;

/// What went wrong asking a provider. Never carries the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// No answer within the call's time bound.
    #[error("no answer in time: {0}")]
    Timeout(String),
    /// No connection could be made, or it broke.
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    /// The token was refused (401) or lacks a grant (403).
    #[error("the provider refused the token ({status}): {message}")]
    Refused { status: u16, message: String },
    /// Asked too often, and the wait it asked for was longer than we wait (or tries ran out).
    #[error("the provider is rate limiting: {message}")]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// The provider failed (5xx) on every try.
    #[error("the provider failed ({status}): {message}")]
    Server { status: u16, message: String },
    /// The provider refused the request as written (400, 409, 422...).
    #[error("the provider rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// No such instance, volume or address.
    #[error("not found at the provider: {0}")]
    NotFound(String),
    /// The answer does not read as the published shape.
    #[error("the provider's answer could not be read: {0}")]
    BadAnswer(String),
    /// The request cannot be made as asked (a bad base URL, an option the provider lacks).
    #[error("{0}")]
    Unusable(String),
}

impl ProviderError {
    /// A failure another try may not meet: a timeout, a lost connection, a 5xx, a 429.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::Timeout(_)
                | ProviderError::Unreachable(_)
                | ProviderError::Server { .. }
                | ProviderError::RateLimited { .. }
        )
    }
}

/// An instance's power state, as the provider words it, read into three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Running,
    /// Made and not running yet (provisioning, booting, initializing, starting).
    Starting(String),
    /// Anything else (offline, off, stopping, rebuilding...), in the provider's word.
    Other(String),
}

/// An instance as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub label: String,
    pub status: Status,
    pub ipv4: Vec<IpAddr>,
    pub ipv6: Vec<IpAddr>,
    pub region: String,
    pub size: String,
    pub image: String,
    pub tags: Vec<String>,
    pub created_at: DateTime<Utc>,
}

impl Instance {
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.ipv4.iter().chain(&self.ipv6).copied().collect()
    }
}

/// A volume in the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub label: String,
    /// The instance it is attached to.
    pub attached_to: Option<String>,
    pub tags: Vec<String>,
    pub created_at: DateTime<Utc>,
}

/// A firewall in the account (read for the copy work later, PV-36).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firewall {
    pub id: String,
    pub label: String,
    /// The instances it applies to.
    pub instances: Vec<String>,
}

/// What a create asks for (PV-48: disk encryption and swap are explicit).
#[derive(Clone)]
pub struct CreateInstance {
    /// Unique per provision: a create that may have happened is found again by it.
    pub label: String,
    pub region: String,
    pub size: String,
    pub image: String,
    /// The provider's disk encryption on or off; `None` leaves its default.
    pub disk_encryption: Option<bool>,
    /// Swap in MB; `None` leaves the provider's default.
    pub swap_mb: Option<u32>,
    pub tags: Vec<String>,
    /// The root password to set where the provider takes one (Linode); Hetzner makes its own.
    pub root_password: SecretString,
}

impl std::fmt::Debug for CreateInstance {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CreateInstance")
            .field("label", &self.label)
            .field("region", &self.region)
            .field("size", &self.size)
            .field("image", &self.image)
            .field("disk_encryption", &self.disk_encryption)
            .field("swap_mb", &self.swap_mb)
            .field("tags", &self.tags)
            .field("root_password", &"<redacted>")
            .finish()
    }
}

/// A made instance and the root password it has (the one given, or the provider's); its
/// `Debug` never shows the password (`SecretString`'s own).
#[derive(Debug)]
pub struct Created {
    pub instance: Instance,
    pub root_password: SecretString,
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
}

/// One account's provider (PV-57). Every call is bounded in time and retried by the rule in
/// `api`; a create is never sent twice when the first may have made something.
pub trait CloudProvider: Send + Sync {
    fn create(&self, request: &CreateInstance) -> BoxFuture<'_, Result<Created, ProviderError>>;
    fn get(&self, id: &str) -> BoxFuture<'_, Result<Instance, ProviderError>>;
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, ProviderError>>;
    fn power(&self, id: &str, power: Power) -> BoxFuture<'_, Result<(), ProviderError>>;
    /// Every region and the sizes it sells now.
    fn offer(&self) -> BoxFuture<'_, Result<Vec<RegionOffer>, ProviderError>>;
    fn set_reverse_dns(
        &self,
        instance: &str,
        address: IpAddr,
        name: &str,
    ) -> BoxFuture<'_, Result<(), ProviderError>>;
    /// The account's company name (PV-55's disposable marker).
    fn company_name(&self) -> BoxFuture<'_, Result<String, ProviderError>>;
    fn delete_instance(&self, id: &str) -> BoxFuture<'_, Result<(), ProviderError>>;
    fn volumes(&self) -> BoxFuture<'_, Result<Vec<Volume>, ProviderError>>;
    fn delete_volume(&self, id: &str) -> BoxFuture<'_, Result<(), ProviderError>>;
    /// Declared for the copy work (PV-36): the account's firewalls.
    fn firewalls(&self) -> BoxFuture<'_, Result<Vec<Firewall>, ProviderError>>;
    /// Declared for the copy work (PV-36): the public IPv4 addresses of two instances in one
    /// region swapped, both at once.
    fn swap_addresses(&self, first: &str, second: &str)
        -> BoxFuture<'_, Result<(), ProviderError>>;
}

/// The most pages one listing reads (a provider that never says "last page" is cut off).
pub const MAX_PAGES: u32 = 200;

/// Reads an address as the provider wrote it, dropping a `/prefix`.
pub fn address(text: &str) -> Result<IpAddr, ProviderError> {
    let bare = text.split('/').next().unwrap_or(text);
    bare.parse()
        .map_err(|_| ProviderError::BadAnswer(format!("{text:?} is not an IP address")))
}

/// Reads the `field` of `value` as a string, or says the answer is not the published shape.
pub fn text(value: &serde_json::Value, field: &str) -> Result<String, ProviderError> {
    match &value[field] {
        serde_json::Value::String(text) => Ok(text.clone()),
        serde_json::Value::Number(number) => Ok(number.to_string()),
        _ => Err(ProviderError::BadAnswer(format!(
            "no {field:?} in {}",
            shown(value)
        ))),
    }
}

/// A value for an error's text, cut short.
pub fn shown(value: &serde_json::Value) -> String {
    let mut text = value.to_string();
    if text.len() > 200 {
        let mut end = 200;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Sends a create at most once in effect (PV-57, issue 29: "a provider answering 429 then 500
/// then success still creates once"): a 429 is sent again after its wait; after any other
/// transient failure (a 5xx, a timeout, a lost connection: it may have been made) the account
/// is searched for the label first, and only when nothing carries it is the create sent again.
pub async fn create_once<'a>(
    api: &'a api::Api,
    attempt: impl Fn() -> BoxFuture<'a, Result<Created, ProviderError>>,
    find: impl Fn() -> BoxFuture<'a, Result<Option<Created>, ProviderError>>,
) -> Result<Created, ProviderError> {
    let mut failures = 0;
    loop {
        let error = match attempt().await {
            Ok(created) => return Ok(created),
            Err(error) => error,
        };
        failures += 1;
        if error.is_transient() && !matches!(error, ProviderError::RateLimited { .. }) {
            if let Some(found) = find().await? {
                tracing::info!(instance = %found.instance.id, "a create that failed had made its instance; taken as made");
                return Ok(found);
            }
        }
        let Some(wait) = api.wait_after(&error, failures, api::Retry::Always) else {
            return Err(error);
        };
        tracing::info!(%error, wait_ms = wait.as_millis() as u64, "create retried");
        tokio::time::sleep(wait).await;
    }
}

/// The instance `label` in `instances`, if any.
pub fn by_label<'a>(instances: &'a [Instance], label: &str) -> Option<&'a Instance> {
    instances.iter().find(|instance| instance.label == label)
}

/// Makes the driver of an account: its provider's base URL (a setting), the shared client and
/// the calls' bounds.
#[derive(Clone)]
pub struct Providers {
    pub linode_base_url: String,
    pub hetzner_base_url: String,
    pub limits: api::Limits,
    pub http: api::Http,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Providers")
            .field("linode_base_url", &self.linode_base_url)
            .field("hetzner_base_url", &self.hetzner_base_url)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Providers {
    /// The driver of one account, with its opened token.
    pub fn driver(
        &self,
        provider: capstan_events::provisioning::CloudProvider,
        token: SecretString,
    ) -> Result<Box<dyn CloudProvider>, ProviderError> {
        use capstan_events::provisioning::CloudProvider as Which;
        Ok(match provider {
            Which::Linode => Box::new(linode::Linode::new(
                &self.linode_base_url,
                token,
                self.http.clone(),
                self.limits,
            )?),
            Which::Hetzner => Box::new(hetzner::Hetzner::new(
                &self.hetzner_base_url,
                token,
                self.http.clone(),
                self.limits,
            )?),
        })
    }
}
