//! Move end to end (BK-01..BK-03): the real plane, the real `capstan-agent` with a real site,
//! two S3-compatible servers that check every signature (the old target and the new). A node
//! backs up a full and an incremental to the old target's space; the operator moves it; the
//! next run is a full in the new space, nothing is copied or removed, the old runs stay
//! restorable from where they are, and the broker refuses to extend the old chain into the new
//! space (a chain may not span spaces).

use std::collections::BTreeSet;
use std::time::Duration;

use super::schedule::{
    act, backups, fleet_every_minute, give_site, psql, restoring_run_2_brings_it_back, runs,
    wait_runs,
};
use super::*;
use capstan_e2e::agent::{binary, Agent};
use capstan_e2e::wait_for;

/// A second target, on its own server; its id. It is not where new backups go.
async fn second_target(plane: &Plane, s3: &S3Server) -> i64 {
    let mut body = target_body(s3, &s3.secret_key);
    body["name"] = json!("new s3");
    let (status, target) = plane
        .api(&plane.admin, "POST", "/api/v1/backups/targets", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{target}");
    target["id"].as_i64().unwrap()
}

/// Every stored key of `node`'s runs on `s3`.
fn node_keys(s3: &S3Server, node: i64) -> BTreeSet<String> {
    let marker = format!("/node-{node}/");
    s3.keys()
        .into_iter()
        .filter(|key| key.contains(&marker))
        .collect()
}

/// The seqs of `keys` (`.../node-{node}/{seq:010}/{name}`).
fn seqs(keys: &BTreeSet<String>) -> BTreeSet<i64> {
    keys.iter()
        .filter_map(|key| key.rsplit('/').nth(1)?.parse().ok())
        .collect()
}

/// Each landed run's space, by seq.
fn spaces(view: &Value) -> Vec<(i64, i64)> {
    let mut spaces: Vec<(i64, i64)> = view["chains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|chain| {
            let space = chain["space_id"].as_i64().unwrap();
            chain["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |run| (run["seq"].as_i64().unwrap(), space))
        })
        .collect();
    spaces.sort();
    spaces
}

async fn wait_free(plane: &Plane, node: i64) {
    wait_for(
        "the node's turn to be free",
        Duration::from_secs(120),
        || async { backups(plane, node).await["busy"].is_null().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn bk_01_bk_02_bk_03_a_moved_node_starts_a_full_in_the_new_space_nothing_is_copied_and_the_old_runs_stay_restorable(
) {
    let old_s3 = S3Server::start().await;
    let new_s3 = S3Server::start().await;
    let plane = Plane::start_with(&[("CAPSTAN__BACKUPS__SCHEDULE_SECS", "1")]).await;
    default_target(&plane, &old_s3).await;
    let new_target = second_target(&plane, &new_s3).await;
    fleet_every_minute(&plane, false).await;
    let mut agent = Agent::new(binary());
    let node = agent.paired(&plane, "web-moving").await;
    agent.policy(r#"{"destructive": "accept"}"#, 0o600);
    let db = give_site(&agent);
    fleet_every_minute(&plane, true).await;

    // A full, then (after the site changed) an incremental, in the old target's space.
    wait_runs(&plane, node, 1).await;
    std::fs::write(agent.site().join("index.php"), "<?php echo 'v2';").unwrap();
    psql(
        &db.0,
        "INSERT INTO customers (name) SELECT 'd' || g FROM generate_series(1, 25) g",
    );
    wait_runs(&plane, node, 2).await;
    // The schedule stops for this node (the move dispatches its own run).
    let (status, off) = plane
        .api(
            &plane.admin,
            "PUT",
            &format!("/api/v1/nodes/{node}/backups/policy"),
            Some(json!({"position": "off"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{off}");
    wait_free(&plane, node).await;
    let before = backups(&plane, node).await;
    let old_runs = runs(&before);
    assert_eq!(
        old_runs[..2],
        [(1, "full".to_string()), (2, "incremental".to_string())],
        "{before}"
    );
    let old_space = spaces(&before)[0].1;
    assert!(
        spaces(&before).iter().all(|(_, space)| *space == old_space),
        "{before}"
    );
    let old_keys = node_keys(&old_s3, node);
    assert_eq!(
        seqs(&old_keys),
        old_runs.iter().map(|(seq, _)| *seq).collect(),
        "{old_keys:?}"
    );
    assert!(node_keys(&new_s3, node).is_empty());

    // BK-02: the operator moves the node; the run dispatched at once is a full, in a new space
    // on the new target.
    let moved = act(&plane, node, "move", json!({"target_id": new_target})).await;
    assert_eq!(plane.finished(moved).await["state"], "completed");
    let after = wait_runs(&plane, node, old_runs.len() + 1).await;
    let new_seq = old_runs.last().unwrap().0 + 1;
    assert_eq!(
        runs(&after).last(),
        Some(&(new_seq, "full".to_string())),
        "{after}"
    );
    let new_chain = after["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|chain| chain["full_seq"] == new_seq)
        .unwrap_or_else(|| panic!("a chain starts at {new_seq}: {after}"))
        .clone();
    assert_ne!(new_chain["space_id"], old_space, "{after}");
    assert_eq!(new_chain["space_state"], "active", "{after}");
    assert_eq!(new_chain["target_id"], new_target, "{after}");
    let old_chain = after["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|chain| chain["space_id"] == old_space)
        .unwrap_or_else(|| panic!("the old space's chain is still listed: {after}"))
        .clone();
    assert_eq!(old_chain["space_state"], "draining", "{after}");
    // Nothing copied, nothing removed: the old store holds exactly what it held, the new one
    // only the new run.
    assert_eq!(node_keys(&old_s3, node), old_keys);
    assert_eq!(seqs(&node_keys(&new_s3, node)), BTreeSet::from([new_seq]));

    // BK-03: the old runs stay restorable from where they are: restoring run 2 brings back its
    // file and rows.
    wait_free(&plane, node).await;
    restoring_run_2_brings_it_back(&plane, node, &agent, &db).await;

    // A chain may not span spaces: an incremental that extends run 2 (in the old, draining
    // space) is refused its PUT URLs, even one the backups service held as its own, and
    // nothing of it is stored.
    wait_free(&plane, node).await;
    let extend = super::queue_as_backups(
        &plane,
        node,
        "backup_run",
        json!({"seq": new_seq + 1, "kind": "incremental", "previous_seq": 2}),
    )
    .await;
    let refused = wait_for(
        "the cross-space incremental to end",
        Duration::from_secs(120),
        || async {
            let job = plane.job(extend).await;
            (!["pending", "running"].contains(&job["state"].as_str()?)).then_some(job)
        },
    )
    .await;
    assert_eq!(refused["state"], "failed", "{refused}");
    assert!(
        refused.to_string().contains("a chain may not span spaces"),
        "{refused}"
    );
    assert!(!seqs(&node_keys(&new_s3, node)).contains(&(new_seq + 1)));
    assert!(!seqs(&node_keys(&old_s3, node)).contains(&(new_seq + 1)));
    assert_eq!(node_keys(&old_s3, node), old_keys);
}
