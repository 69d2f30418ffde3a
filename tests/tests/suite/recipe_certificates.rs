//! `certificate_expiry` end to end (AG-56, AG-44, AC-47, IN-11): the real agent binary on a
//! one-second tick (so "hourly" is six seconds), its nginx site files in a directory of the
//! test's own, and a real TLS server of the test's choosing its certificate by SNI on a port the
//! test picked (standing in for the machine's web server on 443), against the real plane. A
//! served certificate with fewer than 14 days is a case on the next claim and an incident on
//! the plane; once the server serves a renewed certificate the check passes, the node closes
//! its case and the incident clears.

use capstan_e2e::{agent::Agent, tls::SniServer, wait_for};
use serde_json::Value;

use crate::incidents::{plane_with, wait_incident, PATIENCE};

const SITE: &str = "
server {
    listen 80;
    server_name example.test www.example.test;
    return 301 https://$host$request_uri;
}
server {
    listen 443 ssl;
    server_name example.test www.example.test;
    ssl_certificate /etc/letsencrypt/live/example.test/fullchain.pem;
}
";

fn events(agent: &Agent) -> Vec<String> {
    std::fs::read_to_string(agent.file("ledger/certificate_expiry.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| {
            let name = line["event"].as_str().unwrap_or_default().to_string();
            match line["verdict"].as_str() {
                Some(verdict) => format!("{name}:{verdict}"),
                None => name,
            }
        })
        .collect()
}

async fn wait_ledger(agent: &Agent, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
    wait_for(what, PATIENCE, || async {
        let events = events(agent);
        check(&events).then_some(events)
    })
    .await
}

/// AG-56, AG-44, AC-47, IN-11: a certificate near expiry becomes a case and an incident; a
/// renewed one closes the case and clears the incident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_56_a_served_certificate_near_expiry_is_an_incident_until_it_is_renewed() {
    let plane = plane_with(&[]).await;
    let server = SniServer::start().await;
    server.serve("example.test", 90);
    server.serve("www.example.test", 5);
    let scratch = tempfile::tempdir().unwrap();
    let nginx = scratch.path().join("sites-enabled");
    std::fs::create_dir(&nginx).unwrap();
    std::fs::write(nginx.join("example.test"), SITE).unwrap();

    let mut agent = Agent::new(capstan_e2e::agent::binary());
    agent.set_env("CAPSTAN_AGENT_RECIPE_TICK_SECS", "1");
    agent.set_env("CAPSTAN_AGENT_NGINX_DIR", &nginx.display().to_string());
    agent.set_env("CAPSTAN_AGENT_TLS_PORT", &server.port().to_string());
    agent.set_env(
        "CAPSTAN_AGENT_DOCKER_SOCKET",
        &scratch.path().join("docker.sock").display().to_string(),
    );
    agent.set_env("CAPSTAN_AGENT_APP_UNIT", "none");
    let node = agent.paired(&plane, "web-certificates").await;

    // Check-only: the case opens on the first failing check, no attempt is spent.
    let seen = wait_ledger(&agent, "the certificate's case", |events| {
        events.iter().any(|e| e == "escalation")
    })
    .await;
    assert!(seen.contains(&"check:fail".to_string()), "{seen:?}");
    assert!(!seen.iter().any(|e| e == "attempt"), "{seen:?}");
    let opened = wait_incident(
        &plane,
        node,
        "agent:certificate_expiry",
        "the certificate's incident",
        |incident| incident["status"] == "open",
    )
    .await;
    let detail = opened["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("www.example.test's certificate has 4 days left"),
        "{opened}"
    );
    let shown = agent.ok(&["recipes"]).await;
    assert!(
        shown.contains("certificate_expiry: armed (check-only)"),
        "{shown}"
    );
    assert!(
        shown.contains("container_health: not-applicable"),
        "no Docker engine here: {shown}"
    );

    // Renewed (as certbot's timer would): the next hourly check passes and the case closes.
    server.serve("www.example.test", 90);
    wait_ledger(&agent, "the case to close", |events| {
        events.iter().any(|e| e == "escalation_closed")
    })
    .await;
    let cleared = wait_incident(
        &plane,
        node,
        "agent:certificate_expiry",
        "the incident to clear",
        |incident| incident["status"] == "closed",
    )
    .await;
    assert_eq!(cleared["id"], opened["id"]);
}
