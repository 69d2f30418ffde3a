//! End-to-end fixtures: a plane of the test's own (the real agent-channel service and gateway
//! on a fresh database and a private NATS server, with operator tokens) and the real
//! `capstan-agent` binary on a temporary state directory.

use capstan_bus::{testsuite::NatsServer, Bus};
use capstan_events::rpc::Level;
use capstan_store::testsuite::TestDatabase;
use serde_json::{json, Value};
use std::{
    future::Future,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};
use tokio::{process::Child, task::JoinHandle};
use tokio_util::sync::CancellationToken;

/// Polls `check` every 100 ms until it answers `Some`, failing after `limit` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Plane {
    pub base: String,
    pub http: reqwest::Client,
    pub admin: String,
    pub database: TestDatabase,
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
        let environment = [
            ("CAPSTAN__DATABASE__URL", database.url().to_string()),
            ("CAPSTAN__NATS__URL", nats.url()),
            ("CAPSTAN__GATEWAY__LISTEN", listen.clone()),
            ("CAPSTAN__DATABASE__MAX_CONNECTIONS", "8".to_string()),
        ]
        .map(|(key, value)| (key.to_string(), value));
        let settings = capstan_settings::Settings::load_from(None, environment).unwrap();
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
        let bus = Bus::connect(&nats.url(), "agent-test").await.unwrap();
        wait_for(
            "the agent channel to answer",
            Duration::from_secs(60),
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
        wait_for("the gateway to listen", Duration::from_secs(60), || {
            let (http, base) = (http.clone(), base.clone());
            async move { http.get(format!("{base}/livez")).send().await.ok() }
        })
        .await;
        let gateway_store = capstan_store::Store::connect(database.url(), "gateway", 1)
            .await
            .unwrap();
        let admin = capstan_gateway::admin::issue_operator(&gateway_store, "ada", Level::Admin)
            .await
            .unwrap()
            .expose()
            .to_string();
        gateway_store.close().await;
        Plane {
            base,
            http,
            admin,
            database,
            shutdown,
            services,
            _nats: nats,
        }
    }

    /// An operator request: `(status, body)`.
    pub async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request.bearer_auth(&self.admin).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The join request of `fingerprint`, in any state.
    pub async fn join_of(&self, fingerprint: &str) -> Option<Value> {
        let (status, joins) = self.api("GET", "/api/v1/joins?state=all", None).await;
        assert_eq!(status, 200, "{joins}");
        joins["joins"]
            .as_array()?
            .iter()
            .find(|join| join["fingerprint"] == fingerprint)
            .cloned()
    }

    pub async fn decide_join(&self, fingerprint: &str, act: &str) -> Value {
        let join = wait_for("the join to be listed", Duration::from_secs(30), || async {
            self.join_of(fingerprint).await
        })
        .await;
        let id = join["id"].as_str().unwrap();
        let (status, answer) = self
            .api(
                "POST",
                &format!("/api/v1/joins/{id}/{act}"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{act}: {answer}");
        answer
    }

    /// Approves the join of `fingerprint`; returns the node id.
    pub async fn approve(&self, fingerprint: &str) -> i64 {
        self.decide_join(fingerprint, "approve").await["node_id"]
            .as_i64()
            .unwrap()
    }

    pub async fn node(&self, node: i64) -> Value {
        let (status, view) = self
            .api("GET", &format!("/api/v1/nodes/{node}"), None)
            .await;
        assert_eq!(status, 200, "{view}");
        view
    }

    /// Waits until the node's agent has reported its vocabulary in a claim.
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

    /// A job on `node`; returns its id.
    pub async fn queue(&self, node: i64, primitive: &str, params: Value) -> i64 {
        let (status, created) = self
            .api(
                "POST",
                &format!("/api/v1/nodes/{node}/jobs"),
                Some(json!({"primitive": primitive, "params": params})),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        created["id"].as_i64().unwrap()
    }

    /// A job written straight into the plane's table, as a plane that does not check what it
    /// asks for would hand it out (the node must refuse it on its own).
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
        let (status, job) = self.api("GET", &format!("/api/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{job}");
        job
    }

    /// Waits until job `id` is in a terminal state; returns it.
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

    pub async fn stop(self) {
        self.shutdown.cancel();
        for service in self.services {
            service.await.unwrap().unwrap();
        }
    }
}

/// The real agent binary on a state directory of its own.
pub struct Agent {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Agent {
    pub fn new() -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("logs")).unwrap();
        std::fs::write(
            site.join("logs/access.log"),
            "203.0.113.9 - - GET /login?password=hunter2 200\n",
        )
        .unwrap();
        Agent { dir, child: None }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.state_dir().join(name)
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_capstan-agent"));
        command
            .arg(format!("--state-dir={}", self.state_dir().display()))
            .arg(format!(
                "--site-root={}",
                self.dir.path().join("site").display()
            ))
            .arg(format!(
                "--letsencrypt-dir={}",
                self.dir.path().join("letsencrypt").display()
            ))
            .args(args)
            .env("CAPSTAN_AGENT_LOG", "capstan_agent=debug")
            .kill_on_drop(true);
        command
    }

    /// Runs a command to its end: (exit code, stdout, stderr).
    pub async fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.command(args).output().await.unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs a command that must succeed; its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.cli(args).await;
        assert_eq!(code, 0, "capstan-agent {args:?}: {stdout}{stderr}");
        stdout
    }

    /// Starts a command in the background (for `join` that waits).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts `run`, logging to `agent.log` beside the state directory.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .unwrap();
        let child = self
            .command(&["run"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// Kills `run` with SIGKILL (no chance to clean up) and waits for it.
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("the agent runs");
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    pub async fn status(&self) -> String {
        self.ok(&["status"]).await
    }

    /// The identity file as JSON.
    pub fn identity(&self) -> Option<Value> {
        let bytes = std::fs::read(self.file("node_identity.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn fingerprint(&self) -> String {
        self.identity().unwrap()["fingerprint"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Joins `plane` without waiting, approves it, starts `run` switched on, and waits until
    /// the node reports in; returns the node id.
    pub async fn paired(&mut self, plane: &Plane, name: &str) -> i64 {
        self.ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            &format!("--name={name}"),
            "--no-wait",
        ])
        .await;
        self.ok(&["enable"]).await;
        let node = plane.approve(&self.fingerprint()).await;
        self.start();
        plane.wait_online(node).await;
        node
    }

    /// Writes `policy.json` with `mode`.
    pub fn policy(&self, body: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file("policy.json");
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.log());
        }
    }
}

pub fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}
