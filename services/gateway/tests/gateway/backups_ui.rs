//! The backups pages against the harness's backups service (issue 14): the node page's
//! Backups tab draws the chains the service answers, newest first, with the verify state in
//! BK-20's words, and offers each act only at its level; the acts ask the service as the
//! operator; the Targets page (level 10) shows where new backups go and the fleet's coverage;
//! the fleet policy page reads at 7, saves at 10, and draws a refusal back on the form with the
//! field it names. A level-7 operator's POST is refused at the door (403) and asks nothing.

use capstan_events::backups::rpc::{
    self as backups, ChainView, FleetCoverage, NodeBackups, RunKind, RunView, TargetCoverage,
    Uncovered, UncoveredNode, VerifyState, VerifyStateKind, VerifyView,
};
use capstan_events::rpc::{ErrorCode, Level, Rpc, RpcError};
use capstan_events::NodeId;
use chrono::{Duration, Utc};
use serde_json::{json, Value};

use crate::harness::{no_backups, Gateway};

fn run(seq: i64, kind: RunKind, hours_ago: i64, bytes: i64, by: &str, verified: bool) -> RunView {
    let started = Utc::now() - Duration::hours(hours_ago);
    RunView {
        seq,
        kind,
        started_at: started,
        finished_at: started + Duration::minutes(3),
        bytes,
        verified_at: verified.then(|| started + Duration::hours(1)),
        requested_by: by.into(),
    }
}

/// Two chains: the active one on target 2 (runs 4 and 3), and an older one on target 1 the
/// node was moved from (runs 2 and 1), newest first as the service answers them.
fn two_chains() -> NodeBackups {
    NodeBackups {
        chains: vec![
            ChainView {
                space_id: 12,
                space_state: "active".into(),
                target_id: 2,
                target_name: "second site".into(),
                full_seq: 3,
                runs: vec![
                    run(
                        4,
                        RunKind::Incremental,
                        2,
                        3 * 1024 * 1024 / 2,
                        "ada",
                        false,
                    ),
                    run(
                        3,
                        RunKind::Full,
                        26,
                        40 * 1024 * 1024,
                        "service/backups",
                        true,
                    ),
                ],
            },
            ChainView {
                space_id: 11,
                space_state: "draining".into(),
                target_id: 1,
                target_name: "offsite".into(),
                full_seq: 1,
                runs: vec![
                    run(2, RunKind::Incremental, 50, 2048, "service/backups", false),
                    run(
                        1,
                        RunKind::Full,
                        74,
                        39 * 1024 * 1024,
                        "service/backups",
                        false,
                    ),
                ],
            },
        ],
        last_backup: Some(Utc::now() - Duration::hours(2)),
        last_full: Some(Utc::now() - Duration::hours(26)),
        oldest: Some(Utc::now() - Duration::hours(74)),
        shelf_problem: Some("run 2: files-2.tar.zst.age is 10 bytes, not 2048".into()),
        verify_state: VerifyState {
            state: VerifyStateKind::Failed,
            problem: true,
            words: "Verification failed: table orders is missing; nothing is retried \
                    automatically"
                .into(),
            last: Some(VerifyView {
                job_id: 90,
                seq: 3,
                level: 3,
                ok: false,
                finished_at: Utc::now() - Duration::hours(1),
                checked: Some(serde_json::json!({"artifacts": 2, "tables": 4})),
                problems: vec!["table orders is missing".into()],
            }),
        },
        ..no_backups(NodeId(17))
    }
}

fn asked(gateway: &Gateway, op: &str) -> Vec<Value> {
    gateway
        .script
        .lock()
        .unwrap()
        .asked
        .iter()
        .filter(|(asked, _)| asked == op)
        .map(|(_, request)| request.clone())
        .collect()
}

/// The position of `needle` in `body` (it must be there).
fn at(body: &str, needle: &str) -> usize {
    body.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not on the page:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backups_tab_draws_the_chains_newest_first_with_the_verify_state_in_bk_20_words() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().node_backups = Some(two_chains());
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/nodes/17?tab=backups").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    assert!(page.has(r#"data-test="tab-backups" aria-current="page""#));
    // Asked once, as the operator, for this node.
    let requests = asked(&gateway, backups::NodeBackupsRequest::OP);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["node_id"], 17);
    assert_eq!(requests[0]["actor"]["name"], reader.name.as_str());
    // Newest first, chain by chain; each run's kind, size, who and verified.
    let order: Vec<usize> = [
        "id=\"run-4\"",
        "id=\"run-3\"",
        "id=\"run-2\"",
        "id=\"run-1\"",
    ]
    .iter()
    .map(|row| at(body, row))
    .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}");
    let row4 = &body[order[0]..order[1]];
    assert!(
        row4.contains(r#"data-test="run-kind">incremental<"#),
        "{row4}"
    );
    assert!(row4.contains("1.5 MiB"), "{row4}");
    assert!(row4.contains(r#"data-test="run-by">ada<"#), "{row4}");
    assert!(row4.contains("not verified"), "{row4}");
    let row3 = &body[order[1]..order[2]];
    assert!(row3.contains(r#"data-test="run-kind">full<"#), "{row3}");
    assert!(
        row3.contains("40.0 MiB") || row3.contains("40 MiB"),
        "{row3}"
    );
    assert!(row3.contains("<time"), "verified: {row3}");
    assert!(page.has("draining: held where the node was moved from"));
    // The three times above the list, the verify state as the service words it (a problem),
    // with the last verify's facts, and the storage check's line.
    for hook in ["last-backup", "last-full", "oldest"] {
        let start = at(body, &format!(r#"data-test="{hook}""#));
        assert!(body[start..start + 200].contains(" ago</time>"), "{hook}");
    }
    assert!(
        page.has(r#"data-state="failed" data-problem="true""#),
        "{body}"
    );
    assert!(page.has("nothing is retried automatically"));
    assert!(page.has("Rehearse a restore of run 3: failed"));
    assert!(page.has("2 artifacts, 4 tables"));
    assert!(page.has("is 10 bytes, not 2048"));
    // A reader sees no act.
    for act in ["backup-run-now", "verify-4", "restore-4", "backup-move"] {
        assert!(
            !page.has(&format!(r#"data-test="{act}""#)),
            "{act} offered at 7"
        );
    }

    let changer = gateway.signed_in(Level::Change).await;
    let page = changer.get("/ui/nodes/17?tab=backups").await;
    assert!(page.has(r#"data-test="backup-run-now""#));
    assert!(page.has(r#"data-test="verify-4""#) && page.has(r#"data-test="verify-1""#));
    assert!(!page.has(r#"data-test="restore-4""#));
    assert!(!page.has(r#"data-test="backup-move""#));

    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/nodes/17?tab=backups").await;
    assert!(page.has(r#"data-test="restore-4""#));
    assert!(page.has(r#"data-test="backup-move""#));
    // Moving is offered to the targets it is not on (the fake lists target 1; it is on 2).
    assert!(
        page.has(r#"<option value="1">offsite</option>"#),
        "{}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_no_backups_says_so_and_other_tabs_do_not_ask_the_backups_service() {
    let gateway = Gateway::start().await;
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/nodes/17?tab=backups").await;
    assert_eq!(page.status, 200);
    assert!(page.has(r#"data-test="no-backups""#));
    assert!(page.has(r#"data-state="no_backups" data-problem="false""#));
    // Other tabs do not ask the backups service.
    gateway.script.lock().unwrap().asked.clear();
    let overview = reader.get("/ui/nodes/17").await;
    assert_eq!(overview.status, 200);
    assert!(asked(&gateway, backups::NodeBackupsRequest::OP).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_act_asks_the_backups_service_as_the_operator_and_only_at_its_level() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().node_backups = Some(two_chains());
    let reader = gateway.signed_in(Level::Read).await;
    let changer = gateway.signed_in(Level::Change).await;
    let admin = gateway.signed_in(Level::Admin).await;

    // Level 7 may not run one; level 8 may run and verify, not restore or move.
    let refused = reader.submit("/ui/nodes/17/backups/run", &[]).await;
    assert_eq!(refused.status, 403);
    for (path, fields) in [
        (
            "/ui/nodes/17/backups/restore",
            vec![("seq", "3"), ("what", "database"), ("confirm", "yes")],
        ),
        ("/ui/nodes/17/backups/move", vec![("target_id", "1")]),
    ] {
        let refused = changer.submit(path, &fields).await;
        assert_eq!(refused.status, 403, "{path}");
    }
    assert!(asked(&gateway, backups::RunNow::OP).is_empty());
    assert!(asked(&gateway, backups::RestoreRequest::OP).is_empty());
    assert!(asked(&gateway, backups::MoveRequest::OP).is_empty());

    let ran = changer.submit("/ui/nodes/17/backups/run", &[]).await;
    assert_eq!(ran.status, 303);
    assert_eq!(ran.location.as_deref(), Some("/ui/nodes/17?tab=backups"));
    let requests = asked(&gateway, backups::RunNow::OP);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["node_id"], 17);
    assert_eq!(requests[0]["actor"]["level"], 8);
    let after = changer.get("/ui/nodes/17?tab=backups").await;
    assert!(after.has("Backup asked for as job 77."), "{}", after.body);

    let verified = changer
        .submit(
            "/ui/nodes/17/backups/verify",
            &[("level", "3"), ("seq", "3")],
        )
        .await;
    assert_eq!(verified.status, 303);
    let requests = asked(&gateway, backups::VerifyRequest::OP);
    assert_eq!(
        (requests[0]["level"].as_u64(), requests[0]["seq"].as_i64()),
        (Some(3), Some(3))
    );
    // A bad level is named and asks nothing.
    let bad = changer
        .submit(
            "/ui/nodes/17/backups/verify",
            &[("level", "9"), ("seq", "3")],
        )
        .await;
    assert_eq!(bad.status, 303);
    let after = changer.get("/ui/nodes/17?tab=backups").await;
    assert!(after.has("level: must be 2"), "{}", after.body);
    assert_eq!(asked(&gateway, backups::VerifyRequest::OP).len(), 1);

    // A restore needs its box ticked.
    let unticked = admin
        .submit(
            "/ui/nodes/17/backups/restore",
            &[("seq", "3"), ("what", "project")],
        )
        .await;
    assert_eq!(unticked.status, 303);
    assert!(asked(&gateway, backups::RestoreRequest::OP).is_empty());
    let after = admin.get("/ui/nodes/17?tab=backups").await;
    assert!(after.has("confirm: tick the box"), "{}", after.body);
    let restored = admin
        .submit(
            "/ui/nodes/17/backups/restore",
            &[("seq", "3"), ("what", "project"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(restored.status, 303);
    let requests = asked(&gateway, backups::RestoreRequest::OP);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["what"], "project");
    assert_eq!(requests[0]["seq"], 3);
    let moved = admin
        .submit("/ui/nodes/17/backups/move", &[("target_id", "1")])
        .await;
    assert_eq!(moved.status, 303);
    assert_eq!(asked(&gateway, backups::MoveRequest::OP)[0]["target_id"], 1);
    // Each act is in the audit log with its job.
    let acts: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, outcome FROM audit_log
         WHERE action IN ('run_backup', 'verify_backup', 'restore_backup', 'move_backups')
           AND outcome = 'ok' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    let actions: Vec<&str> = acts.iter().map(|(action, _)| action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "run_backup",
            "verify_backup",
            "restore_backup",
            "move_backups"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_page_reads_at_7_saves_at_10_and_names_a_bad_field() {
    let gateway = Gateway::start().await;
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/backups/policy").await;
    assert_eq!(page.status, 200);
    assert!(
        page.has(r#"name="every_minutes" type="number" step="1" min="1" max="10080" value="1440""#),
        "{}",
        page.body
    );
    assert!(page.has("<fieldset disabled>"));
    assert!(!page.has(r#"data-test="save-policy""#));
    assert!(page.has(r#"data-test="nav-backup-policy""#));
    assert!(!page.has(r#"data-test="nav-backup-targets""#));
    let good = [
        ("enabled", "on"),
        ("mode", "full_only"),
        ("every_minutes", "720"),
        ("window_start_hour", "2"),
        ("window_hours", "4"),
        ("keep_days", "30"),
        ("full_every_days", "7"),
        ("verify_every_days", "3"),
        ("keep_daily", "7"),
        ("keep_weekly", "4"),
        ("keep_monthly", "12"),
    ];
    // A level-7 operator cannot post an edit: 403 at the door, nothing asked.
    let refused = reader.submit("/ui/backups/policy", &good).await;
    assert_eq!(refused.status, 403);
    assert!(asked(&gateway, backups::SetPolicy::OP).is_empty());

    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/backups/policy").await;
    assert!(page.has(r#"data-test="save-policy""#));
    assert!(page.has(r#"data-test="nav-backup-targets""#));
    // A field the gateway cannot read is named, marked, and what was typed is kept.
    let mut bad = good;
    bad[5] = ("keep_days", "a month");
    let page = admin.submit("/ui/backups/policy", &bad).await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.has(r#"data-test="policy-problem""#));
    assert!(
        page.has(r#"data-test="field-error-keep_days""#),
        "{}",
        page.body
    );
    assert!(
        page.has(r#"value="a month" required aria-invalid="true""#),
        "{}",
        page.body
    );
    assert!(!page.has(r#"data-test="field-error-every_minutes""#));
    assert!(asked(&gateway, backups::SetPolicy::OP).is_empty());
    // A good one is asked for as the operator, and said.
    let saved = admin.submit("/ui/backups/policy", &good).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let requests = asked(&gateway, backups::SetPolicy::OP);
    assert_eq!(requests.len(), 1);
    let policy = &requests[0]["policy"];
    assert_eq!(policy["mode"], "full_only");
    assert_eq!(policy["every_minutes"], 720);
    assert_eq!(policy["keep_days"], 30);
    assert_eq!(policy["verify_every_days"], 3);
    assert_eq!(
        (
            &policy["keep_daily"],
            &policy["keep_weekly"],
            &policy["keep_monthly"]
        ),
        (&json!(7), &json!(4), &json!(12))
    );
    assert_eq!(requests[0]["actor"]["level"], 10);
    let after = admin.get("/ui/backups/policy").await;
    assert!(after.has("Fleet backup policy saved"), "{}", after.body);
    // The service's own refusal names its field the same way.
    gateway.script.lock().unwrap().failure = Some(RpcError::new(
        ErrorCode::InvalidRequest,
        "window_hours: 40 is outside 1..=24",
    ));
    let mut out_of_range = good;
    out_of_range[4] = ("window_hours", "40");
    let page = admin.submit("/ui/backups/policy", &out_of_range).await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(
        page.has(r#"data-test="field-error-window_hours""#),
        "{}",
        page.body
    );
    assert!(page.has("40 is outside 1..=24"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_targets_page_is_level_10_with_where_new_backups_go_and_the_fleets_coverage() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().coverage = Some(FleetCoverage {
        targets: vec![TargetCoverage {
            target_id: 1,
            name: "offsite".into(),
            is_default: false,
            nodes: 3,
            waiting: 1,
            draining: 2,
        }],
        nodes: 6,
        covered: 4,
        uncovered_count: 2,
        uncovered: vec![
            UncoveredNode {
                node_id: NodeId(8),
                name: "web-8".into(),
                reason: Uncovered::Off,
                words: "Backups switched off for this node (a decision).".into(),
            },
            UncoveredNode {
                node_id: NodeId(9),
                name: "web-9".into(),
                reason: Uncovered::NoRecoveryKey,
                words: "No recovery key: it cannot be backed up until its owner sets one.".into(),
            },
        ],
    });
    let changer = gateway.signed_in(Level::Change).await;
    assert_eq!(changer.get("/ui/backups/targets").await.status, 403);
    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/backups/targets").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    let row = &body[at(body, r#"id="target-1""#)..];
    assert!(row.contains(r#"data-test="target-nodes">3<"#), "{row}");
    assert!(row.contains(r#"data-test="target-waiting">1<"#), "{row}");
    assert!(row.contains(r#"data-test="target-draining">2<"#), "{row}");
    assert!(row.contains(r#"data-test="make-default""#));
    assert!(page.has(r#"data-test="no-default""#));
    assert!(page.has("6 nodes: 4 backed up, 2 not backed up."));
    assert!(page.has(r#"id="uncovered-9""#));
    assert!(page.has(r#"data-reason="no_recovery_key""#));
    assert_eq!(
        asked(&gateway, backups::FleetCoverageRequest::OP)[0]["actor"]["level"],
        10
    );

    let chosen = admin.submit("/ui/backups/targets/1/default", &[]).await;
    assert_eq!(chosen.status, 303);
    assert_eq!(
        asked(&gateway, backups::SetDefaultTarget::OP)[0]["target_id"],
        1
    );
    let after = admin.get("/ui/backups/targets").await;
    assert!(
        after.has("New backups go to offsite now."),
        "{}",
        after.body
    );
    // Level 8 cannot choose either.
    assert_eq!(
        changer
            .submit("/ui/backups/targets/1/default", &[])
            .await
            .status,
        403
    );
}

/// Issue 27: the Targets page says where the seal key is and why to keep a copy, and without
/// one says what to set instead of leaving a new plane's operator to find it in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_targets_page_says_where_the_seal_key_is_and_what_to_set_when_there_is_none() {
    let gateway = Gateway::start().await;
    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/backups/targets").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.has(r#"data-test="seal-key-file">/var/lib/capstan/backups-seal.key<"#),
        "{}",
        page.body
    );
    assert!(page.has("Back it up with the plane's database"));
    assert!(!page.has(r#"data-test="no-seal-key""#));

    gateway.script.lock().unwrap().seal_key = Some(backups::SealKeyView {
        set: false,
        file: None,
    });
    let page = admin.get("/ui/backups/targets").await;
    assert!(page.has(r#"data-test="no-seal-key""#), "{}", page.body);
    assert!(page.has("CAPSTAN__BACKUPS__SEAL_KEY_FILE"));
    assert!(!page.has(r#"data-test="seal-key-file""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tab_states_the_nodes_position_and_level_10_sets_it() {
    let gateway = Gateway::start().await;
    let changer = gateway.signed_in(Level::Change).await;
    let page = changer.get("/ui/nodes/17?tab=backups").await;
    assert!(
        page.has(r#"data-test="node-position" data-position="fleet">Follows the fleet policy: every 1440 min"#),
        "{}",
        page.body
    );
    assert!(!page.has(r#"id="backup-position""#));
    let refused = changer
        .submit("/ui/nodes/17/backups/policy", &[("position", "off")])
        .await;
    assert_eq!(refused.status, 403);
    assert!(asked(&gateway, backups::SetNodePolicy::OP).is_empty());

    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/nodes/17?tab=backups").await;
    assert!(page.has(r#"id="backup-position""#));
    let bad = admin
        .submit("/ui/nodes/17/backups/policy", &[("position", "sometimes")])
        .await;
    assert_eq!(bad.status, 303);
    assert!(asked(&gateway, backups::SetNodePolicy::OP).is_empty());
    let after = admin.get("/ui/nodes/17?tab=backups").await;
    assert!(
        after.has("position: must be fleet, own or off"),
        "{}",
        after.body
    );
    let saved = admin
        .submit("/ui/nodes/17/backups/policy", &[("position", "off")])
        .await;
    assert_eq!(saved.status, 303);
    assert_eq!(saved.location.as_deref(), Some("/ui/nodes/17?tab=backups"));
    let requests = asked(&gateway, backups::SetNodePolicy::OP);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["node_id"], 17);
    assert_eq!(requests[0]["body"], serde_json::json!({"position": "off"}));
    assert_eq!(requests[0]["actor"]["level"], 10);
}
