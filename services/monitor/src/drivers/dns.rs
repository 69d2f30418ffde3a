//! The monitor's resolver: hickory against the DNS server `CAPSTAN__MONITOR__RESOLVER` names,
//! or the system's. A and AAAA are both asked, since the pinning rule looks for the node's
//! address among either (MO-03).

use std::net::{IpAddr, SocketAddr};

use hickory_resolver::config::{LookupIpStrategy, NameServerConfigGroup, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::TokioResolver;

use super::ProbeError;

pub struct Resolver {
    inner: TokioResolver,
}

impl Resolver {
    /// `server` is `ip` or `ip:port` (53 when absent); `None` is the system's configuration.
    pub fn new(server: Option<&str>) -> anyhow::Result<Resolver> {
        let mut builder = match server {
            Some(text) => {
                let address = match text.parse::<SocketAddr>() {
                    Ok(address) => address,
                    Err(_) => SocketAddr::new(
                        text.parse::<IpAddr>().map_err(|_| {
                            anyhow::anyhow!("monitor.resolver: {text:?} is not an IP address")
                        })?,
                        53,
                    ),
                };
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[address.ip()], address.port(), true);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, Vec::new(), servers),
                    TokioConnectionProvider::default(),
                )
            }
            None => TokioResolver::builder_tokio()
                .map_err(|error| anyhow::anyhow!("reading the system's resolver: {error}"))?,
        };
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        options.attempts = 1;
        Ok(Resolver {
            inner: builder.build(),
        })
    }

    /// The addresses `host` resolves to (A and AAAA), or why not. An IP literal is itself.
    pub async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, ProbeError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(address) = bare.parse::<IpAddr>() {
            return Ok(vec![address]);
        }
        let found = self
            .inner
            .lookup_ip(format!("{}.", bare.trim_end_matches('.')))
            .await
            .map_err(|error| {
                if error.is_nx_domain() || error.is_no_records_found() {
                    ProbeError::NotFound(host.to_string())
                } else {
                    ProbeError::Resolving {
                        host: host.to_string(),
                        why: error.to_string(),
                    }
                }
            })?;
        let addresses: Vec<IpAddr> = found.iter().collect();
        if addresses.is_empty() {
            return Err(ProbeError::NotFound(host.to_string()));
        }
        Ok(addresses)
    }
}
