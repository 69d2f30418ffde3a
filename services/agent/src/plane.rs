//! Talking to the plane (PROTOCOL.md): every request is a signed `POST` of JSON under
//! `/api/v1/agent/`, and every answer is read only up to the size it may have (AG-19).

use bytes::Bytes;
use capstan_events::Word as _;
use capstan_signing::{sign_request, NodeKey};
use capstan_telemetry::tls::HttpsConnector;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::Value;
use std::{net::IpAddr, time::Duration};
use tracing::warn;
use url::Url;

use crate::domain::{backoff, AGENT_VERSION};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long any request may take beyond its long poll.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request did not get an answer the agent can use.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    /// No answer, or a `5xx`: try again later, backing off.
    #[error("the management node cannot be reached: {0}")]
    Unreachable(String),
    /// `429`: wait what `Retry-After` says.
    #[error("the management node asks to wait {} seconds (429 {code})", .wait.as_secs())]
    RateLimited { wait: Duration, code: String },
    /// A `4xx` with the protocol's error body.
    #[error("the management node refused ({status} {code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// An answer that is too large or not the JSON it should be.
    #[error("the management node's answer cannot be read: {0}")]
    BadAnswer(String),
}

crate::domain::refusal!(
    /// A management node's address or a broker's answer refused, the fault named.
    BadAddress
);

/// Why an object at a presigned URL could not be put or got.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("the {method} of {key} cannot be made: {source}")]
    BadRequest {
        method: &'static str,
        key: String,
        #[source]
        source: hyper::http::Error,
    },
    #[error("the {method} of {key} took too long")]
    Timeout { method: &'static str, key: String },
    #[error("the {method} of {key} failed: {reason}")]
    Unreachable {
        method: &'static str,
        key: String,
        reason: String,
    },
    #[error("the storage refused the PUT of {key} ({status}): {body}")]
    Refused {
        key: String,
        status: hyper::StatusCode,
        body: String,
    },
    #[error("the storage answered the GET of {key} with {status}")]
    Answered {
        key: String,
        status: hyper::StatusCode,
    },
    #[error("{key}: {source}")]
    Unreadable {
        key: String,
        #[source]
        source: PlaneError,
    },
}

impl ObjectError {
    /// The storage has no such object.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ObjectError::Answered { status, .. } if *status == hyper::StatusCode::NOT_FOUND)
    }
}

impl PlaneError {
    /// The protocol's error code of a refusal.
    pub fn code(&self) -> Option<&str> {
        match self {
            PlaneError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The management node's address, checked: `https://host[:port]`, or `http://` only to this
/// machine itself (a plane on the same box, or a test); no path, query or user.
pub fn base_url(text: &str) -> Result<String, BadAddress> {
    let url = Url::parse(text.trim()).map_err(|error| format!("{text:?} is not a URL: {error}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the management node's URL must not carry a user or password".into());
    }
    if url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/") {
        return Err(
            "give the management node's address only (https://host[:port]), without a path".into(),
        );
    }
    let Some(host) = url.host_str() else {
        return Err("the management node's URL has no host".into());
    };
    match url.scheme() {
        "https" => {}
        "http" => {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = bare == "localhost"
                || bare
                    .parse::<IpAddr>()
                    .is_ok_and(|address| address.is_loopback());
            if !loopback {
                return Err("the management node must be reached over https".into());
            }
        }
        other => return Err(format!("{other}:// is not https://").into()),
    }
    let mut base = format!("{}://{}", url.scheme(), host);
    if let Some(port) = url.port() {
        base.push_str(&format!(":{port}"));
    }
    Ok(base)
}

/// A client for one management node.
#[derive(Debug, Clone)]
pub struct Plane {
    base: String,
    http: Client<HttpsConnector, Full<Bytes>>,
    local_address: Option<IpAddr>,
}

/// TLS through rustls with the ring provider and the system's trusted roots.
pub(crate) fn https_connector() -> HttpsConnector {
    https_connector_from(None)
}

/// As [`https_connector`], each connection made from `local_address` when one is given.
fn https_connector_from(local_address: Option<IpAddr>) -> HttpsConnector {
    capstan_telemetry::tls::https_connector_from(local_address, Some(CONNECT_TIMEOUT), |error| {
        // No trusted roots on this machine: https will fail to verify, and say why.
        warn!(%error, "no trusted certificate authorities found; https to the management node cannot be verified");
    })
}

impl Plane {
    /// A client for `management_node` whose connections are made from `local_address`
    /// (`CAPSTAN_AGENT_LOCAL_ADDRESS`), or from the system's choice when `None`.
    pub fn new(management_node: &str, local_address: Option<IpAddr>) -> Result<Plane, BadAddress> {
        let base = base_url(management_node)?;
        let http = Client::builder(TokioExecutor::new()).build(https_connector_from(local_address));
        Ok(Plane {
            base,
            http,
            local_address,
        })
    }

    /// The local address this client connects from, when one is set.
    pub fn local_address(&self) -> Option<IpAddr> {
        self.local_address
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `body` to `endpoint`, signed by `key`, and reads a JSON answer of at most
    /// `limit` bytes. `wait` is the long poll the request asks for.
    pub async fn send(
        &self,
        key: &NodeKey,
        endpoint: &str,
        query: &str,
        body: &Value,
        limit: usize,
        wait: Duration,
    ) -> Result<Value, PlaneError> {
        let bytes = self
            .send_for_bytes(key, endpoint, query, body, limit, wait)
            .await?;
        serde_json::from_slice(&bytes)
            .map_err(|error| PlaneError::BadAnswer(format!("not JSON: {error}")))
    }

    /// As [`Plane::send`], but the answer's bytes as they came (an artifact), at most `limit`.
    pub async fn send_for_bytes(
        &self,
        key: &NodeKey,
        endpoint: &str,
        query: &str,
        body: &Value,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<u8>, PlaneError> {
        let path = format!("/api/v1/agent/{endpoint}");
        let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
        let created = chrono::Utc::now().timestamp();
        let headers = sign_request(key, "POST", &path, &bytes, created);
        let request = hyper::Request::post(format!("{}{path}{query}", self.base))
            .header("content-type", "application/json")
            .header("user-agent", format!("capstan-agent/{AGENT_VERSION}"))
            .header("content-digest", headers.content_digest)
            .header("signature-input", headers.signature_input)
            .header("signature", headers.signature)
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|error| {
                PlaneError::BadAnswer(format!("the request cannot be made: {error}"))
            })?;
        let limit_time = REQUEST_TIMEOUT + wait;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|error| PlaneError::Unreachable(error_chain(&error)))?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            let answer = read_capped(response.into_body(), limit).await;
            Ok::<_, PlaneError>((status, retry_after, answer))
        };
        let (status, retry_after, answer) = tokio::time::timeout(limit_time, exchange)
            .await
            .map_err(|_| {
                PlaneError::Unreachable(format!(
                    "no answer within {} seconds",
                    limit_time.as_secs()
                ))
            })??;
        match status {
            200..=299 => answer,
            429 => Err(PlaneError::RateLimited {
                wait: backoff::retry_after(retry_after.as_deref()),
                code: error_of(answer.ok().as_deref()).0,
            }),
            500..=599 => Err(PlaneError::Unreachable(format!(
                "it answered {status}: {}",
                error_of(answer.ok().as_deref()).1
            ))),
            _ => {
                let (code, message) = error_of(answer.ok().as_deref());
                Err(PlaneError::Refused {
                    status,
                    code,
                    message,
                })
            }
        }
    }
}

/// One presigned URL from the broker (`POST /api/v1/agent/backup_urls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedUrl {
    pub key: String,
    pub method: String,
    pub url: String,
    /// Headers the request must carry (`if-none-match: *` on a conditional PUT).
    pub headers: Vec<(String, String)>,
}

/// What the broker is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum UrlOp {
    Put,
    Get,
}

/// Reads the broker's answer: one URL for each key asked, each checked (a URL that is not
/// https, or http to this machine, is refused).
pub fn read_signed_urls(answer: &Value, keys: &[String]) -> Result<Vec<SignedUrl>, BadAddress> {
    let Some(urls) = answer.get("urls").and_then(Value::as_array) else {
        return Err("the broker's answer has no urls".into());
    };
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(entry) = urls.iter().find(|entry| entry["key"].as_str() == Some(key)) else {
            return Err(format!("the broker's answer has no URL for {key}").into());
        };
        let url = entry["url"]
            .as_str()
            .ok_or_else(|| format!("the broker's URL for {key} is not text"))?;
        object_url(url)?;
        let headers = entry
            .get("headers")
            .and_then(Value::as_object)
            .map(|headers| {
                headers
                    .iter()
                    .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        found.push(SignedUrl {
            key: key.clone(),
            method: entry["method"].as_str().unwrap_or("GET").to_string(),
            url: url.to_string(),
            headers,
        });
    }
    Ok(found)
}

/// An object URL the agent will use: https, or http only to this machine (a test's store).
pub fn object_url(text: &str) -> Result<Url, BadAddress> {
    let url = Url::parse(text)
        .map_err(|_| BadAddress::from("the broker gave a URL that does not parse"))?;
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare == "localhost" || bare.parse::<IpAddr>().is_ok_and(|a| a.is_loopback());
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err("the broker gave a URL that is not https".into()),
    }
}

impl Plane {
    /// Asks the broker for presigned URLs for `keys` of a running backup job (the contract's
    /// `backup_urls`).
    pub async fn backup_urls(
        &self,
        key: &NodeKey,
        job_id: i64,
        op: UrlOp,
        keys: &[String],
    ) -> Result<Vec<SignedUrl>, PlaneError> {
        let body = serde_json::json!({"job_id": job_id, "op": op.as_str(), "keys": keys});
        let answer = self
            .send(key, "backup_urls", "", &body, 256 * 1024, Duration::ZERO)
            .await?;
        read_signed_urls(&answer, keys).map_err(|refused| PlaneError::BadAnswer(refused.0))
    }
}

/// Puts and gets objects at presigned URLs, over the agent's own HTTPS client.
#[derive(Debug, Clone)]
pub struct Objects {
    http: Client<HttpsConnector, Full<Bytes>>,
}

impl Default for Objects {
    fn default() -> Objects {
        Objects::new()
    }
}

/// How long one object transfer may take.
const OBJECT_TIMEOUT: Duration = Duration::from_secs(600);

impl Objects {
    pub fn new() -> Objects {
        Objects {
            http: Client::builder(TokioExecutor::new()).build(https_connector()),
        }
    }

    /// PUTs `body` to a presigned URL; an answer other than 2xx is an error naming the status.
    pub async fn put(&self, url: &SignedUrl, body: Bytes) -> Result<(), ObjectError> {
        let mut request = hyper::Request::put(&url.url)
            .header("content-length", body.len())
            .header("user-agent", format!("capstan-agent/{AGENT_VERSION}"));
        for (name, value) in &url.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|source| ObjectError::BadRequest {
                method: "PUT",
                key: url.key.clone(),
                source,
            })?;
        let response = self.request(request, "PUT", &url.key).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = read_capped(response.into_body(), 4096)
            .await
            .unwrap_or_default();
        Err(ObjectError::Refused {
            key: url.key.clone(),
            status,
            body: String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>(),
        })
    }

    /// GETs a presigned URL: the response body, to be read frame by frame.
    pub async fn get(&self, url: &SignedUrl) -> Result<Incoming, ObjectError> {
        let mut request = hyper::Request::get(&url.url)
            .header("user-agent", format!("capstan-agent/{AGENT_VERSION}"));
        for (name, value) in &url.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request =
            request
                .body(Full::new(Bytes::new()))
                .map_err(|source| ObjectError::BadRequest {
                    method: "GET",
                    key: url.key.clone(),
                    source,
                })?;
        let response = self.request(request, "GET", &url.key).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(ObjectError::Answered {
                key: url.key.clone(),
                status,
            });
        }
        Ok(response.into_body())
    }

    /// GETs a small object whole (a manifest), at most `limit` bytes.
    pub async fn get_small(&self, url: &SignedUrl, limit: usize) -> Result<Vec<u8>, ObjectError> {
        let body = self.get(url).await?;
        read_capped(body, limit)
            .await
            .map_err(|source| ObjectError::Unreadable {
                key: url.key.clone(),
                source,
            })
    }

    /// Sends `request`, at most [`OBJECT_TIMEOUT`].
    async fn request(
        &self,
        request: hyper::Request<Full<Bytes>>,
        method: &'static str,
        key: &str,
    ) -> Result<hyper::Response<Incoming>, ObjectError> {
        tokio::time::timeout(OBJECT_TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| ObjectError::Timeout {
                method,
                key: key.to_string(),
            })?
            .map_err(|error| ObjectError::Unreachable {
                method,
                key: key.to_string(),
                reason: error_chain(&error),
            })
    }
}

/// The body, refusing to read past `limit`.
pub(crate) async fn read_capped(mut body: Incoming, limit: usize) -> Result<Vec<u8>, PlaneError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| PlaneError::Unreachable(error_chain(&error)))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > limit {
            return Err(PlaneError::BadAnswer(format!(
                "the answer is larger than the {limit} bytes the agent reads"
            )));
        }
        bytes.extend_from_slice(&data);
    }
    Ok(bytes)
}

/// `(code, message)` of the protocol's error body, or words saying there was none.
fn error_of(body: Option<&[u8]>) -> (String, String) {
    let parsed: Option<Value> = body.and_then(|bytes| serde_json::from_slice(bytes).ok());
    let error = parsed.as_ref().and_then(|value| value.get("error"));
    let text = |field: &str| {
        error
            .and_then(|error| error.get(field))
            .and_then(Value::as_str)
            .map(|text| text.chars().take(500).collect::<String>())
    };
    (
        text("code").unwrap_or_else(|| "unknown".into()),
        text("message").unwrap_or_else(|| "no error body".into()),
    )
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_management_node_is_an_https_origin() {
        assert_eq!(
            base_url("https://plane.example.com").unwrap(),
            "https://plane.example.com"
        );
        assert_eq!(
            base_url("https://plane.example.com:8443/").unwrap(),
            "https://plane.example.com:8443"
        );
        assert_eq!(
            base_url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(base_url("http://[::1]:8080").unwrap(), "http://[::1]:8080");
        assert_eq!(
            base_url("http://localhost:8080").unwrap(),
            "http://localhost:8080"
        );
    }

    #[test]
    fn plain_http_to_another_machine_and_urls_with_more_than_an_origin_are_refused() {
        for (url, expected) in [
            ("http://plane.example.com", "over https"),
            ("ftp://plane.example.com", "is not https"),
            ("https://plane.example.com/prefix", "without a path"),
            ("https://plane.example.com/?x=1", "without a path"),
            ("https://user:pw@plane.example.com", "user or password"),
            ("plane.example.com", "is not a URL"),
        ] {
            let error = base_url(url).unwrap_err();
            assert!(error.contains(expected), "{url}: {error}");
        }
    }

    #[test]
    fn the_protocol_error_body_is_read_and_its_absence_said() {
        let body = br#"{"error": {"code": "unknown_key", "message": "no approved node holds it"}}"#;
        assert_eq!(
            error_of(Some(body)),
            (
                "unknown_key".to_string(),
                "no approved node holds it".to_string()
            )
        );
        assert_eq!(
            error_of(Some(b"<html>")),
            ("unknown".to_string(), "no error body".to_string())
        );
    }
}
