//! PV-05, PV-06: the root password lives in memory only — found in no process's arguments
//! during the bootstrap, no log line, no event, no API answer and no column in clear — and once
//! retired, a login with it is refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_e2e::wait_for;
use capstan_events::Domain;
use capstan_provisioning::drivers::ssh::{password_refused, SshLimits, SshTarget};
use secrecy::SecretString;

use super::{drop_site_database, unique, World};

/// Every log line of this test's process (nextest runs each test in a process of its own).
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut lines) = self.0.lock() {
            lines.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every process's command line now, NUL bytes as spaces.
fn command_lines() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .collect()
}

/// Every row of every table of every schema of the plane's database, as text.
async fn every_row(url: &str) -> String {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_schema::text, table_name::text FROM information_schema.tables
         WHERE table_type = 'BASE TABLE'
           AND table_schema NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut all = String::new();
    for (schema, table) in tables {
        let rows: Vec<String> =
            sqlx::query_scalar(&format!("SELECT t::text FROM \"{schema}\".\"{table}\" t"))
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
        all.extend(rows);
    }
    pool.close().await;
    all
}

#[tokio::test]
async fn pv_05_the_root_password_is_nowhere_but_in_memory_and_pv_06_a_login_with_it_is_refused_after(
) {
    let lines = Lines::default();
    let writer = lines.clone();
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .try_init();

    let world = World::start().await;
    let account = world.account("linode", "ours", "main").await;
    let name = unique("vault");
    let id = world.ask(account, "site", &name, "linode").await["id"]
        .as_i64()
        .unwrap();
    let server = wait_for("the server", Duration::from_secs(30), || async {
        world.linode.world().servers.first().cloned()
    })
    .await;
    let password = server.root_password.clone();
    assert!(password.len() >= 16, "a generated password");

    // While the bootstrap runs, no process shows the password in its arguments.
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let scans = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scanner = {
        let (seen, scans, password) = (seen.clone(), scans.clone(), password.clone());
        tokio::spawn(async move {
            loop {
                for line in command_lines() {
                    if line.contains(&password) {
                        seen.lock().unwrap().push(line);
                    }
                }
                scans.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let (node, _) = world.online(id).await;
    scanner.abort();
    assert!(
        scans.load(std::sync::atomic::Ordering::Relaxed) > 10,
        "the scan ran"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        Vec::<String>::new(),
        "in a command line"
    );

    // No API answer.
    for path in [
        format!("/api/v1/provisioning/provisions/{id}"),
        "/api/v1/provisioning/provisions".to_string(),
        "/api/v1/provisioning/accounts".to_string(),
        format!("/api/v1/nodes/{node}"),
    ] {
        let (_, body) = world
            .plane
            .api(&world.plane.admin, "GET", &path, None)
            .await;
        assert!(!body.to_string().contains(&password), "{path}");
    }
    // No event, no condition, no command.
    let mut streams: Vec<String> = [
        Domain::Gateway,
        Domain::AgentChannel,
        Domain::Incidents,
        Domain::Monitor,
        Domain::Rollouts,
        Domain::Backups,
        Domain::Provisioning,
    ]
    .iter()
    .map(|domain| domain.events_stream())
    .collect();
    streams.push(Domain::AgentChannel.commands_stream());
    streams.push(capstan_events::conditions::STREAM.to_string());
    for stream in streams {
        let messages =
            capstan_bus::testsuite::read_stream(&world.plane.bus, &stream, usize::MAX).await;
        for message in messages {
            assert!(
                !String::from_utf8_lossy(&message.payload).contains(&password),
                "in {stream}"
            );
        }
    }
    // No column in clear, in any service's schema.
    let rows = every_row(world.plane.database.url()).await;
    assert!(rows.len() > 1_000, "the tables were read");
    assert!(!rows.contains(&password), "in a column");
    // No log line.
    let logged = String::from_utf8_lossy(&lines.0.lock().unwrap()).to_string();
    assert!(
        logged.contains("provision installed"),
        "the log was captured"
    );
    assert!(!logged.contains(&password), "in a log line");

    // PV-06: retired; a login with it is refused now.
    let target = SshTarget {
        address: std::net::SocketAddr::new(server.ipv4.into(), world.ssh_port),
        user: "root".into(),
        password: SecretString::from(password.clone()),
    };
    let limits = SshLimits {
        connect: Duration::from_secs(10),
        session: Duration::from_secs(10),
    };
    assert!(password_refused(&target, &limits, None).await.unwrap());
    assert_eq!(world.provision(id).await["password_retired"], true);
    drop_site_database(&name).await;
}
