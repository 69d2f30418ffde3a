//! What this service hears from others, each message applied once through the inbox: the agent
//! channel's node events (pairing, reports with their cases, check-ins, placement), the
//! gateway's operator changes, and every service's conditions (`capstan_events::conditions`:
//! the monitor's `site_down`, backups' `backup_failed`...). Node facts, operators and
//! conditions are projections; a claim's `cases` go through the intake (AC-47) and become
//! incidents (IN-11) in the same transaction.

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{NodeReported, NodesSeen};
use capstan_events::conditions::ConditionChanged;
use capstan_events::gateway::OperatorChanged;
use capstan_events::{Domain, Envelope};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;
use tracing::info;

use crate::domain::cases::incidents::case_effects;
use crate::domain::cases::{intake, parse_cases, CaseOutcome};
use crate::domain::grouping::host_critical_kinds;
use crate::domain::reconcile::NodeContext;
use crate::domain::sources::NodeFacts;
use crate::store::{self, conditions, projections, Audience};

/// The durable consumers of this service: one per stream it reads (the conditions stream
/// included).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Incidents, max_deliver, ack_wait)
}

/// The lock every writer of incidents takes shared and the reconciler's pass exclusive, so a
/// pass never writes from a picture another writer changed under it.
pub const WRITES_LOCK: &str = "capstan-incidents-writes";

/// Takes [`WRITES_LOCK`] shared for the rest of the transaction.
pub async fn share_writes(connection: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared(hashtext($1))")
        .bind(WRITES_LOCK)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// The events this service applies; `mail_enabled` is false when no SMTP server is set, so
/// no signal makes a mail delivery that could never be sent.
pub(crate) struct Events {
    pub mail_enabled: bool,
}

/// The events this service reads (jobs and joins are not this service's).
pub(crate) enum Heard {
    /// The kit's node projection (approved, reported, placed, left, disconnected), to which
    /// this service adds its own facts.
    Node(NodeEvent),
    NodesSeen(Envelope<NodesSeen>),
    OperatorChanged(Envelope<OperatorChanged>),
    /// Any service's condition (`capstan.conditions.<domain>.<name>`).
    Condition(ConditionChanged),
}

impl Apply for Events {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        NodeEvent::read(delivery, Heard::Node)
            .or_else(|| read_as(delivery, Heard::NodesSeen))
            .or_else(|| read_as(delivery, Heard::OperatorChanged))
            .or_else(|| read_condition(delivery))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        heard: Heard,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match heard {
                Heard::Node(event) => {
                    event.apply(connection).await.map_err(retry)?;
                    node_event(connection, &event, self.mail_enabled).await
                }
                Heard::NodesSeen(seen) => {
                    projections::checkins(connection, seen.data.as_of, &seen.data.seen)
                        .await
                        .map_err(retry)
                }
                Heard::OperatorChanged(changed) => projections::operator(connection, &changed.data)
                    .await
                    .map_err(retry),
                Heard::Condition(condition) => conditions::record(connection, &condition)
                    .await
                    .map_err(retry),
            }
        })
    }
}

/// What this service adds to the kit's node projection for `event` (already applied).
async fn node_event(
    connection: &mut PgConnection,
    event: &NodeEvent,
    mail_enabled: bool,
) -> Result<(), HandlerError> {
    match event {
        NodeEvent::Approved(approved) => {
            projections::node_paired(connection, approved.data.node_id, approved.time)
                .await
                .map_err(retry)
        }
        NodeEvent::Left(left) => projections::node_unpaired(connection, left.data.node_id)
            .await
            .map_err(retry),
        NodeEvent::Disconnected(disconnected) => {
            projections::node_unpaired(connection, disconnected.data.node_id)
                .await
                .map_err(retry)
        }
        NodeEvent::Reported(reported) => {
            node_reported(connection, &reported.data, reported.time, mail_enabled).await
        }
        NodeEvent::Placed(placed) => projections::placed_unknown(
            connection,
            placed.data.node_id,
            placed.data.host_node_id,
            placed.time,
        )
        .await
        .map_err(retry),
        // The kit kept the install state in `nodes.install_state`, which the sources read
        // (IN-13: a non-operational node opens nothing).
        NodeEvent::InstallChanged(_) => Ok(()),
    }
}

/// The recipe names of a claim's `recipes` field: `[{"name": ..., ...}]`.
fn recipe_names(recipes: &Value) -> Option<Vec<String>> {
    let list = recipes.as_array()?;
    Some(
        list.iter()
            .filter_map(|recipe| recipe.get("name")?.as_str().map(str::to_string))
            .collect(),
    )
}

/// A condition off the conditions stream, refused (dead-lettered) when its data breaks its
/// shape or it came on a subject other than its own: the subject is what the bus lets only the
/// judging domain publish, so it proves who judged.
fn read_condition(delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
    let condition = match ConditionChanged::read(&delivery.envelope)? {
        Ok(condition) => condition,
        Err(error) => return Some(Err(HandlerError::Reject(error.to_string()))),
    };
    if let Err(invalid) = condition.check() {
        return Some(Err(HandlerError::Reject(format!(
            "condition {}: {invalid}",
            condition.subject()
        ))));
    }
    if delivery.subject != condition.subject() {
        return Some(Err(HandlerError::Reject(format!(
            "a condition of {} came on {}, not its own subject",
            condition.domain, delivery.subject
        ))));
    }
    Some(Ok(Heard::Condition(condition)))
}

/// A claim changed what the plane knows of a node: its recipes and container, and its cases.
async fn node_reported(
    connection: &mut PgConnection,
    reported: &NodeReported,
    at: DateTime<Utc>,
    mail_enabled: bool,
) -> Result<(), HandlerError> {
    let node_id = reported.node_id;
    let recipes = reported.facts.get("recipes").and_then(recipe_names);
    let container = reported.facts.get("container").map(|value| value.as_str());
    projections::node_reported(connection, node_id, recipes.as_deref(), container)
        .await
        .map_err(retry)?;
    let Some(cases) = reported.facts.get("cases") else {
        return Ok(());
    };
    share_writes(connection).await.map_err(retry)?;
    let node = store::node(connection, node_id)
        .await
        .map_err(retry)?
        .ok_or_else(|| HandlerError::Retry(format!("node {node_id} is not projected yet")))?;
    let reports = match parse_cases(cases) {
        Ok(reports) => reports,
        Err(refusal) => {
            let outcome = CaseOutcome::Refused {
                source: "cases".to_string(),
                id: None,
                reason: refusal,
            };
            return projections::case_outcomes(connection, node_id, &[outcome], at)
                .await
                .map_err(retry);
        }
    };
    let stored = store::cases(connection, node_id).await.map_err(retry)?;
    let outcomes = intake(&node.recipes, &stored, reports, at);
    projections::case_outcomes(connection, node_id, &outcomes, at)
        .await
        .map_err(retry)?;
    for outcome in &outcomes {
        if let CaseOutcome::Refused { source, id, reason } = outcome {
            info!(node_id = node_id.get(), source = %source, case = ?id, %reason, "case refused");
        }
    }
    // IN-13: a node that is not operational opens nothing; its cases are kept.
    if !node.install_state.is_operational() {
        return Ok(());
    }
    cases_to_incidents(connection, &node, &outcomes, at, mail_enabled)
        .await
        .map_err(retry)
}

/// What the intake's `outcomes` do to the node's incidents (IN-11), written with their signals.
async fn cases_to_incidents(
    connection: &mut PgConnection,
    node: &NodeFacts,
    outcomes: &[CaseOutcome],
    at: DateTime<Utc>,
    mail_enabled: bool,
) -> Result<(), StoreError> {
    let held = store::held(connection, Some(node.node_id)).await?;
    let silences = store::active_silences(connection, at).await?;
    let host_critical = match node.docker_host {
        Some(host) => {
            let host_held = store::held(connection, Some(host)).await?;
            host_critical_kinds(&host_held, &[])
        }
        None => Vec::new(),
    };
    let context = NodeContext {
        node,
        silences: &silences,
        host_critical: &host_critical,
    };
    let effects = case_effects(&context, outcomes, &held, at);
    if effects.is_empty() {
        return Ok(());
    }
    let recipients = store::recipients(connection, mail_enabled).await?;
    let webhooks = store::webhook_targets(connection).await?;
    let audience = Audience {
        recipients: &recipients,
        webhooks: &webhooks,
    };
    store::apply(connection, &effects, audience, at).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::backups::BACKUP_FAILED;
    use capstan_events::monitor::SITE_DOWN;
    use capstan_events::NodeId;

    fn delivery(condition: &ConditionChanged, subject: &str) -> Delivery {
        Delivery {
            envelope: condition.clone().envelope(),
            subject: subject.to_string(),
            delivered: 1,
        }
    }

    #[test]
    fn a_condition_on_its_own_subject_is_heard() {
        let down = SITE_DOWN.happening(NodeId(3), "HTTP 500", Utc::now(), Utc::now());
        match read_condition(&delivery(&down, &down.subject())) {
            Some(Ok(Heard::Condition(heard))) => assert_eq!(heard, down),
            _ => panic!("a well-formed condition on its own subject is heard"),
        }
    }

    #[test]
    fn a_condition_on_another_domains_subject_or_out_of_shape_is_refused_and_other_events_are_not_conditions(
    ) {
        // the backups user may publish only capstan.conditions.backups.>: a condition claiming
        // to be the monitor's that came on it is not the monitor's
        let forged = SITE_DOWN.happening(NodeId(3), "HTTP 500", Utc::now(), Utc::now());
        let subject = BACKUP_FAILED.subject();
        assert!(matches!(
            read_condition(&delivery(&forged, &subject)),
            Some(Err(HandlerError::Reject(reason))) if reason.contains("not its own subject")
        ));
        let bad = ConditionChanged {
            title: String::new(),
            ..forged.clone()
        };
        assert!(matches!(
            read_condition(&delivery(&bad, &bad.subject())),
            Some(Err(HandlerError::Reject(reason))) if reason.contains("title")
        ));
        let mut other = delivery(&forged, &forged.subject());
        other.envelope.event_type = "capstan.monitor.site_down".into();
        assert!(read_condition(&other).is_none());
    }

    /// The agent channel's `event` as the consumer hears it, applied in one transaction.
    async fn hear<M: capstan_events::Message>(store: &capstan_store::Store, event: Envelope<M>) {
        let delivery = Delivery {
            envelope: event.into_raw(),
            subject: format!("capstan.events.agent_channel.{}", M::event_type()),
            delivered: 1,
        };
        let events = Events {
            mail_enabled: false,
        };
        let heard = events.read(&delivery).expect("heard").expect("read");
        let mut transaction = store.begin().await.unwrap();
        events
            .apply(&mut transaction, heard, &delivery)
            .await
            .unwrap();
        transaction.commit().await.unwrap();
    }

    fn approved(node: i64) -> capstan_events::agent_channel::NodeApproved {
        capstan_events::agent_channel::NodeApproved {
            request_id: uuid::Uuid::now_v7(),
            node_id: NodeId(node),
            name: format!("web-{node}"),
            fingerprint: format!("SHA256:{node}"),
            addresses: vec!["203.0.113.7".into()],
            site_root: None,
            container: Some(format!("site-{node}")),
            approved_by: "ops".into(),
        }
    }

    // Incidents on the kit's node projection: an approval pairs the node in the kit's words and
    // starts its pairing time here; a report of a node never heard approved, and a placement
    // heard first, still make its row (recipes, Docker host), as before the kit; leaving ends
    // the pairing (agent_silent has nothing to count from) and keeps the row and its name.
    #[tokio::test]
    async fn node_events_write_the_kits_projection_and_what_incidents_adds() {
        use capstan_events::agent_channel::{NodeLeft, PlacementChanged};
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = capstan_store::Store::connect(database.url(), "incidents", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();

        let mut approval = Envelope::new(approved(7), None);
        // A time the database keeps exactly (it keeps microseconds).
        let paired_at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 7, 12, 0, 0).unwrap();
        approval.time = paired_at;
        hear(&store, approval).await;
        let mut connection = store.acquire().await.unwrap();
        let kit = capstan_store::nodes::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .expect("the kit's row");
        assert!(kit.paired);
        assert_eq!(kit.name, "web-7");
        assert_eq!(kit.fingerprint, "SHA256:7");
        let facts = store::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(facts.paired_at, Some(paired_at));
        assert_eq!(
            store::node_names(&mut connection).await.unwrap()[&NodeId(7)],
            "web-7"
        );

        let report = NodeReported {
            node_id: NodeId(9),
            agent_version: "1.4.0".into(),
            vocabulary: vec!["check_status".into()],
            facts: serde_json::json!({"recipes": [{"name": "fail2ban"}]}),
            site_root: None,
        };
        hear(&store, Envelope::new(report, None)).await;
        let facts = store::node(&mut connection, NodeId(9))
            .await
            .unwrap()
            .expect("a report makes the row");
        assert_eq!(facts.recipes, vec!["fail2ban"]);
        assert_eq!(facts.paired_at, None);

        let placed = PlacementChanged {
            node_id: NodeId(11),
            host_node_id: Some(NodeId(7)),
        };
        hear(&store, Envelope::new(placed, None)).await;
        let facts = store::node(&mut connection, NodeId(11))
            .await
            .unwrap()
            .expect("a placement makes the row");
        assert_eq!(facts.docker_host, Some(NodeId(7)));
        assert_eq!(
            capstan_store::nodes::placed_on(&mut connection, NodeId(7))
                .await
                .unwrap(),
            vec![NodeId(11)]
        );

        let left = NodeLeft {
            node_id: NodeId(7),
            fingerprint: "SHA256:7".into(),
            left_at: Utc::now(),
        };
        hear(&store, Envelope::new(left, None)).await;
        assert!(!capstan_store::nodes::is_paired(&mut connection, NodeId(7))
            .await
            .unwrap());
        let facts = store::node(&mut connection, NodeId(7))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(facts.paired_at, None, "no agent to be silent");
        assert_eq!(
            store::node_names(&mut connection).await.unwrap()[&NodeId(7)],
            "web-7"
        );
    }
}

#[cfg(test)]
mod install_states;
