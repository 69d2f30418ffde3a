//! The monitor's reach into the world: its resolver, its HTTP checks and its reading of served
//! certificates. Every connection is made by hand to an address chosen here (pinned or
//! resolved, MO-03) so the name stays the one used for SNI and `Host`, and every address is
//! checked against the plane's address policy (`capstan_runtime::outbound`) before it is
//! dialled: a node's reported address or an operator's URL never reaches inside the plane.

pub mod dns;
pub mod edge;
pub mod http;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use crate::settings::MonitorSettings;
use capstan_runtime::outbound::Outbound;

pub use dns::Resolver;

/// Why a look at the world failed, told apart so a caller can tell a timeout from a refusal.
/// Each message is the one a check's reason or a page shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The URL, name or request cannot be used as written.
    #[error("{0}")]
    Unusable(String),
    /// The name does not resolve (no such name, or no address records).
    #[error("{0} does not resolve")]
    NotFound(String),
    /// Resolving the name failed otherwise.
    #[error("resolving {host}: {why}")]
    Resolving { host: String, why: String },
    /// The plane's address policy refuses where it would go.
    #[error("{0}")]
    Refused(String),
    /// No connection could be made.
    #[error("{0}")]
    Unreachable(String),
    /// The TLS handshake failed.
    #[error("{0}")]
    Tls(String),
    /// The other side answered, but not in a way that reads.
    #[error("{0}")]
    BadAnswer(String),
    /// No answer in time.
    #[error("{0}")]
    Timeout(String),
}

/// What every check reaches: the resolver, the two TLS set-ups and the limits.
pub struct Prober {
    pub resolver: Resolver,
    /// Verifies the chain and the name against the system's roots (uptime checks).
    pub verified: tokio_rustls::TlsConnector,
    /// Verifies nothing and keeps the certificate (reading what an origin serves, MO-08).
    pub any: tokio_rustls::TlsConnector,
    pub timeout: Duration,
    pub tls_port: u16,
    /// Which addresses may be dialled.
    pub outbound: Outbound,
}

impl Prober {
    pub fn new(settings: &MonitorSettings, outbound: Outbound) -> anyhow::Result<Prober> {
        Ok(Prober {
            resolver: Resolver::new(settings.resolver.as_deref())?,
            verified: tls::verified_connector(),
            any: tls::any_connector(),
            timeout: settings.timeout(),
            tls_port: settings.tls_port,
            outbound,
        })
    }

    /// For tests: as [`Prober::new`], trusting `extra_roots` besides the system's.
    pub fn with_roots(
        settings: &MonitorSettings,
        outbound: Outbound,
        extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> anyhow::Result<Arc<Prober>> {
        let mut prober = Prober::new(settings, outbound)?;
        prober.verified = tls::verified_connector_with(extra_roots);
        Ok(Arc::new(prober))
    }
}
