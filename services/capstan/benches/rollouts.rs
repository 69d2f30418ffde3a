//! A staged rollout across N simulated nodes (issue 16), against the real plane: the
//! `capstan all` release binary in its own process, its own PostgreSQL database and
//! nats-server. The agents are written here and sign every request as PROTOCOL.md says (as the
//! agents bench's do): each joins with a site, is approved through the operator API, reports
//! `upgrade_preflight` and `apply_update`, then long-polls (`wait=25`) and answers each job at
//! once — a passing readiness check, a passing structured apply — and polls again.
//!
//! The rollout is started through `POST /api/v1/rollouts` in `BENCH_STAGES` stages of equal
//! size, every node its own machine, so a stage's nodes all go at once. Reported:
//!
//! * the plane's time per step decision: `capstan_rollouts_advance_seconds` from the plane's
//!   `/metrics` (one advance = read the rollout and its steps under the row lock, judge, write
//!   the changed rows, the job requests and the events; without the commit);
//! * a node's result to its next step starting: from sending the readiness check's result to
//!   holding the apply job (result → agent channel's `job_finished` → the rollouts service
//!   judges and asks for the apply through its outbox → the agent channel queues it → the
//!   node's long poll hands it out);
//! * a stage's last result to the next stage's first job;
//! * the rollout's total time (the start POST to the last apply answered, then to the plane
//!   saying `finished`) and the plane's RSS.
//!
//! `cargo bench -p capstan --bench rollouts` (`BENCH_NODES=1000`, `BENCH_STAGES=10` by default)

mod support;

use futures::{stream, StreamExt};
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};
use support::{address, percentile, signed, signed_until_answered, Plane};

const VOCABULARY: &[&str] = &["check_status", "apply_update", "upgrade_preflight"];
const VERSION: &str = "2.1.0";
const POLL_WAIT: u64 = 25;

fn claim_body() -> Value {
    json!({"agent_version": "0.1.0", "vocabulary": VOCABULARY, "claim_bytes": 1048576})
}

/// Publishes the site release `VERSION` (one small file, signed here) through
/// `POST /api/v1/site-releases`: the agents here never fetch it, but the plane refuses to roll
/// out a version it never published.
async fn publish_release(plane: &Plane) {
    use base64::{engine::general_purpose::STANDARD, Engine as _};
    use capstan_signing::manifest::{signature_file, write_archive, FileManifest};
    let files = [(
        "public/index.html",
        0o644,
        &b"<html><body>bench</body></html>"[..],
    )];
    let manifest = FileManifest::describe(files)
        .expect("the bench release describes")
        .to_bytes();
    let key = capstan_signing::NodeKey::from_secret_bytes(&[12; 32]).expect("a key");
    let signatures = signature_file(&manifest, &key);
    let answer = plane
        .operator_post(
            "/api/v1/site-releases",
            json!({
                "version": VERSION,
                "manifest": String::from_utf8_lossy(&manifest),
                "signatures": String::from_utf8_lossy(&signatures),
                "archive": STANDARD.encode(write_archive(files)),
            }),
        )
        .await;
    assert_eq!(answer["version"], VERSION, "publishing {VERSION}: {answer}");
}

struct Agent {
    key: capstan_signing::NodeKey,
    http: reqwest::Client,
    node: i64,
}

/// What the agents saw, shared between them.
#[derive(Default)]
struct Seen {
    /// Per node: when its readiness check's result was sent.
    preflight_answered: HashMap<i64, Instant>,
    /// Readiness result sent → apply job held.
    result_to_next: Vec<Duration>,
    /// Per node: (first job held, apply result sent).
    spans: HashMap<i64, (Instant, Instant)>,
    /// Answers refused by the plane, by status.
    refused: HashMap<u16, usize>,
    /// Jobs other than the two words.
    other_jobs: usize,
}

fn main() {
    let size: usize = std::env::var("BENCH_NODES")
        .ok()
        .and_then(|size| size.parse().ok())
        .unwrap_or(1000);
    let stages: usize = std::env::var("BENCH_STAGES")
        .ok()
        .and_then(|stages| stages.parse().ok())
        .unwrap_or(10)
        .clamp(1, 20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "staged rollout, `capstan all` ({}) in its own process, {} cores, load average {}",
        if cfg!(debug_assertions) {
            "DEBUG build: run it with cargo bench"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    runtime.block_on(run(size, stages));
}

async fn run(size: usize, stage_count: usize) {
    let plane = Plane::start().await;
    let base = plane.base.clone();

    // Enrol: join with a site from its own address, approve, report the words.
    let enrolling = Instant::now();
    let mut agents: Vec<Agent> = Vec::with_capacity(size);
    for chunk_start in (0..size).step_by(500) {
        let chunk: Vec<usize> = (chunk_start..(chunk_start + 500).min(size)).collect();
        let joined: Vec<(capstan_signing::NodeKey, reqwest::Client, String)> = stream::iter(chunk)
            .map(|index| {
                let base = base.clone();
                async move {
                    let http = reqwest::Client::builder()
                        .local_address(address(index))
                        .build()
                        .unwrap();
                    let key = capstan_signing::NodeKey::generate();
                    let body = json!({"name": format!("site-{index}"),
                        "public_key": key.public_key().to_base64(), "agent_version": "0.1.0",
                        "site_root": "/var/www/site", "container": null, "addresses": []});
                    let (status, answer) =
                        signed_until_answered(&http, &base, &key, "join", "", &body).await;
                    assert_eq!(status, 202, "join: {answer}");
                    let id = answer["request_id"].as_str().unwrap().to_string();
                    (key, http, id)
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let approved: Vec<Agent> = stream::iter(joined)
            .map(|(key, http, id)| {
                let plane = &plane;
                async move {
                    let mut tries = 0;
                    let node = loop {
                        let answer = plane
                            .operator_post(&format!("/api/v1/joins/{id}/approve"), json!({}))
                            .await;
                        tries += 1;
                        match answer["node_id"].as_i64() {
                            Some(node) => break node,
                            None if answer["error"]["code"] == "unavailable" && tries < 20 => {
                                tokio::time::sleep(Duration::from_millis(250 * tries)).await;
                            }
                            None => panic!("approve: {answer}"),
                        }
                    };
                    Agent { key, http, node }
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        agents.extend(approved);
    }
    let agents = Arc::new(agents);
    stream::iter(0..size)
        .for_each_concurrent(64, |index| {
            let (agents, base) = (agents.clone(), base.clone());
            async move {
                let agent = &agents[index];
                let (status, answer) = signed_until_answered(
                    &agent.http,
                    &base,
                    &agent.key,
                    "claim",
                    "",
                    &claim_body(),
                )
                .await;
                assert_eq!(status, 200, "first claim: {answer}");
            }
        })
        .await;
    // The rollouts service plans from its projection of the agent channel's events.
    let nodes: Vec<i64> = agents.iter().map(|agent| agent.node).collect();
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    let projecting = Instant::now();
    loop {
        let known: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM rollouts.nodes
             WHERE node_id = ANY($1) AND 'apply_update' = ANY(vocabulary)",
        )
        .bind(&nodes)
        .fetch_one(&pool)
        .await
        .unwrap();
        if known == size as i64 {
            break;
        }
        assert!(
            projecting.elapsed() < Duration::from_secs(120),
            "the rollouts service knows {known} of {size} nodes' words"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let enrolment = enrolling.elapsed();
    let rss_enrolled = plane.rss_now_mib();

    // Every agent long-polls and answers its jobs at once.
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let applied = Arc::new(AtomicUsize::new(0));
    let pollers: Vec<_> = (0..size)
        .map(|index| {
            let (agents, base, seen, stop, applied) = (
                agents.clone(),
                base.clone(),
                seen.clone(),
                stop.clone(),
                applied.clone(),
            );
            tokio::spawn(async move {
                let agent = &agents[index];
                // The first poll spread over a second, as a fleet's polls are.
                tokio::time::sleep(Duration::from_millis((index as u64 * 7919) % 1000)).await;
                while !stop.load(Ordering::Relaxed) {
                    let (status, answer) = signed(
                        &agent.http,
                        &base,
                        &agent.key,
                        "claim",
                        &format!("?wait={POLL_WAIT}"),
                        &claim_body(),
                    )
                    .await;
                    let held = Instant::now();
                    if status != 200 {
                        *seen.lock().unwrap().refused.entry(status).or_default() += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    let job = &answer["job"];
                    let Some(job_id) = job["id"].as_i64() else {
                        continue;
                    };
                    let result = match job["primitive"].as_str() {
                        Some("upgrade_preflight") => {
                            let mut seen = seen.lock().unwrap();
                            seen.spans.entry(agent.node).or_insert((held, held));
                            json!({"checks": [{"name": "manifest", "pass": true},
                                              {"name": "lock", "pass": true}]})
                        }
                        Some("apply_update") => {
                            let mut seen = seen.lock().unwrap();
                            if let Some(sent) = seen.preflight_answered.remove(&agent.node) {
                                seen.result_to_next.push(held.duration_since(sent));
                            }
                            seen.spans.entry(agent.node).or_insert((held, held));
                            json!({"completed": true, "deploy_tier_passed": true,
                                   "version": VERSION, "rolled_back": false})
                        }
                        _ => {
                            seen.lock().unwrap().other_jobs += 1;
                            json!({})
                        }
                    };
                    let sent = Instant::now();
                    let primitive = job["primitive"].as_str().unwrap_or_default().to_string();
                    {
                        let mut seen = seen.lock().unwrap();
                        match primitive.as_str() {
                            "upgrade_preflight" => {
                                seen.preflight_answered.insert(agent.node, sent);
                            }
                            "apply_update" => {
                                if let Some(span) = seen.spans.get_mut(&agent.node) {
                                    span.1 = sent;
                                }
                            }
                            _ => {}
                        }
                    }
                    let body = json!({"job_id": job_id, "outcome": "completed", "output": "",
                                      "result": result, "reason": null});
                    let (status, _) =
                        signed_until_answered(&agent.http, &base, &agent.key, "result", "", &body)
                            .await;
                    if status != 200 {
                        *seen.lock().unwrap().refused.entry(status).or_default() += 1;
                    } else if primitive == "apply_update" {
                        applied.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    // The plane refuses a rollout of a version it never published (409): publish VERSION.
    publish_release(&plane).await;
    // Every poll parked before the rollout starts.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let per_stage = size.div_ceil(stage_count);
    let stages: Vec<Value> = nodes
        .chunks(per_stage)
        .map(|chunk| json!({"nodes": chunk}))
        .collect();
    let started = Instant::now();
    // A start the gateway refused unread (on a loaded machine the body can come slower than
    // its minimum rate) changed nothing, and is sent again.
    let mut tries = 0;
    let answer = loop {
        let answer = plane
            .operator_post(
                "/api/v1/rollouts",
                json!({"version": VERSION, "stages": stages}),
            )
            .await;
        tries += 1;
        let unread = answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("could not be read"));
        if !unread || tries >= 5 {
            break answer;
        }
        println!("    the start was refused unread, sent again: {answer}");
    };
    // A start the gateway gave up on after its 5 s (`unavailable`) may still commit in the
    // rollouts service: the rollout is then the one the list shows.
    let mut answer = answer;
    if answer["error"]["code"] == "unavailable" {
        println!("    the start was not answered in time: {answer}");
        let asked = Instant::now();
        while answer["id"].as_i64().is_none() && asked.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let list = plane.operator_get("/api/v1/rollouts").await;
            if let Some(first) = list["rollouts"].as_array().and_then(|all| all.first()) {
                answer = first.clone();
            }
        }
    }
    let rollout = answer["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("start: {answer}"));
    // The last apply answered, then the plane says finished.
    let limit = Duration::from_secs(60 + size as u64);
    while applied.load(Ordering::SeqCst) < size {
        assert!(
            started.elapsed() < limit,
            "only {} of {size} applies answered after {limit:?}",
            applied.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_applied = started.elapsed();
    let state = loop {
        let view = plane
            .operator_get(&format!("/api/v1/rollouts/{rollout}"))
            .await;
        let state = view["state"].as_str().unwrap_or_default().to_string();
        if state != "running" || started.elapsed() > limit {
            break (state, view);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let finished = started.elapsed();
    let metrics = plane.metrics().await;
    let rss_peak = plane.peak_rss_mib();
    stop.store(true, Ordering::Relaxed);
    for poller in &pollers {
        poller.abort();
    }

    // A stage's last apply answered → the next stage's first job held.
    let seen = seen.lock().unwrap();
    let mut stage_gaps = Vec::new();
    for pair in nodes.chunks(per_stage).collect::<Vec<_>>().windows(2) {
        let last_answer = pair[0]
            .iter()
            .filter_map(|node| seen.spans.get(node).map(|span| span.1))
            .max();
        let first_job = pair[1]
            .iter()
            .filter_map(|node| seen.spans.get(node).map(|span| span.0))
            .min();
        if let (Some(last), Some(first)) = (last_answer, first_job) {
            stage_gaps.push(first.saturating_duration_since(last));
        }
    }
    let mut result_to_next = seen.result_to_next.clone();
    let quantile = |name: &str, q: &str| -> f64 {
        let wanted = format!("{name}{{quantile=\"{q}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&wanted))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .map_or(f64::NAN, |seconds| seconds * 1e3)
    };
    let scalar = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let decision = "capstan_rollouts_advance_seconds";
    let decisions = scalar(&format!("{decision}_count"));
    println!(
        "  N = {size} nodes in {stage_count} stages of {per_stage} (enrolled in {:.1} s), rollout {rollout} ended {}",
        enrolment.as_secs_f64(),
        state.0
    );
    println!(
        "    plane time per step decision ({decisions:.0} advances)   p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms   mean {:>7.1} ms",
        quantile(decision, "0.5"),
        quantile(decision, "0.99"),
        quantile(decision, "1"),
        scalar(&format!("{decision}_sum")) * 1e3 / decisions
    );
    if !result_to_next.is_empty() {
        println!(
            "    node's result → its next step held ({} nodes)       p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms",
            result_to_next.len(),
            percentile(&mut result_to_next, 0.5),
            percentile(&mut result_to_next, 0.99),
            percentile(&mut result_to_next, 1.0)
        );
    }
    if !stage_gaps.is_empty() {
        println!(
            "    stage's last result → next stage's first job ({} gaps)   p50 {:>7.1} ms   max {:>7.1} ms",
            stage_gaps.len(),
            percentile(&mut stage_gaps, 0.5),
            percentile(&mut stage_gaps, 1.0)
        );
    }
    println!(
        "    rollout total: every apply answered {:.1} s, finished {:.1} s ({:.1} ms a node)",
        all_applied.as_secs_f64(),
        finished.as_secs_f64(),
        finished.as_secs_f64() * 1e3 / size as f64
    );
    println!("    plane RSS enrolled {rss_enrolled:.1} MiB, peak {rss_peak:.1} MiB");
    for (status, count) in &seen.refused {
        println!("    requests answered {status}: {count}");
    }
    if seen.other_jobs > 0 {
        println!("    jobs other than the rollout's: {}", seen.other_jobs);
    }
    assert_eq!(state.0, "finished", "{}", state.1);
}
