//! PV-01 and BK-06 through this service's consumer: a node provisioning says is installing is
//! left out of the schedule until its install is done.

use super::*;
use capstan_events::agent_channel::NodeReported;
use capstan_events::provisioning::InstallState;
use capstan_events::NodeId;
use capstan_runtime::testsuite::{
    hear, install_state as install, provisioned_node_approved as approved,
};

use crate::domain::policy::{default_fleet, effective, Stored};
use crate::domain::schedule::{excluded, NodeFacts, BACKUP_RUN};

/// Why the schedule leaves `node` out, as the schedule's task judges it from the projection.
async fn left_out(connection: &mut PgConnection, node: i64) -> Option<&'static str> {
    let row = crate::store::schedule::node(connection, NodeId(node))
        .await
        .unwrap()
        .expect("known");
    let mut fleet = default_fleet();
    fleet.enabled = true;
    let facts = NodeFacts {
        paired: row.paired,
        install_state: row.install_state,
        vocabulary: row.vocabulary,
    };
    excluded(&facts, &effective(&fleet, &Stored::Fleet))
}

#[tokio::test]
async fn bk_06_a_node_installing_by_provisionings_event_is_left_out_of_the_schedule() {
    let database = capstan_store::testsuite::TestDatabase::create().await;
    let store = capstan_store::Store::connect(database.url(), "backups", 2)
        .await
        .unwrap();
    store.migrate(&crate::MIGRATOR).await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    hear(
        &Events,
        &mut connection,
        install(7, Some(InstallState::Installing), 0),
    )
    .await;
    hear(&Events, &mut connection, approved(7)).await;
    let report = NodeReported {
        node_id: NodeId(7),
        agent_version: "1.0.0".into(),
        vocabulary: vec![BACKUP_RUN.into()],
        facts: serde_json::json!({}),
        site_root: None,
    };
    hear(&Events, &mut connection, report).await;
    assert_eq!(
        left_out(&mut connection, 7).await,
        Some("it is not operational")
    );
    hear(&Events, &mut connection, install(7, None, 1)).await;
    assert_eq!(left_out(&mut connection, 7).await, None);
    hear(
        &Events,
        &mut connection,
        install(7, Some(InstallState::Retired), 2),
    )
    .await;
    assert_eq!(
        left_out(&mut connection, 7).await,
        Some("it is not operational")
    );
}
