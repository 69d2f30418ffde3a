//! Planes of several processes on one database and one NATS server of the test's own: each
//! replica is the real `capstan` binary (`capstan all`, or one service), killed or stopped as
//! an operator or a crash would. Agents are written here from PROTOCOL.md (signed HTTP), each
//! moving to the other gateway when its own stops answering, and a plain core NATS subscriber
//! counts every event as another system would see it.

use capstan_bus::{
    testsuite::{spy, NatsServer},
    Bus,
};
use capstan_e2e::wait_for;
use capstan_events::rpc::Level;
use capstan_signing::{sign_request, NodeKey};
use capstan_store::{testsuite::TestDatabase, Store};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::process::Child;

/// The `capstan` binary beside the test binary's directory (`target/<profile>/capstan`).
fn capstan_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary sits in target/<profile>/deps");
    let binary = profile_dir.join("capstan");
    assert!(
        binary.is_file(),
        "{} is missing: build it with `cargo build -p capstan`",
        binary.display()
    );
    binary
}

fn free_address() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// One process of the plane.
pub struct Replica {
    pub name: String,
    /// `http://<gateway listen>` (a replica with a gateway), or its metrics address.
    pub base: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Replica {
    /// Kills the process with SIGKILL: no chance to finish anything.
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("the replica runs");
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    /// Sends SIGTERM, as Kubernetes or systemd would; how long the process took to exit, and
    /// its exit status code.
    pub async fn sigterm(&mut self) -> (Duration, Option<i32>) {
        let mut child = self.child.take().expect("the replica runs");
        let pid = child.id().expect("a running child has a pid");
        let started = Instant::now();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the replica exits within a minute of SIGTERM")
            .unwrap();
        (started.elapsed(), status.code())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What a plain core NATS subscriber on `capstan.events.>` saw: each envelope with how often.
#[derive(Default)]
pub struct Seen {
    /// Envelope id → (type, subject, times seen, when first seen).
    pub envelopes: HashMap<String, (String, String, u32, Instant)>,
}

impl Seen {
    /// Envelopes first seen at or after `since` that were seen more than once.
    pub fn repeated_since(&self, since: Instant) -> Vec<(String, String, u32)> {
        self.envelopes
            .iter()
            .filter(|(_, (_, _, times, first))| *first >= since && *times > 1)
            .map(|(id, (kind, subject, times, _))| {
                (id.clone(), format!("{kind} {subject}"), *times)
            })
            .collect()
    }

    /// Envelopes seen more than once, at any time.
    pub fn repeated(&self) -> usize {
        self.envelopes
            .values()
            .filter(|(_, _, times, _)| *times > 1)
            .count()
    }

    /// The distinct envelopes of `kind` about `subject`.
    pub fn count(&self, kind: &str, subject: &str) -> usize {
        self.envelopes
            .values()
            .filter(|(k, s, _, _)| k == kind && s == subject)
            .count()
    }

    /// Times the envelopes of `kind` about `subject` were seen, summed.
    pub fn times(&self, kind: &str, subject: &str) -> u32 {
        self.envelopes
            .values()
            .filter(|(k, s, _, _)| k == kind && s == subject)
            .map(|(_, _, times, _)| *times)
            .sum()
    }
}

pub const JOB_FINISHED: &str = "capstan.agent_channel.job_finished";
pub const JOB_CLAIMED: &str = "capstan.agent_channel.job_claimed";
pub const JOB_QUEUED: &str = "capstan.agent_channel.job_queued";

/// The admin's API client, cheap to clone into a load task.
#[derive(Clone)]
pub struct Operator {
    pub http: reqwest::Client,
    pub admin: String,
}

/// A plane of processes on servers of the test's own.
pub struct Replicas {
    pub nats: NatsServer,
    pub database: TestDatabase,
    pub replicas: Vec<Replica>,
    pub http: reqwest::Client,
    pub operator: Operator,
    _bus: Bus,
    pub seen: Arc<Mutex<Seen>>,
    dir: tempfile::TempDir,
}

impl Replicas {
    /// Starts one process per entry of `commands` (`["all"]`, `["gateway"]`,
    /// `["agent_channel"]`), waits until each answers, and issues an admin token.
    pub async fn start(commands: &[&[&str]]) -> Replicas {
        let nats = NatsServer::start();
        let database = TestDatabase::create().await;
        let bus = Bus::connect(&nats.url(), "replicas-test").await.unwrap();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let mut watcher = spy(&bus, "capstan.events.>").await;
        {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Some(message) = watcher.next(Duration::from_secs(600)).await {
                    let Ok(envelope) = serde_json::from_slice::<Value>(&message.payload) else {
                        continue;
                    };
                    let id = envelope["id"].as_str().unwrap_or_default().to_string();
                    let kind = envelope["type"].as_str().unwrap_or_default().to_string();
                    let subject = envelope["subject"].as_str().unwrap_or_default().to_string();
                    let mut seen = seen.lock().unwrap();
                    seen.envelopes
                        .entry(id)
                        .or_insert((kind, subject, 0, Instant::now()))
                        .2 += 1;
                }
            });
        }
        let mut plane = Replicas {
            nats,
            database,
            replicas: Vec::new(),
            http: reqwest::Client::new(),
            operator: Operator {
                http: reqwest::Client::new(),
                admin: String::new(),
            },
            _bus: bus,
            seen,
            dir: tempfile::tempdir().unwrap(),
        };
        for command in commands {
            plane.spawn(command);
        }
        for replica in &plane.replicas {
            let (http, base) = (plane.http.clone(), replica.base.clone());
            let probe = if command_of(&replica.name) == "agent_channel" {
                format!("{base}/metrics")
            } else {
                format!("{base}/livez")
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while !http
                .get(&probe)
                .send()
                .await
                .is_ok_and(|response| response.status().is_success())
            {
                assert!(
                    Instant::now() < deadline,
                    "{} did not answer within 60 s:\n{}",
                    replica.name,
                    tail(&replica.log(), 60)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        wait_for(
            "the agent channel to answer",
            Duration::from_secs(60),
            || {
                let bus = plane._bus.clone();
                async move {
                    bus.health(
                        capstan_events::Domain::AgentChannel,
                        Duration::from_millis(500),
                    )
                    .await
                    .ok()
                }
            },
        )
        .await;
        let gateway_store = Store::connect(plane.database.url(), "gateway", 1)
            .await
            .unwrap();
        plane.operator.admin =
            capstan_gateway::admin::issue_operator(&gateway_store, "ada", Level::Admin)
                .await
                .unwrap()
                .expose()
                .to_string();
        gateway_store.close().await;
        plane
    }

    /// Starts one more process running `command`; its index.
    pub fn spawn(&mut self, command: &[&str]) -> usize {
        let index = self.replicas.len();
        let name = format!("{index}-{}", command.join("-"));
        let listen = free_address();
        let log = self.dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut process = tokio::process::Command::new(capstan_binary());
        process
            .args(command)
            .env("CAPSTAN__DATABASE__URL", self.database.url())
            .env("CAPSTAN__NATS__URL", self.nats.url())
            .env("CAPSTAN__GATEWAY__LISTEN", &listen)
            .env("CAPSTAN__DATABASE__MAX_CONNECTIONS", "4")
            // `capstan all` keeps its seal keys in the test's directory, not the machine's.
            .env("CAPSTAN__BACKUPS__SEAL_KEY_DIR", self.dir.path())
            .env("CAPSTAN__PROVISIONING__SEAL_KEY_DIR", self.dir.path())
            .env("RUST_LOG", "info")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true);
        if command == ["agent_channel"] {
            process.env("CAPSTAN__TELEMETRY__METRICS_LISTEN", &listen);
        }
        let child = process.spawn().expect("the capstan binary starts");
        self.replicas.push(Replica {
            name,
            base: format!("http://{listen}"),
            child: Some(child),
            log,
        });
        index
    }

    /// Every replica's log, for a failing test.
    pub fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|replica| format!("--- {} ---\n{}", replica.name, tail(&replica.log(), 40)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A signed agent at the gateway `base`: joined, approved, and reported in once.
    pub async fn paired(&self, base: &str, name: &str) -> FleetAgent {
        let mut agent = FleetAgent {
            key: Arc::new(NodeKey::generate()),
            bases: vec![base.to_string()],
            http: self.http.clone(),
            node: 0,
        };
        let join = json!({"name": name, "public_key": agent.key.public_key().to_base64(),
            "agent_version": "0.1.0", "site_root": null, "container": null, "addresses": []});
        let (status, answer) = agent
            .send("join", "", &join)
            .await
            .expect("the gateway answers a join");
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        let fingerprint = agent.key.public_key().fingerprint().to_string();
        let bases = vec![base.to_string()];
        let (_, joins) = self
            .operator
            .api_any(&bases, "GET", "/api/v1/joins?state=all", None)
            .await;
        let id = joins["joins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|join| join["fingerprint"] == fingerprint)
            .expect("the join is listed")["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, approved) = self
            .operator
            .api_any(
                &bases,
                "POST",
                &format!("/api/v1/joins/{id}/approve"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{approved}");
        agent.node = approved["node_id"].as_i64().unwrap();
        let (status, claim) = agent
            .claim(0, false)
            .await
            .expect("the first claim is answered");
        assert_eq!(status, StatusCode::OK, "{claim}");
        agent
    }

    /// The state of every job, as the operator API lists them (through whichever replica's
    /// gateway answers first).
    pub async fn job_states(&self) -> HashMap<i64, String> {
        self.jobs()
            .await
            .iter()
            .map(|job| {
                (
                    job["id"].as_i64().unwrap(),
                    job["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Every job, as the operator API lists them (at most one listing's 1,000).
    pub async fn jobs(&self) -> Vec<Value> {
        // A replica's base is its gateway only where it runs one (`all`, `gateway`).
        let gateways: Vec<String> = self
            .replicas
            .iter()
            .filter(|replica| replica.name.ends_with("-all") || replica.name.ends_with("-gateway"))
            .map(|replica| replica.base.clone())
            .collect();
        let (status, jobs) = self
            .operator
            .api_any(&gateways, "GET", "/api/v1/jobs?limit=1000", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{jobs}");
        let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
        assert!(jobs.len() < 1000, "more jobs than one listing shows");
        jobs
    }

    /// Waits until every job in `jobs` has ended; how many ended in each state.
    pub async fn all_ended(&self, jobs: &[i64], limit: Duration) -> HashMap<String, usize> {
        wait_for("every job to end", limit, || async {
            let states = self.job_states().await;
            let ended = jobs.iter().all(|job| {
                states
                    .get(job)
                    .is_some_and(|state| !["pending", "running"].contains(&state.as_str()))
            });
            ended.then(|| {
                let mut counts = HashMap::new();
                for job in jobs {
                    *counts.entry(states[job].clone()).or_insert(0) += 1;
                }
                counts
            })
        })
        .await
    }

    /// The value of the metric `name` on the replica at `base` (0 when absent); `None` when the
    /// replica does not answer.
    pub async fn metric(&self, base: &str, name: &str) -> Option<f64> {
        // A gateway's /metrics needs an operator's token (a metrics listener ignores it).
        let text = self
            .http
            .get(format!("{base}/metrics"))
            .bearer_auth(&self.operator.admin)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let prefix = format!("{name} ");
        Some(
            text.lines()
                .find_map(|line| line.strip_prefix(prefix.as_str()))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0.0),
        )
    }
}

impl Operator {
    /// An operator request to the gateway at `base`.
    pub async fn api(
        &self,
        base: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Option<(StatusCode, Value)> {
        let url = format!("{base}{path}");
        let request = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let response = request
            .bearer_auth(&self.admin)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        let status = response.status();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// An operator request to whichever of `bases` answers first in turn (retrying for 30 s).
    pub async fn api_any(
        &self,
        bases: &[String],
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for base in bases {
                if let Some((status, answer)) = self.api(base, method, path, body.clone()).await {
                    if !status.is_server_error() {
                        return (status, answer);
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no gateway answered {method} {path}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Queues `check_status` on `node` through any of `bases`; the job id.
    pub async fn queue(&self, bases: &[String], node: i64) -> i64 {
        let (status, created) = self
            .api_any(
                bases,
                "POST",
                &format!("/api/v1/nodes/{node}/jobs"),
                Some(json!({"primitive": "check_status", "params": {}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        created["id"].as_i64().unwrap()
    }
}

fn command_of(name: &str) -> &str {
    name.split_once('-')
        .map(|(_, command)| command)
        .unwrap_or(name)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// An agent written from PROTOCOL.md: signed claims and results, idle when it holds no job
/// (so the plane ends as lost what it handed out to a claim that never came back), and moving
/// to the next gateway when its own does not answer.
#[derive(Clone)]
pub struct FleetAgent {
    pub key: Arc<NodeKey>,
    /// The gateways it knows, its current one first.
    pub bases: Vec<String>,
    http: reqwest::Client,
    pub node: i64,
}

impl FleetAgent {
    /// Sends a signed request to its current gateway; `None` when that gateway did not answer.
    pub async fn send(
        &self,
        endpoint: &str,
        query: &str,
        body: &Value,
    ) -> Option<(StatusCode, Value)> {
        let path = format!("/api/v1/agent/{endpoint}");
        let bytes = serde_json::to_vec(body).unwrap();
        let headers = sign_request(
            &self.key,
            "POST",
            &path,
            &bytes,
            chrono::Utc::now().timestamp(),
        );
        let response = self
            .http
            .post(format!("{}{path}{query}", self.bases[0]))
            .header("content-type", "application/json")
            .header("content-digest", headers.content_digest)
            .header("signature-input", headers.signature_input)
            .header("signature", headers.signature)
            .body(bytes)
            .timeout(Duration::from_secs(40))
            .send()
            .await
            .ok()?;
        let status = response.status();
        Some((status, response.json().await.ok()?))
    }

    pub async fn claim(&self, wait: u64, idle: bool) -> Option<(StatusCode, Value)> {
        let body = json!({"agent_version": "0.1.0", "idle": idle,
            "vocabulary": ["check_status", "host_report"], "claim_bytes": 1048576});
        self.send("claim", &format!("?wait={wait}"), &body).await
    }

    /// Works until `stop`: claims with a short wait, completes each job it is handed, and
    /// moves to the next gateway whenever one does not answer. The jobs it was handed, in order.
    pub async fn work(mut self, stop: tokio_util::sync::CancellationToken) -> Vec<i64> {
        let mut handed = Vec::new();
        while !stop.is_cancelled() {
            let answer = tokio::select! {
                _ = stop.cancelled() => break,
                answer = self.claim(2, true) => answer,
            };
            let job = match answer {
                Some((StatusCode::OK, body)) => body["job"]["id"].as_i64(),
                Some(_) | None => {
                    self.bases.rotate_left(1);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(job) = job else { continue };
            handed.push(job);
            let result = json!({"job_id": job, "outcome": "completed", "output": "ok",
                "result": {"ok": true}, "reason": null});
            // A result is repeated until some gateway takes it (the same result again changes
            // nothing); a job the plane ended meanwhile answers 409.
            for _ in 0..100 {
                match self.send("result", "", &result).await {
                    Some((status, _)) if status.is_success() || status == StatusCode::CONFLICT => {
                        break
                    }
                    _ => {
                        self.bases.rotate_left(1);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
        handed
    }
}

/// The jobs handed out more than once across `agents`' lists.
pub fn handed_twice(handed: &[Vec<i64>]) -> Vec<i64> {
    let mut once = HashSet::new();
    handed
        .iter()
        .flatten()
        .filter(|job| !once.insert(**job))
        .copied()
        .collect()
}
