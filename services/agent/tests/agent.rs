//! The real `capstan-agent` binary against the real plane (agent-channel and gateway on a
//! database and NATS server of each test's own), driven as an operator would drive it: the
//! operator API on one side, the agent's command line on the other.

mod common;

use common::{mode_of, wait_for, Plane};
use serde_json::json;
use std::time::Duration;

const LOG_ACCESS_OFF: &str =
    "this site's owner has not allowed log access (agent_log_access is off)";

/// AG-05, AG-06, AG-07, AG-08, AG-09, AG-16: join sends only the public key, the running agent
/// finishes the join when an operator approves it (no restart), runs read words whose results
/// the plane stores, and `leave` ends the pairing on both sides while the agent keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_joins_runs_read_words_and_leaves() {
    let plane = Plane::start().await;
    let mut agent = common::agent();
    agent.ok(&["enable"]).await;
    agent.start();
    wait_for(
        "the agent to say it is not paired",
        Duration::from_secs(30),
        || async {
            let status = agent.status().await;
            (status.contains("pairing: not paired") && status.contains("agent: running"))
                .then_some(())
        },
    )
    .await;

    let asked = agent
        .ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            "--name=web-1",
            "--no-wait",
        ])
        .await;
    let identity = agent.identity().unwrap();
    let fingerprint = identity["fingerprint"].as_str().unwrap().to_string();
    assert!(
        asked.contains(&format!("fingerprint: {fingerprint}")),
        "{asked}"
    );
    assert_eq!(mode_of(&agent.state_dir()), 0o700);
    assert_eq!(mode_of(&agent.file("node_identity.json")), 0o600);

    // The plane holds the public half only: the join shows the same fingerprint and key, and
    // the secret appears nowhere in what the plane stored.
    let join = plane.join_of(&fingerprint).await.unwrap();
    assert_eq!(join["name"], "web-1");
    assert_eq!(join["state"], "pending");
    let secret = identity["secret_key"].as_str().unwrap();
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    let (stored,): (String,) =
        sqlx::query_as("SELECT coalesce(string_agg(j::text, ''), '') FROM agent_channel.joins j")
            .fetch_one(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(stored.contains(identity["public_key"].as_str().unwrap()));
    assert!(!stored.contains(secret));

    // AG-07: approval is picked up by the agent that was already running.
    let node = plane.approve(&fingerprint).await;
    let view = plane.wait_online(node).await;
    assert_eq!(
        view["vocabulary"],
        json!([
            "check_status",
            "host_report",
            "disk_usage",
            "unit_journal",
            "restart_unit",
            "reset_failed_unit",
            "site_log",
            "file_head",
            "restart_container",
            "backup_run",
            "verify_backup",
            "list_backups",
            "restore_database",
            "restore_project",
            "agent_converge",
            "install_security_updates",
            "apply_update",
            "upgrade_preflight",
            "page_probe"
        ])
    );
    assert_eq!(view["facts"]["log_access"], "off");
    wait_for(
        "status to show the pairing",
        Duration::from_secs(30),
        || async {
            agent
                .status()
                .await
                .contains(&format!("pairing: paired (node {node}"))
                .then_some(())
        },
    )
    .await;

    let status_job = plane.queue(node, "check_status", json!({})).await;
    let job = plane.finished(status_job).await;
    assert_eq!(job["state"], "completed", "{job}");
    let result = &job["result"];
    assert_eq!(result["agent_version"], env!("CARGO_PKG_VERSION"));
    assert!(
        result["memory"]["total_bytes"].as_u64().unwrap() > 0,
        "{result}"
    );
    assert!(
        result["disk"]["total_bytes"].as_u64().unwrap() > 0,
        "{result}"
    );
    assert!(result["certificates"].is_array(), "{result}");
    assert!(result["unmeasured"].is_array(), "{result}");

    let host_job = plane.queue(node, "host_report", json!({})).await;
    let job = plane.finished(host_job).await;
    assert_eq!(job["state"], "completed", "{job}");
    let result = &job["result"];
    assert!(result["kernel"].is_string(), "{result}");
    assert!(result["boot_id"].as_str().unwrap().len() == 36, "{result}");
    assert!(result["disk"]["avail_bytes"].is_u64(), "{result}");
    // Without systemd the failed units are unknown and said to be, not an error.
    if result["systemd"] == "absent" {
        assert!(result["failed_units"].is_null());
        assert!(result["unmeasured"]
            .to_string()
            .contains("systemd is not running"));
    }
    let status = agent.status().await;
    assert!(status.contains("last claim: "), "{status}");
    assert!(!agent.file("job-running").exists());

    let left = agent.ok(&["leave"]).await;
    assert!(left.contains("said goodbye"), "{left}");
    assert!(agent.identity().is_none());
    let view = plane.node(node).await;
    assert!(view["left_at"].is_string(), "{view}");
    assert!(view["fingerprint"].is_null(), "{view}");
    wait_for(
        "the running agent to notice the leave",
        Duration::from_secs(15),
        || async {
            agent
                .status()
                .await
                .contains("pairing: not paired")
                .then_some(())
        },
    )
    .await;
    assert!(agent.running(), "the agent keeps running, unpaired");
    plane.stop().await;
}

/// PV-09, AC-08 (issue 29): an agent told `CAPSTAN_AGENT_LOCAL_ADDRESS` makes its connections
/// to the plane from that address: the plane sees it as the join's source address (what a
/// provisioned machine's auto-approval compares with its instance's), and the paired agent
/// keeps working from it. A value that is not one usable IP address stops every command with
/// the setting named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_connects_to_the_plane_from_its_configured_local_address() {
    let plane = Plane::start().await;
    // Every 127.0.0.0/8 address is this machine's own; the plane listens on 127.0.0.1.
    let local = format!("127.0.0.{}", 2 + rand::random::<u8>() % 250);
    let mut agent = common::agent();
    agent.set_env("CAPSTAN_AGENT_LOCAL_ADDRESS", &local);
    agent
        .ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            "--name=from-local",
            "--no-wait",
        ])
        .await;
    let fingerprint = agent.fingerprint();
    let join = plane.join_of(&fingerprint).await.unwrap();
    assert_eq!(join["source_address"], local.as_str(), "{join}");

    // The running agent's claims come from the same address and reach the plane.
    agent.ok(&["enable"]).await;
    let node = plane.approve(&fingerprint).await;
    agent.start();
    plane.wait_online(node).await;
    let status_job = plane.queue(node, "check_status", json!({})).await;
    assert_eq!(plane.finished(status_job).await["state"], "completed");

    let mut refused = common::agent();
    for bad in ["plane.example.com", "0.0.0.0", "127.0.0.7:80"] {
        refused.set_env("CAPSTAN_AGENT_LOCAL_ADDRESS", bad);
        let (code, stdout, stderr) = refused.cli(&["status"]).await;
        assert_eq!(code, 1, "{bad}: {stdout}{stderr}");
        assert!(
            stderr.contains("CAPSTAN_AGENT_LOCAL_ADDRESS"),
            "{bad}: {stderr}"
        );
    }
    plane.stop().await;
}

/// AG-11, AC-07: a rejected key is kept; once an operator reopens the request, the same key
/// asks again and `join` waits for the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_join_keeps_its_key_and_is_approved_once_reopened() {
    let plane = Plane::start().await;
    let agent = common::agent();
    let management_node = format!("--management-node={}", plane.base);
    agent
        .ok(&["join", &management_node, "--name=web-2", "--no-wait"])
        .await;
    let fingerprint = agent.fingerprint();
    plane.decide_join(&fingerprint, "reject").await;

    let (code, stdout, stderr) = agent.cli(&["join", &management_node]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("rejected: the key is kept"), "{stdout}");
    assert!(stdout.contains(&fingerprint), "{stdout}");
    assert!(agent.status().await.contains("pairing: rejected"));

    plane.decide_join(&fingerprint, "reopen").await;
    let waiting = agent.spawn(&["join", &management_node]);
    wait_for(
        "the reopened join to be pending",
        Duration::from_secs(30),
        || async {
            let join = plane.join_of(&fingerprint).await?;
            (join["state"] == "pending").then_some(())
        },
    )
    .await;
    let node = plane.approve(&fingerprint).await;
    let output = match tokio::time::timeout(Duration::from_secs(60), waiting.wait_with_output())
        .await
    {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let join = plane.join_of(&fingerprint).await;
            panic!("join did not return within 60 s of the approval; the plane has {join:?}; the agent says {}", agent.status().await);
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("approved: this machine is node {node}")),
        "{stdout}"
    );
    assert_eq!(agent.fingerprint(), fingerprint, "the same key throughout");
    plane.stop().await;
}

/// AG-16, AG-22, AC-28: an agent killed mid-job leaves its marker; the next start says it is
/// idle, the plane marks the job lost, and the job is never run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_job_is_lost_and_never_run_again() {
    let plane = Plane::start().await;
    let mut agent = common::agent();
    // Held for approval, the job is deterministically in the middle of its life on the node.
    agent.ok(&["status"]).await;
    agent.policy(r#"{"read": "ask"}"#, 0o600);
    let node = agent.paired(&plane, "web-3").await;
    let job = plane.queue(node, "check_status", json!({})).await;
    agent.held_for_approval(job).await;
    let marker = std::fs::read_to_string(agent.file("job-running")).unwrap();
    assert!(
        marker.contains(&format!("job {job} check_status")),
        "{marker}"
    );
    assert_eq!(plane.job(job).await["state"], "running");

    agent.kill9().await;
    agent.start();
    let lost = plane.finished(job).await;
    assert_eq!(lost["state"], "lost", "{lost}");
    assert!(lost["reason"].as_str().unwrap().contains("idle"), "{lost}");
    wait_for(
        "status to name the crashed job",
        Duration::from_secs(30),
        || async {
            agent
                .status()
                .await
                .contains(&format!("stopped in the middle of job {job} check_status"))
                .then_some(())
        },
    )
    .await;
    assert!(!agent.file("job-running").exists());
    // Nothing waits for approval any more, and the job stays lost.
    let (code, _, stderr) = agent.cli(&["approve", &job.to_string()]).await;
    assert_eq!(code, 1, "{stderr}");
    // A marker: the agent takes the next job (and holds it for approval), so whatever it would
    // have done about the lost one came before.
    let next = plane.queue(node, "check_status", json!({})).await;
    agent.held_for_approval(next).await;
    assert_eq!(plane.job(job).await["state"], "lost");
    assert_eq!(plane.job(job).await["outcome"], "lost");
    plane.stop().await;
}

/// AG-01, AG-02, AG-63: the node refuses, with the reason, whatever the plane asks: an
/// out-of-bounds or undeclared parameter, a class its policy refuses, a log word while
/// log access is off, and everything once its policy file could have been written by another
/// user. (The plane sends each word's class from the catalog, so a class mismatch cannot be
/// produced through it, nor a word the plane knows and the agent lacks, now that this agent
/// has every word of the catalogue; the domain tests cover both refusals, e.g.
/// `vocabulary::tests` for an unknown word.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_reported_as_refused_with_its_reason() {
    let plane = Plane::start().await;
    let mut agent = common::agent();
    agent.ok(&["status"]).await;
    agent.policy(r#"{"change": "refuse"}"#, 0o600);
    let node = agent.paired(&plane, "web-4").await;

    let cases = [
        (
            plane
                .queue(node, "restart_unit", json!({"unit": "nginx"}))
                .await,
            "this node's policy refuses change words",
        ),
        (
            plane
                .queue(node, "site_log", json!({"log": "access"}))
                .await,
            LOG_ACCESS_OFF,
        ),
        (
            plane
                .queue_unchecked(node, "unit_journal", "read", json!({"unit": "sshd"}))
                .await,
            "unit must be one of",
        ),
        (
            plane
                .queue_unchecked(
                    node,
                    "unit_journal",
                    "read",
                    json!({"unit": "nginx", "lines": 99999}),
                )
                .await,
            "lines is 99999, outside 1..=2000",
        ),
        (
            plane
                .queue_unchecked(node, "check_status", "read", json!({"shell": "id"}))
                .await,
            "takes no parameter \"shell\"",
        ),
    ];
    for (job, reason) in cases {
        let ended = plane.finished(job).await;
        assert_eq!(ended["state"], "refused", "{ended}");
        assert_eq!(ended["outcome"], "refused", "{ended}");
        let said = ended["reason"].as_str().unwrap();
        assert!(said.contains(reason), "{said}");
        assert!(ended["reason"]
            .as_str()
            .unwrap()
            .starts_with("Refused by the node: "));
    }

    // With the owner's switch on, the log word runs and what it returns is redacted.
    agent.ok(&["log-access", "on"]).await;
    let log_job = plane
        .queue(node, "site_log", json!({"log": "access", "lines": 10}))
        .await;
    let read = plane.finished(log_job).await;
    assert_eq!(read["state"], "completed", "{read}");
    let lines = read["result"]["lines"].to_string();
    assert!(
        lines.contains("[ip] - - GET /login?password=[redacted] 200"),
        "{lines}"
    );
    assert!(
        !lines.contains("hunter2") && !lines.contains("203.0.113.9"),
        "{lines}"
    );

    // The other log-gated words run too; without systemd a unit's state is "unknown", not an
    // error, and a host file's credential lines keep their key alone.
    let journal = plane
        .queue(node, "unit_journal", json!({"unit": "nginx", "lines": 5}))
        .await;
    let journal = plane.finished(journal).await;
    assert_eq!(journal["state"], "completed", "{journal}");
    assert_eq!(journal["result"]["unit"], "nginx.service", "{journal}");
    if !std::path::Path::new("/run/systemd/system").is_dir() {
        assert_eq!(journal["result"]["state"], "unknown", "{journal}");
    }
    let head = plane
        .queue(node, "file_head", json!({"file": "/etc/hosts", "lines": 3}))
        .await;
    let head = plane.finished(head).await;
    assert_eq!(head["state"], "completed", "{head}");
    assert_eq!(head["result"]["path"], "/etc/hosts", "{head}");
    assert!(
        head["result"]["line_count"].as_u64().unwrap() <= 3,
        "{head}"
    );

    // AG-02: a policy file others could write makes the node accept nothing at all.
    agent.policy(r#"{"read": "accept"}"#, 0o666);
    let job = plane.queue(node, "check_status", json!({})).await;
    let refused = plane.finished(job).await;
    assert_eq!(refused["state"], "refused", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("accepts nothing until a person fixes its policy file"),
        "{reason}"
    );
    assert!(reason.contains("666"), "{reason}");

    let (status, count) = plane
        .api(
            &plane.admin,
            "GET",
            &format!("/api/v1/nodes/{node}/refusals?window_secs=3600"),
            None,
        )
        .await;
    assert_eq!(status, 200u16, "{count}");
    assert_eq!(count["refused"], 6, "{count}");
    plane.stop().await;
}

/// AG-23: a word the policy asks about waits for a person on the node: approved, it runs;
/// denied, it is refused with that reason; withdrawn on the plane, the wait ends and it never
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_held_for_approval_runs_when_approved_and_is_refused_when_denied() {
    let plane = Plane::start().await;
    let mut agent = common::agent();
    agent.ok(&["status"]).await;
    agent.policy(r#"{"read": "ask"}"#, 0o600);
    let node = agent.paired(&plane, "web-5").await;

    for (primitive, decision) in [("check_status", "approve"), ("host_report", "deny")] {
        let job = plane.queue(node, primitive, json!({})).await;
        let held = agent.held_for_approval(job).await;
        assert!(held.contains(&format!("job {job} {primitive}")), "{held}");
        assert_eq!(plane.job(job).await["state"], "running");
        let said = agent.ok(&[decision, &job.to_string()]).await;
        assert!(said.contains(&format!("job {job}: {primitive}")), "{said}");
        let ended = plane.finished(job).await;
        if decision == "approve" {
            assert_eq!(ended["state"], "completed", "{ended}");
        } else {
            assert_eq!(ended["state"], "refused", "{ended}");
            assert_eq!(
                ended["reason"],
                "Refused by the node: denied on the node by its operator"
            );
        }
    }

    // Withdrawn on the plane while it waits: the node learns it from job_status (every 30
    // seconds), ends its wait, and never runs the job.
    let job = plane.queue(node, "check_status", json!({})).await;
    agent.held_for_approval(job).await;
    let (status, answer) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/jobs/{job}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 200u16, "{answer}");
    // The log line and the status line are written by the agent one after the other; wait
    // for both rather than reading the log the moment the status changes.
    wait_for(
        "the node to end its wait, saying it was withdrawn",
        Duration::from_secs(60),
        || async {
            (!agent
                .status()
                .await
                .contains(&format!("waiting for approval: job {job}"))
                && agent.log().contains("withdrawn on the management node"))
            .then_some(())
        },
    )
    .await;
    let (code, _, _) = agent.cli(&["approve", &job.to_string()]).await;
    assert_eq!(code, 1, "nothing waits any more");
    assert_eq!(plane.job(job).await["state"], "withdrawn");
    plane.stop().await;
}

/// `401 unknown_key` after pairing: an operator's disconnect stops the agent taking work, and
/// `status` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_disconnected_on_the_plane_stops_taking_work() {
    let plane = Plane::start().await;
    let mut agent = common::agent();
    let node = agent.paired(&plane, "web-6").await;
    let (status, answer) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/nodes/{node}/disconnect"),
            None,
        )
        .await;
    assert_eq!(status, 200u16, "{answer}");
    wait_for(
        "the agent to report it is disconnected",
        Duration::from_secs(60),
        || async {
            agent
                .status()
                .await
                .contains("pairing: disconnected")
                .then_some(())
        },
    )
    .await;
    assert!(agent.running());
    plane.stop().await;
}
