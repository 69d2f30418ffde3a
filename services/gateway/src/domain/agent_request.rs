//! Which requests the gateway's own connection code answers (`crate::connection`): an agent's,
//! in the one plain case. The rule, on the bytes of a request head: `POST` to one of the agent
//! routes of [`ROUTES`], HTTP/1.1, its body framed by exactly one `Content-Length` (digits only)
//! within the endpoint's limit, and no `Transfer-Encoding`, `Expect` or upgrade. The head is
//! parsed by `httparse`, hyper's own parser; anything else is hyper's to read, with every
//! framing rule beyond this one case.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Uri};
use capstan_events::agent_channel::rpc::AgentEndpoint;

use crate::{route::Route, routes::ROUTES};

/// An agent sends about ten header fields; more, and hyper reads the head.
const MAX_FIELDS: usize = 32;

/// A request head read so far.
pub enum Parsed {
    /// Read whole.
    Complete(Head),
    /// More bytes are needed.
    Partial,
    /// Not a head this rule can read (too many fields, a bad token): hyper reads it.
    Unreadable,
}

/// A request head as read: its length in bytes and, when this path takes it, what it needs.
#[derive(Debug)]
pub struct Head {
    /// Its length in bytes, up to and with the blank line.
    pub length: usize,
    pub lane: Option<Box<Lane>>,
}

/// An agent's request this path answers.
#[derive(Debug)]
pub struct Lane {
    /// Its row of the route table.
    pub route: &'static Route,
    pub endpoint: AgentEndpoint,
    /// The request target: the route's path and any query.
    pub uri: Uri,
    pub headers: HeaderMap,
    pub content_length: usize,
    /// It asked for the connection to end after the answer (`Connection: close`).
    pub close: bool,
    /// The head's length in bytes, up to and with the blank line (its body follows).
    pub head_length: usize,
}

impl Head {
    /// Reads `bytes` as the start of a request.
    pub fn parse(bytes: &[u8]) -> Parsed {
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut request = httparse::Request::new(&mut fields);
        match request.parse(bytes) {
            Ok(httparse::Status::Complete(length)) => Parsed::Complete(Head {
                length,
                lane: Head::lane(&request).map(|mut lane| {
                    lane.head_length = length;
                    lane
                }),
            }),
            Ok(httparse::Status::Partial) => Parsed::Partial,
            // Too many fields, a bad token: hyper reads it and answers as it does.
            Err(_) => Parsed::Unreadable,
        }
    }

    /// The request when this rule takes it; `None` sends it to hyper.
    fn lane(request: &httparse::Request) -> Option<Box<Lane>> {
        let target = request.path?;
        let (route, endpoint) = agent_route(target)?;
        if request.version != Some(1) || request.method != Some(route.method.as_ref()) {
            return None;
        }
        let mut content_length = None;
        let mut close = false;
        let mut headers = HeaderMap::with_capacity(request.headers.len());
        for field in request.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
            if name == header::TRANSFER_ENCODING
                || name == header::EXPECT
                || name == header::UPGRADE
            {
                return None;
            }
            if name == header::CONTENT_LENGTH {
                if content_length.is_some() {
                    return None;
                }
                content_length = Some(decimal(field.value)?);
            }
            if name == header::CONNECTION {
                for token in std::str::from_utf8(field.value).ok()?.split(',') {
                    let token = token.trim();
                    if token.eq_ignore_ascii_case("upgrade") {
                        return None;
                    }
                    close |= token.eq_ignore_ascii_case("close");
                }
            }
            headers.append(name, HeaderValue::from_bytes(field.value).ok()?);
        }
        let content_length = content_length.filter(|length| *length <= endpoint.body_limit())?;
        Some(Box::new(Lane {
            route,
            endpoint,
            uri: Uri::try_from(target).ok()?,
            headers,
            content_length,
            close,
            head_length: 0,
        }))
    }
}

/// The agent route of [`ROUTES`] a request target names (its path, before any query).
fn agent_route(target: &str) -> Option<(&'static Route, AgentEndpoint)> {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    ROUTES.iter().find_map(|route| match route.endpoint {
        Some(endpoint) if route.path == path => Some((route, endpoint)),
        _ => None,
    })
}

/// A `Content-Length` value: digits only (no sign, no space, no list), that fit.
fn decimal(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 12 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::Word as _;

    const CLAIM: &str = "POST /api/v1/agent/claim?wait=0 HTTP/1.1\r\nhost: plane\r\n\
                         content-type: application/json\r\nsignature: sig=:AA==:\r\n";

    fn head(bytes: &str) -> Head {
        match Head::parse(bytes.as_bytes()) {
            Parsed::Complete(head) => head,
            Parsed::Partial => panic!("partial: {bytes:?}"),
            Parsed::Unreadable => panic!("unreadable: {bytes:?}"),
        }
    }

    fn claim(extra: &str) -> String {
        format!("{CLAIM}{extra}\r\n")
    }

    #[test]
    fn an_agents_post_framed_by_one_content_length_is_answered_here() {
        let taken = head(&claim("content-length: 2\r\n"));
        let lane = taken.lane.expect("taken");
        assert_eq!(lane.content_length, 2);
        assert_eq!(lane.uri, "/api/v1/agent/claim?wait=0");
        assert_eq!(lane.headers["signature"], "sig=:AA==:");
        assert!(!lane.close);
        assert_eq!(taken.length, claim("content-length: 2\r\n").len());
        let closing = head(&claim(
            "content-length: 0\r\nconnection: keep-alive, Close\r\n",
        ));
        assert!(closing.lane.expect("taken").close);
        for endpoint in AgentEndpoint::ALL {
            let request = format!(
                "POST /api/v1/agent/{} HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
                endpoint.as_str()
            );
            assert!(head(&request).lane.is_some(), "{request}");
        }
    }

    #[test]
    fn every_other_framing_is_left_to_hyper() {
        let limit = AgentEndpoint::Claim.body_limit();
        for extra in [
            "transfer-encoding: chunked\r\n".to_string(),
            "content-length: 2\r\ntransfer-encoding: chunked\r\n".into(),
            "content-length: 2\r\ncontent-length: 2\r\n".into(),
            "content-length: 2\r\nexpect: 100-continue\r\n".into(),
            "content-length: 2\r\nconnection: upgrade\r\nupgrade: websocket\r\n".into(),
            "content-length: +2\r\n".into(),
            "content-length: 2, 2\r\n".into(),
            "content-length: 99999999999999999999\r\n".into(),
            format!("content-length: {}\r\n", limit + 1),
            // No length at all.
            String::new(),
        ] {
            assert!(head(&claim(&extra)).lane.is_none(), "taken: {extra:?}");
        }
        assert!(head(&claim(&format!("content-length: {limit}\r\n")))
            .lane
            .is_some());
        for request in [
            "GET /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            "POST /api/v1/agent/claim HTTP/1.0\r\ncontent-length: 0\r\n\r\n",
            "POST /api/v1/agent/claimx HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            "POST /api/v1/agent/ HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            "POST /api/v1/joins/1/approve HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
            "POST http://plane/api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(head(request).lane.is_none(), "taken: {request:?}");
        }
        assert!(matches!(
            Head::parse(b"POST /api/v1/agent/claim HTTP/1.1\r\nbad field\r\n\r\n"),
            Parsed::Unreadable
        ));
        assert!(matches!(
            Head::parse(b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-le"),
            Parsed::Partial
        ));
    }
}
