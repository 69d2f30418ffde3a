//! The node projection a service embeds (see `capstan_store::nodes` for its table and read
//! API): the agent channel's node events, and provisioning's install states (PV-01), read as
//! one [`NodeEvent`] and applied through the service's inbox. A service's consumer names it as
//! one variant of its own `Heard`:
//!
//! ```ignore
//! enum Heard { Node(NodeEvent), JobFinished(Envelope<JobFinished>) }
//! // in `read`:
//! NodeEvent::read(delivery, Heard::Node).or_else(|| read_as(delivery, Heard::JobFinished))
//! // in `apply`:
//! Heard::Node(event) => event.apply(connection).await.map_err(retry),
//! ```
//!
//! The install states come on provisioning's stream: the service's `Domain::reach` reads it
//! through its own durable consumer, filtered to `install_state_changed`, and the same `read`
//! takes them (its other variants never match there).

use capstan_bus::{Delivery, HandlerError};
use capstan_events::agent_channel::{
    NodeApproved, NodeDisconnected, NodeLeft, NodeReported, PlacementChanged,
};
use capstan_events::provisioning::InstallStateChanged;
use capstan_events::{Envelope, NodeId};
use capstan_store::{nodes, PgConnection, StoreError};

use crate::read_as;

/// One of the agent channel's events the node projection applies.
#[derive(Debug)]
pub enum NodeEvent {
    Approved(Envelope<NodeApproved>),
    Reported(Envelope<NodeReported>),
    Placed(Envelope<PlacementChanged>),
    Left(Envelope<NodeLeft>),
    Disconnected(Envelope<NodeDisconnected>),
    /// Provisioning's word on the node's install state (PV-01).
    InstallChanged(Envelope<InstallStateChanged>),
}

impl NodeEvent {
    /// `delivery` as a node event wrapped by `wrap` (the consumer's variant), `None` when it is
    /// none of them, or its rejection when its data does not read as its type.
    pub fn read<T>(
        delivery: &Delivery,
        wrap: impl Fn(NodeEvent) -> T,
    ) -> Option<Result<T, HandlerError>> {
        read_as(delivery, NodeEvent::Approved)
            .or_else(|| read_as(delivery, NodeEvent::Reported))
            .or_else(|| read_as(delivery, NodeEvent::Placed))
            .or_else(|| read_as(delivery, NodeEvent::Left))
            .or_else(|| read_as(delivery, NodeEvent::Disconnected))
            .or_else(|| read_as(delivery, NodeEvent::InstallChanged))
            .map(|read| read.map(wrap))
    }

    /// The node the event is about.
    pub fn node_id(&self) -> NodeId {
        match self {
            NodeEvent::Approved(event) => event.data.node_id,
            NodeEvent::Reported(event) => event.data.node_id,
            NodeEvent::Placed(event) => event.data.node_id,
            NodeEvent::Left(event) => event.data.node_id,
            NodeEvent::Disconnected(event) => event.data.node_id,
            NodeEvent::InstallChanged(event) => event.data.node_id,
        }
    }

    /// Writes the event into the service's `nodes` table, in the consumer's transaction.
    pub async fn apply(&self, connection: &mut PgConnection) -> Result<(), StoreError> {
        match self {
            NodeEvent::Approved(event) => {
                nodes::approved(connection, &event.data, event.time).await
            }
            NodeEvent::Reported(event) => {
                nodes::reported(connection, &event.data, event.time).await
            }
            NodeEvent::Placed(event) => nodes::placed(connection, &event.data, event.time).await,
            NodeEvent::Left(event) => nodes::unpaired(connection, event.data.node_id).await,
            NodeEvent::Disconnected(event) => nodes::unpaired(connection, event.data.node_id).await,
            NodeEvent::InstallChanged(event) => {
                nodes::install_state_changed(connection, &event.data).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::provisioning::InstallState;
    use capstan_events::{Message, Word as _};
    use capstan_store::testsuite::TestDatabase;
    use capstan_store::Store;
    use chrono::{Duration, Utc};
    use sqlx::Executor;

    fn delivery<M: Message>(event: Envelope<M>) -> Delivery {
        Delivery {
            envelope: event.into_raw(),
            subject: format!("capstan.events.{}.{}", M::DOMAIN.as_str(), M::NAME),
            delivered: 1,
        }
    }

    fn install(node: NodeId, state: Option<InstallState>, at: chrono::DateTime<Utc>) -> Delivery {
        delivery(Envelope::new(
            InstallStateChanged {
                node_id: node,
                state,
                previous: None,
                changed_at: at,
            },
            None,
        ))
    }

    async fn install_state(store: &Store, node: NodeId) -> Option<InstallState> {
        let mut connection = store.pool().acquire().await.unwrap();
        let node = nodes::node(&mut connection, node).await.unwrap().unwrap();
        assert_eq!(node.is_operational(), node.install_state.is_none());
        node.install_state
    }

    // PV-01: provisioning says `installing` before the node's agent exists (kept aside, no
    // row: the node is not listed until its approval), the approval takes it; the install's
    // end makes the node operational; an older change heard late changes nothing, however it
    // arrives (before or after the approval).
    #[tokio::test]
    async fn pv_01_an_install_state_is_kept_from_before_the_approval_and_only_newer_ones_win() {
        let (_database, store) = store().await;
        let now = Utc::now();
        let node = NodeId(11);
        heard(&store, install(node, Some(InstallState::Installing), now)).await;
        heard(&store, install(node, None, now - Duration::minutes(10))).await;
        let mut connection = store.pool().acquire().await.unwrap();
        assert_eq!(nodes::node(&mut connection, node).await.unwrap(), None);
        assert!(nodes::paired(&mut connection).await.unwrap().is_empty());

        heard(&store, delivery(Envelope::new(approved(node), None))).await;
        assert_eq!(
            install_state(&store, node).await,
            Some(InstallState::Installing),
            "the approval took the state heard before it"
        );
        assert!(!nodes::paired(&mut connection).await.unwrap()[0].is_operational());

        heard(
            &store,
            install(
                node,
                Some(InstallState::InstallFailed),
                now - Duration::minutes(1),
            ),
        )
        .await;
        assert_eq!(
            install_state(&store, node).await,
            Some(InstallState::Installing)
        );

        heard(&store, install(node, None, now + Duration::minutes(5))).await;
        assert_eq!(
            install_state(&store, node).await,
            None,
            "installed: operational"
        );

        // A re-approval keeps it; the early table was emptied by the first approval.
        heard(&store, delivery(Envelope::new(approved(node), None))).await;
        assert_eq!(install_state(&store, node).await, None);
        let early: i64 = sqlx::query_scalar("SELECT count(*) FROM early_install_states")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(early, 0);

        // A node approved first, then set installing (a re-install of a known node), and a
        // state word the contract does not know is refused on reading.
        heard(&store, delivery(Envelope::new(approved(NodeId(12)), None))).await;
        heard(
            &store,
            install(NodeId(12), Some(InstallState::Retired), now),
        )
        .await;
        assert_eq!(
            install_state(&store, NodeId(12)).await,
            Some(InstallState::Retired)
        );
        sqlx::query("UPDATE nodes SET install_state = 'melting' WHERE node_id = 12")
            .execute(store.pool())
            .await
            .unwrap();
        let error = nodes::node(&mut connection, NodeId(12)).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("\"melting\" is not an install state"),
            "{error}"
        );
    }

    fn approved(node: NodeId) -> NodeApproved {
        NodeApproved {
            request_id: uuid::Uuid::now_v7(),
            node_id: node,
            name: format!("site-{node}"),
            fingerprint: format!("SHA256:{node}"),
            addresses: vec!["203.0.113.7".into(), "2001:db8::7".into()],
            site_root: Some("/srv/site".into()),
            container: Some("site-7".into()),
            approved_by: "ops".into(),
        }
    }

    fn reported(node: NodeId, version: &str, site_root: Option<&str>) -> NodeReported {
        NodeReported {
            node_id: node,
            agent_version: version.into(),
            vocabulary: vec!["check_status".into(), "backup_run".into()],
            facts: serde_json::json!({}),
            site_root: site_root.map(str::to_string),
        }
    }

    async fn store() -> (TestDatabase, Store) {
        let database = TestDatabase::create().await;
        let store = Store::connect(database.url(), "kit", 2).await.unwrap();
        store.pool().execute(nodes::TABLE).await.unwrap();
        (database, store)
    }

    async fn heard(store: &Store, delivery: Delivery) {
        let event = NodeEvent::read(&delivery, |event| event)
            .expect("a node event")
            .expect("read");
        let mut connection = store.pool().acquire().await.unwrap();
        event.apply(&mut connection).await.unwrap();
    }

    // A node approved is paired and known by what its join said; its agent's report adds its
    // version and words and keeps the join's site root when it names none; a placement says
    // which host it sits on; leaving ends its pairing and keeps its row.
    #[tokio::test]
    async fn a_node_is_approved_reported_placed_and_leaves() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        assert_eq!(nodes::node(&mut connection, NodeId(7)).await.unwrap(), None);
        assert!(!nodes::is_paired(&mut connection, NodeId(7)).await.unwrap());

        heard(&store, delivery(Envelope::new(approved(NodeId(7)), None))).await;
        let node = nodes::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert!(node.paired);
        assert_eq!(node.name, "site-7");
        assert_eq!(node.fingerprint, "SHA256:7");
        assert_eq!(node.addresses, vec!["203.0.113.7", "2001:db8::7"]);
        assert_eq!(node.container.as_deref(), Some("site-7"));
        assert_eq!(node.reported_at, None, "not reported yet");

        heard(
            &store,
            delivery(Envelope::new(reported(NodeId(7), "1.4.0", None), None)),
        )
        .await;
        let node = nodes::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(node.agent_version.as_deref(), Some("1.4.0"));
        assert_eq!(node.vocabulary, vec!["check_status", "backup_run"]);
        assert_eq!(
            node.site_root.as_deref(),
            Some("/srv/site"),
            "the join's root kept"
        );
        assert!(node.reported_at.is_some());

        let placed = PlacementChanged {
            node_id: NodeId(7),
            host_node_id: Some(NodeId(3)),
        };
        heard(&store, delivery(Envelope::new(placed, None))).await;
        assert_eq!(
            nodes::placed_on(&mut connection, NodeId(3)).await.unwrap(),
            vec![NodeId(7)]
        );

        let left = NodeLeft {
            node_id: NodeId(7),
            fingerprint: "SHA256:7".into(),
            left_at: Utc::now(),
        };
        heard(&store, delivery(Envelope::new(left, None))).await;
        assert!(!nodes::is_paired(&mut connection, NodeId(7)).await.unwrap());
        assert!(nodes::paired(&mut connection).await.unwrap().is_empty());
        assert!(
            nodes::node(&mut connection, NodeId(7))
                .await
                .unwrap()
                .is_some(),
            "row kept"
        );

        heard(&store, delivery(Envelope::new(approved(NodeId(7)), None))).await;
        let again = nodes::paired(&mut connection).await.unwrap();
        assert_eq!(again.len(), 1, "paired again");
        assert_eq!(again[0].agent_version.as_deref(), Some("1.4.0"));
    }

    // A placement or a report heard late (a redelivery of an older event) never overwrites a
    // newer one; events about a node never approved here change nothing.
    #[tokio::test]
    async fn an_older_event_heard_late_changes_nothing() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        let now = Utc::now();
        let mut orphan = Envelope::new(reported(NodeId(9), "1.0.0", None), None);
        orphan.time = now;
        heard(&store, delivery(orphan)).await;
        assert_eq!(nodes::node(&mut connection, NodeId(9)).await.unwrap(), None);

        heard(&store, delivery(Envelope::new(approved(NodeId(7)), None))).await;
        let mut newer = Envelope::new(
            PlacementChanged {
                node_id: NodeId(7),
                host_node_id: None,
            },
            None,
        );
        newer.time = now;
        let mut older = Envelope::new(
            PlacementChanged {
                node_id: NodeId(7),
                host_node_id: Some(NodeId(3)),
            },
            None,
        );
        older.time = now - Duration::minutes(5);
        heard(&store, delivery(newer)).await;
        heard(&store, delivery(older)).await;
        let node = nodes::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(node.host_node_id, None, "the newer placement stands");

        let mut newer = Envelope::new(reported(NodeId(7), "2.0.0", Some("/srv/new")), None);
        newer.time = now;
        let mut older = Envelope::new(reported(NodeId(7), "1.0.0", None), None);
        older.time = now - Duration::minutes(5);
        heard(&store, delivery(newer)).await;
        heard(&store, delivery(older)).await;
        let node = nodes::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(node.agent_version.as_deref(), Some("2.0.0"));
        assert_eq!(node.site_root.as_deref(), Some("/srv/new"));
    }

    // Another type on the stream is not a node event; a node event whose data breaks its
    // schema is rejected (dead-lettered) rather than applied.
    #[test]
    fn other_events_are_passed_by_and_bad_data_is_rejected() {
        let queued = capstan_events::agent_channel::JobQueued {
            job_id: 1,
            node_id: NodeId(7),
            primitive: "check_status".into(),
            requested_by: "monitor".into(),
            correlation_id: None,
        };
        assert!(NodeEvent::read(&delivery(Envelope::new(queued, None)), |e| e).is_none());
        let mut broken = delivery(Envelope::new(approved(NodeId(7)), None));
        broken.envelope.data = serde_json::json!({"node_id": "seven"});
        assert!(matches!(
            NodeEvent::read(&broken, |e| e),
            Some(Err(HandlerError::Reject(_)))
        ));
    }
}
