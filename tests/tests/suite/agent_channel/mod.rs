//! The agent channel end to end: the real agent-channel service and the real gateway on a
//! database and NATS server of the test's own, driven over HTTP by an agent written here (raw
//! HTTP and signing, as anyone could write one from PROTOCOL.md) and by an operator's token.

mod events;
mod jobs;
mod joins;
mod signing;

use capstan_bus::{testsuite::NatsServer, Bus};
use capstan_e2e::wait_for;
use capstan_events::rpc::Level;
use capstan_signing::{sign_request, NodeKey};
use capstan_store::testsuite::TestDatabase;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A plane of the test's own: agent channel and gateway, with an operator at each level.
pub struct Plane {
    pub base: String,
    pub http: reqwest::Client,
    pub admin: String,
    pub changer: String,
    pub reader: String,
    pub bus: Bus,
    pub database: TestDatabase,
    settings: capstan_settings::Settings,
    shutdown: CancellationToken,
    services: Vec<JoinHandle<anyhow::Result<()>>>,
    _nats: NatsServer,
}

impl Plane {
    pub async fn start() -> Plane {
        let nats = NatsServer::start();
        let database = TestDatabase::create().await;
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let settings = capstan_e2e::settings(
            &database,
            &nats,
            &[
                ("CAPSTAN__GATEWAY__LISTEN", &listen),
                ("CAPSTAN__DATABASE__MAX_CONNECTIONS", "8"),
            ],
        );
        let shutdown = CancellationToken::new();
        let services = vec![
            tokio::spawn(capstan_agent_channel::run(
                settings.clone(),
                shutdown.clone(),
            )),
            tokio::spawn(capstan_gateway::run(settings.clone(), shutdown.clone())),
        ];
        let base = format!("http://{listen}");
        let http = reqwest::Client::new();
        let bus = Bus::connect(&nats.url(), "test").await.unwrap();
        wait_for(
            "the agent channel to answer",
            Duration::from_secs(30),
            || {
                let bus = bus.clone();
                async move {
                    bus.request::<_, Value>(
                        capstan_events::Domain::AgentChannel,
                        "health",
                        &json!({}),
                        Duration::from_millis(500),
                    )
                    .await
                    .ok()
                }
            },
        )
        .await;
        wait_for("the gateway to listen", Duration::from_secs(30), || {
            let (http, base) = (http.clone(), base.clone());
            async move { http.get(format!("{base}/livez")).send().await.ok() }
        })
        .await;
        let gateway_store = capstan_store::Store::connect(database.url(), "gateway", 1)
            .await
            .unwrap();
        let token = |name: &'static str, level| {
            let store = gateway_store.clone();
            async move {
                capstan_gateway::admin::issue_operator(&store, name, level)
                    .await
                    .unwrap()
                    .expose()
                    .to_string()
            }
        };
        let (admin, changer, reader) = (
            token("ada", Level::Admin).await,
            token("chris", Level::Change).await,
            token("rita", Level::Read).await,
        );
        gateway_store.close().await;
        Plane {
            admin,
            changer,
            reader,
            base,
            http,
            bus,
            database,
            settings,
            shutdown,
            services,
            _nats: nats,
        }
    }

    /// An operator request: `(status, body)`.
    pub async fn api(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request.bearer_auth(token).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Lists pending joins and approves the one with `fingerprint`; returns the node id.
    pub async fn approve(&self, fingerprint: &str) -> i64 {
        let (status, joins) = self
            .api(&self.admin, "GET", "/api/v1/joins?state=pending", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{joins}");
        let join = joins["joins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|join| join["fingerprint"] == fingerprint)
            .unwrap_or_else(|| panic!("no pending join for {fingerprint}: {joins}"))
            .clone();
        let id = join["id"].as_str().unwrap();
        let (status, approved) = self
            .api(
                &self.admin,
                "POST",
                &format!("/api/v1/joins/{id}/approve"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{approved}");
        approved["node_id"].as_i64().unwrap()
    }

    /// A job on `node` by the admin; returns its id.
    pub async fn queue(&self, node: i64, primitive: &str, params: Value) -> i64 {
        let (status, created) = self
            .api(
                &self.admin,
                "POST",
                &format!("/api/v1/nodes/{node}/jobs"),
                Some(json!({"primitive": primitive, "params": params})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        assert_eq!(created["state"], "pending");
        created["id"].as_i64().unwrap()
    }

    pub async fn job(&self, id: i64) -> Value {
        let (status, job) = self
            .api(&self.reader, "GET", &format!("/api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{job}");
        job
    }

    /// A paired agent: joined, approved, and having reported its vocabulary in one claim.
    pub async fn paired_agent(&self, name: &str) -> (TestAgent, i64) {
        let agent = TestAgent::new(self);
        let (status, _) = agent.join(name).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let node = self.approve(&agent.fingerprint()).await;
        let (status, claim) = agent.claim(&json!({})).await;
        assert_eq!(status, StatusCode::OK, "{claim}");
        (agent, node)
    }

    /// Starts another agent-channel replica on the same database and NATS server; rpc
    /// questions are then shared between the replicas by the queue group.
    pub fn add_agent_channel_replica(&mut self) {
        self.services.push(tokio::spawn(capstan_agent_channel::run(
            self.settings.clone(),
            self.shutdown.clone(),
        )));
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        for service in self.services {
            service.await.unwrap().unwrap();
        }
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
        let mut request = self
            .http
            .post(format!("{}{path_and_query}", self.base))
            .header("content-type", "application/json")
            .body(body.to_vec());
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
        self.send(
            "join",
            &json!({"name": name, "public_key": self.key.public_key().to_base64(), "agent_version": "0.1.0",
                    "site_root": "/var/www/site", "container": null, "addresses": ["203.0.113.7"]}),
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
