//! The gateway's section of the configuration (`[gateway]`, `CAPSTAN__GATEWAY__*`): where it
//! listens, the operator UI's sessions and sign-in throttle, the proxies it believes, and its
//! connection limits (docs/configuration.md).

use capstan_settings::{all_within, PlaneName, Problem, Section};
use serde::Deserialize;
use std::{net::SocketAddr, time::Duration};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewaySettings {
    pub listen: SocketAddr,
    /// The operator UI's name for this plane, shown in its top bar and page titles.
    pub plane_name: PlaneName,
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

impl Default for GatewaySettings {
    fn default() -> GatewaySettings {
        GatewaySettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            plane_name: PlaneName::default(),
            session_idle_minutes: 30,
            session_lifetime_hours: 12,
            sign_in_account_failures: 5,
            sign_in_address_failures: 20,
            sign_in_window_minutes: 15,
            trusted_proxies: String::new(),
            client_address_header: "x-forwarded-for".into(),
            max_connections: 20_000,
            header_timeout_secs: 5,
            idle_timeout_secs: 75,
            min_rate_bytes_per_sec: 1024,
        }
    }
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
    pub fn trusted_networks(&self) -> Result<Vec<ipnet::IpNet>, Problem> {
        self.trusted_proxies
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        Problem::new(
                            "gateway.trusted_proxies",
                            format!("{entry:?} is not an address or a network like 10.0.0.0/8"),
                        )
                    })
            })
            .collect()
    }

    fn bound_problems(&self) -> Vec<Problem> {
        all_within(&[
            (
                "gateway.session_idle_minutes",
                self.session_idle_minutes,
                1,
                24 * 60,
            ),
            (
                "gateway.session_lifetime_hours",
                self.session_lifetime_hours,
                1,
                24 * 30,
            ),
            (
                "gateway.sign_in_window_minutes",
                self.sign_in_window_minutes,
                1,
                24 * 60,
            ),
            (
                "gateway.sign_in_account_failures",
                u64::from(self.sign_in_account_failures),
                1,
                1000,
            ),
            (
                "gateway.sign_in_address_failures",
                u64::from(self.sign_in_address_failures),
                1,
                100_000,
            ),
            (
                "gateway.max_connections",
                u64::from(self.max_connections),
                1,
                1_000_000,
            ),
            (
                "gateway.header_timeout_secs",
                self.header_timeout_secs,
                1,
                300,
            ),
            ("gateway.idle_timeout_secs", self.idle_timeout_secs, 1, 3600),
            (
                "gateway.min_rate_bytes_per_sec",
                self.min_rate_bytes_per_sec,
                1,
                1 << 30,
            ),
        ])
    }
}

impl Section for GatewaySettings {
    const KEY: &'static str = "gateway";

    fn validate(&self) -> Vec<Problem> {
        let mut problems = self.plane_name.validate();
        problems.extend(self.bound_problems());
        problems.extend(self.trusted_networks().err());
        let header = &self.client_address_header;
        if header.is_empty()
            || !header
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        {
            problems.push(Problem::new(
                "gateway.client_address_header",
                "must be a header name: letters, digits, '-' or '_'",
            ));
        }
        problems
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

    fn load(pairs: &[(&str, &str)]) -> Result<GatewaySettings, capstan_settings::SettingsError> {
        capstan_settings::load_from::<GatewaySettings>(None, env(pairs)).map(|(_, gateway)| gateway)
    }

    #[test]
    fn with_nothing_set_the_gateway_listens_locally_with_the_documented_defaults() {
        let gateway = load(&[]).unwrap();
        assert_eq!(gateway.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(gateway.plane_name.text(), "Capstan");
        assert_eq!(gateway.session_idle(), Duration::from_secs(30 * 60));
        assert_eq!(gateway.session_lifetime(), Duration::from_secs(12 * 3600));
        assert_eq!(
            (
                gateway.sign_in_account_failures,
                gateway.sign_in_address_failures,
                gateway.sign_in_window()
            ),
            (5, 20, Duration::from_secs(15 * 60))
        );
        assert_eq!(gateway.client_address_header, "x-forwarded-for");
        assert!(gateway.trusted_networks().unwrap().is_empty());
    }

    // The gateway's connections (docs/security.md "The gateway's connections"): the cap fits a
    // 10,000-agent fleet of long polls, each holding one connection, with room to spare.
    #[test]
    fn the_gateways_connection_limits_have_defaults_an_environment_overrides_and_bounds() {
        let gateway = load(&[]).unwrap();
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
        let gateway = load(&[
            ("CAPSTAN__GATEWAY__MAX_CONNECTIONS", "50"),
            ("CAPSTAN__GATEWAY__HEADER_TIMEOUT_SECS", "2"),
        ])
        .unwrap();
        assert_eq!(gateway.max_connections, 50);
        assert_eq!(gateway.header_timeout(), Duration::from_secs(2));
        for key in [
            "max_connections",
            "header_timeout_secs",
            "idle_timeout_secs",
            "min_rate_bytes_per_sec",
        ] {
            let variable = format!("CAPSTAN__GATEWAY__{}", key.to_ascii_uppercase());
            let error = load(&[(variable.as_str(), "0")]).unwrap_err().to_string();
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
        ] {
            let error = load(&[(key, value)]).unwrap_err().to_string();
            assert!(error.contains(named), "{error}");
        }
    }

    #[test]
    fn every_bad_gateway_key_is_named_at_once() {
        let error = load(&[
            ("CAPSTAN__GATEWAY__SESSION_IDLE_MINUTES", "0"),
            ("CAPSTAN__GATEWAY__PLANE_NAME", " "),
            ("CAPSTAN__GATEWAY__CLIENT_ADDRESS_HEADER", "x forwarded"),
        ])
        .unwrap_err()
        .to_string();
        for named in [
            "gateway.session_idle_minutes",
            "gateway.plane_name",
            "gateway.client_address_header",
        ] {
            assert!(error.contains(named), "{error}");
        }
    }

    #[test]
    fn environment_variables_override_the_listen_address() {
        let gateway = load(&[("CAPSTAN__GATEWAY__LISTEN", "0.0.0.0:9000")]).unwrap();
        assert_eq!(gateway.listen.port(), 9000);
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let error = load(&[("CAPSTAN__GATEWAY__LISTN", "x")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("listn"), "{error}");
    }

    #[test]
    fn a_bad_listen_address_names_its_key() {
        let error = load(&[("CAPSTAN__GATEWAY__LISTEN", "nowhere")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("listen"), "{error}");
    }

    #[test]
    fn a_file_layer_sits_between_defaults_and_environment() {
        let dir = std::env::temp_dir().join(format!("capstan-gateway-toml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("capstan.toml");
        std::fs::write(
            &path,
            "[nats]\nurl = \"nats://file:4222\"\n[gateway]\nlisten = \"127.0.0.1:1\"\n",
        )
        .unwrap();
        let (settings, gateway) = capstan_settings::load_from::<GatewaySettings>(
            Some(path.to_str().unwrap()),
            env(&[("CAPSTAN__GATEWAY__LISTEN", "127.0.0.1:2")]),
        )
        .unwrap();
        assert_eq!(settings.nats.url, "nats://file:4222");
        assert_eq!(gateway.listen.port(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
