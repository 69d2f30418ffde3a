//! The agent channel end to end: the real agent-channel service and the real gateway on a
//! database and NATS server of the test's own, driven over HTTP by an agent written here (raw
//! HTTP and signing, as anyone could write one from PROTOCOL.md) and by an operator's token.

mod edge;
mod events;
mod fleet;
mod guards;
mod jobs;
mod joins;
mod listing;
mod secured;
mod signing;
mod storm;

pub use capstan_e2e::plane::Plane;
use capstan_signing::{sign_request, NodeKey};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A paired test agent: joined, approved, and having reported its vocabulary in one claim.
pub(crate) trait PairedAgent {
    async fn paired_agent(&self, name: &str) -> (TestAgent, i64);
}

impl PairedAgent for Plane {
    async fn paired_agent(&self, name: &str) -> (TestAgent, i64) {
        let agent = TestAgent::new(self);
        let (status, _) = agent.join(name).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let node = self.approve(&agent.fingerprint()).await;
        let (status, claim) = agent.claim(&json!({})).await;
        assert_eq!(status, StatusCode::OK, "{claim}");
        (agent, node)
    }
}

/// The words a test agent reports.
pub const VOCABULARY: &[&str] = &[
    "check_status",
    "host_report",
    "restart_unit",
    "apply_update",
];

/// An agent written from PROTOCOL.md alone.
pub struct TestAgent {
    pub key: NodeKey,
    base: String,
    http: reqwest::Client,
}

pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub retry_after: Option<String>,
}

impl TestAgent {
    pub fn new(plane: &Plane) -> TestAgent {
        TestAgent {
            key: NodeKey::generate(),
            base: plane.base.clone(),
            http: plane.http.clone(),
        }
    }

    pub fn fingerprint(&self) -> String {
        self.key.public_key().fingerprint().to_string()
    }

    /// Sends `body` to `endpoint` signed with `created` (the plane's clock, unless testing skew).
    pub async fn send_at(&self, endpoint: &str, query: &str, body: &[u8], created: i64) -> Reply {
        let path = format!("/api/v1/agent/{endpoint}");
        let headers = sign_request(&self.key, "POST", &path, body, created);
        self.send_with(
            &format!("{path}{query}"),
            body,
            Some((
                &headers.content_digest,
                &headers.signature_input,
                &headers.signature,
            )),
        )
        .await
    }

    /// Sends with exactly these signature headers (or none).
    pub async fn send_with(
        &self,
        path_and_query: &str,
        body: &[u8],
        headers: Option<(&str, &str, &str)>,
    ) -> Reply {
        self.send_with_from(path_and_query, body, headers, None)
            .await
    }

    /// As [`TestAgent::send_with`], through a proxy the plane trusts that names `client` in
    /// `X-Forwarded-For` (the plane must trust 127.0.0.1: `CAPSTAN__GATEWAY__TRUSTED_PROXIES`).
    pub async fn send_with_from(
        &self,
        path_and_query: &str,
        body: &[u8],
        headers: Option<(&str, &str, &str)>,
        client: Option<&str>,
    ) -> Reply {
        let mut request = self
            .http
            .post(format!("{}{path_and_query}", self.base))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(client) = client {
            request = request.header("x-forwarded-for", client);
        }
        if let Some((digest, input, signature)) = headers {
            request = request
                .header("content-digest", digest)
                .header("signature-input", input)
                .header("signature", signature);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let body = response.json().await.unwrap_or(Value::Null);
        Reply {
            status,
            body,
            retry_after,
        }
    }

    pub async fn send(&self, endpoint: &str, body: &Value) -> (StatusCode, Value) {
        let reply = self
            .send_at(endpoint, "", &serde_json::to_vec(body).unwrap(), now())
            .await;
        (reply.status, reply.body)
    }

    pub async fn join(&self, name: &str) -> (StatusCode, Value) {
        self.send("join", &self.join_body(name)).await
    }

    fn join_body(&self, name: &str) -> Value {
        json!({"name": name, "public_key": self.key.public_key().to_base64(), "agent_version": "0.1.0",
               "site_root": "/var/www/site", "container": null, "addresses": ["203.0.113.7"]})
    }

    /// A join sent through a trusted proxy on behalf of `client`.
    pub async fn join_from(&self, name: &str, client: &str) -> Reply {
        let body = serde_json::to_vec(&self.join_body(name)).unwrap();
        let path = "/api/v1/agent/join";
        let headers = sign_request(&self.key, "POST", path, &body, now());
        self.send_with_from(
            path,
            &body,
            Some((
                &headers.content_digest,
                &headers.signature_input,
                &headers.signature,
            )),
            Some(client),
        )
        .await
    }

    /// A claim with the test vocabulary, merged with `extra`.
    pub async fn claim(&self, extra: &Value) -> (StatusCode, Value) {
        let mut body =
            json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY, "claim_bytes": 1048576});
        for (field, value) in extra.as_object().unwrap() {
            body[field] = value.clone();
        }
        self.send("claim", &body).await
    }

    pub async fn result(&self, job: i64, outcome: &str, output: &str) -> (StatusCode, Value) {
        self.send(
            "result",
            &json!({"job_id": job, "outcome": outcome, "output": output,
                                     "result": {"ok": outcome == "completed"}, "reason": null}),
        )
        .await
    }
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}
