//! What the plane benchmarks share: the plane as the real `capstan all` release binary in its
//! own process (its own database and nats-server), an operator token, agents' signed requests
//! from their own loopback addresses, and the figures read from /proc.

#![allow(dead_code)]

use capstan_bus::testsuite::NatsServer;
use capstan_signing::{sign_request, NodeKey, SignedHeaders};
use capstan_store::testsuite::TestDatabase;
use serde_json::{json, Value};
use std::{
    net::{IpAddr, Ipv4Addr, TcpListener},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Each agent speaks from its own loopback address, as a fleet's machines have their own.
pub fn address(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        10 + (index / 62_500) as u8,
        ((index / 250) % 250) as u8,
        (1 + index % 250) as u8,
    ))
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub async fn signed(
    http: &reqwest::Client,
    base: &str,
    key: &NodeKey,
    endpoint: &str,
    query: &str,
    body: &Value,
) -> (u16, Value) {
    let (url, bytes, headers) = sign(base, key, endpoint, query, body);
    send(http, url, bytes, headers).await
}

/// As [`signed`], asked again (signed afresh) while the plane answers 503 or not at all: a
/// loaded plane's gateway gives up on a slow service after 5 s, and join, approve-free
/// claims and results are safe to repeat (PROTOCOL.md: the same key renews the same join; a
/// repeated result changes nothing).
pub async fn signed_until_answered(
    http: &reqwest::Client,
    base: &str,
    key: &NodeKey,
    endpoint: &str,
    query: &str,
    body: &Value,
) -> (u16, Value) {
    let mut tries = 0;
    loop {
        let (status, answer) = signed(http, base, key, endpoint, query, body).await;
        tries += 1;
        if !matches!(status, 0 | 503) || tries >= 20 {
            return (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(250 * tries)).await;
    }
}

/// A request signed now, to send at once or a moment later.
pub fn sign(
    base: &str,
    key: &NodeKey,
    endpoint: &str,
    query: &str,
    body: &Value,
) -> (String, Vec<u8>, SignedHeaders) {
    let bytes = serde_json::to_vec(body).unwrap();
    let path = format!("/api/v1/agent/{endpoint}");
    let headers = sign_request(key, "POST", &path, &bytes, now());
    (format!("{base}{path}{query}"), bytes, headers)
}

pub async fn send(
    http: &reqwest::Client,
    url: String,
    bytes: Vec<u8>,
    headers: SignedHeaders,
) -> (u16, Value) {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("content-digest", headers.content_digest)
        .header("signature-input", headers.signature_input)
        .header("signature", headers.signature)
        .body(bytes)
        .send()
        .await;
    match response {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        }
        Err(error) => (0, json!({"transport": error.to_string()})),
    }
}

pub fn percentile(samples: &mut [Duration], fraction: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
    samples[index].as_secs_f64() * 1e3
}

/// The plane's process, stopped with SIGTERM when dropped, also when the benchmark panics.
pub struct PlaneProcess(pub Child);

impl Drop for PlaneProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// A memory figure of `child` from /proc (`VmHWM` peak, `VmRSS` now), in MiB.
pub fn rss_mib(child: &Child, field: &str) -> f64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The CPU time `child` has used so far (user and system), in clock ticks, from /proc/<pid>/stat.
fn cpu_ticks(child: &Child) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    // The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|field| field.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Waits until `child` is quiet (under 5% of a core over a second, twice in a row): how long
/// that took, or `None` when it was still busy after `limit`.
pub async fn settled(child: &Child, limit: Duration) -> Option<Duration> {
    let ticks_per_second = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(100)
        .max(1);
    let started = Instant::now();
    let mut quiet = 0;
    let mut before = cpu_ticks(child);
    while quiet < 2 {
        if started.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu_ticks(child);
        // Under 5% of a core: fewer ticks in the second than a twentieth of a second's.
        quiet = if now.saturating_sub(before) * 20 < ticks_per_second {
            quiet + 1
        } else {
            0
        };
        before = now;
    }
    Some(started.elapsed())
}

pub fn peak_rss_mib(child: &Child) -> f64 {
    rss_mib(child, "VmHWM:")
}

pub fn rss_now_mib(child: &Child) -> f64 {
    rss_mib(child, "VmRSS:")
}

/// The plane running: `capstan all` against its own database and nats-server, with an
/// operator (level 10) to ask it things.
pub struct Plane {
    pub process: PlaneProcess,
    pub base: String,
    pub token: String,
    pub operator: reqwest::Client,
    pub database: TestDatabase,
    pub nats: NatsServer,
}

impl Plane {
    pub async fn start() -> Plane {
        Plane::start_with(&[]).await
    }

    /// As [`Plane::start`], with further `CAPSTAN__*` settings; `{base}` in a value stands for
    /// the plane's own URL.
    pub async fn start_with(extra: &[(&str, &str)]) -> Plane {
        let nats = NatsServer::start();
        let database = TestDatabase::create().await;
        let listen = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let base = format!("http://{listen}");
        let environment = [
            ("CAPSTAN__DATABASE__URL", database.url().to_string()),
            ("CAPSTAN__NATS__URL", nats.url()),
            ("CAPSTAN__GATEWAY__LISTEN", listen.clone()),
            ("CAPSTAN__DATABASE__MAX_CONNECTIONS", "16".to_string()),
            ("CAPSTAN__TELEMETRY__LOG_LEVEL", "warn".to_string()),
        ];
        let environment: Vec<(&str, String)> = environment
            .into_iter()
            .chain(
                extra
                    .iter()
                    .map(|(key, value)| (*key, value.replace("{base}", &base))),
            )
            .collect();
        let binary = env!("CARGO_BIN_EXE_capstan");
        let output = Command::new(binary)
            .args([
                "admin",
                "create-operator",
                "--name",
                "bench",
                "--level",
                "10",
            ])
            .envs(environment.iter().cloned())
            .output()
            .unwrap();
        let token = String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|line| line.strip_prefix("token: ").map(str::to_string))
            .expect("create-operator prints a token");
        // `BENCH_PLANE_WRAPPER="heaptrack -o /tmp/plane"`: run the plane under a profiler (the
        // RSS figures are then the wrapper's, not the plane's).
        let wrapper: Vec<String> = std::env::var("BENCH_PLANE_WRAPPER")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut command = match wrapper.split_first() {
            Some((program, arguments)) => {
                let mut command = Command::new(program);
                command.args(arguments).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let process = PlaneProcess(
            command
                .arg("all")
                .envs(environment.iter().cloned())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let operator = reqwest::Client::new();
        let started = Instant::now();
        while operator
            .get(format!("{base}/healthz"))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "plane never healthy"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Plane {
            process,
            base,
            token,
            operator,
            database,
            nats,
        }
    }

    pub async fn operator_post(&self, path: &str, body: Value) -> Value {
        self.operator
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null)
    }

    pub async fn operator_get(&self, path: &str) -> Value {
        self.operator
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null)
    }

    /// The plane's Prometheus text.
    pub async fn metrics(&self) -> String {
        self.operator
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap_or_default()
    }

    pub fn peak_rss_mib(&self) -> f64 {
        rss_mib(&self.process.0, "VmHWM:")
    }

    pub fn rss_now_mib(&self) -> f64 {
        rss_mib(&self.process.0, "VmRSS:")
    }
}
