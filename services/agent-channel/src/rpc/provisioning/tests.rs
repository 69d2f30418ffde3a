//! The provisioning service's three questions against a real database: who may ask, what
//! each refuses and why, and what each leaves behind (rows and outbox events).

use super::*;
use crate::domain::{LAST_SEEN_RESOLUTION, NONCE_WINDOW};
use crate::store::NewJoin;
use capstan_bus::IntoRpcError;
use capstan_events::agent_channel::rpc::{GetNode, ListNodes, NodeRef, Page};
use capstan_events::provisioning::{InstallState, InstallStateChanged};
use capstan_events::rpc::{Actor, Level};
use capstan_events::NodeId;
use capstan_runtime::{Apply, ServiceError};
use capstan_store::{testsuite::TestDatabase, Store};
use std::sync::Arc;
use uuid::Uuid;

async fn state() -> (TestDatabase, State) {
    let database = TestDatabase::create().await;
    let store = Store::connect(database.url(), "agent_channel", 4)
        .await
        .unwrap();
    store.migrate(&crate::MIGRATOR).await.unwrap();
    let wake = Arc::new(crate::wake::Wake::default());
    let state = State {
        store: store.clone(),
        wake: wake.clone(),
        limits: Arc::new(super::super::Limits::default()),
        keys: Arc::new(super::super::Keys::default()),
        arrivals: crate::arrivals::Arrivals::start(store, wake, NONCE_WINDOW, LAST_SEEN_RESOLUTION),
        stopping: tokio_util::sync::CancellationToken::new(),
        agent_slots: Arc::new(tokio::sync::Semaphore::new(2)),
        plain_slots: Arc::new(tokio::sync::Semaphore::new(1)),
        intake: Arc::new(tokio::sync::Semaphore::new(2)),
    };
    (database, state)
}

fn provisioning() -> Actor {
    Actor::service(Domain::Provisioning)
}

fn operator() -> Actor {
    Actor {
        name: "ada".into(),
        level: Level::Admin,
        address: None,
    }
}

/// The refusal's code and words.
fn refused(error: ServiceError) -> (ErrorCode, String) {
    let error = error.into_rpc_error(Domain::AgentChannel);
    (error.code, error.message)
}

fn register(reference: &str, name: &str) -> RegisterNode {
    RegisterNode {
        actor: provisioning(),
        reference: reference.into(),
        name: name.into(),
        addresses: vec!["203.0.113.7".into(), "2001:db8::7".into()],
    }
}

/// A pending join asking with a fresh key from `address`: its id and fingerprint.
async fn join(state: &State, name: &str, address: &str) -> (Uuid, String) {
    let key = capstan_signing::NodeKey::generate().public_key();
    let fingerprint = key.fingerprint().as_str().to_string();
    let id = Uuid::now_v7();
    let mut connection = state.connection().await.unwrap();
    store::insert_join(
        &mut connection,
        &NewJoin {
            id,
            public_key: &key.to_base64(),
            fingerprint: &fingerprint,
            name,
            source_address: address,
            source_network: address,
            addresses: &[address.to_string()],
            agent_version: "1.0.0",
            site_root: None,
            container: None,
            expires_at: Utc::now() + chrono::Duration::hours(1),
        },
    )
    .await
    .unwrap();
    (id, fingerprint)
}

/// The outbox's events of `name` (`node_approved`), their data, oldest first.
async fn outbox(state: &State, name: &str) -> Vec<serde_json::Value> {
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM outbox WHERE subject = $1 ORDER BY id")
            .bind(format!("capstan.events.agent_channel.{name}"))
            .fetch_all(state.store.pool())
            .await
            .unwrap();
    payloads
        .iter()
        .map(|payload| serde_json::from_str::<serde_json::Value>(payload).unwrap()["data"].clone())
        .collect()
}

async fn view(state: &State, node_id: NodeId) -> capstan_events::agent_channel::rpc::NodeView {
    crate::rpc::operator::get_node(
        state.clone(),
        GetNode(NodeRef {
            actor: operator(),
            node_id,
        }),
    )
    .await
    .unwrap()
}

// Issue 29: provisioning makes a node before its agent exists; it is listed like any node,
// unpaired; the same reference answers the same node; a name another live node holds is
// refused naming it; nobody but provisioning may ask.
#[tokio::test]
async fn a_registered_node_is_made_once_per_reference_and_listed_without_agent() {
    let (_database, state) = state().await;
    let made = register_node(state.clone(), register("provision:42", "shop-1"))
        .await
        .unwrap();
    assert!(made.created);
    let again = register_node(state.clone(), register("provision:42", "shop-1"))
        .await
        .unwrap();
    assert_eq!(again.node_id, made.node_id);
    assert!(!again.created);

    let node = view(&state, made.node_id).await;
    assert_eq!(node.name, "shop-1");
    assert_eq!(node.fingerprint, None);
    assert_eq!(node.addresses, vec!["203.0.113.7", "2001:db8::7"]);
    assert!(!node.online);
    assert_eq!(node.install_state, None);
    let unpaired = crate::rpc::operator::list_nodes(
        state.clone(),
        ListNodes {
            actor: operator(),
            search: None,
            health: None,
            online: None,
            placement: None,
            paired: Some(false),
            ids: None,
            page: Page::default(),
        },
    )
    .await
    .unwrap();
    assert_eq!(unpaired.nodes.len(), 1);
    assert_eq!(unpaired.nodes[0].id, made.node_id);

    let (code, message) = refused(
        register_node(state.clone(), register("provision:43", "shop-1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Conflict);
    assert_eq!(
        message,
        format!("the name shop-1 is held by node {}", made.node_id)
    );

    let (code, message) = refused(
        register_node(state.clone(), register("provision:44", "Shop 2"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::InvalidRequest);
    assert!(message.contains("not a node name"), "{message}");

    for actor in [operator(), Actor::service(Domain::Backups)] {
        let mut asked = register("provision:45", "shop-3");
        asked.actor = actor.clone();
        let (code, message) = refused(register_node(state.clone(), asked).await.unwrap_err());
        assert_eq!(code, ErrorCode::Forbidden, "{}", actor.name);
        assert!(
            message.contains("only by the provisioning service"),
            "{message}"
        );
    }
    let nodes: i64 = sqlx::query_scalar("SELECT count(*) FROM nodes")
        .fetch_one(state.store.pool())
        .await
        .unwrap();
    assert_eq!(nodes, 1, "nothing made by a refused registration");
}

// AC-08, AC-10: the join binds to the provision's node only with the key the install
// recorded and while the node has no agent; node_approved names the provision.
#[tokio::test]
async fn ac_08_a_provisioned_join_binds_to_its_node_only_with_the_expected_key() {
    let (_database, state) = state().await;
    let node = register_node(state.clone(), register("provision:42", "shop-1"))
        .await
        .unwrap()
        .node_id;
    let (join_id, fingerprint) = join(&state, "shop-1", "203.0.113.7").await;
    let approve = |fingerprint: &str, actor: Actor| ApproveProvisionedJoin {
        actor,
        join_id,
        node_id: node,
        fingerprint: fingerprint.into(),
        provision_id: 42,
    };

    let (code, message) = refused(
        approve_provisioned_join(state.clone(), approve("SHA256:other", provisioning()))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Refused);
    assert_eq!(
        message,
        format!(
            "join request {join_id} asks with the key {fingerprint}, not the expected SHA256:other"
        )
    );
    let (code, _) = refused(
        approve_provisioned_join(state.clone(), approve(&fingerprint, operator()))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Forbidden);
    assert!(outbox(&state, "node_approved").await.is_empty());

    let approved = approve_provisioned_join(state.clone(), approve(&fingerprint, provisioning()))
        .await
        .unwrap();
    assert_eq!(approved.node_id, node);
    let bound = view(&state, node).await;
    assert_eq!(bound.fingerprint.as_deref(), Some(fingerprint.as_str()));
    assert_eq!(bound.name, "shop-1");
    let (state_word, decided_by): (String, String) =
        sqlx::query_as("SELECT state, decided_by FROM joins WHERE id = $1")
            .bind(join_id)
            .fetch_one(state.store.pool())
            .await
            .unwrap();
    assert_eq!(state_word, "approved");
    assert_eq!(decided_by, "provisioning (provision 42)");
    let events = outbox(&state, "node_approved").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["node_id"], serde_json::json!(node.0));
    assert_eq!(events[0]["approved_by"], "provisioning (provision 42)");
    assert_eq!(events[0]["fingerprint"], fingerprint.as_str());

    // The same join again: no longer pending. A second join for the node: it has an agent.
    let (code, message) = refused(
        approve_provisioned_join(state.clone(), approve(&fingerprint, provisioning()))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Conflict);
    assert_eq!(message, format!("join request {join_id} is not pending"));
    let (second, second_key) = join(&state, "shop-1", "203.0.113.7").await;
    let (code, message) = refused(
        approve_provisioned_join(
            state.clone(),
            ApproveProvisionedJoin {
                join_id: second,
                ..approve(&second_key, provisioning())
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Conflict);
    assert_eq!(message, format!("node {node} already has an agent paired"));
    assert_eq!(outbox(&state, "node_approved").await.len(), 1);
}

// AC-11: a second join from the address after the node's agent was admitted is rejected,
// provisioning named with its reason; a join already decided is not rejected again.
#[tokio::test]
async fn ac_11_provisioning_refuses_a_second_join_with_its_reason() {
    let (_database, state) = state().await;
    let (join_id, fingerprint) = join(&state, "shop-1", "203.0.113.7").await;
    let refuse = |actor: Actor, reason: &str| RefuseJoin {
        actor,
        join_id,
        reason: reason.into(),
    };
    let (code, _) = refused(
        refuse_join(state.clone(), refuse(operator(), "no"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Forbidden);
    let (code, _) = refused(
        refuse_join(state.clone(), refuse(provisioning(), "   "))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::InvalidRequest);

    let reason = "a second join from 203.0.113.7 after node 1's agent was admitted";
    refuse_join(state.clone(), refuse(provisioning(), reason))
        .await
        .unwrap();
    let (state_word, decided_by): (String, String) =
        sqlx::query_as("SELECT state, decided_by FROM joins WHERE id = $1")
            .bind(join_id)
            .fetch_one(state.store.pool())
            .await
            .unwrap();
    assert_eq!(state_word, "rejected");
    assert_eq!(decided_by, format!("provisioning: {reason}"));
    let events = outbox(&state, "join_rejected").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["rejected_by"], format!("provisioning: {reason}"));
    assert_eq!(events[0]["fingerprint"], fingerprint.as_str());

    let (code, _) = refused(
        refuse_join(state.clone(), refuse(provisioning(), reason))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Conflict);
    assert_eq!(outbox(&state, "join_rejected").await.len(), 1);
}

// PV-01: provisioning's install state reaches the node's view; an older change heard late
// changes nothing; a node unknown here is passed by.
#[tokio::test]
async fn pv_01_the_node_view_shows_provisionings_install_state() {
    let (_database, state) = state().await;
    let node = register_node(state.clone(), register("provision:42", "shop-1"))
        .await
        .unwrap()
        .node_id;
    let now = Utc::now();
    let heard = |node_id: NodeId, install: Option<InstallState>, at: chrono::DateTime<Utc>| {
        let envelope = capstan_events::Envelope::new(
            InstallStateChanged {
                node_id,
                state: install,
                previous: None,
                changed_at: at,
            },
            None,
        );
        capstan_bus::Delivery {
            envelope: envelope.into_raw(),
            subject: "capstan.events.provisioning.install_state_changed".into(),
            delivered: 1,
        }
    };
    let apply = |delivery: capstan_bus::Delivery| {
        let state = state.clone();
        async move {
            let consumer = crate::consumers::OtherEvents;
            let message = consumer.read(&delivery).expect("read").expect("decoded");
            let mut connection = state.connection().await.unwrap();
            consumer
                .apply(&mut connection, message, &delivery)
                .await
                .unwrap();
        }
    };
    apply(heard(node, Some(InstallState::Installing), now)).await;
    assert_eq!(
        view(&state, node).await.install_state,
        Some(InstallState::Installing)
    );
    apply(heard(
        node,
        Some(InstallState::InstallFailed),
        now - chrono::Duration::minutes(1),
    ))
    .await;
    assert_eq!(
        view(&state, node).await.install_state,
        Some(InstallState::Installing),
        "the older change is ignored"
    );
    apply(heard(node, None, now + chrono::Duration::minutes(1))).await;
    assert_eq!(view(&state, node).await.install_state, None);
    apply(heard(NodeId(9_999), Some(InstallState::Installing), now)).await;
    let nodes: i64 = sqlx::query_scalar("SELECT count(*) FROM nodes")
        .fetch_one(state.store.pool())
        .await
        .unwrap();
    assert_eq!(nodes, 1);
}
