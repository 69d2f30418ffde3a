//! The `capstan` binary as an operator runs it, against a database and a NATS server of the
//! test's own: start from nothing, report health, stop cleanly, refuse bad configuration.

use capstan_bus::testsuite::NatsServer;
use capstan_store::testsuite::TestDatabase;
use std::{
    net::TcpListener,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

const SERVICES: [&str; 9] = [
    "gateway",
    "agent-channel",
    "incidents",
    "monitor",
    "backups",
    "rollouts",
    "provisioning",
    "dns",
    "billing",
];

const TEST_SEAL_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

fn free_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn capstan(args: &[&str], database: &TestDatabase, nats: &NatsServer, listen: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    command
        .args(args)
        .env("CAPSTAN__DATABASE__URL", database.url())
        .env("CAPSTAN__DATABASE__MAX_CONNECTIONS", "2")
        .env("CAPSTAN__NATS__URL", nats.url())
        .env("CAPSTAN__GATEWAY__LISTEN", listen)
        .env("CAPSTAN__TELEMETRY__LOG_FORMAT", "json")
        // A key of the test's, so `capstan all` makes none in the machine's /var/lib/capstan.
        .env("CAPSTAN__BACKUPS__SEAL_KEY", TEST_SEAL_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Polls `/healthz` until it answers `want`, returning the body.
async fn healthz_until(listen: &str, want: u16, limit: Duration) -> serde_json::Value {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(response) = client.get(format!("http://{listen}/healthz")).send().await {
            if response.status().as_u16() == want {
                return response.json().await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "/healthz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh level-7 operator's token, from the plane's own database (its gateway migrated).
async fn reader_token(database: &TestDatabase, name: &str) -> String {
    let store = capstan_store::Store::connect(database.url(), "gateway", 1)
        .await
        .unwrap();
    let token =
        capstan_gateway::admin::issue_operator(&store, name, capstan_events::rpc::Level::Read)
            .await
            .unwrap()
            .expose()
            .to_string();
    store.close().await;
    token
}

/// `/healthz` as an operator sees it: each service's state, version and error.
async fn healthz_detailed(listen: &str, token: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("http://{listen}/healthz"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Sends SIGTERM and waits for the process to end.
fn terminate(child: Child) -> Output {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiter.is_finished() {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("capstan did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap()
}

async fn schemas_with_outbox(database: &TestDatabase) -> Vec<String> {
    let pool = sqlx::PgPool::connect(database.url()).await.unwrap();
    let schemas = sqlx::query_scalar(
        "SELECT table_schema::text FROM information_schema.tables WHERE table_name = 'outbox' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    schemas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_all_starts_from_nothing_reports_healthy_and_stops_cleanly_on_sigterm() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let listen = free_address();
    let metrics_listen = free_address();
    let child = capstan(&["all"], &database, &nats, &listen)
        .env("CAPSTAN__TELEMETRY__METRICS_LISTEN", &metrics_listen)
        .spawn()
        .unwrap();

    let health = healthz_until(&listen, 200, Duration::from_secs(60)).await;
    assert_eq!(
        health,
        serde_json::json!({"status": "ready"}),
        "anyone is told ready, and nothing more"
    );
    let health = healthz_detailed(&listen, &reader_token(&database, "reader").await).await;
    assert_eq!(health["status"], "ready");
    for service in SERVICES {
        assert_eq!(
            health["services"][service]["ready"], true,
            "{service}: {health}"
        );
    }
    let mut expected: Vec<String> = SERVICES.iter().map(|name| name.replace('-', "_")).collect();
    expected.sort();
    assert_eq!(schemas_with_outbox(&database).await, expected);
    // On the public listener /metrics needs a token; on the metrics listener, none.
    let public = reqwest::get(format!("http://{listen}/metrics"))
        .await
        .unwrap();
    assert_eq!(public.status(), 401);
    let metrics = reqwest::get(format!("http://{metrics_listen}/metrics"))
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics
        .text()
        .await
        .unwrap()
        .contains("capstan_http_request_seconds"));

    let output = terminate(child);
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "exit {:?}\n{log}", output.status);
    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    assert!(
        !log.contains("\"level\":\"ERROR\""),
        "no errors while stopping:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_alone_answers_503_naming_the_services_that_do_not_answer() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let listen = free_address();
    let child = capstan(&["gateway"], &database, &nats, &listen)
        .spawn()
        .unwrap();

    let health = healthz_until(&listen, 503, Duration::from_secs(60)).await;
    assert_eq!(
        health,
        serde_json::json!({"status": "starting"}),
        "anyone is told not ready, and not who or why"
    );
    let health = healthz_detailed(&listen, &reader_token(&database, "reader").await).await;
    assert_eq!(health["status"], "starting");
    assert_eq!(health["services"]["gateway"]["ready"], true);
    assert_eq!(health["services"]["billing"]["ready"], false);
    assert!(health["services"]["billing"]["error"]
        .as_str()
        .unwrap()
        .contains("billing"));
    let live = reqwest::get(format!("http://{listen}/livez"))
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    assert!(terminate(child).status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_exits_64_naming_the_key() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let output = capstan(&["all"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__GATEWAY__LISTN", "0.0.0.0:80")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("listn"));

    let output = capstan(&["all"], &database, &nats, "not-an-address")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("listen"));

    let output = capstan(&["nonsense"], &database, &nats, "127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown service"));
}

// Issue 28: every problem of every section is named in one start, each by its file key and its
// environment variable, before exit 64; a service run alone judges its own section too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_in_three_sections_names_all_three_and_exits_64() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let output = capstan(&["all"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__MONITOR__TICK_MS", "1")
        .env("CAPSTAN__INCIDENTS__AGENT_SILENT_SECS", "5")
        .env("CAPSTAN__OUTBOX__BATCH_SIZE", "0")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for named in [
        "monitor.tick_ms",
        "CAPSTAN__MONITOR__TICK_MS",
        "incidents.agent_silent_secs",
        "CAPSTAN__INCIDENTS__AGENT_SILENT_SECS",
        "outbox.batch_size",
        "CAPSTAN__OUTBOX__BATCH_SIZE",
    ] {
        assert!(stderr.contains(named), "{named} in {stderr}");
    }

    let output = capstan(&["monitor"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__MONITOR__TICK_MS", "1")
        .env("CAPSTAN__MONITR__TICK_MS", "1000")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("monitor.tick_ms"), "{stderr}");
    assert!(
        stderr.contains("monitr"),
        "an unknown section is named: {stderr}"
    );
}

// Issue 28: a key of the wrong type does not hide its section's other problems; and `capstan
// all`, which reads every section there is, refuses a domain's name that has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_error_and_a_bad_value_in_one_section_are_both_named_and_exit_64() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let output = capstan(&["all"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__MONITOR__TICK_MS", "fast")
        .env("CAPSTAN__MONITOR__TIMEOUT_SECS", "0")
        .env("CAPSTAN__ROLLOUTS__TICK_MS", "5")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for named in [
        "monitor.tick_ms",
        "CAPSTAN__MONITOR__TICK_MS",
        "monitor.timeout_secs",
        "CAPSTAN__MONITOR__TIMEOUT_SECS",
        "rollouts",
    ] {
        assert!(stderr.contains(named), "{named} in {stderr}");
    }

    // Alone, the monitor judges its own section the same way and leaves `rollouts` to it.
    let output = capstan(&["monitor"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__MONITOR__TICK_MS", "fast")
        .env("CAPSTAN__MONITOR__TIMEOUT_SECS", "0")
        .env("CAPSTAN__ROLLOUTS__TICK_MS", "5")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("monitor.tick_ms"), "{stderr}");
    assert!(stderr.contains("monitor.timeout_secs"), "{stderr}");
    assert!(!stderr.contains("rollouts"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_migrate_gives_every_service_its_schema_and_capstan_health_asks_one() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let output = capstan(&["migrate"], &database, &nats, "127.0.0.1:1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(schemas_with_outbox(&database).await.len(), 9);

    // Nobody runs billing yet: the probe fails; then it runs and the probe passes.
    let probe = capstan(&["health", "billing"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__BUS__RPC_TIMEOUT_SECS", "1")
        .output()
        .unwrap();
    assert_eq!(probe.status.code(), Some(1));
    let billing = capstan(&["billing"], &database, &nats, "127.0.0.1:1")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe = capstan(&["health", "billing"], &database, &nats, "127.0.0.1:1")
            .output()
            .unwrap();
        if probe.status.success() {
            let said = String::from_utf8_lossy(&probe.stdout);
            assert!(
                said.lines()
                    .any(|line| line.starts_with("billing ") && line.ends_with(" ready")),
                "{said}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "billing never became healthy");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(terminate(billing).status.success());
}

/// Polls `/livez` until the gateway answers at all.
async fn wait_for_gateway(listen: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while reqwest::get(format!("http://{listen}/livez"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the gateway never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_admin_create_operator_prints_a_token_the_gateway_accepts() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let create = |name: &str, level: &str| {
        capstan(
            &["admin", "create-operator", "--name", name, "--level", level],
            &database,
            &nats,
            "127.0.0.1:1",
        )
        .output()
        .unwrap()
    };

    let created = create("ada", "10");
    let stdout = String::from_utf8_lossy(&created.stdout).to_string();
    let stderr = String::from_utf8_lossy(&created.stderr).to_string();
    assert!(created.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "standard output is the token line and the one-time password line: {stdout:?}"
    );
    let token = lines[0]
        .strip_prefix("token: ")
        .expect("a line `token: <token>`");
    assert!(token.starts_with("cap_") && token.len() == 47, "{token}");
    assert!(!stderr.contains(token), "the token is not logged");
    let password = lines[1]
        .strip_prefix("password: ")
        .expect("a line `password: <one-time password>`");
    assert!(password.len() >= 20, "{password}");
    assert!(!stderr.contains(password), "the password is not logged");

    // The same name again is refused, clearly; a bad level never reaches the database.
    let again = create("ada", "8");
    assert_eq!(again.status.code(), Some(1));
    assert!(again.stdout.is_empty());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("already exists"), "{said}");
    let bad_level = create("bob", "9");
    assert_eq!(bad_level.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_level.stderr).contains("7, 8, 10"));

    // A forgotten password is replaced by a new one-time one; an unknown name is said so.
    let reset = |name: &str| {
        capstan(
            &["admin", "reset-password", "--name", name],
            &database,
            &nats,
            "127.0.0.1:1",
        )
        .output()
        .unwrap()
    };
    let hash_before = password_hash_of(&database, "ada").await;
    let pool = sqlx::PgPool::connect(database.url()).await.unwrap();
    sqlx::query(
        "INSERT INTO gateway.sessions (operator_id, session_sha256, csrf_token)
         SELECT id, $1, $2 FROM gateway.operators WHERE name = 'ada'",
    )
    .bind(vec![7u8; 32])
    .bind("c".repeat(43))
    .execute(&pool)
    .await
    .unwrap();
    let replaced = reset("ada");
    let said = String::from_utf8_lossy(&replaced.stdout).to_string();
    assert!(replaced.status.success(), "{said}");
    let new_password = said
        .trim()
        .strip_prefix("password: ")
        .expect("one line `password: <one-time password>`");
    assert_ne!(new_password, password);
    assert!(!String::from_utf8_lossy(&replaced.stderr).contains(new_password));
    let (hash_after, must_change) = password_state_of(&database, "ada").await;
    assert_ne!(hash_after, hash_before);
    assert!(
        must_change,
        "the new password must be changed at the next sign-in"
    );
    let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM gateway.sessions")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(sessions, 0, "the operator's sessions end with the reset");
    pool.close().await;
    let nobody = reset("nobody");
    assert_eq!(nobody.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("no operator named"));

    let listen = free_address();
    let gateway = capstan(&["gateway"], &database, &nats, &listen)
        .spawn()
        .unwrap();
    wait_for_gateway(&listen, Duration::from_secs(60)).await;
    let client = reqwest::Client::new();
    let document = client
        .get(format!("http://{listen}/api/v1/openapi.json"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(document.status(), 200);
    let wrong = client
        .get(format!("http://{listen}/api/v1/openapi.json"))
        .bearer_auth(format!("cap_{}", "A".repeat(43)))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // A level-10 operator passes the door of an admin act (nothing answers behind it here).
    let approve = client
        .post(format!(
            "http://{listen}/api/v1/joins/0190b5c2-7d1e-7a3c-9f00-000000000001/approve"
        ))
        .bearer_auth(token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(approve.status(), 503);
    let output = terminate(gateway);
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains(token),
        "the token is not logged by the gateway"
    );
}

async fn password_state_of(database: &TestDatabase, name: &str) -> (String, bool) {
    let pool = sqlx::PgPool::connect(database.url()).await.unwrap();
    let state = sqlx::query_as(
        "SELECT password_hash, must_change_password FROM gateway.operators WHERE name = $1",
    )
    .bind(name)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    state
}

async fn password_hash_of(database: &TestDatabase, name: &str) -> String {
    password_state_of(database, name).await.0
}

/// A stop must not wait for a NATS server that is gone: shutdown's last flushes are bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_all_stops_on_sigterm_even_after_nats_has_gone() {
    let mut nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let listen = free_address();
    let child = capstan(&["all"], &database, &nats, &listen)
        .spawn()
        .unwrap();
    healthz_until(&listen, 200, Duration::from_secs(60)).await;
    nats.stop();
    // The plane has noticed: its health, asked over the bus, no longer answers ready.
    healthz_until(&listen, 503, Duration::from_secs(60)).await;
    let output = terminate(child);
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(log.contains("service stopped"), "{log}");
}

/// `capstan all` against a NATS server running the generated authorization: it runs as the
/// user `all`; a probe run with one service's credentials asks that service; without
/// credentials nothing gets in; and the server refused nothing the plane did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_all_runs_as_the_nats_user_all_and_a_probe_as_its_services_user() {
    use capstan_bus::access::BusUser;
    let nats = NatsServer::start_secured();
    let database = TestDatabase::create().await;
    let listen = free_address();
    let all_password = nats.password(BusUser::AllInOne);
    let child = capstan(&["all"], &database, &nats, &listen)
        .env("CAPSTAN__NATS__USER", "all")
        .env("CAPSTAN__NATS__PASSWORD", &all_password)
        .spawn()
        .unwrap();
    let health = healthz_until(&listen, 200, Duration::from_secs(60)).await;
    assert_eq!(health["status"], "ready");

    let billing_password = nats.password(BusUser::Service(capstan_events::Domain::Billing));
    let probe = capstan(&["health", "billing"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__NATS__USER", "billing")
        .env("CAPSTAN__NATS__PASSWORD", &billing_password)
        .output()
        .unwrap();
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let anonymous = capstan(&["health", "billing"], &database, &nats, "127.0.0.1:1")
        .env("CAPSTAN__BUS__RPC_TIMEOUT_SECS", "1")
        .output()
        .unwrap();
    assert_eq!(
        anonymous.status.code(),
        Some(1),
        "a probe without credentials"
    );

    let output = terminate(child);
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "exit {:?}\n{log}", output.status);
    assert!(!log.contains(&all_password), "the password was logged");
    assert_eq!(nats.violations(), Vec::<String>::new());
}
