//! Provisioning under load (issue 29): N provisions asked for at once (50 by default) against
//! the Linode stand-in, each instance a real sshd in a namespace of its own on a loopback
//! address, each bootstrapped over SSH with the release agent binary, whose agent joins from the
//! instance's address and is auto-approved. The plane is the real `capstan all` release binary
//! in its own process; its peak RSS is read from /proc.
//!
//! `cargo build --release -p capstan-agent && cargo bench -p capstan --bench provisions`
//! (`BENCH_PROVISIONS=50`, as root: the machines need namespaces and sshd). Reported, p50 and
//! p99 over the provisions, from each provision's own step times:
//!
//! * request → node online, in all;
//! * the provider's part: `creating` → `installing` (the create call and the boot, which the
//!   stand-in makes last `BOOT_POLLS` looks 200 ms apart);
//! * the SSH sessions' part: `installing` → `done` (upload, install, password retirement and
//!   its proof, on this machine's sshd);
//! * what the plane adds: `requested` → `creating` (the workflow picking it up) and `done` → the
//!   join approved (the agent's join heard, the five conditions judged with the provider asked,
//!   the agent channel's approval);
//! * the agent's own: the approval seen at its next join-status poll, its first claim, online
//!   (as the API's node view says, polled every 100 ms here).

mod support;

use std::time::{Duration, Instant};

use capstan_provisioning::standin::{sshd, Flavor, StandIn};
use chrono::{DateTime, Utc};
use futures::future::join_all;
use serde_json::{json, Value};
use support::{percentile, Plane};

const BOOT_POLLS: u32 = 3;

fn main() {
    let count: usize = std::env::var("BENCH_PROVISIONS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(50);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "provisioning load, `capstan all` (release) in its own process, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    runtime.block_on(run(count));
}

fn agent_binary() -> String {
    let bench = std::env::current_exe().unwrap();
    let release = bench.parent().and_then(|deps| deps.parent()).unwrap();
    let agent = release.join("capstan-agent");
    assert!(
        agent.is_file(),
        "{} is missing: cargo build --release -p capstan-agent",
        agent.display()
    );
    agent.display().to_string()
}

fn at(step: &Value, name: &str) -> Option<DateTime<Utc>> {
    step["steps"]
        .as_array()?
        .iter()
        .rev()
        .find(|each| each["step"] == name)?["at"]
        .as_str()?
        .parse()
        .ok()
}

fn span(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or_default()
}

async fn run(count: usize) {
    let linode = StandIn::start(Flavor::Linode).await;
    linode.world().boot_polls = BOOT_POLLS;
    linode.start_machines(
        sshd::DEFAULT_SSH_PORT,
        vec![("CAPSTAN_AGENT_LOCAL_ADDRESS".into(), "{address}".into())],
    );
    let linode_url = linode.base_url();
    let agent = agent_binary();
    let plane = Plane::start_with(&[
        ("CAPSTAN__PROVISIONING__SEAL_KEY", &"5e".repeat(32)),
        ("CAPSTAN__PROVISIONING__LINODE_BASE_URL", &linode_url),
        ("CAPSTAN__PROVISIONING__PLANE_URL", "{base}"),
        ("CAPSTAN__PROVISIONING__AGENT_BINARY", &agent),
        ("CAPSTAN__PROVISIONING__BOOT_POLL_MILLIS", "200"),
        ("CAPSTAN__PROVISIONING__CONCURRENCY", "100"),
        ("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true"),
    ])
    .await;
    let account = plane
        .operator_post(
            "/api/v1/provisioning/accounts",
            json!({"provider": "linode", "label": "bench", "flag": "main", "token": "standin-token"}),
        )
        .await;
    let account = account["id"].as_i64().expect("the account was added");

    let started = Instant::now();
    let asked = join_all((0..count).map(|index| {
        let plane = &plane;
        async move {
            let body = json!({"account_id": account, "kind": "agent", "name": format!("bench{index:03}"),
                "region": "us-east", "size": "g6-nanode-1"});
            let answer = plane.operator_post("/api/v1/provisioning/provisions", body).await;
            answer["id"].as_i64().unwrap_or_else(|| panic!("not asked: {answer}"))
        }
    }))
    .await;
    println!(
        "  {count} provisions asked for in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Each provision's node, and when it was first seen online.
    let mut online: Vec<Option<DateTime<Utc>>> = vec![None; count];
    let mut views: Vec<Value> = vec![Value::Null; count];
    let deadline = Instant::now() + Duration::from_secs(1800);
    while online.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "not all online in 30 minutes");
        for (index, id) in asked.iter().enumerate() {
            if online[index].is_some() {
                continue;
            }
            let provision = plane
                .operator_get(&format!("/api/v1/provisioning/provisions/{id}"))
                .await;
            assert_ne!(provision["step"], "install_failed", "{provision}");
            let Some(node) = provision["node_id"].as_i64() else {
                continue;
            };
            if provision["step"] != "done" {
                continue;
            }
            let view = plane.operator_get(&format!("/api/v1/nodes/{node}")).await;
            if view["online"] == true {
                online[index] = Some(Utc::now());
                views[index] = provision;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall = started.elapsed();
    let (mut total, mut provider, mut ssh, mut plane_adds, mut agent) =
        (vec![], vec![], vec![], vec![], vec![]);
    for (view, online) in views.iter().zip(&online) {
        let (requested, creating, installing, done, online) = (
            at(view, "requested").unwrap(),
            at(view, "creating").unwrap(),
            at(view, "installing").unwrap(),
            at(view, "done").unwrap(),
            online.unwrap(),
        );
        // When auto-approval bound the join (its verdict's time), after the install was done.
        let approved: DateTime<Utc> = view["approval"]["judged_at"]
            .as_str()
            .and_then(|at| at.parse().ok())
            .unwrap_or(online);
        total.push(span(requested, online));
        provider.push(span(creating, installing));
        ssh.push(span(installing, done));
        plane_adds.push(span(requested, creating) + span(done, approved));
        agent.push(span(approved.max(done), online));
    }
    println!("  all {count} online after {:.1} s", wall.as_secs_f64());
    for (what, samples) in [
        ("request → node online", &mut total),
        ("the provider (create, boot)", &mut provider),
        ("the SSH sessions (install, retire)", &mut ssh),
        (
            "what the plane adds (pick-up; install done → join approved)",
            &mut plane_adds,
        ),
        (
            "the agent's own (approval seen at its next poll → first claim → online)",
            &mut agent,
        ),
    ] {
        println!(
            "  {what}: p50 {:.0} ms, p99 {:.0} ms",
            percentile(samples, 0.5),
            percentile(samples, 0.99)
        );
    }
    println!("  plane peak RSS {:.0} MiB", plane.peak_rss_mib());
    assert_eq!(
        linode.world().servers.len(),
        count,
        "one server per provision"
    );
}
