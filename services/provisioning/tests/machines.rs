//! The machines inventory, adoption, hosts, the transfer watch and the test-cloud cleanup end
//! to end inside the service, each test on a database of its own, against the providers'
//! stand-ins: the cleanup deletes only what it may, and under any other company name nothing
//! and the condition is published (PV-55); adopt on one, two and no matches (PV-52); a host is
//! not deleted while a container lives on it (PV-16); the transfer watch sees an instance
//! leave its account.

use std::net::Ipv4Addr;
use std::time::Duration;

use capstan_events::conditions::ConditionChanged;
use capstan_events::provisioning::machines::{
    AddHost, AdoptMachine, DeleteHost, HostBody, ListHosts, ListMachines, MachineColour,
    MachineKind, MachineNoteBody, WriteMachine,
};
use capstan_events::provisioning::rpc::AddAccount;
use capstan_events::rpc::{Actor, ErrorCode, Level, RpcError};
use capstan_events::{NodeId, RawEnvelope};
use capstan_provisioning::domain::cleanup::DISPOSABLE_MARKER;
use capstan_provisioning::drivers::api::{http, Limits};
use capstan_provisioning::drivers::seal::Sealer;
use capstan_provisioning::drivers::Providers;
use capstan_provisioning::rpc::{self, State};
use capstan_provisioning::standin::{Flavor, Server, StandIn};
use capstan_provisioning::tasks::{cleanup, transfer};
use capstan_runtime::ServiceError;
use capstan_store::testsuite::TestDatabase;
use capstan_store::Store;
use chrono::Utc;

const TOKEN: &str = "standin-token";
const KEY: Option<[u8; 32]> = Some([7u8; 32]);

struct World {
    _database: TestDatabase,
    store: Store,
    linode: StandIn,
    hetzner: StandIn,
}

async fn world() -> World {
    let database = TestDatabase::create().await;
    let store = Store::connect(database.url(), "provisioning", 3)
        .await
        .unwrap();
    store
        .migrate(&capstan_provisioning::MIGRATOR)
        .await
        .unwrap();
    World {
        _database: database,
        store,
        linode: StandIn::start(Flavor::Linode).await,
        hetzner: StandIn::start(Flavor::Hetzner).await,
    }
}

fn actor(level: Level) -> Actor {
    Actor {
        name: "ada".into(),
        level,
        address: None,
    }
}

fn refused(error: ServiceError) -> RpcError {
    match error {
        ServiceError::Refused(refused) => refused,
        other => panic!("not a refusal: {other:?}"),
    }
}

impl World {
    fn state(&self) -> State {
        State {
            store: self.store.clone(),
            sealer: Sealer::new(KEY),
            providers: Providers {
                linode_base_url: self.linode.base_url(),
                hetzner_base_url: self.hetzner.base_url(),
                limits: Limits {
                    call_timeout: Duration::from_secs(5),
                    attempts: 2,
                    first_wait: Duration::from_millis(10),
                    longest_wait: Duration::from_secs(1),
                },
                http: http(),
            },
            settings: std::sync::Arc::new(
                capstan_provisioning::settings::ProvisioningSettings::default(),
            ),
            wake: Default::default(),
        }
    }

    async fn account(&self, provider: &str, label: &str, flag: &str) -> i64 {
        rpc::add_account(
            self.state(),
            AddAccount {
                actor: actor(Level::Admin),
                provider: provider.into(),
                label: label.into(),
                flag: flag.into(),
                token: TOKEN.into(),
            },
        )
        .await
        .unwrap()
        .id
    }

    /// A node as the agent channel's events would have it in this service's projection.
    async fn node(&self, id: i64, name: &str, addresses: &[&str], paired: bool) {
        sqlx::query(
            "INSERT INTO nodes (node_id, name, addresses, paired, approved_at)
             VALUES ($1, $2, $3, $4, now())",
        )
        .bind(id)
        .bind(name)
        .bind(serde_json::json!(addresses))
        .bind(paired)
        .execute(self.store.pool())
        .await
        .unwrap();
    }

    async fn outbox(&self, subject: &str) -> Vec<RawEnvelope> {
        let payloads: Vec<String> =
            sqlx::query_scalar("SELECT payload FROM outbox WHERE subject = $1 ORDER BY id")
                .bind(subject)
                .fetch_all(self.store.pool())
                .await
                .unwrap();
        payloads
            .iter()
            .map(|payload| serde_json::from_str(payload).unwrap())
            .collect()
    }

    async fn conditions(&self, name: &str) -> Vec<ConditionChanged> {
        self.outbox(&format!("capstan.conditions.provisioning.{name}"))
            .await
            .iter()
            .map(|envelope| ConditionChanged::read(envelope).unwrap().unwrap())
            .collect()
    }
}

/// Puts a server into a stand-in's account, made `age_hours` ago at `ipv4`.
fn server(standin: &StandIn, id: u64, ipv4: [u8; 4], age_hours: i64, tags: &[&str]) {
    let mut world = standin.world();
    let image = world.images[0].clone();
    let (region, sizes) = world.regions[0].clone();
    world.servers.push(Server {
        id,
        label: format!("box-{id}"),
        region,
        size: sizes[0].clone(),
        image,
        ipv4: Ipv4Addr::from(ipv4),
        ipv6: format!("2001:db8:ffff::{id:x}").parse().unwrap(),
        tags: tags.iter().map(|tag| tag.to_string()).collect(),
        created: Utc::now() - chrono::Duration::hours(age_hours),
        root_password: "unused-here".into(),
        powered: true,
        polls: 10,
        rdns: None,
        disk_encryption: None,
        swap_size: None,
        machine_ready: true,
    });
}

fn ids(standin: &StandIn) -> Vec<u64> {
    let mut ids: Vec<u64> = standin.world().servers.iter().map(|s| s.id).collect();
    ids.sort();
    ids
}

fn volume_labels(standin: &StandIn) -> Vec<String> {
    let mut labels: Vec<String> = standin
        .world()
        .volumes
        .iter()
        .map(|v| v.label.clone())
        .collect();
    labels.sort();
    labels
}

fn cleanup_on(plane_node: Option<&str>) -> cleanup::Cleanup {
    cleanup::Cleanup {
        enabled: true,
        max_age: chrono::Duration::hours(24),
        plane_node: plane_node.map(str::to_string),
    }
}

#[tokio::test]
async fn pv_55_the_cleanup_deletes_only_old_untagged_servers_not_at_a_live_node_and_loose_volumes()
{
    let world = world().await;
    world.linode.world().company = DISPOSABLE_MARKER.into();
    world.hetzner.world().company = DISPOSABLE_MARKER.into();
    world.account("linode", "Test cloud", "test").await;
    // A main account whose provider says disposable is never touched.
    world.account("hetzner", "Ours", "main").await;
    world.node(1, "plane", &["203.0.113.1"], true).await;
    world.node(2, "live-box", &["203.0.113.30"], true).await;
    server(&world.linode, 10, [203, 0, 113, 10], 48, &["ci"]);
    server(&world.linode, 11, [203, 0, 113, 11], 48, &["KeEp"]);
    server(&world.linode, 12, [203, 0, 113, 30], 48, &[]);
    server(&world.linode, 13, [203, 0, 113, 13], 2, &[]);
    world
        .linode
        .add_volume("loose", None, &[], chrono::Duration::hours(48));
    world
        .linode
        .add_volume("attached", Some(12), &[], chrono::Duration::hours(48));
    world
        .linode
        .add_volume("kept", None, &["Keep"], chrono::Duration::hours(48));
    world
        .linode
        .add_volume("young", None, &[], chrono::Duration::hours(1));
    server(&world.hetzner, 20, [203, 0, 113, 20], 480, &[]);

    // Off (the default), nothing is asked of any provider.
    let off = cleanup::Cleanup {
        enabled: false,
        ..cleanup_on(Some("plane"))
    };
    let report = cleanup::tick(&world.state(), &off, Utc::now(), true)
        .await
        .unwrap();
    assert!(!report.ran);
    assert_eq!(world.linode.count("DELETE", "/v4/linode/instances/10"), 0);

    let report = cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    assert!(report.ran);
    assert_eq!(report.deleted_servers, ["10"]);
    assert_eq!(report.refusals, Vec::<String>::new());
    assert_eq!(
        ids(&world.linode),
        [11, 12, 13],
        "kept, at a live node, young"
    );
    assert_eq!(volume_labels(&world.linode), ["attached", "kept", "young"]);
    assert_eq!(ids(&world.hetzner), [20], "a main account is never cleaned");
    assert!(
        world.conditions("test_cloud_cleanup").await.is_empty(),
        "a passing run with nothing open publishes nothing"
    );
    let held: Vec<String> = sqlx::query_scalar("SELECT unnest(held) FROM cleanup_runs")
        .fetch_all(world.store.pool())
        .await
        .unwrap();
    assert!(
        held.iter()
            .any(|line| line == "12: a live node is at 203.0.113.30"),
        "{held:?}"
    );

    // Within the hour it is not due again.
    server(&world.linode, 14, [203, 0, 113, 14], 48, &[]);
    let again = cleanup::tick(
        &world.state(),
        &cleanup_on(Some("plane")),
        Utc::now(),
        false,
    )
    .await
    .unwrap();
    assert!(!again.ran);
    assert!(ids(&world.linode).contains(&14));
}

#[tokio::test]
async fn pv_55_under_any_other_company_name_nothing_is_deleted_and_the_condition_opens_until_a_pass_or_off(
) {
    let world = world().await;
    world.linode.world().company = "Joinery Test Disposable".into();
    let account = world.account("linode", "Test cloud", "test").await;
    world.node(1, "plane", &["203.0.113.1"], true).await;
    server(&world.linode, 10, [203, 0, 113, 10], 480, &[]);
    world
        .linode
        .add_volume("loose", None, &[], chrono::Duration::hours(480));
    // Adding the account listed it once (the token's trial).
    let listed_before = world.linode.count("GET", "/v4/linode/instances");

    let report = cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!(ids(&world.linode), [10], "nothing deleted");
    assert_eq!(volume_labels(&world.linode), ["loose"]);
    assert_eq!(report.refusals.len(), 1);
    assert!(
        report.refusals[0].contains("\"Joinery Test Disposable\""),
        "{:?}",
        report.refusals
    );
    assert_eq!(
        world.linode.count("GET", "/v4/linode/instances"),
        listed_before,
        "nothing listed after the company name"
    );
    let published = world.conditions("test_cloud_cleanup").await;
    assert_eq!(published.len(), 1);
    assert!(published[0].happening);
    assert_eq!(published[0].node_id, NodeId(1), "on the plane's own node");
    assert_eq!(published[0].source(), "plane:test_cloud_cleanup");
    assert!(published[0]
        .evidence
        .contains(&format!("account {account}")));
    let refused: Option<String> = sqlx::query_scalar("SELECT refused FROM cleanup_runs")
        .fetch_one(world.store.pool())
        .await
        .unwrap();
    assert!(refused.unwrap().contains("not exactly"));

    // The same refusal again publishes nothing new.
    cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!(world.conditions("test_cloud_cleanup").await.len(), 1);

    // A passing run clears it.
    world.linode.world().company = DISPOSABLE_MARKER.into();
    cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    let published = world.conditions("test_cloud_cleanup").await;
    assert_eq!(published.len(), 2);
    assert!(!published[1].happening);
    assert!(ids(&world.linode).is_empty());

    // Refused again, then turned off: cleared.
    world.linode.world().company = "Acme Ltd".into();
    cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    let off = cleanup::Cleanup {
        enabled: false,
        ..cleanup_on(Some("plane"))
    };
    cleanup::tick(&world.state(), &off, Utc::now(), true)
        .await
        .unwrap();
    let published = world.conditions("test_cloud_cleanup").await;
    assert_eq!(
        published.iter().map(|c| c.happening).collect::<Vec<_>>(),
        [true, false, true, false]
    );
}

#[tokio::test]
async fn pv_55_a_refusal_with_no_plane_node_known_is_recorded_and_not_published() {
    let world = world().await;
    world.linode.world().company = "Acme Ltd".into();
    world.account("linode", "Test cloud", "test").await;
    let report = cleanup::tick(
        &world.state(),
        &cleanup_on(Some("nowhere")),
        Utc::now(),
        true,
    )
    .await
    .unwrap();
    assert_eq!(report.refusals.len(), 1);
    assert!(!report.condition_open);
    assert!(world.conditions("test_cloud_cleanup").await.is_empty());
}

#[tokio::test]
async fn pv_52_a_server_is_adopted_on_exactly_one_match_and_the_candidates_are_named_otherwise() {
    let world = world().await;
    let linode = world.account("linode", "Ours", "main").await;
    let hetzner = world.account("hetzner", "Other", "main").await;
    world.node(5, "web-5", &["203.0.113.5"], true).await;
    world.node(6, "web-6", &["203.0.113.6"], true).await;
    world.node(7, "web-7", &["203.0.113.7"], true).await;
    // One match for node 5; two (one per account) for node 6; none for node 7.
    server(&world.linode, 50, [203, 0, 113, 5], 100, &[]);
    server(&world.linode, 60, [203, 0, 113, 6], 100, &[]);
    server(&world.hetzner, 61, [203, 0, 113, 6], 100, &[]);
    let adopt = |node: i64, instance: &str, level: Level| AdoptMachine {
        actor: actor(level),
        node_id: NodeId(node),
        instance_id: instance.into(),
    };

    let forbidden = refused(
        rpc::adopt_machine(world.state(), adopt(5, "50", Level::Change))
            .await
            .unwrap_err(),
    );
    assert_eq!(forbidden.code, ErrorCode::Forbidden);

    let two = refused(
        rpc::adopt_machine(world.state(), adopt(6, "60", Level::Admin))
            .await
            .unwrap_err(),
    );
    assert_eq!(two.code, ErrorCode::Conflict);
    assert!(
        two.message.contains(&format!("60 (account {linode})"))
            && two.message.contains(&format!("61 (account {hetzner})")),
        "{}",
        two.message
    );
    let none = refused(
        rpc::adopt_machine(world.state(), adopt(7, "50", Level::Admin))
            .await
            .unwrap_err(),
    );
    assert_eq!(none.code, ErrorCode::NotFound);
    let not_shown = refused(
        rpc::adopt_machine(world.state(), adopt(5, "99", Level::Admin))
            .await
            .unwrap_err(),
    );
    assert_eq!(not_shown.code, ErrorCode::Conflict);
    assert!(world
        .outbox("capstan.events.provisioning.machine_adopted")
        .await
        .is_empty());

    let adopted = rpc::adopt_machine(world.state(), adopt(5, "50", Level::Admin))
        .await
        .unwrap();
    assert_eq!(adopted.instance_id, "50");
    assert_eq!(adopted.account_id, linode);
    assert_eq!(adopted.ipv4.as_deref(), Some("203.0.113.5"));
    let events = world
        .outbox("capstan.events.provisioning.machine_adopted")
        .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["instance_id"], "50");
    assert_eq!(events[0].data["node_id"], 5);
    let again = refused(
        rpc::adopt_machine(world.state(), adopt(5, "50", Level::Admin))
            .await
            .unwrap_err(),
    );
    assert_eq!(again.code, ErrorCode::AlreadyExists);
}

#[tokio::test]
async fn pv_16_a_host_is_not_deleted_while_a_container_lives_on_it() {
    let world = world().await;
    world.node(30, "dock-host", &["203.0.113.40"], true).await;
    let body = HostBody {
        address: "203.0.113.40".into(),
        max_sites: 2,
        provisioning_enabled: true,
        flag: None,
    };
    let forbidden = refused(
        rpc::add_host(
            world.state(),
            AddHost {
                actor: actor(Level::Change),
                body: body.clone(),
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(forbidden.code, ErrorCode::Forbidden);
    let host = rpc::add_host(
        world.state(),
        AddHost {
            actor: actor(Level::Admin),
            body: body.clone(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        host.node_id,
        Some(NodeId(30)),
        "the paired host agent is linked"
    );
    let bad = refused(
        rpc::add_host(
            world.state(),
            AddHost {
                actor: actor(Level::Admin),
                body: HostBody {
                    address: "not an address".into(),
                    ..body.clone()
                },
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(bad.code, ErrorCode::InvalidRequest);
    assert!(bad.message.contains("address"), "{}", bad.message);

    // A container site on the host (the agent channel placed it on the host's node).
    world.node(31, "shop", &["203.0.113.40"], true).await;
    sqlx::query("UPDATE nodes SET container = 'shop', host_node_id = 30 WHERE node_id = 31")
        .execute(world.store.pool())
        .await
        .unwrap();
    let listed = rpc::list_hosts(
        world.state(),
        ListHosts {
            actor: actor(Level::Read),
        },
    )
    .await
    .unwrap();
    assert_eq!(listed.hosts.len(), 1);
    assert_eq!(listed.hosts[0].containers.len(), 1);
    assert_eq!(listed.hosts[0].containers[0].name, "shop");
    assert!(listed.hosts[0].has_room);

    let delete = |level| DeleteHost {
        actor: actor(level),
        host_id: host.id,
    };
    let busy = refused(
        rpc::delete_host(world.state(), delete(Level::Admin))
            .await
            .unwrap_err(),
    );
    assert_eq!(busy.code, ErrorCode::Conflict);
    assert!(
        busy.message.contains("1 container site"),
        "{}",
        busy.message
    );

    // The container gone, the host's own agent still live: still refused.
    sqlx::query("UPDATE nodes SET paired = false WHERE node_id = 31")
        .execute(world.store.pool())
        .await
        .unwrap();
    let own = refused(
        rpc::delete_host(world.state(), delete(Level::Admin))
            .await
            .unwrap_err(),
    );
    assert!(own.message.contains("own agent node"), "{}", own.message);

    sqlx::query("UPDATE nodes SET paired = false WHERE node_id = 30")
        .execute(world.store.pool())
        .await
        .unwrap();
    let gone = rpc::delete_host(world.state(), delete(Level::Admin))
        .await
        .unwrap();
    assert!(gone.deleted_at.is_some());
    let listed = rpc::list_hosts(
        world.state(),
        ListHosts {
            actor: actor(Level::Read),
        },
    )
    .await
    .unwrap();
    assert!(listed.hosts.is_empty());
}

#[tokio::test]
async fn the_transfer_watch_raises_machine_transfer_when_an_instance_leaves_its_account() {
    let world = world().await;
    world.account("linode", "Ours", "main").await;
    world.node(5, "web-5", &["203.0.113.5"], true).await;
    server(&world.linode, 50, [203, 0, 113, 5], 100, &[]);
    rpc::adopt_machine(
        world.state(),
        AdoptMachine {
            actor: actor(Level::Admin),
            node_id: NodeId(5),
            instance_id: "50".into(),
        },
    )
    .await
    .unwrap();

    let report = transfer::tick(&world.state(), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!((report.watched, report.transferred.len()), (1, 0));
    assert!(world.conditions("machine_transfer").await.is_empty());

    // The server leaves the account.
    world
        .linode
        .world()
        .servers
        .retain(|server| server.id != 50);
    let report = transfer::tick(&world.state(), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!(report.transferred, [NodeId(5)]);
    let published = world.conditions("machine_transfer").await;
    assert_eq!(published.len(), 1);
    assert!(published[0].happening);
    assert_eq!(published[0].node_id, NodeId(5));
    assert!(
        published[0].evidence.contains("instance 50"),
        "{}",
        published[0].evidence
    );

    // An account that cannot be listed judges nothing: the condition stands.
    world.linode.world().token = "rotated".into();
    transfer::tick(&world.state(), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!(world.conditions("machine_transfer").await.len(), 1);

    // Back where it was recorded: cleared.
    world.linode.world().token = TOKEN.into();
    server(&world.linode, 50, [203, 0, 113, 5], 100, &[]);
    transfer::tick(&world.state(), Utc::now(), true)
        .await
        .unwrap();
    let published = world.conditions("machine_transfer").await;
    assert_eq!(published.len(), 2);
    assert!(!published[1].happening);

    // Daily: not due again within the day.
    let report = transfer::tick(&world.state(), Utc::now(), false)
        .await
        .unwrap();
    assert!(!report.ran);
}

#[tokio::test]
async fn pv_53_pv_54_the_inventory_lists_nodes_and_main_account_servers_with_no_node_and_notes_confirm(
) {
    let world = world().await;
    world.account("linode", "Ours", "main").await;
    world.account("hetzner", "Test cloud", "test").await;
    world.node(5, "web-5", &["203.0.113.5"], true).await;
    world.node(8, "agentless", &["203.0.113.8"], false).await;
    sqlx::query("UPDATE nodes SET os = 'Ubuntu 20.04.6 LTS' WHERE node_id = 5")
        .execute(world.store.pool())
        .await
        .unwrap();
    server(&world.linode, 50, [203, 0, 113, 5], 100, &[]);
    server(&world.linode, 51, [203, 0, 113, 51], 100, &[]);
    server(&world.hetzner, 70, [203, 0, 113, 70], 100, &[]);

    let listed = rpc::list_machines(
        world.state(),
        ListMachines {
            actor: actor(Level::Read),
        },
    )
    .await
    .unwrap();
    let ids: Vec<&str> = listed.machines.iter().map(|m| m.id.as_str()).collect();
    let loose = format!("server-{}-51", 1);
    assert_eq!(ids, ["node-5", "node-8", loose.as_str()]);
    assert_eq!(
        listed.machines[0].colour,
        MachineColour::Red,
        "Ubuntu 20.04"
    );
    assert_eq!(
        listed.machines[1].colour,
        MachineColour::Amber,
        "agentless, nothing written"
    );
    assert_eq!(listed.machines[2].kind, MachineKind::NotManaged);
    assert_eq!(listed.machines[2].colour, MachineColour::Amber);

    let write = |id: &str, body: MachineNoteBody, level| WriteMachine {
        actor: actor(level),
        machine_id: id.into(),
        body,
    };
    let note = MachineNoteBody {
        purpose: "mail relay".into(),
        owner: "ops".into(),
        serves: "outbound mail".into(),
        ..MachineNoteBody::default()
    };
    let forbidden = refused(
        rpc::write_machine(world.state(), write(&loose, note.clone(), Level::Read))
            .await
            .unwrap_err(),
    );
    assert_eq!(forbidden.code, ErrorCode::Forbidden);
    let confirm = MachineNoteBody {
        confirm_only: true,
        ..MachineNoteBody::default()
    };
    let nothing = refused(
        rpc::write_machine(
            world.state(),
            write("node-8", confirm.clone(), Level::Change),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(nothing.code, ErrorCode::Conflict);
    let written = rpc::write_machine(world.state(), write(&loose, note, Level::Change))
        .await
        .unwrap();
    assert_eq!(written.colour, MachineColour::Plain);
    let first = written.note.unwrap().confirmed_at.unwrap();
    let confirmed = rpc::write_machine(world.state(), write(&loose, confirm, Level::Change))
        .await
        .unwrap();
    let note = confirmed.note.unwrap();
    assert_eq!(note.purpose, "mail relay");
    assert!(note.confirmed_at.unwrap() >= first);
    let unknown = refused(
        rpc::write_machine(
            world.state(),
            write("server-1-999", MachineNoteBody::default(), Level::Change),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(unknown.code, ErrorCode::NotFound);
    let in_test_account = refused(
        rpc::write_machine(
            world.state(),
            write("server-2-70", MachineNoteBody::default(), Level::Change),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(in_test_account.code, ErrorCode::NotFound);
    let bad = refused(
        rpc::write_machine(
            world.state(),
            write("box-1", MachineNoteBody::default(), Level::Change),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(bad.code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn pv_55_a_hetzner_test_account_has_no_company_name_so_nothing_is_deleted_and_it_is_refused()
{
    let world = world().await;
    world.account("hetzner", "Test cloud", "test").await;
    world.node(1, "plane", &["203.0.113.1"], true).await;
    server(&world.hetzner, 20, [203, 0, 113, 20], 480, &[]);
    let report = cleanup::tick(&world.state(), &cleanup_on(Some("plane")), Utc::now(), true)
        .await
        .unwrap();
    assert_eq!(ids(&world.hetzner), [20]);
    assert_eq!(report.refusals.len(), 1);
    assert!(
        report.refusals[0].contains("no account record"),
        "{:?}",
        report.refusals
    );
    let published = world.conditions("test_cloud_cleanup").await;
    assert_eq!(published.len(), 1);
    assert!(published[0].happening);
}

#[tokio::test]
async fn pv_14_a_host_agent_approved_or_reporting_at_the_address_links_its_record_once() {
    let world = world().await;
    let host = rpc::add_host(
        world.state(),
        AddHost {
            actor: actor(Level::Admin),
            body: HostBody {
                address: "203.0.113.40".into(),
                max_sites: 2,
                provisioning_enabled: true,
                flag: None,
            },
        },
    )
    .await
    .unwrap();
    assert_eq!(host.node_id, None, "no agent at the address yet");
    let linked = || async {
        sqlx::query_scalar::<_, Option<i64>>("SELECT node_id FROM hosts WHERE id = $1")
            .bind(host.id)
            .fetch_one(world.store.pool())
            .await
            .unwrap()
    };
    // A container site at the same address is not the host's own node.
    world.node(31, "shop", &["203.0.113.40"], true).await;
    sqlx::query("UPDATE nodes SET container = 'shop' WHERE node_id = 31")
        .execute(world.store.pool())
        .await
        .unwrap();
    let mut connection = world.store.pool().acquire().await.unwrap();
    capstan_provisioning::consumers::link_host(&mut connection, NodeId(31))
        .await
        .unwrap();
    assert_eq!(linked().await, None);
    world.node(30, "dock-host", &["203.0.113.40"], true).await;
    capstan_provisioning::consumers::link_host(&mut connection, NodeId(30))
        .await
        .unwrap();
    assert_eq!(linked().await, Some(30));
    // A live link is never re-pointed.
    world.node(32, "dock-host-2", &["203.0.113.40"], true).await;
    capstan_provisioning::consumers::link_host(&mut connection, NodeId(32))
        .await
        .unwrap();
    assert_eq!(linked().await, Some(30));
}
