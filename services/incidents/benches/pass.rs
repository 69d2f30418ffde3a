//! The reconciler's pass at fleet scale: 10,000 nodes with three sources each (two agent cases
//! held open, and `plane:agent_silent` judged), on a real PostgreSQL. The first pass opens the
//! silent agents' incidents (one in ten nodes); the next passes find nothing new to write.
//! Prints the time of each pass and the process's peak RSS.
//!
//!     cargo bench -p capstan-incidents --bench pass
//!
//! PostgreSQL is found as the tests find it (`CAPSTAN_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1/postgres`).

use std::time::Instant;

use capstan_incidents::domain::sources::{AgentSilent, Registry};
use capstan_incidents::{tasks, MIGRATOR};
use capstan_store::{testsuite::TestDatabase, Store};
use chrono::Utc;

const NODES: i64 = 10_000;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

#[tokio::main]
async fn main() {
    if std::env::var_os("CAPSTAN_TEST_DATABASE_URL").is_none() {
        std::env::set_var(
            "CAPSTAN_TEST_DATABASE_URL",
            "postgres://postgres@127.0.0.1/postgres",
        );
    }
    let database = TestDatabase::create().await;
    let store = Store::connect(database.url(), "incidents", 4)
        .await
        .unwrap();
    store.migrate(&MIGRATOR).await.unwrap();
    let seeding = Instant::now();
    let statements = [
        // Every node paired an hour ago; one in ten last checked in 20 minutes ago (silent).
        format!(
            "INSERT INTO nodes (node_id, name, paired_at, last_checkin_at, recipes)
             SELECT n, 'web-' || n, now() - interval '1 hour',
                    CASE WHEN n % 10 = 0 THEN now() - interval '20 minutes' ELSE now() END,
                    '[\"disk_headroom\", \"fail2ban\"]'
             FROM generate_series(1, {NODES}) AS n"
        ),
        "INSERT INTO checkins_known (id, as_of) VALUES (1, now() + interval '1 day')".to_string(),
        "INSERT INTO operators VALUES (1, 'ada', 10, NULL, true)".to_string(),
        // Two agent cases open on every node, each an open incident.
        format!(
            "INSERT INTO incidents (node_id, source, severity, status, triage, triage_at, title,
                detail, opened_at, last_seen_at, case_id, heard_open)
             SELECT n, source, 'warning', 'open', 'new', now(), 'held', 'held', now(), now(), 1, true
             FROM generate_series(1, {NODES}) AS n,
                  (VALUES ('agent:disk_headroom'), ('agent:fail2ban')) AS sources (source)"
        ),
    ];
    for statement in &statements {
        sqlx::query(statement).execute(store.pool()).await.unwrap();
    }
    println!(
        "seeded {NODES} nodes and {} incidents in {:.1} s",
        NODES * 2,
        seeding.elapsed().as_secs_f64()
    );
    let mut registry = Registry::default();
    registry
        .register(Box::new(AgentSilent::new(600).unwrap()))
        .unwrap();
    for round in 1..=4 {
        let started = Instant::now();
        let report = tasks::pass(&store, &registry, false, Utc::now())
            .await
            .unwrap();
        println!(
            "pass {round}: {} nodes × 3 sources, {} effects written, {:.3} s",
            report.nodes,
            report.effects,
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "peak RSS of this process (the pass's plane side): {:.1} MiB",
        peak_rss_mib()
    );
    store.close().await;
}
