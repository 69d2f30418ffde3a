//! PV-01 and IN-13 through this service's consumer: a node provisioning says is installing
//! opens nothing, whatever its sources see, until its install is done.

use super::*;
use capstan_events::provisioning::InstallState;
use capstan_events::NodeId;
use capstan_runtime::testsuite::{
    hear, install_state as install, provisioned_node_approved as approved,
};

use crate::domain::sources::{AgentSilent, Registry};

#[tokio::test]
async fn in_13_a_node_installing_by_provisionings_event_opens_nothing() {
    let database = capstan_store::testsuite::TestDatabase::create().await;
    let store = capstan_store::Store::connect(database.url(), "incidents", 2)
        .await
        .unwrap();
    store.migrate(&crate::MIGRATOR).await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    let events = Events {
        mail_enabled: false,
    };
    hear(
        &events,
        &mut connection,
        install(7, Some(InstallState::Installing), 0),
    )
    .await;
    hear(&events, &mut connection, approved(7)).await;
    let mut registry = Registry::default();
    registry
        .register(Box::new(AgentSilent::new(60).unwrap()))
        .unwrap();
    // Long silent: the agent channel's check-ins run two hours past the pairing and name no
    // check-in of this node, so agent_silent would hold on an operational node.
    let silent = Utc::now() + chrono::Duration::hours(2);
    let seen = NodesSeen {
        as_of: silent,
        seen: vec![],
    };
    hear(&events, &mut connection, seen).await;
    let conditions =
        |node: &crate::domain::sources::NodeFacts| registry.conditions(node, &[], silent).len();
    let node = store::node(&mut connection, NodeId(7))
        .await
        .unwrap()
        .expect("known");
    assert!(!node.install_state.is_operational());
    assert_eq!(conditions(&node), 0);

    hear(&events, &mut connection, install(7, None, 1)).await;
    let node = store::node(&mut connection, NodeId(7))
        .await
        .unwrap()
        .expect("known");
    assert!(node.install_state.is_operational());
    assert_eq!(conditions(&node), 1, "agent_silent holds once operational");
}
