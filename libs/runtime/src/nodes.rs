//! The node projection a service embeds (see `capstan_store::nodes` for its table and read
//! API): the agent channel's node events read as one [`NodeEvent`] and applied through the
//! service's inbox. A service's consumer names it as one variant of its own `Heard`:
//!
//! ```ignore
//! enum Heard { Node(NodeEvent), JobFinished(Envelope<JobFinished>) }
//! // in `read`:
//! NodeEvent::read(delivery, Heard::Node).or_else(|| read_as(delivery, Heard::JobFinished))
//! // in `apply`:
//! Heard::Node(event) => event.apply(connection).await.map_err(retry),
//! ```

use capstan_bus::{Delivery, HandlerError};
use capstan_events::agent_channel::{
    NodeApproved, NodeDisconnected, NodeLeft, NodeReported, PlacementChanged,
};
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::Message;
    use capstan_store::testsuite::TestDatabase;
    use capstan_store::Store;
    use chrono::{Duration, Utc};
    use sqlx::Executor;

    fn delivery<M: Message>(event: Envelope<M>) -> Delivery {
        Delivery {
            envelope: event.into_raw(),
            subject: format!("capstan.events.agent_channel.{}", M::event_type()),
            delivered: 1,
        }
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
