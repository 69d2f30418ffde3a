//! What the dashboard of a plane with no nodes says to do first (issue 27): how to install the
//! agent on a machine, with this plane's URL in the command, and what happens next (the join to
//! approve, the fingerprint to compare). The URL is the one the operator's browser reached the
//! plane at, read from its `Host`: the UI's cookies are `Secure`, so a browser signed in
//! anywhere but on a loopback address came over HTTPS.

use axum::http::{header, uri::Authority, HeaderMap};
use std::net::IpAddr;

/// The URL shown when the request named no usable host.
pub const UNKNOWN_PLANE_URL: &str = "https://THIS-PLANE";

/// This plane's URL for an agent's `--management-node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneUrl {
    pub url: String,
    /// Reached at a loopback address: an agent on another machine must use another address.
    pub loopback: bool,
}

/// The plane's URL as the browser reached it: `https://<host>` for any host but a loopback one
/// (`http://`, as the gateway itself listens); a `Host` that is not a plain `host[:port]` is not
/// echoed into a command an operator may paste, [`UNKNOWN_PLANE_URL`] is shown instead.
pub fn plane_url(headers: &HeaderMap) -> PlaneUrl {
    let authority = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .filter(|host| !host.contains('@'))
        .and_then(|host| host.parse::<Authority>().ok());
    let Some(authority) = authority else {
        return PlaneUrl {
            url: UNKNOWN_PLANE_URL.into(),
            loopback: false,
        };
    };
    let host = authority.host();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback());
    let scheme = if loopback { "http" } else { "https" };
    PlaneUrl {
        url: format!("{scheme}://{authority}"),
        loopback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_host(host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, host.parse().unwrap());
        headers
    }

    #[test]
    fn a_plane_reached_by_name_is_given_as_https_with_its_port() {
        assert_eq!(
            plane_url(&with_host("plane.example.com")),
            PlaneUrl {
                url: "https://plane.example.com".into(),
                loopback: false
            }
        );
        assert_eq!(
            plane_url(&with_host("plane.example.com:8443")).url,
            "https://plane.example.com:8443"
        );
        assert_eq!(
            plane_url(&with_host("203.0.113.7")).url,
            "https://203.0.113.7"
        );
    }

    #[test]
    fn a_plane_reached_on_a_loopback_address_is_plain_http_and_said_to_be_loopback() {
        for (host, url) in [
            ("127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("localhost:8080", "http://localhost:8080"),
            ("[::1]:8080", "http://[::1]:8080"),
        ] {
            assert_eq!(
                plane_url(&with_host(host)),
                PlaneUrl {
                    url: url.into(),
                    loopback: true
                },
                "{host}"
            );
        }
    }

    #[test]
    fn a_host_that_is_not_a_plain_authority_is_never_echoed_into_the_command() {
        for host in [
            "user@evil.example",
            "a b",
            "plane.example.com/path",
            "x;rm -rf /",
        ] {
            let Ok(value) = host.parse() else { continue };
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, value);
            assert_eq!(plane_url(&headers).url, UNKNOWN_PLANE_URL, "{host}");
        }
        assert_eq!(plane_url(&HeaderMap::new()).url, UNKNOWN_PLANE_URL);
    }
}
