//! Issue 27: a new single-machine plane can add a backup target. `capstan all` started with no
//! seal key setting makes its own key on its first run, a file of mode 0600 in its state
//! directory, and says where it is on `GET /api/v1/backups/targets` (the Targets page reads it).
//! Issue 29: it makes the provisioning service's key beside it the same way.

use std::{os::unix::fs::PermissionsExt as _, process::Stdio, time::Duration};

use capstan_bus::testsuite::NatsServer;
use capstan_e2e::{process::binary, s3::S3Server, wait_for};
use capstan_store::testsuite::TestDatabase;
use reqwest::StatusCode;
use serde_json::Value;

use super::target_body;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plane_started_with_no_seal_key_setting_makes_a_0600_key_and_can_add_a_target() {
    let s3 = S3Server::start().await;
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let state = tempfile::tempdir().unwrap();
    let key_dir = state.path().join("capstan");
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    // No CAPSTAN__{BACKUPS,PROVISIONING}__SEAL_KEY(_FILE): only where the plane keeps what it
    // makes, so the test writes nothing into the machine's /var/lib/capstan.
    let _plane = tokio::process::Command::new(binary("capstan"))
        .arg("all")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CAPSTAN__DATABASE__URL", database.url())
        .env("CAPSTAN__DATABASE__MAX_CONNECTIONS", "4")
        .env("CAPSTAN__NATS__URL", nats.url())
        .env("CAPSTAN__GATEWAY__LISTEN", &listen)
        .env("CAPSTAN__BACKUPS__SEAL_KEY_DIR", &key_dir)
        .env("CAPSTAN__PROVISIONING__SEAL_KEY_DIR", &key_dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    wait_for(
        "capstan all to answer ready",
        Duration::from_secs(120),
        || async {
            let answer = http.get(format!("http://{listen}/healthz")).send().await;
            answer
                .ok()
                .filter(|answer| answer.status() == StatusCode::OK)
        },
    )
    .await;
    let store = capstan_store::Store::connect(database.url(), "gateway", 1)
        .await
        .unwrap();
    let admin =
        capstan_gateway::admin::issue_operator(&store, "ada", capstan_events::rpc::Level::Admin)
            .await
            .unwrap()
            .expose()
            .to_string();
    store.close().await;

    let file = key_dir.join("backups-seal.key");
    let listed: Value = http
        .get(format!("http://{listen}/api/v1/backups/targets"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["seal_key"]["set"], true, "{listed}");
    assert_eq!(
        listed["seal_key"]["file"],
        file.display().to_string(),
        "{listed}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the seal key file is its owner's alone");
    let key = std::fs::read_to_string(&file).unwrap();
    assert_eq!(key.trim().len(), 64, "64 hex digits");
    let provisioning = key_dir.join("provisioning-seal.key");
    let mode = std::fs::metadata(&provisioning)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(
        mode, 0o600,
        "provisioning's seal key file is its owner's alone"
    );
    let provisioning_key = std::fs::read_to_string(&provisioning).unwrap();
    assert_eq!(provisioning_key.trim().len(), 64, "64 hex digits");
    assert_ne!(provisioning_key, key, "each service has a key of its own");

    let added = http
        .post(format!("http://{listen}/api/v1/backups/targets"))
        .bearer_auth(&admin)
        .json(&target_body(&s3, &s3.secret_key))
        .send()
        .await
        .unwrap();
    let status = added.status();
    let body: Value = added.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
