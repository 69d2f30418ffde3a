//! For services' tests (the `testsuite` feature, on in their dev-dependencies only): a message
//! heard as the service's consumer hears it, read and applied on a connection of the test's.

use capstan_bus::Delivery;
use capstan_events::{Envelope, Message};
use capstan_store::PgConnection;

use crate::Apply;

/// `message`, in an envelope of its own, read and applied through `consumer` on `connection`
/// (no inbox: the test says what is heard). Panics when the consumer does not apply it or
/// refuses it: the test asked for a message the consumer takes.
pub async fn hear<A: Apply, M: Message>(consumer: &A, connection: &mut PgConnection, message: M) {
    let delivery = Delivery {
        envelope: Envelope::new(message, None).into_raw(),
        subject: capstan_events::subject_for(M::KIND, M::DOMAIN, M::NAME),
        delivered: 1,
    };
    let read = match consumer.read(&delivery) {
        Some(Ok(read)) => read,
        Some(Err(error)) => panic!("{} refused: {error:?}", M::NAME),
        None => panic!("the consumer does not apply {}", M::NAME),
    };
    if let Err(error) = consumer.apply(connection, read, &delivery).await {
        panic!("{} not applied: {error:?}", M::NAME);
    }
}

/// A node's approval as the agent channel tells it, for a provisioned node `node` (`site-<node>`
/// at 203.0.113.7, its site at `/srv/site`).
pub fn provisioned_node_approved(node: i64) -> capstan_events::agent_channel::NodeApproved {
    capstan_events::agent_channel::NodeApproved {
        request_id: Default::default(),
        node_id: capstan_events::NodeId(node),
        name: format!("site-{node}"),
        fingerprint: format!("SHA256:{node}"),
        addresses: vec!["203.0.113.7".into()],
        site_root: Some("/srv/site".into()),
        container: None,
        approved_by: "provisioning (provision 1)".into(),
    }
}

/// Provisioning's word on `node`'s install state (`None`: operational), `minutes` from now.
pub fn install_state(
    node: i64,
    state: Option<capstan_events::provisioning::InstallState>,
    minutes: i64,
) -> capstan_events::provisioning::InstallStateChanged {
    capstan_events::provisioning::InstallStateChanged {
        node_id: capstan_events::NodeId(node),
        state,
        previous: None,
        changed_at: chrono::Utc::now() + chrono::Duration::minutes(minutes),
    }
}
