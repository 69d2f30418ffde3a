//! How fast the plane comes up and goes down: `capstan all` from nothing (an empty database, a
//! fresh NATS server) to `/healthz` 200, then SIGTERM to exit. Five runs; median and worst.
//!
//! `cargo bench -p capstan --bench start`

use capstan_bus::testsuite::NatsServer;
use capstan_store::testsuite::TestDatabase;
use std::{
    net::TcpListener,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const RUNS: usize = 5;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut starts = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..RUNS {
        let (start, stop) = runtime.block_on(once());
        starts.push(start);
        stops.push(stop);
    }
    starts.sort();
    stops.sort();
    let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
    println!(
        "capstan all, {RUNS} runs from an empty database and a fresh NATS server (release build):"
    );
    println!(
        "  start to /healthz 200   median {:>7.0} ms   worst {:>7.0} ms",
        ms(starts[RUNS / 2]),
        ms(starts[RUNS - 1])
    );
    println!(
        "  SIGTERM to clean exit   median {:>7.0} ms   worst {:>7.0} ms",
        ms(stops[RUNS / 2]),
        ms(stops[RUNS - 1])
    );
}

async fn once() -> (Duration, Duration) {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let listen = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("all")
        .env("CAPSTAN__DATABASE__URL", database.url())
        .env("CAPSTAN__NATS__URL", nats.url())
        .env("CAPSTAN__GATEWAY__LISTEN", &listen)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    loop {
        if let Ok(response) = client.get(format!("http://{listen}/healthz")).send().await {
            if response.status() == 200 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never healthy");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let start = started.elapsed();
    let stopping = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "capstan exited with {status}");
    (start, stopping.elapsed())
}
