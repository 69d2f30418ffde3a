//! The uptime checks at fleet scale: 10,000 targets, each checked once a minute by the real
//! check loop (`tasks::uptime`: taking due checks from PostgreSQL, the HTTP check, recording
//! the result and its history point), against a local server answering for every target. The
//! server runs in a child process (this binary started again with `CAPSTAN_BENCH_SERVE=1`), so
//! the CPU and RSS measured are the monitor's alone (PostgreSQL's are not counted either).
//!
//!     cargo bench -p capstan-monitor --bench checks
//!
//! `CAPSTAN_BENCH_TARGETS` (10000) and `CAPSTAN_BENCH_MINUTES` (4) change the run. The first
//! minute is the warm-up (every target's first check falls somewhere in it); the figures are of
//! the minutes after it: checks achieved per minute, every target's longest gap between two
//! checks (60 s is on time), the p50/p99 of the check's own time, the monitor's CPU (cores)
//! and its RSS. Each target is a loopback address of its own (127.x.y.z, all answered by the
//! one server), so no DNS is asked: the resolver is not in the measured path.
//!
//! PostgreSQL is found as the tests find it (`CAPSTAN_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1/postgres`).

use capstan_events::NodeId;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_monitor::drivers::Prober;
use capstan_monitor::settings::MonitorSettings;
use capstan_monitor::tasks::{self, Pace};
use capstan_monitor::MIGRATOR;
use capstan_runtime::outbound::Outbound;
use capstan_store::{testsuite::TestDatabase, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// This process's (VmRSS, VmHWM) in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let read = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (read("VmRSS:"), read("VmHWM:"))
}

/// This process's CPU time (user + system) so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command's closing parenthesis; utime and stime are the 12th and 13th
    let after = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // clock ticks are 100 a second on Linux
    (ticks(11) + ticks(12)) / 100.0
}

/// The kernel's TCP counters that tell a dropped connection attempt from a slow check: a full
/// accept queue (`ListenOverflows`, `ListenDrops`) and SYNs sent again (`TCPSynRetrans`, each
/// costing the client a second). Machine-wide, so other work on the machine counts too.
fn tcp_drops() -> [(&'static str, u64); 3] {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut counters = [
        ("ListenOverflows", 0),
        ("ListenDrops", 0),
        ("TCPSynRetrans", 0),
    ];
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        if !names.starts_with("TcpExt:") {
            continue;
        }
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            for counter in counters.iter_mut() {
                if counter.0 == name {
                    counter.1 = value.parse().unwrap_or(0);
                }
            }
        }
    }
    counters
}

/// The server: answers every request on every loopback address with 200, then closes. Its
/// accept queue is the kernel's largest (`net.core.somaxconn`, 4,096 here) rather than tokio's
/// 1,024: with 1,024 the bursts of connections overflowed it (ListenOverflows in the thousands a
/// run), and each dropped SYN cost its check a one-second retransmit, the whole of the p99.
async fn serve() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((Ipv4Addr::UNSPECIFIED, 0).into()).unwrap();
    let listener = socket.listen(4096).unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buffer = [0u8; 2048];
            while !head.windows(4).any(|window| window == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => head.extend_from_slice(&buffer[..read]),
                }
                if head.len() > 16 * 1024 {
                    return;
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
            let _ = stream.shutdown().await;
        });
    }
}

/// The `n`th target's address: 127.0.0.0/8 is all loopback, and the server listens on all.
fn target(n: u64) -> IpAddr {
    let n = n + 256;
    IpAddr::V4(Ipv4Addr::new(
        127,
        (n >> 16) as u8,
        (n >> 8) as u8,
        (n & 0xff) as u8,
    ))
}

fn main() {
    if std::env::var_os("CAPSTAN_BENCH_SERVE").is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
            .block_on(serve());
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    if std::env::var_os("CAPSTAN_TEST_DATABASE_URL").is_none() {
        std::env::set_var(
            "CAPSTAN_TEST_DATABASE_URL",
            "postgres://postgres@127.0.0.1/postgres",
        );
    }
    let targets = env_number("CAPSTAN_BENCH_TARGETS", 10_000);
    let minutes = env_number("CAPSTAN_BENCH_MINUTES", 4).max(2);
    let mut server = Command::new(std::env::current_exe().unwrap())
        .env("CAPSTAN_BENCH_SERVE", "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().expect("the server's port");

    let database = TestDatabase::create().await;
    let (_, monitor) =
        capstan_settings::load_from::<MonitorSettings>(None, Vec::<(String, String)>::new())
            .unwrap();
    let store = Store::connect(database.url(), "monitor", 8).await.unwrap();
    store.migrate(&MIGRATOR).await.unwrap();
    // Every target's first check falls somewhere in the first minute (its phase).
    let urls: Vec<String> = (0..targets)
        .map(|n| format!("http://{}:{port}/", target(n)))
        .collect();
    let nodes: Vec<NodeId> = (1..=targets as i64).map(NodeId).collect();
    sqlx::query(
        "INSERT INTO nodes (node_id, name, paired) SELECT n, 'site-' || n, true FROM UNNEST($1::bigint[]) AS n",
    )
    .bind(&nodes)
    .execute(store.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO checks (node_id, url, interval_secs, next_check_at)
         SELECT n, url, 60, now() + random() * interval '60 seconds'
         FROM UNNEST($1::bigint[], $2::text[]) AS t (n, url)",
    )
    .bind(&nodes)
    .bind(&urls)
    .execute(store.pool())
    .await
    .unwrap();
    let pace = Pace {
        tick: monitor.tick(),
        concurrency: monitor.concurrency as usize,
        cert_interval: chrono::Duration::hours(1),
        cert_warn_days: 21,
        timeout: monitor.timeout(),
    };
    let prober = Arc::new(Prober::new(&monitor, Outbound::allowing_private()).unwrap());
    let stop = CancellationToken::new();
    let started_at = chrono::Utc::now();
    let running = tokio::spawn(tasks::uptime(store.clone(), prober, pace, stop.clone()));
    println!(
        "{targets} targets, each every 60 s; tick {} ms, {} at once; {minutes} minutes (the first is the warm-up)",
        monitor.tick_ms, monitor.concurrency
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (cpu_from, wall_from) = (cpu_seconds(), Instant::now());
    let drops_from = tcp_drops();
    let measured_from = chrono::Utc::now();
    let mut peak_rss: f64 = 0.0;
    for minute in 1..minutes {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let (rss, _) = rss_mib();
        peak_rss = peak_rss.max(rss);
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM history WHERE at >= now() - interval '60 seconds'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        println!("minute {minute}: {done} checks in the last 60 s, RSS {rss:.1} MiB");
    }
    let cpu = (cpu_seconds() - cpu_from) / wall_from.elapsed().as_secs_f64();
    let measured_to = chrono::Utc::now();
    let drops = tcp_drops();
    stop.cancel();
    let _ = running.await;
    let _ = server.kill();
    let _ = server.wait();
    let (_, hwm) = rss_mib();

    let minutes_measured = (measured_to - measured_from).num_milliseconds() as f64 / 60_000.0;
    let (done, failed, p50, p99): (i64, i64, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE NOT ok),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY response_ms)::float8,
                percentile_cont(0.99) WITHIN GROUP (ORDER BY response_ms)::float8
         FROM history WHERE at >= $1 AND at < $2",
    )
    .bind(measured_from)
    .bind(measured_to)
    .fetch_one(store.pool())
    .await
    .unwrap();
    // Every target's gaps between consecutive checks after the warm-up: on time is 60 s.
    let (gap_p99, gap_max, late): (Option<f64>, Option<f64>, i64) = sqlx::query_as(
        "WITH gaps AS (
             SELECT extract(epoch FROM at - lag(at) OVER (PARTITION BY node_id ORDER BY at)) AS gap
             FROM history WHERE at >= $1
         )
         SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY gap)::float8, max(gap)::float8,
                count(*) FILTER (WHERE gap > 61)
         FROM gaps WHERE gap IS NOT NULL",
    )
    .bind(started_at)
    .fetch_one(store.pool())
    .await
    .unwrap();
    let never: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM checks c WHERE NOT EXISTS
             (SELECT 1 FROM history h WHERE h.node_id = c.node_id AND h.at >= $1)",
    )
    .bind(measured_from)
    .fetch_one(store.pool())
    .await
    .unwrap();
    println!(
        "checks: {:.0} a minute ({done} in {minutes_measured:.2} min, {failed} failed); \
         targets not checked after the warm-up: {never}",
        done as f64 / minutes_measured
    );
    println!(
        "check time: p50 {:.0} ms, p99 {:.0} ms; gap between a target's checks: p99 {:.1} s, \
         longest {:.1} s, {late} gaps over 61 s",
        p50.unwrap_or(0.0),
        p99.unwrap_or(0.0),
        gap_p99.unwrap_or(0.0),
        gap_max.unwrap_or(0.0)
    );
    println!(
        "monitor: CPU {cpu:.2} cores; RSS peak while measured {peak_rss:.1} MiB (high-water {hwm:.1} MiB)"
    );
    let counted: Vec<String> = drops
        .iter()
        .zip(drops_from.iter())
        .map(|((name, to), (_, from))| format!("{name} {}", to.saturating_sub(*from)))
        .collect();
    println!(
        "TCP while measured (the whole machine): {}",
        counted.join(", ")
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end: {}", load.trim());
}
