//! The HTTP half every provider driver shares: JSON over hyper with the kit's rustls connector,
//! the bearer token, a time bound on every call, and the retry rule — `Retry-After` honoured on
//! 429, doubling waits (the kit's backoff) on 5xx, timeouts and lost connections. The token is
//! never in a log line or an error's text: the provider's own words are scrubbed of it.

use std::time::Duration;

use bytes::Bytes;
use capstan_runtime::backoff::doubling;
use capstan_runtime::tls::HttpsConnector;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use url::Url;

use super::ProviderError;

/// The most bytes read of one answer.
pub const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// The HTTPS client every driver shares.
pub type Http = Client<HttpsConnector, Full<Bytes>>;

/// A client for the providers (TLS through rustls with ring and the system's roots).
pub fn http() -> Http {
    let connector = capstan_runtime::tls::https_connector(Some(Duration::from_secs(10)), |error| {
        tracing::warn!(%error, "no trusted certificate authorities found; provider APIs cannot be verified");
    });
    Client::builder(TokioExecutor::new()).build(connector)
}

/// How long a call may take and how it is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One request and its answer, at most.
    pub call_timeout: Duration,
    /// Tries of one call, the first included.
    pub attempts: u32,
    /// The wait after the first failure; doubled after each next one.
    pub first_wait: Duration,
    /// The longest wait between two tries; a `Retry-After` longer than this is not waited out.
    pub longest_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            call_timeout: Duration::from_secs(30),
            attempts: 5,
            first_wait: Duration::from_millis(500),
            longest_wait: Duration::from_secs(30),
        }
    }
}

/// Whether a failed call may be sent again as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A read, or a write whose repeat does no harm (PUT, DELETE, an action).
    Always,
    /// A create: sent again only when the provider said it did nothing (429); after any other
    /// failure the caller first looks for what it may have made.
    OnlyRateLimited,
}

/// Reads a provider's error body into its own words.
pub type ErrorWords = fn(&Value) -> Option<String>;

/// One account's API: its base URL, its token, the shared client and the limits.
#[derive(Clone)]
pub struct Api {
    base: Url,
    token: SecretString,
    http: Http,
    pub limits: Limits,
    words: ErrorWords,
    /// The provider's name for messages (`linode`).
    provider: &'static str,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Api")
            .field("provider", &self.provider)
            .field("base", &self.base.as_str())
            .field("token", &"<sealed>")
            .finish()
    }
}

/// `Retry-After`: seconds, or an HTTP date (RFC 9110 §10.2.3).
pub fn retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at: DateTime<Utc> = httpdate::parse_http_date(value).ok()?.into();
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

impl Api {
    pub fn new(
        provider: &'static str,
        base: &str,
        token: SecretString,
        http: Http,
        limits: Limits,
        words: ErrorWords,
    ) -> Result<Api, ProviderError> {
        let mut base = Url::parse(base).map_err(|error| {
            ProviderError::Unusable(format!("{provider} base URL {base:?}: {error}"))
        })?;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Api {
            base,
            token,
            http,
            limits,
            words,
            provider,
        })
    }

    /// Text from outside with the token taken out, should the provider have echoed it.
    fn scrub(&self, text: &str) -> String {
        let token = self.token.expose_secret();
        if token.is_empty() {
            text.to_string()
        } else {
            text.replace(token, "<token>")
        }
    }

    fn url(&self, path: &str) -> Result<Url, ProviderError> {
        self.base
            .join(path.trim_start_matches('/'))
            .map_err(|error| ProviderError::Unusable(format!("path {path:?}: {error}")))
    }

    /// One try, bounded by the call timeout: the answer's JSON (`null` for an empty body).
    pub async fn once(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ProviderError> {
        let url = self.url(path)?;
        let payload = match body {
            Some(body) => Bytes::from(
                serde_json::to_vec(body)
                    .map_err(|error| ProviderError::Unusable(format!("request body: {error}")))?,
            ),
            None => Bytes::new(),
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token.expose_secret()),
            )
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "capstan-provisioning")
            .body(Full::new(payload))
            .map_err(|error| ProviderError::Unusable(self.scrub(&error.to_string())))?;
        let what = format!("{} {} {}", self.provider, method, url.path());
        let exchange = async {
            let answer = self
                .http
                .request(request)
                .await
                .map_err(|error| ProviderError::Unreachable(format!("{what}: {error}")))?;
            let status = answer.status();
            let after = answer
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| retry_after(value, Utc::now()));
            let bytes = Limited::new(answer.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|error| ProviderError::BadAnswer(format!("{what}: {error}")))?
                .to_bytes();
            Ok::<_, ProviderError>((status, after, bytes))
        };
        let (status, after, bytes) = tokio::time::timeout(self.limits.call_timeout, exchange)
            .await
            .map_err(|_| ProviderError::Timeout(what.clone()))??;
        self.read(&what, status, after, &bytes)
    }

    fn read(
        &self,
        what: &str,
        status: StatusCode,
        after: Option<Duration>,
        bytes: &[u8],
    ) -> Result<Value, ProviderError> {
        let json: Option<Value> = if bytes.iter().all(u8::is_ascii_whitespace) {
            Some(Value::Null)
        } else {
            serde_json::from_slice(bytes).ok()
        };
        if status.is_success() {
            return json.ok_or_else(|| {
                ProviderError::BadAnswer(format!("{what}: the answer is not JSON"))
            });
        }
        let said = json
            .as_ref()
            .and_then(self.words)
            .map(|words| self.scrub(&words))
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
        Err(match status.as_u16() {
            401 | 403 => ProviderError::Refused {
                status: status.as_u16(),
                message: format!("{what}: {said}"),
            },
            404 => ProviderError::NotFound(format!("{what}: {said}")),
            429 => ProviderError::RateLimited {
                retry_after: after,
                message: format!("{what}: {said}"),
            },
            500..=599 => ProviderError::Server {
                status: status.as_u16(),
                message: format!("{what}: {said}"),
            },
            other => ProviderError::Rejected {
                status: other,
                message: format!("{what}: {said}"),
            },
        })
    }

    /// The wait before try `failures + 1`, or `None` when the error is not retried.
    pub fn wait_after(
        &self,
        error: &ProviderError,
        failures: u32,
        retry: Retry,
    ) -> Option<Duration> {
        if failures >= self.limits.attempts {
            return None;
        }
        match (error, retry) {
            (ProviderError::RateLimited { retry_after, .. }, _) => match retry_after {
                Some(after) if *after > self.limits.longest_wait => None,
                Some(after) => Some(*after),
                None => Some(doubling(
                    self.limits.first_wait,
                    failures,
                    self.limits.longest_wait,
                )),
            },
            (_, Retry::OnlyRateLimited) => None,
            (error, Retry::Always) if error.is_transient() => Some(doubling(
                self.limits.first_wait,
                failures,
                self.limits.longest_wait,
            )),
            _ => None,
        }
    }

    /// A call, retried under the rule: the last error when every try failed.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        retry: Retry,
    ) -> Result<Value, ProviderError> {
        let mut failures = 0;
        loop {
            match self.once(method.clone(), path, body).await {
                Ok(value) => return Ok(value),
                Err(error) => {
                    failures += 1;
                    let Some(wait) = self.wait_after(&error, failures, retry) else {
                        return Err(error);
                    };
                    tracing::info!(provider = self.provider, %error, wait_ms = wait.as_millis() as u64, "provider call retried");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, ProviderError> {
        self.call(Method::GET, path, None, Retry::Always).await
    }

    /// A delete, retried always (deleting twice is deleting once); its answer is not read.
    pub async fn delete(&self, path: &str) -> Result<(), ProviderError> {
        self.call(Method::DELETE, path, None, Retry::Always)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn retry_after_reads_seconds_and_an_http_date() {
        let now = Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap();
        assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after("Mon, 07 Dec 2026 12:00:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_after("Mon, 07 Dec 2026 11:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon", now), None);
    }

    fn api() -> Api {
        Api::new(
            "linode",
            "http://127.0.0.1:1/v4",
            SecretString::from("tok-SECRET"),
            http(),
            Limits::default(),
            |body| body["errors"][0]["reason"].as_str().map(str::to_string),
        )
        .unwrap()
    }

    #[test]
    fn a_create_is_sent_again_only_after_a_429_and_reads_after_transient_failures() {
        let api = api();
        let limited = ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(2)),
            message: String::new(),
        };
        let server = ProviderError::Server {
            status: 500,
            message: String::new(),
        };
        assert_eq!(
            api.wait_after(&limited, 1, Retry::OnlyRateLimited),
            Some(Duration::from_secs(2))
        );
        assert_eq!(api.wait_after(&server, 1, Retry::OnlyRateLimited), None);
        assert_eq!(
            api.wait_after(&server, 2, Retry::Always),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            api.wait_after(&server, 5, Retry::Always),
            None,
            "five tries at most"
        );
        let refused = ProviderError::Refused {
            status: 401,
            message: String::new(),
        };
        assert_eq!(api.wait_after(&refused, 1, Retry::Always), None);
        let too_long = ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(3600)),
            message: String::new(),
        };
        assert_eq!(api.wait_after(&too_long, 1, Retry::Always), None);
    }

    #[test]
    fn the_token_is_scrubbed_from_the_providers_words_and_absent_from_debug() {
        let api = api();
        assert_eq!(api.scrub("bad token tok-SECRET"), "bad token <token>");
        assert!(!format!("{api:?}").contains("tok-SECRET"));
        let error = api
            .read(
                "linode GET /v4/x",
                StatusCode::UNAUTHORIZED,
                None,
                br#"{"errors":[{"reason":"Invalid Token tok-SECRET"}]}"#,
            )
            .unwrap_err();
        assert!(matches!(error, ProviderError::Refused { status: 401, .. }));
        let text = error.to_string();
        assert!(text.contains("Invalid Token <token>"), "{text}");
        assert!(!text.contains("tok-SECRET"), "{text}");
    }
}
