//! A plane of the test's own: the real services (agent channel, gateway, incidents, monitor,
//! rollouts, backups, provisioning) in this process, on a fresh database and a private NATS server, with an
//! operator at each level (each with an API token and a known password for the web UI).

use capstan_bus::{access::BusUser, testsuite::NatsServer, Bus};
use capstan_events::{rpc::Level, Domain};
use capstan_settings::Settings;
use capstan_store::testsuite::TestDatabase;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::wait_for;
use capstan_events::Word as _;

/// The seal key of every test plane's backups service (64 hex digits).
pub const TEST_SEAL_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The sections of the services a test plane runs, as `capstan all` reads them (the gateway's
/// `plane_name` is also the one incidents' signals carry).
pub type PlaneSections = (
    capstan_gateway::settings::GatewaySettings,
    capstan_agent_channel::settings::AgentChannelSettings,
    capstan_incidents::settings::IncidentsSettings,
    capstan_monitor::settings::MonitorSettings,
    capstan_backups::settings::BackupsSettings,
    capstan_provisioning::settings::ProvisioningSettings,
);

/// An operator of the test plane.
#[derive(Debug, Clone)]
pub struct TestOperator {
    pub name: &'static str,
    pub level: Level,
    /// Its API token (`Authorization: Bearer`).
    pub token: String,
    /// Its web UI password (already chosen: no change asked for at sign-in).
    pub password: String,
}

pub struct Plane {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub http: reqwest::Client,
    /// API tokens of `ada` (10), `chris` (8) and `rita` (7).
    pub admin: String,
    pub changer: String,
    pub reader: String,
    pub operators: Vec<TestOperator>,
    pub bus: Bus,
    pub database: TestDatabase,
    pub settings: Settings,
    /// The services' own sections.
    pub sections: PlaneSections,
    shutdown: CancellationToken,
    services: Vec<JoinHandle<anyhow::Result<()>>>,
    _nats: NatsServer,
}

impl Plane {
    /// Starts the plane and waits until both services answer.
    pub async fn start() -> Plane {
        Plane::start_with(&[]).await
    }

    /// As [`Plane::start`], with further `CAPSTAN__*` settings.
    pub async fn start_with(extra: &[(&str, &str)]) -> Plane {
        Plane::start_on(NatsServer::start(), extra, &[]).await
    }

    /// As [`Plane::start_with`], without the services of `skip` (a test runs them itself, as
    /// processes of their own it can kill: [`crate::process::ServiceProcess`]).
    pub async fn start_without(skip: &[Domain], extra: &[(&str, &str)]) -> Plane {
        Plane::start_on(NatsServer::start(), extra, skip).await
    }

    /// The URL of the plane's NATS server.
    pub fn nats_url(&self) -> String {
        self._nats.url()
    }

    /// As [`Plane::start`], on a NATS server running the generated authorization: each
    /// service connects as its own user, the test's own bus as `all`.
    pub async fn start_secured() -> Plane {
        Plane::start_on(NatsServer::start_secured(), &[], &[]).await
    }

    /// What the NATS server refused for lack of permission (a secured plane): nothing, when
    /// the generated permissions cover what the services do.
    pub fn nats_violations(&self) -> Vec<String> {
        self._nats.violations()
    }

    async fn start_on(nats: NatsServer, extra: &[(&str, &str)], skip: &[Domain]) -> Plane {
        let secured = nats.is_secured();
        let database = TestDatabase::create().await;
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let mut overrides = vec![
            ("CAPSTAN__GATEWAY__LISTEN", listen.as_str()),
            ("CAPSTAN__DATABASE__MAX_CONNECTIONS", "8"),
            // The backups service seals its targets' keys with this (a test key), and the
            // provisioning service its accounts' tokens and root passwords.
            ("CAPSTAN__BACKUPS__SEAL_KEY", TEST_SEAL_KEY),
            ("CAPSTAN__PROVISIONING__SEAL_KEY", TEST_SEAL_KEY),
        ];
        // A new machine's agent joins this plane (a test may name another URL).
        let plane_url = format!("http://{listen}");
        if !extra
            .iter()
            .any(|(key, _)| *key == "CAPSTAN__PROVISIONING__PLANE_URL")
        {
            overrides.push(("CAPSTAN__PROVISIONING__PLANE_URL", plane_url.as_str()));
        }
        overrides.extend_from_slice(extra);
        let (settings, sections): (Settings, PlaneSections) =
            crate::settings_with(&database, &nats, &overrides);
        let (gateway, agent_channel, incidents, monitor, backups, provisioning) = sections.clone();
        // On a secured server each service runs as its own NATS user.
        let as_user = |domain: Domain| {
            if !secured {
                return settings.clone();
            }
            let password = nats.password(BusUser::Service(domain));
            let mut own = overrides.clone();
            own.extend([
                ("CAPSTAN__NATS__USER", domain.as_str()),
                ("CAPSTAN__NATS__PASSWORD", password.as_str()),
            ]);
            crate::settings(&database, &nats, &own)
        };
        let shutdown = CancellationToken::new();
        let plane_name = gateway.plane_name.clone();
        let mut services = vec![tokio::spawn(capstan_gateway::run(
            as_user(Domain::Gateway),
            gateway,
            shutdown.clone(),
        ))];
        if !skip.contains(&Domain::AgentChannel) {
            services.push(tokio::spawn(capstan_agent_channel::run(
                as_user(Domain::AgentChannel),
                agent_channel,
                shutdown.clone(),
            )));
        }
        if !skip.contains(&Domain::Incidents) {
            services.push(tokio::spawn(capstan_incidents::run(
                as_user(Domain::Incidents),
                (incidents, plane_name),
                shutdown.clone(),
            )));
        }
        if !skip.contains(&Domain::Monitor) {
            services.push(tokio::spawn(capstan_monitor::run(
                as_user(Domain::Monitor),
                monitor,
                shutdown.clone(),
            )));
        }
        if !skip.contains(&Domain::Rollouts) {
            services.push(tokio::spawn(capstan_rollouts::run(
                as_user(Domain::Rollouts),
                shutdown.clone(),
            )));
        }
        if !skip.contains(&Domain::Backups) {
            services.push(tokio::spawn(capstan_backups::run(
                as_user(Domain::Backups),
                backups,
                shutdown.clone(),
            )));
        }
        if !skip.contains(&Domain::Provisioning) {
            services.push(tokio::spawn(capstan_provisioning::run(
                as_user(Domain::Provisioning),
                provisioning,
                shutdown.clone(),
            )));
        }
        let base = format!("http://{listen}");
        // The gateway closes a connection idle for its header timeout (5 s by default): a
        // client that reuses one at that moment hears the close instead of an answer
        // (`IncompleteMessage`, seen in the UI flow after the agent's join took a few seconds).
        // A pooled connection is dropped well before that.
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(2))
            .build()
            .expect("a plain HTTP client");
        let bus = if secured {
            nats.connect_as(BusUser::AllInOne).await
        } else {
            Bus::connect(&nats.url(), "test").await.unwrap()
        };
        for domain in [
            Domain::AgentChannel,
            Domain::Incidents,
            Domain::Monitor,
            Domain::Rollouts,
            Domain::Backups,
            Domain::Provisioning,
        ]
        .into_iter()
        .filter(|domain| !skip.contains(domain))
        {
            wait_for(
                &format!("the {domain} service to answer its health"),
                Duration::from_secs(60),
                || {
                    let bus = bus.clone();
                    async move { bus.health(domain, Duration::from_millis(500)).await.ok() }
                },
            )
            .await;
        }
        wait_for("the gateway to listen", Duration::from_secs(60), || {
            let (http, base) = (http.clone(), base.clone());
            async move { http.get(format!("{base}/livez")).send().await.ok() }
        })
        .await;
        let gateway_store = capstan_store::Store::connect(database.url(), "gateway", 1)
            .await
            .unwrap();
        let mut operators = Vec::new();
        for (name, level) in [
            ("ada", Level::Admin),
            ("chris", Level::Change),
            ("rita", Level::Read),
        ] {
            let token = capstan_gateway::admin::issue_operator(&gateway_store, name, level)
                .await
                .unwrap()
                .expose()
                .to_string();
            let password = format!("{name}-correct-horse-battery");
            capstan_gateway::admin::set_password_plain(&gateway_store, name, &password, false)
                .await
                .unwrap();
            operators.push(TestOperator {
                name,
                level,
                token,
                password,
            });
        }
        gateway_store.close().await;
        Plane {
            admin: operators[0].token.clone(),
            changer: operators[1].token.clone(),
            reader: operators[2].token.clone(),
            operators,
            base,
            http,
            bus,
            database,
            settings,
            sections,
            shutdown,
            services,
            _nats: nats,
        }
    }

    /// The test operator called `name`.
    pub fn operator(&self, name: &str) -> &TestOperator {
        self.operators
            .iter()
            .find(|operator| operator.name == name)
            .unwrap_or_else(|| panic!("no test operator {name}"))
    }

    /// An operator request with `token`: `(status, body)`.
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
            "DELETE" => self.http.delete(url),
            "PUT" => self.http.put(url).json(&body.unwrap_or(json!({}))),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request.bearer_auth(token).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The join request of `fingerprint`, in any state.
    pub async fn join_of(&self, fingerprint: &str) -> Option<Value> {
        let (status, joins) = self
            .api(&self.admin, "GET", "/api/v1/joins?state=all", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{joins}");
        joins["joins"]
            .as_array()?
            .iter()
            .find(|join| join["fingerprint"] == fingerprint)
            .cloned()
    }

    /// Waits for the join of `fingerprint` to be listed and `act`s on it (`approve`, `reject`,
    /// `reopen`) as the admin; the answer.
    pub async fn decide_join(&self, fingerprint: &str, act: &str) -> Value {
        let join = wait_for("the join to be listed", Duration::from_secs(30), || async {
            self.join_of(fingerprint).await
        })
        .await;
        let id = join["id"].as_str().unwrap();
        let (status, answer) = self
            .api(
                &self.admin,
                "POST",
                &format!("/api/v1/joins/{id}/{act}"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{act}: {answer}");
        answer
    }

    /// Approves the join of `fingerprint` to a new node; the node id.
    pub async fn approve(&self, fingerprint: &str) -> i64 {
        self.decide_join(fingerprint, "approve").await["node_id"]
            .as_i64()
            .unwrap()
    }

    pub async fn node(&self, node: i64) -> Value {
        let (status, view) = self
            .api(&self.reader, "GET", &format!("/api/v1/nodes/{node}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{view}");
        view
    }

    /// Waits until the node's agent is online and has reported its vocabulary.
    pub async fn wait_online(&self, node: i64) -> Value {
        wait_for(
            "the agent to report in",
            Duration::from_secs(60),
            || async {
                let view = self.node(node).await;
                (view["online"] == true && !view["vocabulary"].as_array()?.is_empty())
                    .then_some(view)
            },
        )
        .await
    }

    /// A job on `node` asked for by the admin; its id.
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

    /// A job written straight into the agent channel's table, as a plane that does not check what
    /// it asks for would hand it out (the node must refuse it on its own), or as one of the
    /// jobs made before a door refused it. No API makes one: every door checks the word, its
    /// asker and its params, which is the point of the tests that need it.
    pub async fn queue_unchecked(
        &self,
        node: i64,
        primitive: &str,
        class: &str,
        params: Value,
    ) -> i64 {
        let pool = sqlx::PgPool::connect(self.database.url()).await.unwrap();
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO agent_channel.jobs (node_id, primitive, class, params, state, requested_by, budget_s)
             VALUES ($1, $2, $3, $4, 'pending', 'test', 300) RETURNING id",
        )
        .bind(node)
        .bind(primitive)
        .bind(class)
        .bind(params)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        id
    }

    pub async fn job(&self, id: i64) -> Value {
        let (status, job) = self
            .api(&self.reader, "GET", &format!("/api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{job}");
        job
    }

    /// Every job the agent channel holds (at most the listing's 1,000, newest first), as the
    /// operator API lists them.
    pub async fn jobs(&self) -> Vec<Value> {
        let (status, jobs) = self
            .api(&self.reader, "GET", "/api/v1/jobs?limit=1000", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{jobs}");
        let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
        assert!(jobs.len() < 1000, "more jobs than one listing shows");
        jobs
    }

    /// How many jobs of `primitive` each node was given, by node id, from the operator API.
    pub async fn jobs_per_node(&self, primitive: &str) -> Vec<(i64, i64)> {
        let mut counts = std::collections::BTreeMap::new();
        for job in self.jobs().await {
            if job["primitive"] == primitive {
                *counts.entry(job["node_id"].as_i64().unwrap()).or_insert(0) += 1;
            }
        }
        counts.into_iter().collect()
    }

    /// Waits until job `id` is in a terminal state; the job.
    pub async fn finished(&self, id: i64) -> Value {
        wait_for(
            &format!("job {id} to end"),
            Duration::from_secs(60),
            || async {
                let job = self.job(id).await;
                (!["pending", "running"].contains(&job["state"].as_str()?)).then_some(job)
            },
        )
        .await
    }

    /// Starts another agent-channel replica on the same database and NATS server; rpc
    /// questions are then shared between the replicas by the queue group.
    pub fn add_agent_channel_replica(&mut self) {
        self.services.push(tokio::spawn(capstan_agent_channel::run(
            self.settings.clone(),
            self.sections.1.clone(),
            self.shutdown.clone(),
        )));
    }

    /// Stops every service and waits for each to end cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for service in self.services {
            service.await.unwrap().unwrap();
        }
    }
}
