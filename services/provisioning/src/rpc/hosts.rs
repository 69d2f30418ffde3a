//! Docker hosts' placement records (PV-14..PV-16): listed with their containers (level 7),
//! added by hand (level 10; the host's own node is linked when its agent is approved or
//! reports from the address) and soft-deleted (level 10), refused while anything lives on it.

use std::net::IpAddr;

use capstan_events::provisioning::machines::{
    AddHost, DeleteHost, HostContainer, HostView, Hosts, ListHosts, HOST_MAX_SITES,
};
use capstan_events::provisioning::AccountFlag;
use capstan_events::rpc::{ErrorCode, InvalidInput, Level, RpcError};
use capstan_store::{PgConnection, StoreError};
use chrono::Utc;

use crate::domain::placement::{self, Host, PlacedNode};
use crate::store::hosts::{self as store, HostRow, PlacedRow};

use super::{Answer, State};

fn host_of(row: &HostRow) -> Host {
    Host {
        id: row.id,
        address: row.address.clone(),
        max_sites: row.max_sites.max(0) as u32,
        provisioning_enabled: row.provisioning_enabled,
        node: row.node_id,
        deleted: row.deleted_at.is_some(),
    }
}

fn placed_of(rows: &[PlacedRow]) -> Vec<PlacedNode> {
    rows.iter()
        .map(|row| PlacedNode {
            id: row.node_id,
            host: row.host_id,
            live: row.paired,
        })
        .collect()
}

/// A host as the API shows it, with its containers (PV-15: the host agent is not one).
pub fn view(row: &HostRow, placed: &[PlacedRow]) -> Answer<HostView> {
    let host = host_of(row);
    let nodes = placed_of(placed);
    let own = row
        .node_id
        .and_then(|node| placed.iter().find(|placed| placed.node_id == node));
    Ok(HostView {
        id: row.id,
        address: row.address.clone(),
        flag: row.flag()?,
        max_sites: host.max_sites,
        provisioning_enabled: row.provisioning_enabled,
        node_id: row.node_id,
        node_name: own.map(|node| node.name.clone()),
        node_live: own.is_some_and(|node| node.paired),
        containers: placed
            .iter()
            .filter(|node| node.host_id == Some(row.id) && Some(node.node_id) != row.node_id)
            .map(|node| HostContainer {
                node_id: node.node_id,
                name: node.name.clone(),
                live: node.paired,
            })
            .collect(),
        has_room: placement::has_room(&host, &nodes),
        created_at: row.created_at,
        created_by: row.created_by.clone(),
        deleted_at: row.deleted_at,
    })
}

pub async fn list_hosts(state: State, request: ListHosts) -> Answer<Hosts> {
    request.actor.require(Level::Read, "reading the hosts")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::hosts(&mut connection).await?;
    let placed = store::placed(&mut connection).await?;
    Ok(Hosts {
        hosts: rows
            .iter()
            .map(|row| view(row, &placed))
            .collect::<Answer<_>>()?,
    })
}

pub async fn add_host(state: State, request: AddHost) -> Answer<HostView> {
    request.actor.require(Level::Admin, "adding a host")?;
    let body = &request.body;
    let address: IpAddr = body
        .address
        .trim()
        .parse()
        .map_err(|_| InvalidInput::new("address", "must be the host's IPv4 or IPv6 address"))?;
    if body.max_sites == 0 || body.max_sites > HOST_MAX_SITES {
        return Err(
            InvalidInput::new("max_sites", format!("must be 1 to {HOST_MAX_SITES}")).into(),
        );
    }
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let inserted = store::insert_host(
        &mut transaction,
        &address.to_string(),
        body.flag.unwrap_or(AccountFlag::Main),
        body.max_sites,
        body.provisioning_enabled,
        now,
        &request.actor.name,
    )
    .await;
    let row = match inserted {
        Err(StoreError::AlreadyExists(_)) => {
            return Err(RpcError::new(
                ErrorCode::AlreadyExists,
                format!("address: a host at {address} is on record"),
            )
            .into())
        }
        other => other?,
    };
    // A host agent already paired at the address is linked now (PV-14).
    link_at(&mut transaction, &[address.to_string()], None).await?;
    let row = store::host_for_update(&mut transaction, row.id)
        .await?
        .unwrap_or(row);
    let placed = store::placed(&mut transaction).await?;
    let answer = view(&row, &placed)?;
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(host_id = row.id, address = %address, actor = %request.actor.name, "host added");
    Ok(answer)
}

/// PV-16: refused while a container site names the host or its own agent node is live.
pub async fn delete_host(state: State, request: DeleteHost) -> Answer<HostView> {
    request.actor.require(Level::Admin, "deleting a host")?;
    let mut transaction = state.store.begin().await?;
    let row = store::host_for_update(&mut transaction, request.host_id)
        .await?
        .ok_or_else(|| {
            RpcError::new(ErrorCode::NotFound, format!("no host {}", request.host_id))
        })?;
    let placed = store::placed(&mut transaction).await?;
    placement::delete(&host_of(&row), &placed_of(&placed))
        .map_err(|refusal| RpcError::new(ErrorCode::Conflict, format!("not deleted: {refusal}")))?;
    let now = Utc::now();
    store::delete_host(&mut transaction, row.id, now, &request.actor.name).await?;
    let gone = HostRow {
        deleted_at: Some(now),
        ..row
    };
    let answer = view(&gone, &placed)?;
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(host_id = gone.id, actor = %request.actor.name, "host deleted");
    Ok(answer)
}

/// Links the live host records at `addresses` to their own node (PV-14: "set by host-join
/// approval, by each host report; a live link is never re-pointed"): to `node` when given (a
/// node just approved or reporting from there), else to the one paired, non-container node at
/// the address if there is exactly one. Returns how many records were linked.
pub async fn link_at(
    connection: &mut PgConnection,
    addresses: &[String],
    node: Option<capstan_events::NodeId>,
) -> Result<usize, StoreError> {
    let hosts = store::hosts_at(connection, addresses).await?;
    if hosts.is_empty() {
        return Ok(0);
    }
    let placed = store::placed(connection).await?;
    let nodes = placed_of(&placed);
    let mut linked = 0;
    for row in hosts {
        let candidate = match node {
            Some(node) => Some(node),
            None => {
                let at: Vec<_> = crate::store::machines::nodes(connection)
                    .await?
                    .into_iter()
                    .filter(|candidate| {
                        candidate.paired
                            && candidate.container.is_none()
                            && candidate.addresses.0.first() == Some(&row.address)
                    })
                    .collect();
                match at.as_slice() {
                    [one] => Some(one.node_id),
                    _ => None,
                }
            }
        };
        let Some(candidate) = candidate else {
            continue;
        };
        if row.node_id == Some(candidate) {
            continue;
        }
        match placement::link_host_node(&host_of(&row), candidate, &nodes) {
            Ok(_) => {
                store::link_host(connection, row.id, candidate).await?;
                tracing::info!(host_id = row.id, node_id = %candidate, "host linked to its own node");
                linked += 1;
            }
            Err(refusal) => {
                tracing::warn!(host_id = row.id, node_id = %candidate, %refusal, "host link refused");
            }
        }
    }
    Ok(linked)
}
