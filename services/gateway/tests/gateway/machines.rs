//! The machines, adopt and hosts routes against a fake provisioning service (the real one is
//! tested in services/provisioning/tests/machines.rs): each route at its level (7 reads, 8
//! writes a machine down, 10 adopts and adds or deletes a host), the acts audited, the bodies
//! forwarded as the contract's and a bad one refused naming its field, a refusal's code mapped
//! (a host with containers is 409); and the two pages drawing what the service answers.

use std::sync::{Arc, Mutex};

use capstan_bus::{Bus, RpcServer};
use capstan_events::provisioning::machines::{
    self as machines, Adopted, HostContainer, HostView, Hosts, MachineColour, MachineKind,
    MachineNote, MachineView, Machines,
};
use capstan_events::provisioning::{AccountFlag, CloudProvider};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_events::{Domain, NodeId};
use chrono::Utc;
use serde_json::json;

use crate::harness::{error_of, fake, Gateway, Script};

fn machine(id: &str, colour: MachineColour) -> MachineView {
    MachineView {
        id: id.into(),
        kind: MachineKind::Managed,
        node_id: Some(NodeId(5)),
        name: "web-5".into(),
        addresses: vec!["203.0.113.5".into()],
        account_id: Some(1),
        provider: Some(CloudProvider::Linode),
        instance_id: Some("50".into()),
        region: Some("us-east".into()),
        os: Some("Ubuntu 20.04.6 LTS".into()),
        has_agent: true,
        install_state: None,
        note: Some(MachineNote {
            purpose: "shop".into(),
            owner: "ops".into(),
            serves: "the shop".into(),
            release: String::new(),
            retire_by: None,
            confirmed_at: Some(Utc::now()),
            confirmed_by: Some("ada".into()),
        }),
        colour,
    }
}

fn host(id: i64) -> HostView {
    HostView {
        id,
        address: "203.0.113.40".into(),
        flag: AccountFlag::Main,
        max_sites: 4,
        provisioning_enabled: true,
        node_id: Some(NodeId(30)),
        node_name: Some("dock-host".into()),
        node_live: true,
        containers: vec![HostContainer {
            node_id: NodeId(31),
            name: "shop".into(),
            live: true,
        }],
        has_room: true,
        created_at: Utc::now(),
        created_by: "ada".into(),
        deleted_at: None,
    }
}

/// The provisioning service's machines and hosts ops, as the harness's fakes answer them.
pub fn fake_machines(bus: Bus, script: &Arc<Mutex<Script>>) -> RpcServer {
    let server = RpcServer::new(bus, Domain::Provisioning);
    let server = fake(server, script, |_, _: machines::ListMachines| Machines {
        machines: vec![
            machine("node-5", MachineColour::Red),
            MachineView {
                id: "server-1-51".into(),
                kind: MachineKind::NotManaged,
                node_id: None,
                name: "loose-box".into(),
                note: None,
                colour: MachineColour::Amber,
                ..machine("server-1-51", MachineColour::Amber)
            },
        ],
        unreachable: vec!["account 2 (Other): the provider could not be reached".into()],
    });
    let server = fake(server, script, |_, request: machines::WriteMachine| {
        machine(&request.machine_id, MachineColour::Plain)
    });
    let server = fake(server, script, |_, request: machines::AdoptMachine| {
        Adopted {
            node_id: request.node_id,
            account_id: 1,
            provider: CloudProvider::Linode,
            instance_id: request.instance_id,
            ipv4: Some("203.0.113.5".into()),
            ipv6: None,
            region: "us-east".into(),
            adopted_by: request.actor.name,
            adopted_at: Utc::now(),
        }
    });
    let server = fake(server, script, |_, _: machines::ListHosts| Hosts {
        hosts: vec![host(3)],
    });
    let server = fake(server, script, |_, request: machines::AddHost| HostView {
        address: request.body.address,
        max_sites: request.body.max_sites,
        ..host(4)
    });
    fake(server, script, |_, request: machines::DeleteHost| {
        HostView {
            deleted_at: Some(Utc::now()),
            ..host(request.host_id)
        }
    })
}

fn asked(gateway: &Gateway, op: &str) -> Vec<serde_json::Value> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_routes_answer_at_their_levels_and_forward_the_contracts_bodies() {
    let gateway = Gateway::start().await;
    let read = gateway.token(Level::Read).await;
    let change = gateway.token(Level::Change).await;
    let admin = gateway.token(Level::Admin).await;

    let listed = gateway.get("/api/v1/machines", &read).send().await.unwrap();
    assert_eq!(listed.status(), 200);
    let listed: Machines = listed.json().await.unwrap();
    assert_eq!(listed.machines.len(), 2);

    // Writing a machine down: 8, not 7; the id goes to the service as written.
    let note =
        json!({"purpose": "mail relay", "serves": "outbound mail", "retire_by": "2027-06-30"});
    let refused = gateway
        .put("/api/v1/machines/server-1-51", &read, note.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let written = gateway
        .put("/api/v1/machines/server-1-51", &change, note)
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 200);
    let forwarded = asked(&gateway, "write_machine");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0]["machine_id"], "server-1-51");
    assert_eq!(forwarded[0]["body"]["retire_by"], "2027-06-30");
    assert_eq!(forwarded[0]["body"]["confirm_only"], false);
    let unknown_field = gateway
        .put(
            "/api/v1/machines/node-5",
            &change,
            json!({"purpose": "x", "colour": "plain"}),
        )
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(unknown_field).await;
    assert_eq!(status, 400);
    assert!(message.contains("colour"), "{message}");

    // Adopting: 10 only; 201 with what was adopted.
    for token in [&read, &change] {
        let status = gateway
            .post("/api/v1/nodes/5/adopt", token, json!({"instance_id": "50"}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 403);
    }
    let adopted = gateway
        .post(
            "/api/v1/nodes/5/adopt",
            &admin,
            json!({"instance_id": "50"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(adopted.status(), 201);
    let adopted: Adopted = adopted.json().await.unwrap();
    assert_eq!(
        (adopted.node_id, adopted.instance_id.as_str()),
        (NodeId(5), "50")
    );
    let missing = gateway
        .post("/api/v1/nodes/5/adopt", &admin, json!({}))
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(missing).await;
    assert_eq!(status, 400);
    assert!(message.contains("instance_id"), "{message}");

    // Hosts: read at 7, added and deleted at 10.
    assert_eq!(
        gateway
            .get("/api/v1/hosts", &read)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let body = json!({"address": "203.0.113.41", "max_sites": 3});
    assert_eq!(
        gateway
            .post("/api/v1/hosts", &change, body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let added = gateway
        .post("/api/v1/hosts", &admin, body)
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    let added: HostView = added.json().await.unwrap();
    assert_eq!(added.address, "203.0.113.41");
    let deleted = gateway
        .client
        .delete(format!("{}/api/v1/hosts/4", gateway.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);

    // Every act is audited with its action's name (the refusals too, as refused).
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE action IN ('write_machine', 'adopt_machine', \
         'add_host', 'delete_host') AND outcome = 'ok' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    assert_eq!(
        actions,
        ["write_machine", "adopt_machine", "add_host", "delete_host"]
    );
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'adopt_machine' AND outcome <> 'ok'",
    )
    .fetch_one(gateway.store.pool())
    .await
    .unwrap();
    assert_eq!(refused, 3, "two below level 10 and one bad body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_containers_is_409_naming_them_as_the_service_said() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    gateway.script.lock().unwrap().failure = Some(RpcError::new(
        ErrorCode::Conflict,
        "not deleted: host 3 still has 1 container site(s) placed on it",
    ));
    let refused = gateway
        .client
        .delete(format!("{}/api/v1/hosts/3", gateway.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(refused).await;
    assert_eq!((status, code.as_str()), (409, "conflict"));
    assert!(message.contains("1 container site"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machines_page_draws_colours_and_offers_confirm_from_level_8_and_hosts_their_containers(
) {
    let gateway = Gateway::start().await;
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/machines").await;
    assert_eq!(page.status, 200);
    assert!(page.has(r#"id="machine-node-5" data-colour="red" data-kind="managed""#));
    assert!(page.has(r#"id="machine-server-1-51" data-colour="amber" data-kind="not_managed""#));
    assert!(page.has("data-test=\"machines-unreachable\""));
    assert!(
        !page.has("data-test=\"confirm-machine\""),
        "no Confirm at 7"
    );

    let changer = gateway.signed_in(Level::Change).await;
    let page = changer.get("/ui/machines").await;
    assert!(page.has("data-test=\"confirm-machine\""));
    let confirmed = changer.submit("/ui/machines/node-5/confirm", &[]).await;
    assert_eq!(confirmed.status, 303);
    let forwarded = asked(&gateway, "write_machine");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0]["machine_id"], "node-5");
    assert_eq!(forwarded[0]["body"]["confirm_only"], true);

    assert!(page.has("data-test=\"write-machine\""));
    assert!(page.has(r#"name="purpose" maxlength="500" value="shop""#));
    let saved = changer
        .submit(
            "/ui/machines/server-1-51",
            &[
                ("purpose", " mail relay "),
                ("serves", "outbound mail"),
                ("retire_by", "2027-06-30"),
            ],
        )
        .await;
    assert_eq!(saved.status, 303);
    let forwarded = asked(&gateway, "write_machine");
    assert_eq!(forwarded.len(), 2);
    assert_eq!(forwarded[1]["machine_id"], "server-1-51");
    assert_eq!(forwarded[1]["body"]["purpose"], "mail relay");
    assert_eq!(forwarded[1]["body"]["retire_by"], "2027-06-30");
    assert_eq!(forwarded[1]["body"]["confirm_only"], false);
    let bad_date = changer
        .submit("/ui/machines/server-1-51", &[("retire_by", "next spring")])
        .await;
    assert_eq!(bad_date.status, 303);
    assert_eq!(
        asked(&gateway, "write_machine").len(),
        2,
        "a bad date asks nothing"
    );
    assert!(!reader
        .get("/ui/machines")
        .await
        .has("data-test=\"write-machine\""));

    let hosts = reader.get("/ui/hosts").await;
    assert_eq!(hosts.status, 200);
    assert!(hosts.has(r#"id="host-3""#));
    assert!(hosts.has(r#"data-test="host-containers" data-count="1""#));
    assert!(hosts.has("dock-host"));
}
