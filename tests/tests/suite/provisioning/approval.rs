//! AC-08..AC-11 end to end: with auto-approval switched off, a provisioned machine's own join is
//! judged with all five conditions holding (pending only because the switch is off); each
//! condition failing leaves a join pending with its reason in the plane's words (a differing
//! key flagged red); a join from a machine the plane did not provision gets no verdict; and
//! once the machine's agent is admitted, a second join from its address is refused and raises
//! an incident on the plane's own node. With the switch on, the flow tests see it approve.

use std::time::Duration;

use capstan_e2e::agent::{self, Agent};
use capstan_e2e::wait_for;
use capstan_events::provisioning::provisions::{JoinVerdicts, VerdictView};
use capstan_events::rpc::{Actor, Level};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{unique, World};

/// Where the judge's words for the five conditions begin (domain::approval's Display).
const OFF: &str = "auto-approval is off";
const NOT_RUNNING: &str = "the provider reports the instance";
const KEY_DIFFERS: &str = "the key does not match the one the install showed";
const WRONG_NAME: &str = "the join is named";
const NOT_INSTALLING: &str = "the provision at this address is install_failed";

async fn verdict(world: &World, join: Uuid, wanted: impl Fn(&VerdictView) -> bool) -> VerdictView {
    wait_for(
        &format!("a verdict over join {join}"),
        Duration::from_secs(60),
        || async {
            let asked = JoinVerdicts {
                actor: Actor {
                    name: "rita".into(),
                    level: Level::Read,
                    address: None,
                },
                join_ids: vec![join],
            };
            let verdicts = world
                .plane
                .bus
                .ask(&asked, Duration::from_secs(5))
                .await
                .ok()?;
            verdicts.verdicts.into_iter().find(|each| wanted(each))
        },
    )
    .await
}

/// A real agent asking to join as `name` from `address` (with a key of its own); its join's id.
async fn join_from(world: &World, address: &str, name: &str) -> (Agent, Uuid) {
    let mut stranger = Agent::new(agent::binary());
    stranger.set_siteless();
    stranger.set_env("CAPSTAN_AGENT_LOCAL_ADDRESS", address);
    stranger
        .ok(&[
            "join",
            &format!("--management-node={}", world.plane.base),
            &format!("--name={name}"),
            "--no-wait",
        ])
        .await;
    let fingerprint = stranger.fingerprint();
    let join = wait_for("the join to be listed", Duration::from_secs(30), || async {
        world.plane.join_of(&fingerprint).await
    })
    .await;
    assert_eq!(join["source_address"], address, "{join}");
    let id = join["id"].as_str().unwrap().parse().unwrap();
    (stranger, id)
}

fn reasons_start(verdict: &VerdictView, starts: &[&str]) -> bool {
    verdict.reasons.len() == starts.len()
        && verdict
            .reasons
            .iter()
            .zip(starts)
            .all(|(reason, start)| reason.starts_with(start))
}

#[tokio::test]
async fn ac_08_each_failing_condition_leaves_the_join_pending_with_its_reason_and_ac_11_a_second_join_is_refused_and_alarmed(
) {
    let world = World::start_with(&[
        ("CAPSTAN__PROVISIONING__AUTO_APPROVE", "false"),
        ("CAPSTAN__PROVISIONING__PLANE_NODE", "plane"),
    ])
    .await;
    // The plane's own node, enrolled like any other.
    let mut own = Agent::new(agent::binary());
    own.set_siteless();
    let plane_node = own.paired(&world.plane, "plane").await;

    let account = world.account("linode", "ours", "main").await;
    let name = unique("alpha");
    let id = world.ask(account, "agent", &name, "linode").await["id"]
        .as_i64()
        .unwrap();
    let done = world.until_step(id, "done").await;
    let address = done["ipv4"][0].as_str().unwrap().to_string();
    let node = done["node_id"].as_i64().unwrap();

    // All five hold for the machine's own join: pending only because the switch is off.
    let own_join = wait_for(
        "the machine's own join judged",
        Duration::from_secs(60),
        || async {
            let provision = world.provision(id).await;
            provision["approval"]["join_id"]
                .as_str()
                .and_then(|join| join.parse::<Uuid>().ok())
        },
    )
    .await;
    let judged = verdict(&world, own_join, |v| reasons_start(v, &[OFF])).await;
    assert!(!judged.approved && !judged.key_differs);

    // (4) The provider reports it stopped: the machine's own join is pending for that alone.
    // A stranger's join (own key, right name) wakes the judge, and fails (3) and (4).
    world.linode.world().servers[0].powered = false;
    let (_first, stranger) = join_from(&world, &address, &name).await;
    verdict(&world, own_join, |v| reasons_start(v, &[NOT_RUNNING])).await;
    verdict(&world, stranger, |v| {
        reasons_start(v, &[KEY_DIFFERS, NOT_RUNNING])
    })
    .await;

    // Running again: the stranger's join fails (3) alone, shown red; a join named otherwise
    // fails (2) (and (3): its key is its own).
    world.linode.world().servers[0].powered = true;
    let (_second, misnamed) = join_from(&world, &address, &format!("{name}-x")).await;
    let red = verdict(&world, stranger, |v| reasons_start(v, &[KEY_DIFFERS])).await;
    assert!(red.key_differs, "a differing key is shown red (AC-09)");
    verdict(&world, misnamed, |v| {
        reasons_start(v, &[WRONG_NAME, KEY_DIFFERS])
    })
    .await;
    verdict(&world, own_join, |v| reasons_start(v, &[OFF])).await;

    // (1) A join from a provision that failed (its install refused: the site is there).
    world.linode.world().boot_polls = 40;
    let failing = unique("gamma");
    let failed_id = world.ask(account, "site", &failing, "linode").await["id"]
        .as_i64()
        .unwrap();
    let server = wait_for(
        "the second server's machine",
        Duration::from_secs(30),
        || async {
            let server = world.linode.world().servers.get(1).cloned()?;
            world
                .linode
                .machine(server.id)
                .map(|machine| (server, machine))
        },
    )
    .await;
    std::fs::create_dir_all(server.1.path(&format!("/var/www/{failing}"))).unwrap();
    world.until_step(failed_id, "install_failed").await;
    let (_third, late) = join_from(&world, &server.0.ipv4.to_string(), &failing).await;
    let not_installing = verdict(&world, late, |v| !v.reasons.is_empty()).await;
    assert!(
        not_installing.reasons[0].starts_with(NOT_INSTALLING),
        "{:?}",
        not_installing.reasons
    );

    // A join from a machine the plane did not provision gets no verdict and stays pending.
    let (_fourth, unknown) = join_from(&world, "127.0.0.1", "walk-in").await;

    // (5) / AC-11: the machine's own join approved (bound to its node), a second join from
    // its address is refused and raises an incident on the plane's own node.
    let (status, approved) = world
        .plane
        .api(
            &world.plane.admin,
            "POST",
            &format!("/api/v1/joins/{own_join}/approve"),
            Some(json!({"node_id": node})),
        )
        .await;
    assert!(status.is_success(), "{approved}");
    world.plane.wait_online(node).await;
    let (_fifth, second) = join_from(&world, &address, &name).await;
    let alarmed = verdict(&world, second, |v| v.second_join).await;
    assert!(!alarmed.approved);
    let refused = wait_for(
        "the second join refused",
        Duration::from_secs(30),
        || async {
            let join = world.plane.join_of(&_fifth.fingerprint()).await?;
            (join["state"] == "rejected").then_some(join)
        },
    )
    .await;
    assert_eq!(refused["state"], "rejected");
    let incident: Value = wait_for("the alarm's incident", Duration::from_secs(60), || async {
        let (_, list) = world
            .plane
            .api(&world.plane.reader, "GET", "/api/v1/incidents", None)
            .await;
        list["incidents"]
            .as_array()?
            .iter()
            .find(|incident| {
                incident["source"] == "plane:provisioned_second_join"
                    && incident["node_id"] == plane_node
            })
            .cloned()
    })
    .await;
    assert_eq!(incident["node_id"], plane_node);
    // The walk-in's join was never judged a provision's, nor approved (the passes since it came
    // judged every pending join: the second join's above among them).
    let walk_in = world.plane.join_of(&_fourth.fingerprint()).await.unwrap();
    assert_eq!(walk_in["state"], "pending");
    let asked = JoinVerdicts {
        actor: Actor {
            name: "rita".into(),
            level: Level::Read,
            address: None,
        },
        join_ids: vec![unknown],
    };
    let none = world
        .plane
        .bus
        .ask(&asked, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(none.verdicts.is_empty(), "{:?}", none.verdicts);
}
