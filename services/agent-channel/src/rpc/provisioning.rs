//! The provisioning service's questions (issue 29): make the node of a machine it provisions,
//! bind that machine's join to it when AC-08's conditions hold, refuse a second join from its
//! address (AC-11). Each is answered to the provisioning service's actor alone
//! (`service/provisioning`; its bus user may send these three ops and no other of ours).

use capstan_events::agent_channel::rpc::{
    ApproveProvisionedJoin, Approved, Done, NodeRegistered, RefuseJoin, RegisterNode,
};
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_events::Domain;
use chrono::Utc;

use super::operator::{approve_pending, conflict, found, reject_pending, Answer};
use super::State;
use crate::{
    domain::{
        joins::JoinRecordState,
        provisioned::{self, ApprovalRefused, ProvisionedJoin},
    },
    store,
};

/// A node with no key and no agent, made for the provision `reference` names; the same
/// reference answers the same node. A name another node holds (one that has not left) is
/// refused, naming that node.
pub async fn register_node(state: State, request: RegisterNode) -> Answer<NodeRegistered> {
    request
        .actor
        .require_service(Domain::Provisioning, "registering a node")?;
    let registration =
        provisioned::registration(&request.reference, &request.name, &request.addresses)?;
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let known = |node: store::NodeRow| NodeRegistered {
                    node_id: node.id,
                    created: false,
                };
                if let Some(node) =
                    store::node_by_reference(transaction, &registration.reference).await?
                {
                    return Ok(known(node));
                }
                store::lock_name(transaction, &registration.name).await?;
                if let Some(holder) =
                    store::live_node_named(transaction, &registration.name).await?
                {
                    return Err(conflict(format!(
                        "the name {} is held by node {holder}",
                        registration.name
                    )));
                }
                match store::insert_registered_node(transaction, &registration).await? {
                    Some(node_id) => {
                        tracing::info!(%node_id, reference = %registration.reference, "node registered");
                        Ok(NodeRegistered {
                            node_id,
                            created: true,
                        })
                    }
                    // Registered by another replica meanwhile.
                    None => found(
                        store::node_by_reference(transaction, &registration.reference).await,
                        format!("node registered as {}", registration.reference),
                    )
                    .map(known),
                }
            })
        })
        .await
}

/// AC-08: binds the pending join's key to the node made for the provision, when the key is
/// the one its install recorded and unused and the node has no agent yet; `node_approved`
/// names provisioning and the provision as the approver.
pub async fn approve_provisioned_join(
    state: State,
    request: ApproveProvisionedJoin,
) -> Answer<Approved> {
    request
        .actor
        .require_service(Domain::Provisioning, "approving a provisioned join")?;
    let node_id = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let join = found(
                    store::join_by_id(transaction, request.join_id).await,
                    format!("join request {}", request.join_id),
                )?;
                let node = found(
                    store::lock_node(transaction, request.node_id).await,
                    format!("node {}", request.node_id),
                )?;
                let key_in_use = store::node_by_fingerprint(transaction, &join.fingerprint)
                    .await?
                    .is_some();
                let verdict = provisioned::provisioned_approval(ProvisionedJoin {
                    pending: join.state == JoinRecordState::Pending && join.expires_at > Utc::now(),
                    fingerprint: &join.fingerprint,
                    expected: &request.fingerprint,
                    node_paired: node.fingerprint.is_some(),
                    key_in_use,
                });
                match verdict {
                    Ok(()) => {}
                    Err(ApprovalRefused::NotPending) => {
                        return Err(conflict(format!("join request {} is not pending", join.id)))
                    }
                    Err(ApprovalRefused::KeyDiffers { asked, expected }) => {
                        return Err(RpcError::new(
                            ErrorCode::Refused,
                            format!(
                                "join request {} asks with the key {asked}, not the expected \
                                 {expected}",
                                join.id
                            ),
                        )
                        .into())
                    }
                    Err(ApprovalRefused::KeyInUse) => {
                        return Err(conflict(format!(
                            "the key of join request {} is already paired with a node",
                            join.id
                        )))
                    }
                    Err(ApprovalRefused::NodePaired) => {
                        return Err(conflict(format!(
                            "node {} already has an agent paired",
                            node.id
                        )))
                    }
                }
                let by = provisioned::approved_by(request.provision_id);
                approve_pending(transaction, &join, Some(node.id), &by).await
            })
        })
        .await?;
    Ok(Approved { node_id })
}

/// AC-11: a second join from a provision's address after its node's agent was admitted is
/// rejected, `join_rejected` saying `provisioning: <reason>`.
pub async fn refuse_join(state: State, request: RefuseJoin) -> Answer<Done> {
    request
        .actor
        .require_service(Domain::Provisioning, "refusing a join")?;
    let by = provisioned::rejected_by(provisioned::refusal_reason(&request.reason)?);
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let join = found(
                    store::join_by_id(transaction, request.join_id).await,
                    format!("join request {}", request.join_id),
                )?;
                reject_pending(transaction, &join, &by).await
            })
        })
        .await?;
    Ok(Done {})
}

#[cfg(test)]
mod tests;
