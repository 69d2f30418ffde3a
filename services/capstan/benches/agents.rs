//! The agent channel under load: N simulated agents enrol (join, operator approval, first
//! claim), then, once the plane is quiet (its other services have read the enrolment's
//! events), report signed claims per second with latency, then all long-poll (20 to 25 s
//! as the agent does, the first poll spread over 5 to 25 s) while jobs are queued one by one,
//! reporting dispatch latency (job queued → agent holds it). The plane is the
//! real `capstan all` release binary in its own process; its peak RSS is read from /proc. Raw
//! Ed25519 verifications per second on this machine are the ceiling.
//!
//! `cargo bench -p capstan --bench agents` (`BENCH_AGENTS=1000,10000` by default). The
//! enrolment is reported by phase (joins, approvals with each approval's answer time, first
//! claims); `BENCH_ENROL_ONLY=1` stops after it.

mod support;

use capstan_signing::{sign_request, NodeKey};
use futures::{stream, StreamExt};
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use support::{
    address, now, peak_rss_mib, percentile, rss_now_mib, send, settled, sign, signed, Plane,
    PlaneProcess,
};

const VOCABULARY: &[&str] = &["check_status", "host_report"];
const CLAIM_SECONDS: u64 = 10;
const DISPATCHES: usize = 300;

struct Agent {
    key: NodeKey,
    http: reqwest::Client,
    node: i64,
}

/// The `wait` of an agent's long poll: as the agent asks (20 to 25 s, spread), except the first,
/// which is spread over 5 to 25 s as in a fleet whose agents came up over time rather than in
/// the same second. (A fleet that renews every poll at once is a burst of N signed claims: at
/// 10,000, several seconds of the plane's two cores, during which a queued job waits its turn.)
fn poll_wait(agent: usize, round: usize) -> usize {
    if round == 0 {
        5 + agent * 7919 % 21
    } else {
        20 + (agent + round) % 6
    }
}

fn claim_body() -> Value {
    json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY, "claim_bytes": 1048576})
}

fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_AGENTS")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "agent channel load, `capstan all` (release) in its own process, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  raw Ed25519 verifications (one core): {:.0}/s",
        verifications_per_second()
    );
    let mode = match std::env::var("BENCH_MODE").as_deref() {
        Ok("storm") => Mode::Storm,
        Ok("steady") | Err(_) => Mode::Steady,
        Ok(other) => panic!("BENCH_MODE is steady or storm, not {other:?}"),
    };
    for size in sizes {
        runtime.block_on(run(size, mode));
    }
}

fn verifications_per_second() -> f64 {
    let key = NodeKey::generate();
    let headers = sign_request(&key, "POST", "/api/v1/agent/claim", b"{}", now());
    let parsed =
        capstan_signing::parse_signature(&headers.signature_input, &headers.signature).unwrap();
    let public = key.public_key();
    let started = Instant::now();
    let rounds = 20_000;
    for _ in 0..rounds {
        parsed
            .verify(
                &public,
                "POST",
                "/api/v1/agent/claim",
                &headers.content_digest,
            )
            .unwrap();
    }
    rounds as f64 / started.elapsed().as_secs_f64()
}

/// Which benchmark `BENCH_MODE` asks for: `steady` (the default) or `storm`.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Steady,
    Storm,
}

async fn run(size: usize, mode: Mode) {
    // `BENCH_PLANE_WRAPPER="heaptrack -o /tmp/plane"` runs the plane under a profiler
    // (`support::Plane::start`).
    let Plane {
        process: plane,
        base,
        token,
        operator,
        database: _database,
        nats: _nats,
    } = Plane::start().await;

    // Enrol: join from its own address, approve through the operator API, first claim.
    let enrolling = Instant::now();
    let (agents, phases) = enrol(&base, &operator, &token, size).await;
    let agents = Arc::new(agents);
    let enrolment = enrolling.elapsed();
    let rss_enrolled = rss_now_mib(&plane.0);
    phases.print(size, enrolment);
    if std::env::var("BENCH_ENROL_ONLY").is_ok_and(|only| only == "1") {
        return;
    }
    // The other services digest the enrolment's events (each node's join, approval and first
    // report, read by four services) for a while after the last answer: the claims are
    // measured once the plane is quiet, and how long that took is reported.
    let digesting = settled(&plane.0, Duration::from_secs(300)).await;
    if mode == Mode::Storm {
        storm(&plane, &base, &operator, &token, agents, enrolment).await;
        return;
    }

    // Signed claims per second: 64 at a time, round robin over the fleet, nothing to hand out.
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(CLAIM_SECONDS);
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let claiming = Instant::now();
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let (agents, base, latencies, counter) = (
                agents.clone(),
                base.clone(),
                latencies.clone(),
                counter.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let index =
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % agents.len();
                    let agent = &agents[index];
                    let sent = Instant::now();
                    let (status, _) =
                        signed(&agent.http, &base, &agent.key, "claim", "", &claim_body()).await;
                    if status == 200 {
                        latencies.lock().unwrap().push(sent.elapsed());
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = claiming.elapsed().as_secs_f64();
    let mut claim_latencies = latencies.lock().unwrap().clone();
    let claims_per_second = claim_latencies.len() as f64 / elapsed;
    let rss_claimed = rss_now_mib(&plane.0);

    // Dispatch: every agent long-polls; jobs are queued one at a time on random nodes.
    let queued_at: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let dispatch: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Long polls answered otherwise than 200, by status (0: the request failed), with a sample.
    let unanswered: Arc<Mutex<HashMap<u16, (usize, String)>>> = Arc::default();
    let pollers: Vec<_> = (0..size)
        .map(|index| {
            let (agents, base, queued_at, dispatch, stop, unanswered) = (
                agents.clone(),
                base.clone(),
                queued_at.clone(),
                dispatch.clone(),
                stop.clone(),
                unanswered.clone(),
            );
            tokio::spawn(async move {
                let agent = &agents[index];
                let mut round = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let wait = poll_wait(index, round);
                    round += 1;
                    let (status, answer) = signed(
                        &agent.http,
                        &base,
                        &agent.key,
                        "claim",
                        &format!("?wait={wait}"),
                        &claim_body(),
                    )
                    .await;
                    if status != 200 {
                        unanswered
                            .lock()
                            .unwrap()
                            .entry(status)
                            .or_insert((0, answer.to_string()))
                            .0 += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    if let Some(job) = answer["job"]["id"].as_i64() {
                        if let Some(at) = queued_at.lock().unwrap().remove(&agent.node) {
                            dispatch.lock().unwrap().push(at.elapsed());
                        }
                        signed(
                            &agent.http,
                            &base,
                            &agent.key,
                            "result",
                            "",
                            &json!({"job_id": job, "outcome": "completed", "output": ""}),
                        )
                        .await;
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(if size > 5_000 { 20 } else { 5 })).await;
    let rss_polling = rss_now_mib(&plane.0);
    // `BENCH_HOLD=<seconds>`: keep every long poll open that long before the jobs are queued,
    // to look at the plane (its pid is printed) with a profiler.
    if let Some(hold) = std::env::var("BENCH_HOLD")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
    {
        println!(
            "  holding {size} long polls for {hold} s; the plane is pid {}",
            plane.0.id()
        );
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
    let mut queueing = Vec::with_capacity(DISPATCHES);
    for round in 0..DISPATCHES {
        let node = agents[(round * 7919) % size].node;
        let asked = Instant::now();
        queued_at.lock().unwrap().insert(node, asked);
        let response = operator
            .post(format!("{base}/api/v1/nodes/{node}/jobs"))
            .bearer_auth(&token)
            .json(&json!({"primitive": "check_status", "params": {}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        queueing.push(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut dispatch_latencies = dispatch.lock().unwrap().clone();
    // What became of a job its agent did not get in time.
    let unseen: Vec<i64> = queued_at.lock().unwrap().keys().copied().collect();
    for node in unseen {
        let jobs: Value = operator
            .get(format!("{base}/api/v1/jobs?node_id={node}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null);
        for job in jobs["jobs"].as_array().into_iter().flatten() {
            println!(
                "    not seen in time: job {} on node {node}: {}, created {}, claimed {}",
                job["id"], job["state"], job["created_at"], job["claimed_at"]
            );
        }
    }
    let rss = peak_rss_mib(&plane.0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(plane);
    for poller in pollers {
        poller.abort();
    }

    println!(
        "  N = {size} agents (enrolled in {:.1} s; the plane {})",
        enrolment.as_secs_f64(),
        digesting.map_or(
            "still busy 300 s later: claims measured anyway".into(),
            |took| { format!("quiet {:.1} s later", took.as_secs_f64()) }
        )
    );
    println!(
        "    signed claims        {claims_per_second:>8.0}/s   p50 {:>6.1} ms   p99 {:>6.1} ms",
        percentile(&mut claim_latencies, 0.5),
        percentile(&mut claim_latencies, 0.99)
    );
    println!(
        "    dispatch ({} of {DISPATCHES} jobs seen)   p50 {:>6.1} ms   p99 {:>6.1} ms",
        dispatch_latencies.len(),
        percentile(&mut dispatch_latencies, 0.5),
        percentile(&mut dispatch_latencies, 0.99)
    );
    println!(
        "      of which queueing it (operator POST answered)      p50 {:>6.1} ms   p99 {:>6.1} ms",
        percentile(&mut queueing, 0.5),
        percentile(&mut queueing, 0.99)
    );
    for (status, (count, sample)) in unanswered.lock().unwrap().iter() {
        println!("    long polls answered {status}: {count} (for example {sample})");
    }
    println!("    plane peak RSS      {rss:>8.1} MiB");
    println!(
        "    plane RSS enrolled {rss_enrolled:.1} MiB, after claims {rss_claimed:.1} MiB, \
         all polling {rss_polling:.1} MiB ({:.1} KiB per open long poll)",
        (rss_polling - rss_claimed) * 1024.0 / size as f64
    );
}

/// How long each part of the enrolment took: every join asked, every join approved (with each
/// approval's own answer time), every node's first claim answered.
struct Phases {
    joins: Duration,
    approvals: Duration,
    first_claims: Duration,
    approval_latencies: Vec<Duration>,
}

impl Phases {
    fn print(mut self, size: usize, enrolment: Duration) {
        println!(
            "  N = {size} enrolled (joined, approved and online) in {:.1} s: joins {:.1} s, \
             approvals {:.1} s ({:.0}/s; one approval p50 {:.1} ms, p99 {:.1} ms), first claims {:.1} s",
            enrolment.as_secs_f64(),
            self.joins.as_secs_f64(),
            self.approvals.as_secs_f64(),
            size as f64 / self.approvals.as_secs_f64(),
            percentile(&mut self.approval_latencies, 0.5),
            percentile(&mut self.approval_latencies, 0.99),
            self.first_claims.as_secs_f64(),
        );
    }
}

/// Enrols `size` agents as a fleet does: each joins from its own address (64 at a time, in
/// chunks of 500), an operator approves them through the API (32 at a time), then each makes
/// its first claim (64 at a time).
async fn enrol(
    base: &str,
    operator: &reqwest::Client,
    token: &str,
    size: usize,
) -> (Vec<Agent>, Phases) {
    let mut agents: Vec<Agent> = Vec::with_capacity(size);
    let mut joins = Duration::ZERO;
    let mut approvals = Duration::ZERO;
    let mut approval_latencies = Vec::with_capacity(size);
    for chunk_start in (0..size).step_by(500) {
        let chunk: Vec<usize> = (chunk_start..(chunk_start + 500).min(size)).collect();
        let joining = Instant::now();
        let joined: Vec<(NodeKey, reqwest::Client, String)> = stream::iter(chunk)
            .map(|index| async move {
                let http = reqwest::Client::builder()
                    .local_address(address(index))
                    .build()
                    .unwrap();
                let key = NodeKey::generate();
                let body = json!({"name": format!("node-{index}"), "public_key": key.public_key().to_base64(), "agent_version": "0.1.0", "addresses": []});
                let (status, answer) = signed(&http, base, &key, "join", "", &body).await;
                assert_eq!(status, 202, "join: {answer}");
                let id = answer["request_id"].as_str().unwrap().to_string();
                (key, http, id)
            })
            .buffer_unordered(64)
            .collect()
            .await;
        joins += joining.elapsed();
        let approving = Instant::now();
        let approved: Vec<(NodeKey, reqwest::Client, i64, Duration)> = stream::iter(joined)
            .map(|(key, http, id)| async move {
                let asked = Instant::now();
                let response = operator
                    .post(format!("{base}/api/v1/joins/{id}/approve"))
                    .bearer_auth(token)
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap();
                let answer: Value = response.json().await.unwrap();
                let node = answer["node_id"].as_i64().expect("approved");
                (key, http, node, asked.elapsed())
            })
            .buffer_unordered(32)
            .collect()
            .await;
        approvals += approving.elapsed();
        for (key, http, node, took) in approved {
            approval_latencies.push(took);
            agents.push(Agent { key, http, node });
        }
    }
    let claiming = Instant::now();
    stream::iter(&agents)
        .for_each_concurrent(64, |agent| async move {
            let (status, answer) =
                signed(&agent.http, base, &agent.key, "claim", "", &claim_body()).await;
            assert_eq!(status, 200, "first claim: {answer}");
        })
        .await;
    let phases = Phases {
        joins,
        approvals,
        first_claims: claiming.elapsed(),
        approval_latencies,
    };
    (agents, phases)
}

/// Storm rounds run (`BENCH_STORM_ROUNDS`).
const STORM_ROUNDS: usize = 3;
/// What every agent asks in the storm, as the agent asks.
const STORM_WAIT: u64 = 25;
/// Rounds start at least this far apart, so every claim of a round is due its heartbeat stamp
/// (`LAST_SEEN_RESOLUTION`, 30 s), as after a restart: the dearest renewal.
const STORM_PERIOD: Duration = Duration::from_secs(31);
/// Jobs queued in a round at least (one after another, each POST answered, then 10 ms).
const STORM_MIN_JOBS: usize = 20;
/// A round whose renewals are not all parked by then is reported as such.
const STORM_SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// The long polls the plane holds open now (`capstan_agent_long_polls`).
async fn open_long_polls(operator: &reqwest::Client, base: &str, token: &str) -> Option<f64> {
    let text = operator
        .get(format!("{base}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("capstan_agent_long_polls "))
        .and_then(|value| value.trim().parse().ok())
}

/// A job queued in a storm: when, and whether the round's renewals were still coming in.
#[derive(Clone, Copy)]
struct Queued {
    at: Instant,
    in_storm: bool,
}

/// The restart storm: every agent renews its long poll (`wait=25`) at the same moment, as a
/// fleet does when the plane restarts, while jobs are queued one after another on nodes whose
/// claims are somewhere in that burst. Reports how long the round of renewals takes (until the
/// plane holds every agent's long poll, read from its `/metrics`) and how long a job queued
/// meanwhile takes to reach its agent. Rounds start [`STORM_PERIOD`] apart; an agent handed a
/// job answers it and polls again until its round ends.
async fn storm(
    plane: &PlaneProcess,
    base: &str,
    operator: &reqwest::Client,
    token: &str,
    agents: Arc<Vec<Agent>>,
    enrolment: Duration,
) {
    let size = agents.len();
    let rounds: usize = std::env::var("BENCH_STORM_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(STORM_ROUNDS);
    let queued_at: Arc<Mutex<HashMap<i64, Queued>>> = Arc::default();
    // (waited, queued during the storm)
    let dispatch: Arc<Mutex<Vec<(Duration, bool)>>> = Arc::default();
    let unanswered: Arc<Mutex<HashMap<u16, (usize, String)>>> = Arc::default();
    // Agents between a job handed to them and their next long poll.
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut settled = Vec::with_capacity(rounds);
    let (mut queued_total, mut not_seen) = (0, 0);
    let mut start = Instant::now() + Duration::from_secs(1);
    for round in 0..rounds {
        let round_end = start + Duration::from_secs(STORM_WAIT);
        let pollers: Vec<_> = (0..size)
            .map(|index| {
                let (agents, base, queued_at, dispatch, unanswered, busy) = (
                    agents.clone(),
                    base.to_string(),
                    queued_at.clone(),
                    dispatch.clone(),
                    unanswered.clone(),
                    busy.clone(),
                );
                tokio::spawn(async move {
                    let agent = &agents[index];
                    // Signed ahead, so the burst is the plane's to take, not the signing's.
                    let query = format!("?wait={STORM_WAIT}");
                    let (url, bytes, headers) =
                        sign(&base, &agent.key, "claim", &query, &claim_body());
                    tokio::time::sleep_until(start.into()).await;
                    let mut answer = send(&agent.http, url, bytes, headers).await;
                    loop {
                        let (status, body) = &answer;
                        if *status != 200 {
                            unanswered
                                .lock()
                                .unwrap()
                                .entry(*status)
                                .or_insert((0, body.to_string()))
                                .0 += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        } else if let Some(job) = body["job"]["id"].as_i64() {
                            busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if let Some(queued) = queued_at.lock().unwrap().remove(&agent.node) {
                                dispatch
                                    .lock()
                                    .unwrap()
                                    .push((queued.at.elapsed(), queued.in_storm));
                            }
                            let result =
                                json!({"job_id": job, "outcome": "completed", "output": ""});
                            signed(&agent.http, &base, &agent.key, "result", "", &result).await;
                            busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        } else if Instant::now() + Duration::from_secs(1) >= round_end {
                            break;
                        }
                        if Instant::now() + Duration::from_secs(1) >= round_end {
                            break;
                        }
                        // As the agent does after a job: poll again, here until the round ends.
                        let wait = round_end
                            .saturating_duration_since(Instant::now())
                            .as_secs();
                        answer = signed(
                            &agent.http,
                            &base,
                            &agent.key,
                            "claim",
                            &format!("?wait={}", wait.max(1)),
                            &claim_body(),
                        )
                        .await;
                    }
                })
            })
            .collect();
        // Watches the plane's open long polls until every agent holds one (or is answering a
        // job): the round of renewals is over.
        let renewed: Arc<Mutex<Option<Duration>>> = Arc::default();
        let watcher = {
            let (operator, base, token, renewed, busy) = (
                operator.clone(),
                base.to_string(),
                token.to_string(),
                renewed.clone(),
                busy.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                while start.elapsed() < STORM_SETTLE_LIMIT {
                    let open = open_long_polls(&operator, &base, &token)
                        .await
                        .unwrap_or(0.0);
                    let busy = busy.load(std::sync::atomic::Ordering::SeqCst) as f64;
                    if open + busy >= size as f64 {
                        *renewed.lock().unwrap() = Some(start.elapsed());
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        tokio::time::sleep_until(start.into()).await;
        let mut queued = 0;
        // Distinct nodes in a round, each a different one every round.
        while queued < size / 2
            && start.elapsed() < STORM_SETTLE_LIMIT
            && (queued < STORM_MIN_JOBS || !watcher.is_finished())
        {
            let node = agents[(queued * 7919 + round * 104_729) % size].node;
            let in_storm = !watcher.is_finished();
            queued_at.lock().unwrap().insert(
                node,
                Queued {
                    at: Instant::now(),
                    in_storm,
                },
            );
            let response = operator
                .post(format!("{base}/api/v1/nodes/{node}/jobs"))
                .bearer_auth(token)
                .json(&json!({"primitive": "check_status", "params": {}}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201);
            queued += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        queued_total += queued;
        watcher.await.unwrap();
        for poller in pollers {
            poller.await.unwrap();
        }
        let round_settled = *renewed.lock().unwrap();
        settled.push(round_settled);
        match round_settled {
            Some(took) => println!(
                "    round {}: every renewal parked after {:.2} s; {queued} jobs queued",
                round + 1,
                took.as_secs_f64()
            ),
            None => println!(
                "    round {}: the renewals were NOT all parked within {STORM_SETTLE_LIMIT:?}; {queued} jobs queued",
                round + 1
            ),
        }
        // A job its agent did not get within its round.
        let left: Vec<i64> = queued_at
            .lock()
            .unwrap()
            .drain()
            .map(|(node, _)| node)
            .collect();
        not_seen += left.len();
        for node in left {
            println!("    not seen within its round: the job on node {node}");
        }
        start = (start + STORM_PERIOD).max(Instant::now() + Duration::from_secs(1));
    }
    let rss = peak_rss_mib(&plane.0);
    let dispatch = dispatch.lock().unwrap().clone();
    let (mut during, mut after): (Vec<_>, Vec<_>) =
        dispatch.iter().partition(|(_, in_storm)| *in_storm);
    let mut during: Vec<Duration> = during.drain(..).map(|(waited, _)| waited).collect();
    let mut after: Vec<Duration> = after.drain(..).map(|(waited, _)| waited).collect();
    println!(
        "  N = {size} agents, restart storm: {rounds} rounds of {size} claims with wait={STORM_WAIT} at once (enrolled in {:.1} s)",
        enrolment.as_secs_f64()
    );
    let rounds_text: Vec<String> = settled
        .iter()
        .map(|took| {
            took.map_or("never".into(), |took| {
                format!("{:.2} s", took.as_secs_f64())
            })
        })
        .collect();
    println!(
        "    renewal round (all long polls parked)   {}",
        rounds_text.join(", ")
    );
    if !during.is_empty() {
        println!(
            "    dispatch, queued during the renewals ({} jobs)   p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms",
            during.len(),
            percentile(&mut during, 0.5),
            percentile(&mut during, 0.99),
            percentile(&mut during, 1.0)
        );
    }
    if !after.is_empty() {
        println!(
            "    dispatch, queued after them ({} jobs)             p50 {:>7.1} ms   p99 {:>7.1} ms",
            after.len(),
            percentile(&mut after, 0.5),
            percentile(&mut after, 0.99)
        );
    }
    println!(
        "    jobs that reached their agent within their round: {} of {queued_total} ({not_seen} not)",
        dispatch.len()
    );
    for (status, (count, sample)) in unanswered.lock().unwrap().iter() {
        println!("    claims answered {status}: {count} (for example {sample})");
    }
    println!("    plane peak RSS      {rss:>8.1} MiB");
}
