//! PV-01 through this service's consumer: a node provisioning says is installing gets no
//! uptime check until its install is done.

use super::*;
use capstan_events::provisioning::InstallState;
use capstan_events::NodeId;
use capstan_runtime::testsuite::{
    hear, install_state as install, provisioned_node_approved as approved,
};
use chrono::Utc;

/// The nodes whose checks are due within the hour, by id.
async fn due(connection: &mut PgConnection) -> Vec<NodeId> {
    let due = store::due_checks(connection, Utc::now() + chrono::Duration::hours(1), 10)
        .await
        .unwrap();
    let mut nodes: Vec<NodeId> = due.iter().map(|due| due.node_id).collect();
    nodes.sort();
    nodes
}

// The installing state comes first (provisioning says it before the node's agent joins), the
// approval after; the check stays off the due list until the install is done.
#[tokio::test]
async fn pv_01_a_node_installing_by_provisionings_event_is_not_checked() {
    let database = capstan_store::testsuite::TestDatabase::create().await;
    let store = capstan_store::Store::connect(database.url(), "monitor", 2)
        .await
        .unwrap();
    store.migrate(&crate::MIGRATOR).await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    hear(
        &NodeEvents,
        &mut connection,
        install(7, Some(InstallState::Installing), 0),
    )
    .await;
    for node in [7, 8] {
        hear(&NodeEvents, &mut connection, approved(node)).await;
    }
    sqlx::query("UPDATE checks SET url = 'https://example.test/', next_check_at = now()")
        .execute(&mut *connection)
        .await
        .unwrap();
    assert_eq!(due(&mut connection).await, vec![NodeId(8)]);
    hear(&NodeEvents, &mut connection, install(7, None, 1)).await;
    assert_eq!(due(&mut connection).await, vec![NodeId(7), NodeId(8)]);
}
