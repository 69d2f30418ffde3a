//! Layered configuration: defaults in code < an optional `capstan.toml` (or the file
//! `CAPSTAN_CONFIG` names) < environment variables `CAPSTAN__SECTION__KEY`. With no file and no
//! variables every service runs against `postgres://localhost/capstan` and
//! `nats://127.0.0.1:4222`. Unknown keys are refused, so a typo never passes silently.
#![forbid(unsafe_code)]

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

/// The exit code of a process started with bad configuration (`EX_USAGE`).
pub const EXIT_BAD_CONFIG: i32 = 64;

/// Everything a Capstan process can be told.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub nats: NatsSettings,
    pub gateway: GatewaySettings,
    pub agent_channel: AgentChannelSettings,
    pub telemetry: TelemetrySettings,
    pub bus: BusSettings,
    pub outbox: OutboxSettings,
    pub incidents: IncidentsSettings,
    pub monitor: MonitorSettings,
    pub backups: BackupsSettings,
    pub outbound: OutboundSettings,
}

/// Where the plane may connect on a node's or an operator's word (webhooks, uptime checks,
/// the edge probe, certificate reads): the one address policy (`capstan_runtime::outbound`,
/// docs/security.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundSettings {
    /// Lets those connections reach loopback, private, link-local and other non-public
    /// addresses, and webhooks use plain `http://` (labs and tests; never in production).
    pub allow_private: bool,
}

/// The backups service: the key its targets' credentials are sealed with at rest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupsSettings {
    /// 32 random bytes as 64 hex digits (`openssl rand -hex 32`), sealing the targets' storage
    /// credentials at rest. A secret; `SEAL_KEY_FILE` reads it from a file. Without it no
    /// target can be added or used (the service says so), and everything else still runs.
    pub seal_key: Option<SecretString>,
    pub seal_key_file: Option<PathBuf>,
    /// Where `capstan all` makes and keeps its seal key when neither `seal_key` nor
    /// `seal_key_file` is set (issue 27; [`Settings::generated_seal_key_file`]). Unset: beside
    /// the NATS password file when one is set, else [`DEFAULT_STATE_DIR`].
    pub seal_key_dir: Option<PathBuf>,
    /// How long a presigned URL the broker hands a node stays valid (60..=3600 s).
    pub url_ttl_secs: u32,
    /// How often the schedule looks for due backups and verifies (1..=3600 s; BK-05).
    pub schedule_secs: u32,
}

/// Where the single-machine plane keeps what it generates (the directory `deploy/local/up`
/// keeps the NATS password in, `CAPSTAN_LOCAL_STATE`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/capstan";

/// The name of the seal key file `capstan all` makes.
pub const GENERATED_SEAL_KEY: &str = "backups-seal.key";

impl BackupsSettings {
    /// Takes the seal key `capstan all` made or found in `file` (64 hex digits), as if
    /// `seal_key_file` had named it; refused, naming the file, when it is not a seal key.
    pub fn use_generated_key(&mut self, file: PathBuf, text: &str) -> Result<(), SettingsError> {
        if parse_seal_key(text).is_none() {
            return Err(SettingsError::BadValue {
                key: "backups.seal_key_dir",
                reason: format!(
                    "{} does not hold a seal key (64 hex digits)",
                    file.display()
                ),
            });
        }
        self.seal_key = Some(SecretString::from(text.trim().to_string()));
        self.seal_key_file = Some(file);
        Ok(())
    }

    /// The seal key's 32 bytes, when one is set (validated at load).
    pub fn seal_key(&self) -> Option<[u8; 32]> {
        self.seal_key
            .as_ref()
            .and_then(|key| parse_seal_key(key.expose_secret()))
    }
    pub fn url_ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.url_ttl_secs))
    }
    pub fn schedule_every(&self) -> Duration {
        Duration::from_secs(u64::from(self.schedule_secs))
    }
}

/// 64 hex digits as 32 bytes.
fn parse_seal_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; 32];
    for (index, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(key)
}

/// The monitor service: its uptime and certificate checks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSettings {
    /// The shortest interval a node's uptime check may be set to (the default is 60 s).
    pub min_interval_secs: u32,
    /// The DNS server the checks resolve names with (`ip` or `ip:port`, port 53 when absent);
    /// the system's resolver when unset.
    pub resolver: Option<String>,
    /// The port the origin's served certificate is read on.
    pub tls_port: u16,
    /// Seconds a check may take before it fails as a stall.
    pub timeout_secs: u32,
    /// Seconds between two reads of a node's served certificate.
    pub cert_interval_secs: u32,
    /// A certificate expiring within this many days is a problem (MO-09's reason 2).
    pub cert_warn_days: u32,
    /// Milliseconds between two looks for checks that are due.
    pub tick_ms: u64,
    /// Checks run at once, at most.
    pub concurrency: u32,
    /// Seconds between two status passes, each asking stale nodes for `check_status` and
    /// `host_report` (MO-05, MO-06).
    pub status_pass_secs: u32,
    /// The status window: a node with no such job completed (or queued, running, or asked for)
    /// inside it is asked for one (`STATUS_REFRESH_SECONDS`).
    pub status_refresh_secs: u32,
    /// host_report's window while a node's data root is being encrypted, decrypted or re-keyed
    /// (`DATA_ROOT_RUN_REFRESH_SECONDS`, MO-06).
    pub data_root_refresh_secs: u32,
    /// host_report's window after a reboot was asked, until a report carries a new boot id
    /// (`REBOOT_REFRESH_SECONDS`, MO-06).
    pub reboot_refresh_secs: u32,
}

impl MonitorSettings {
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.timeout_secs))
    }
}

/// The incidents service: its pass, its plane detector, and where signals go.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentsSettings {
    /// Seconds between two reconciler passes (one replica per pass).
    pub pass_secs: u64,
    /// A paired node whose agent has not checked in for this long opens `plane:agent_silent`;
    /// at least 60 (twice the agent channel's heartbeat resolution).
    pub agent_silent_secs: u64,
    /// `smtp://host:port` or `smtps://user:pass@host:465` (STARTTLS when offered on smtp://);
    /// mail is not sent when unset. A secret: it may carry a password. `SMTP_URL_FILE` reads it
    /// from a file.
    pub smtp_url: Option<SecretString>,
    pub smtp_url_file: Option<PathBuf>,
    /// The sender of the plane's mail.
    pub mail_from: String,
    /// The older, webhooks-only form of `outbound.allow_private`, still read: either set to
    /// true lets webhooks reach non-public addresses and plain `http://`.
    pub webhook_allow_private: bool,
    /// Seconds before a failed delivery's first retry; each further failure doubles it.
    pub retry_first_secs: u64,
    /// Milliseconds between two looks for deliveries that are due.
    pub deliver_interval_ms: u64,
}

impl IncidentsSettings {
    pub fn pass_interval(&self) -> Duration {
        Duration::from_secs(self.pass_secs)
    }
    pub fn deliver_interval(&self) -> Duration {
        Duration::from_millis(self.deliver_interval_ms)
    }
    /// The SMTP URL, for the one place that connects.
    pub fn smtp_url(&self) -> Option<&str> {
        self.smtp_url.as_ref().map(|url| url.expose_secret())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// A secret: it may carry a password. `CAPSTAN__DATABASE__URL_FILE` reads it from a file.
    pub url: SecretString,
    pub url_file: Option<PathBuf>,
    /// Connections each service keeps in its pool.
    pub max_connections: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSettings {
    /// `nats://host:4222`, or `tls://host:4222` to require TLS.
    pub url: String,
    /// The service's NATS user (`agent_channel`, `gateway`, ... or `all` for `capstan all`),
    /// with `password` or `password_file`. With no credentials set the connection offers none,
    /// as a local server without authorization expects.
    pub user: Option<String>,
    /// A secret; `CAPSTAN__NATS__PASSWORD_FILE` reads it from a file instead.
    pub password: Option<SecretString>,
    pub password_file: Option<PathBuf>,
    /// An nkey seed (`SU...`), instead of a user and password; a secret, with a `_FILE` form.
    pub nkey_seed: Option<SecretString>,
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (user JWT and seed), for a server run in operator (JWT) mode.
    pub creds_file: Option<PathBuf>,
    /// PEM certificates the server's must chain to; setting it requires TLS.
    pub tls_ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for a server that verifies clients.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

/// How a process proves itself to NATS, read from [`NatsSettings`].
#[derive(Debug, Clone, PartialEq)]
pub enum NatsCredentials<'a> {
    None,
    UserPassword { user: &'a str, password: &'a str },
    NkeySeed(&'a str),
    CredsFile(&'a std::path::Path),
}

impl NatsSettings {
    /// The credentials to offer; validated when the settings load, so at most one kind is set.
    pub fn credentials(&self) -> NatsCredentials<'_> {
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            return NatsCredentials::UserPassword {
                user,
                password: password.expose_secret(),
            };
        }
        if let Some(seed) = &self.nkey_seed {
            return NatsCredentials::NkeySeed(seed.expose_secret());
        }
        if let Some(path) = &self.creds_file {
            return NatsCredentials::CredsFile(path);
        }
        NatsCredentials::None
    }

    fn resolve_files(&mut self) -> Result<(), SettingsError> {
        if let Some(path) = &self.password_file {
            self.password = Some(read_secret("nats.password_file", path)?);
        }
        if let Some(path) = &self.nkey_seed_file {
            self.nkey_seed = Some(read_secret("nats.nkey_seed_file", path)?);
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let bad = |key, reason: &str| {
            Err(SettingsError::BadValue {
                key,
                reason: reason.to_string(),
            })
        };
        if !(self.url.starts_with("nats://") || self.url.starts_with("tls://")) {
            return bad("nats.url", "must start with nats:// or tls://");
        }
        // The URL is logged and shown in errors; a secret in it would be too.
        if self.url.contains('@') {
            return bad(
                "nats.url",
                "must not carry credentials: set nats.user and nats.password (or their _file)",
            );
        }
        match (&self.user, &self.password) {
            (Some(user), _) if user.trim().is_empty() => {
                return bad("nats.user", "must not be empty")
            }
            (Some(_), None) => return bad("nats.password", "is needed with nats.user"),
            (None, Some(_)) => return bad("nats.user", "is needed with nats.password"),
            _ => {}
        }
        let kinds = [
            self.user.is_some(),
            self.nkey_seed.is_some(),
            self.creds_file.is_some(),
        ];
        if kinds.into_iter().filter(|set| *set).count() > 1 {
            return bad(
                "nats.user",
                "set one of nats.user with nats.password, nats.nkey_seed, nats.creds_file",
            );
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return bad(
                "nats.tls_cert_file",
                "nats.tls_cert_file and nats.tls_key_file go together",
            );
        }
        for (key, path) in [
            ("nats.creds_file", &self.creds_file),
            ("nats.tls_ca_file", &self.tls_ca_file),
            ("nats.tls_cert_file", &self.tls_cert_file),
            ("nats.tls_key_file", &self.tls_key_file),
        ] {
            if let Some(path) = path {
                if let Err(error) = std::fs::metadata(path) {
                    return bad(key, &format!("cannot read {}: {error}", path.display()));
                }
            }
        }
        Ok(())
    }
}

/// A secret kept in a file (a mounted secret), without its final line break.
fn read_secret(key: &'static str, path: &std::path::Path) -> Result<SecretString, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|error| SettingsError::BadValue {
        key,
        reason: format!("cannot read {}: {error}", path.display()),
    })?;
    Ok(SecretString::from(text.trim().to_string()))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    pub listen: SocketAddr,
    /// The operator UI's name for this plane, shown in its top bar and page titles.
    pub plane_name: String,
    /// Minutes a browser session may sit unused before it ends.
    pub session_idle_minutes: u64,
    /// Hours a browser session lasts at most, however busy.
    pub session_lifetime_hours: u64,
    /// Failed sign-ins to one operator name within the window before it is throttled.
    pub sign_in_account_failures: u32,
    /// Failed sign-ins from one address within the window before it is throttled.
    pub sign_in_address_failures: u32,
    /// The window sign-in failures are counted over, in minutes.
    pub sign_in_window_minutes: u64,
    /// Proxies in front of the gateway whose client address header is believed (GW-07):
    /// addresses or networks, comma-separated (`10.0.0.0/8, 192.0.2.5`). Empty: the TCP peer
    /// is every request's address.
    pub trusted_proxies: String,
    /// The header those proxies put the client's address in: `x-forwarded-for` (a list, each
    /// proxy appending), or a single-address one such as `cf-connecting-ip`.
    pub client_address_header: String,
    /// Connections open at once; one more is refused at once (and counted in
    /// `capstan_gateway_connections_refused_total`). Every agent holds one, nearly always in a
    /// long poll, so this must stay above the fleet's size (and below the process's file limit).
    pub max_connections: u32,
    /// Seconds a request head may take to arrive, from its first byte (and a new connection's
    /// first request from the connection). On hyper's path (operators, browsers) this also
    /// bounds an idle keep-alive connection.
    pub header_timeout_secs: u64,
    /// Seconds an agent's keep-alive connection may sit idle between requests.
    pub idle_timeout_secs: u64,
    /// The slowest a request body or an answer may move, in bytes a second, once a grace of
    /// `header_timeout_secs` has passed: a sender or reader slower than this is dropped.
    pub min_rate_bytes_per_sec: u64,
}

impl GatewaySettings {
    pub fn session_idle(&self) -> Duration {
        Duration::from_secs(self.session_idle_minutes * 60)
    }
    pub fn session_lifetime(&self) -> Duration {
        Duration::from_secs(self.session_lifetime_hours * 3600)
    }
    pub fn sign_in_window(&self) -> Duration {
        Duration::from_secs(self.sign_in_window_minutes * 60)
    }
    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs(self.header_timeout_secs)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    /// [`GatewaySettings::trusted_proxies`] read as networks (a lone address is a /32 or
    /// /128); validated when the settings load.
    pub fn trusted_networks(&self) -> Result<Vec<ipnet::IpNet>, String> {
        self.trusted_proxies
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        format!("{entry:?} is not an address or a network like 10.0.0.0/8")
                    })
            })
            .collect()
    }
}

/// The agent channel's request meters (PROTOCOL.md "Limits").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentChannelSettings {
    /// Agent requests a minute that prove no node (unsigned, or failing their signature),
    /// counted per source network: an IPv4 address, an IPv6 /64.
    pub network_requests_per_minute: u32,
    /// Requests a minute whose signature proves a node, counted per node: every one, successful
    /// claims and replays included.
    pub node_requests_per_minute: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    /// An `EnvFilter` directive such as `info,capstan_bus=debug`.
    pub log_level: String,
    /// OTLP/HTTP endpoint (`http://collector:4318`, or `https://` verified against the system's
    /// certificate authorities, or `SSL_CERT_FILE`'s); traces are exported only when set.
    pub otlp_endpoint: Option<String>,
    /// Where a service running alone serves `/metrics`; the gateway always serves its own.
    pub metrics_listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusSettings {
    /// Deliveries of one message before it is dead-lettered.
    pub max_deliver: u32,
    /// Seconds a consumer has to acknowledge a message before it is redelivered.
    pub ack_wait_secs: u64,
    /// Seconds an rpc waits for its answer.
    pub rpc_timeout_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxSettings {
    /// Rows the relay publishes in one pipelined batch.
    pub batch_size: u32,
    /// Milliseconds between sweeps when no notification arrives (notifications wake it early).
    pub poll_interval_ms: u64,
}

impl BusSettings {
    pub fn ack_wait(&self) -> Duration {
        Duration::from_secs(self.ack_wait_secs)
    }
    pub fn rpc_timeout(&self) -> Duration {
        Duration::from_secs(self.rpc_timeout_secs)
    }
}

impl OutboxSettings {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
}

impl DatabaseSettings {
    /// The connection string, for the one place that connects.
    pub fn url(&self) -> &str {
        self.url.expose_secret()
    }
}

/// Configuration that cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Invalid(String),
    #[error("configuration key {key}: {reason}")]
    BadValue { key: &'static str, reason: String },
}

const DEFAULTS: &[(&str, &str)] = &[
    ("database.url", "postgres://localhost/capstan"),
    ("database.max_connections", "5"),
    ("nats.url", "nats://127.0.0.1:4222"),
    ("gateway.listen", "127.0.0.1:8080"),
    ("gateway.plane_name", "Capstan"),
    ("gateway.session_idle_minutes", "30"),
    ("gateway.session_lifetime_hours", "12"),
    ("gateway.sign_in_account_failures", "5"),
    ("gateway.sign_in_address_failures", "20"),
    ("gateway.sign_in_window_minutes", "15"),
    ("gateway.trusted_proxies", ""),
    ("gateway.client_address_header", "x-forwarded-for"),
    ("gateway.max_connections", "20000"),
    ("gateway.header_timeout_secs", "5"),
    ("gateway.idle_timeout_secs", "75"),
    ("gateway.min_rate_bytes_per_sec", "1024"),
    ("agent_channel.network_requests_per_minute", "120"),
    ("agent_channel.node_requests_per_minute", "600"),
    ("telemetry.log_format", "pretty"),
    ("telemetry.log_level", "info"),
    ("bus.max_deliver", "5"),
    ("bus.ack_wait_secs", "30"),
    ("bus.rpc_timeout_secs", "5"),
    ("outbox.batch_size", "256"),
    ("outbox.poll_interval_ms", "1000"),
    ("incidents.pass_secs", "60"),
    ("incidents.agent_silent_secs", "600"),
    ("incidents.mail_from", "capstan@localhost"),
    ("incidents.webhook_allow_private", "false"),
    ("outbound.allow_private", "false"),
    ("incidents.retry_first_secs", "10"),
    ("incidents.deliver_interval_ms", "1000"),
    ("monitor.min_interval_secs", "30"),
    ("monitor.tls_port", "443"),
    ("monitor.timeout_secs", "10"),
    ("monitor.cert_interval_secs", "3600"),
    ("monitor.cert_warn_days", "21"),
    ("monitor.tick_ms", "1000"),
    ("monitor.concurrency", "256"),
    ("backups.url_ttl_secs", "600"),
    ("backups.schedule_secs", "60"),
    ("monitor.status_pass_secs", "900"),
    ("monitor.status_refresh_secs", "3600"),
    ("monitor.data_root_refresh_secs", "300"),
    ("monitor.reboot_refresh_secs", "120"),
];

impl Settings {
    /// The seal key file `capstan all` makes when none is set (issue 27): in
    /// `backups.seal_key_dir`, else beside the NATS password (`nats.password_file`), else in
    /// [`DEFAULT_STATE_DIR`]; `None` when a seal key is set.
    pub fn generated_seal_key_file(&self) -> Option<PathBuf> {
        if self.backups.seal_key.is_some() || self.backups.seal_key_file.is_some() {
            return None;
        }
        let dir = match (&self.backups.seal_key_dir, &self.nats.password_file) {
            (Some(dir), _) => dir.clone(),
            (None, Some(password)) => password
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf),
            (None, None) => PathBuf::from(DEFAULT_STATE_DIR),
        };
        Some(dir.join(GENERATED_SEAL_KEY))
    }

    /// Defaults < `capstan.toml` (or `$CAPSTAN_CONFIG`) < `CAPSTAN__*` environment variables.
    pub fn load() -> Result<Settings, SettingsError> {
        let file = match std::env::var("CAPSTAN_CONFIG") {
            Ok(path) => Some(path),
            Err(_) => std::path::Path::new("capstan.toml")
                .exists()
                .then(|| "capstan.toml".to_string()),
        };
        Self::load_from(file.as_deref(), std::env::vars())
    }

    /// Defaults < `file` (which must exist when named) < `environment`, where only the
    /// `CAPSTAN__*` variables are read; tests use it to point a process at their own servers.
    pub fn load_from(
        file: Option<&str>,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let mut builder = config::Config::builder();
        for (key, value) in DEFAULTS {
            builder = builder
                .set_default(*key, *value)
                .map_err(|error| SettingsError::Invalid(error.to_string()))?;
        }
        if let Some(file) = file {
            builder = builder.add_source(config::File::new(file, config::FileFormat::Toml));
        }
        let environment: config::Map<String, String> = environment
            .into_iter()
            .filter(|(key, _)| key.starts_with("CAPSTAN__"))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("CAPSTAN")
                .prefix_separator("__")
                .separator("__")
                .source(Some(environment)),
        );
        let mut settings: Settings = builder
            .build()
            .and_then(|config| config.try_deserialize())
            .map_err(|error| SettingsError::Invalid(error.to_string()))?;
        settings.resolve_files()?;
        settings.validate()?;
        Ok(settings)
    }

    fn resolve_files(&mut self) -> Result<(), SettingsError> {
        if let Some(path) = &self.database.url_file {
            let url = std::fs::read_to_string(path).map_err(|error| SettingsError::BadValue {
                key: "database.url_file",
                reason: format!("cannot read {}: {error}", path.display()),
            })?;
            self.database.url = SecretString::from(url.trim().to_string());
        }
        if let Some(path) = &self.incidents.smtp_url_file {
            let url = std::fs::read_to_string(path).map_err(|error| SettingsError::BadValue {
                key: "incidents.smtp_url_file",
                reason: format!("cannot read {}: {error}", path.display()),
            })?;
            self.incidents.smtp_url = Some(SecretString::from(url.trim().to_string()));
        }
        if let Some(path) = &self.backups.seal_key_file {
            let key = std::fs::read_to_string(path).map_err(|error| SettingsError::BadValue {
                key: "backups.seal_key_file",
                reason: format!("cannot read {}: {error}", path.display()),
            })?;
            self.backups.seal_key = Some(SecretString::from(key.trim().to_string()));
        }
        self.nats.resolve_files()
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let url = self.database.url();
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(SettingsError::BadValue {
                key: "database.url",
                reason: "must start with postgres:// or postgresql://".into(),
            });
        }
        if self.database.max_connections == 0 {
            return Err(SettingsError::BadValue {
                key: "database.max_connections",
                reason: "must be at least 1".into(),
            });
        }
        self.nats.validate()?;
        if let Some(key) = &self.backups.seal_key {
            if parse_seal_key(key.expose_secret()).is_none() {
                return Err(SettingsError::BadValue {
                    key: "backups.seal_key",
                    reason: "must be 64 hex digits (32 random bytes: openssl rand -hex 32)".into(),
                });
            }
        }
        if !(60..=3600).contains(&self.backups.url_ttl_secs) {
            return Err(SettingsError::BadValue {
                key: "backups.url_ttl_secs",
                reason: "must be from 60 to 3600 seconds".into(),
            });
        }
        if !(1..=3600).contains(&self.backups.schedule_secs) {
            return Err(SettingsError::BadValue {
                key: "backups.schedule_secs",
                reason: "must be from 1 to 3600 seconds".into(),
            });
        }
        let incidents = &self.incidents;
        if !(1..=3600).contains(&incidents.pass_secs) {
            return Err(SettingsError::BadValue {
                key: "incidents.pass_secs",
                reason: "must be from 1 to 3600 seconds".into(),
            });
        }
        if !(60..=604_800).contains(&incidents.agent_silent_secs) {
            return Err(SettingsError::BadValue {
                key: "incidents.agent_silent_secs",
                reason: "must be from 60 (twice the agent channel's heartbeat resolution) to 604800 seconds".into(),
            });
        }
        if let Some(url) = incidents.smtp_url() {
            if !(url.starts_with("smtp://") || url.starts_with("smtps://")) {
                return Err(SettingsError::BadValue {
                    key: "incidents.smtp_url",
                    reason: "must start with smtp:// or smtps://".into(),
                });
            }
        }
        if !(1..=3600).contains(&incidents.retry_first_secs) {
            return Err(SettingsError::BadValue {
                key: "incidents.retry_first_secs",
                reason: "must be from 1 to 3600 seconds".into(),
            });
        }
        if !(10..=60_000).contains(&incidents.deliver_interval_ms) {
            return Err(SettingsError::BadValue {
                key: "incidents.deliver_interval_ms",
                reason: "must be from 10 to 60000 milliseconds".into(),
            });
        }
        let monitor = &self.monitor;
        for (key, value, least, most) in [
            (
                "monitor.min_interval_secs",
                u64::from(monitor.min_interval_secs),
                1,
                3600,
            ),
            (
                "monitor.timeout_secs",
                u64::from(monitor.timeout_secs),
                1,
                60,
            ),
            (
                "monitor.cert_interval_secs",
                u64::from(monitor.cert_interval_secs),
                1,
                86_400,
            ),
            (
                "monitor.cert_warn_days",
                u64::from(monitor.cert_warn_days),
                1,
                365,
            ),
            ("monitor.tick_ms", monitor.tick_ms, 10, 60_000),
            (
                "monitor.concurrency",
                u64::from(monitor.concurrency),
                1,
                10_000,
            ),
            ("monitor.tls_port", u64::from(monitor.tls_port), 1, 65_535),
            (
                "monitor.status_pass_secs",
                u64::from(monitor.status_pass_secs),
                1,
                86_400,
            ),
            (
                "monitor.status_refresh_secs",
                u64::from(monitor.status_refresh_secs),
                1,
                86_400,
            ),
            (
                "monitor.data_root_refresh_secs",
                u64::from(monitor.data_root_refresh_secs),
                1,
                86_400,
            ),
            (
                "monitor.reboot_refresh_secs",
                u64::from(monitor.reboot_refresh_secs),
                1,
                86_400,
            ),
        ] {
            if !(least..=most).contains(&value) {
                return Err(SettingsError::BadValue {
                    key,
                    reason: format!("must be from {least} to {most}"),
                });
            }
        }
        if let Some(resolver) = &monitor.resolver {
            if resolver.parse::<std::net::IpAddr>().is_err()
                && resolver.parse::<SocketAddr>().is_err()
            {
                return Err(SettingsError::BadValue {
                    key: "monitor.resolver",
                    reason: "must be an IP address, with or without a port".into(),
                });
            }
        }
        let gateway = &self.gateway;
        let plane_name = gateway.plane_name.trim();
        if plane_name.is_empty()
            || plane_name.chars().count() > 64
            || plane_name.chars().any(char::is_control)
        {
            return Err(SettingsError::BadValue {
                key: "gateway.plane_name",
                reason: "must be 1 to 64 characters without control characters".into(),
            });
        }
        for (key, value, most) in [
            (
                "gateway.session_idle_minutes",
                gateway.session_idle_minutes,
                24 * 60,
            ),
            (
                "gateway.session_lifetime_hours",
                gateway.session_lifetime_hours,
                24 * 30,
            ),
            (
                "gateway.sign_in_window_minutes",
                gateway.sign_in_window_minutes,
                24 * 60,
            ),
            (
                "gateway.sign_in_account_failures",
                u64::from(gateway.sign_in_account_failures),
                1000,
            ),
            (
                "gateway.sign_in_address_failures",
                u64::from(gateway.sign_in_address_failures),
                100_000,
            ),
            (
                "gateway.max_connections",
                u64::from(gateway.max_connections),
                1_000_000,
            ),
            (
                "gateway.header_timeout_secs",
                gateway.header_timeout_secs,
                300,
            ),
            ("gateway.idle_timeout_secs", gateway.idle_timeout_secs, 3600),
            (
                "gateway.min_rate_bytes_per_sec",
                gateway.min_rate_bytes_per_sec,
                1 << 30,
            ),
        ] {
            if value == 0 || value > most {
                return Err(SettingsError::BadValue {
                    key,
                    reason: format!("must be between 1 and {most}"),
                });
            }
        }
        if let Err(reason) = gateway.trusted_networks() {
            return Err(SettingsError::BadValue {
                key: "gateway.trusted_proxies",
                reason,
            });
        }
        let header = &gateway.client_address_header;
        if header.is_empty()
            || !header
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        {
            return Err(SettingsError::BadValue {
                key: "gateway.client_address_header",
                reason: "must be a header name: letters, digits, '-' or '_'".into(),
            });
        }
        for (key, value) in [
            (
                "agent_channel.network_requests_per_minute",
                self.agent_channel.network_requests_per_minute,
            ),
            (
                "agent_channel.node_requests_per_minute",
                self.agent_channel.node_requests_per_minute,
            ),
        ] {
            if value == 0 || value > 1_000_000 {
                return Err(SettingsError::BadValue {
                    key,
                    reason: "must be between 1 and 1000000".into(),
                });
            }
        }
        if self.bus.max_deliver == 0 {
            return Err(SettingsError::BadValue {
                key: "bus.max_deliver",
                reason: "must be at least 1".into(),
            });
        }
        if self.outbox.batch_size == 0 || self.outbox.batch_size > 10_000 {
            return Err(SettingsError::BadValue {
                key: "outbox.batch_size",
                reason: "must be between 1 and 10000".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn private_targets_are_refused_unless_outbound_allow_private_is_set() {
        let settings = Settings::load_from(None, env(&[])).unwrap();
        assert!(!settings.outbound.allow_private);
        assert!(!settings.incidents.webhook_allow_private);
        let lab = Settings::load_from(None, env(&[("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true")]))
            .unwrap();
        assert!(lab.outbound.allow_private);
        let error = Settings::load_from(None, env(&[("CAPSTAN__OUTBOUND__ALLOW_PRIVAT", "true")]))
            .unwrap_err();
        assert!(error.to_string().contains("allow_privat"), "{error}");
    }

    #[test]
    fn with_nothing_set_the_plane_talks_to_the_local_servers() {
        let settings = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(settings.database.url(), "postgres://localhost/capstan");
        assert_eq!(settings.nats.url, "nats://127.0.0.1:4222");
        assert_eq!(settings.gateway.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(settings.telemetry.otlp_endpoint, None);
        assert_eq!(settings.gateway.plane_name, "Capstan");
        assert_eq!(
            settings.gateway.session_idle(),
            Duration::from_secs(30 * 60)
        );
        assert_eq!(
            settings.gateway.session_lifetime(),
            Duration::from_secs(12 * 3600)
        );
        assert_eq!(
            (
                settings.gateway.sign_in_account_failures,
                settings.gateway.sign_in_address_failures,
                settings.gateway.sign_in_window()
            ),
            (5, 20, Duration::from_secs(15 * 60))
        );
        assert_eq!(
            (
                settings.agent_channel.network_requests_per_minute,
                settings.agent_channel.node_requests_per_minute
            ),
            (120, 600),
            "PROTOCOL.md's defaults"
        );
    }

    // The gateway's connections (docs/security.md "The gateway's connections"): the cap fits a
    // 10,000-agent fleet of long polls, each holding one connection, with room to spare.
    #[test]
    fn the_gateways_connection_limits_have_defaults_an_environment_overrides_and_bounds() {
        let settings = Settings::load_from(None, env(&[])).unwrap();
        let gateway = &settings.gateway;
        assert_eq!(
            (
                gateway.max_connections,
                gateway.header_timeout(),
                gateway.idle_timeout(),
                gateway.min_rate_bytes_per_sec
            ),
            (
                20_000,
                Duration::from_secs(5),
                Duration::from_secs(75),
                1024
            )
        );
        assert!(gateway.max_connections >= 10_000 + 1_000);
        let settings = Settings::load_from(
            None,
            env(&[
                ("CAPSTAN__GATEWAY__MAX_CONNECTIONS", "50"),
                ("CAPSTAN__GATEWAY__HEADER_TIMEOUT_SECS", "2"),
            ]),
        )
        .unwrap();
        assert_eq!(settings.gateway.max_connections, 50);
        assert_eq!(settings.gateway.header_timeout(), Duration::from_secs(2));
        for key in [
            "max_connections",
            "header_timeout_secs",
            "idle_timeout_secs",
            "min_rate_bytes_per_sec",
        ] {
            let variable = format!("CAPSTAN__GATEWAY__{}", key.to_ascii_uppercase());
            let error = Settings::load_from(None, env(&[(variable.as_str(), "0")]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(&format!("gateway.{key}")), "{error}");
        }
    }

    #[test]
    fn the_operator_ui_settings_are_bounded_by_name() {
        for (key, value, named) in [
            (
                "CAPSTAN__GATEWAY__SESSION_IDLE_MINUTES",
                "0",
                "gateway.session_idle_minutes",
            ),
            (
                "CAPSTAN__GATEWAY__SIGN_IN_ACCOUNT_FAILURES",
                "0",
                "gateway.sign_in_account_failures",
            ),
            ("CAPSTAN__GATEWAY__PLANE_NAME", " ", "gateway.plane_name"),
            (
                "CAPSTAN__GATEWAY__TRUSTED_PROXIES",
                "10.0.0.0/8, proxy.example",
                "gateway.trusted_proxies",
            ),
            (
                "CAPSTAN__GATEWAY__CLIENT_ADDRESS_HEADER",
                "x forwarded",
                "gateway.client_address_header",
            ),
            (
                "CAPSTAN__AGENT_CHANNEL__NODE_REQUESTS_PER_MINUTE",
                "0",
                "agent_channel.node_requests_per_minute",
            ),
        ] {
            let error = Settings::load_from(None, env(&[(key, value)]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(named), "{error}");
        }
    }

    #[test]
    fn environment_variables_override_defaults_with_double_underscores() {
        let settings = Settings::load_from(
            None,
            env(&[
                ("CAPSTAN__DATABASE__URL", "postgres://db/other"),
                ("CAPSTAN__GATEWAY__LISTEN", "0.0.0.0:9000"),
                ("CAPSTAN__BUS__MAX_DELIVER", "3"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(settings.database.url(), "postgres://db/other");
        assert_eq!(settings.gateway.listen.port(), 9000);
        assert_eq!(settings.bus.max_deliver, 3);
    }

    #[test]
    fn capstan_alls_own_seal_key_sits_in_its_dir_else_beside_the_nats_password_else_in_var_lib() {
        let none = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(
            none.generated_seal_key_file(),
            Some(PathBuf::from("/var/lib/capstan/backups-seal.key"))
        );
        let dir = tempfile::tempdir().unwrap();
        let password = dir.path().join("nats-all.password");
        std::fs::write(&password, "secret\n").unwrap();
        let beside = Settings::load_from(
            None,
            env(&[
                ("CAPSTAN__NATS__USER", "all"),
                ("CAPSTAN__NATS__PASSWORD_FILE", password.to_str().unwrap()),
            ]),
        )
        .unwrap();
        assert_eq!(
            beside.generated_seal_key_file(),
            Some(dir.path().join("backups-seal.key"))
        );
        let named = Settings::load_from(
            None,
            env(&[("CAPSTAN__BACKUPS__SEAL_KEY_DIR", "/srv/keys")]),
        )
        .unwrap();
        assert_eq!(
            named.generated_seal_key_file(),
            Some(PathBuf::from("/srv/keys/backups-seal.key"))
        );
        let set = Settings::load_from(
            None,
            env(&[("CAPSTAN__BACKUPS__SEAL_KEY", &"a".repeat(64))]),
        )
        .unwrap();
        assert_eq!(
            set.generated_seal_key_file(),
            None,
            "a key set is used as it is"
        );
        let mut taken = none.clone();
        let error = taken
            .backups
            .use_generated_key(PathBuf::from("/k"), "not a key")
            .unwrap_err()
            .to_string();
        assert!(error.contains("/k") && error.contains("64 hex"), "{error}");
        assert!(taken.backups.seal_key().is_none());
        taken
            .backups
            .use_generated_key(PathBuf::from("/k"), &format!("{}\n", "0f".repeat(32)))
            .unwrap();
        assert_eq!(taken.backups.seal_key(), Some([0x0f; 32]));
        assert_eq!(taken.backups.seal_key_file, Some(PathBuf::from("/k")));
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let error = Settings::load_from(None, env(&[("CAPSTAN__GATEWAY__LISTN", "x")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("listn"), "{error}");
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let error = Settings::load_from(None, env(&[("CAPSTAN__NATS__URL", "http://x")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("nats.url"), "{error}");
        let error = Settings::load_from(None, env(&[("CAPSTAN__GATEWAY__LISTEN", "nowhere")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("listen"), "{error}");
    }

    #[test]
    fn the_database_url_can_come_from_a_file_and_never_shows_in_debug_output() {
        let dir = std::env::temp_dir().join(format!("capstan-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("url");
        std::fs::write(&path, "postgres://capstan:hunter2@db/capstan\n").unwrap();
        let settings = Settings::load_from(
            None,
            env(&[("CAPSTAN__DATABASE__URL_FILE", path.to_str().unwrap())]),
        )
        .unwrap();
        assert_eq!(
            settings.database.url(),
            "postgres://capstan:hunter2@db/capstan"
        );
        assert!(!format!("{settings:?}").contains("hunter2"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn with_no_nats_credentials_set_the_connection_offers_none() {
        let settings = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(settings.nats.credentials(), NatsCredentials::None);
        assert_eq!(settings.nats.tls_ca_file, None);
    }

    #[test]
    fn nats_credentials_come_from_the_environment_or_a_file_and_never_show_in_debug_output() {
        let settings = Settings::load_from(
            None,
            env(&[
                ("CAPSTAN__NATS__USER", "gateway"),
                ("CAPSTAN__NATS__PASSWORD", "s3cret-in-env"),
            ]),
        )
        .unwrap();
        assert_eq!(
            settings.nats.credentials(),
            NatsCredentials::UserPassword {
                user: "gateway",
                password: "s3cret-in-env"
            }
        );
        assert!(!format!("{settings:?}").contains("s3cret"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "s3cret-in-file\n").unwrap();
        let settings = Settings::load_from(
            None,
            env(&[
                ("CAPSTAN__NATS__USER", "all"),
                ("CAPSTAN__NATS__PASSWORD_FILE", path.to_str().unwrap()),
            ]),
        )
        .unwrap();
        assert_eq!(
            settings.nats.credentials(),
            NatsCredentials::UserPassword {
                user: "all",
                password: "s3cret-in-file"
            }
        );
        assert!(!format!("{settings:?}").contains("s3cret"));
    }

    #[test]
    fn half_or_doubled_nats_credentials_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("plane.creds");
        std::fs::write(&creds, "x").unwrap();
        let creds = creds.to_str().unwrap();
        for (pairs, named) in [
            (vec![("CAPSTAN__NATS__USER", "gateway")], "nats.password"),
            (vec![("CAPSTAN__NATS__PASSWORD", "x")], "nats.user"),
            (
                vec![
                    ("CAPSTAN__NATS__USER", "gateway"),
                    ("CAPSTAN__NATS__PASSWORD", "x"),
                    ("CAPSTAN__NATS__CREDS_FILE", creds),
                ],
                "nats.user",
            ),
            (
                vec![("CAPSTAN__NATS__PASSWORD_FILE", "/nonexistent/capstan")],
                "nats.password_file",
            ),
            (
                vec![("CAPSTAN__NATS__TLS_CA_FILE", "/nonexistent/ca.pem")],
                "nats.tls_ca_file",
            ),
            (
                vec![("CAPSTAN__NATS__TLS_CERT_FILE", creds)],
                "nats.tls_cert_file",
            ),
            (
                vec![("CAPSTAN__NATS__URL", "nats://gateway:hunter2@nats:4222")],
                "nats.url",
            ),
        ] {
            let error = Settings::load_from(None, env(&pairs))
                .unwrap_err()
                .to_string();
            assert!(error.contains(named), "{pairs:?}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn a_file_layer_sits_between_defaults_and_environment() {
        let dir = std::env::temp_dir().join(format!("capstan-toml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("capstan.toml");
        std::fs::write(
            &path,
            "[nats]\nurl = \"nats://file:4222\"\n[gateway]\nlisten = \"127.0.0.1:1\"\n",
        )
        .unwrap();
        let settings = Settings::load_from(
            Some(path.to_str().unwrap()),
            env(&[("CAPSTAN__GATEWAY__LISTEN", "127.0.0.1:2")]),
        )
        .unwrap();
        assert_eq!(settings.nats.url, "nats://file:4222");
        assert_eq!(settings.gateway.listen.port(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
