//! Asking to be admitted and learning the answer (PROTOCOL.md "join", "join_status"), shared by
//! `capstan-agent join` and the running agent, which finishes a staged join on its own when the
//! plane approves it (AG-07). Only the public half of the key is ever sent.

use capstan_signing::NodeKey;
use chrono::Utc;
use serde_json::{json, Value};
use std::{
    net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket},
    time::Duration,
};
use tracing::{info, warn};
use uuid::Uuid;

use crate::{
    config::Config,
    domain::{
        join::{after_join, after_status, Pairing, StatusOutcome},
        AGENT_VERSION, MAX_ANSWER_BYTES,
    },
    plane::{Plane, PlaneError},
    state::{Identity, StateDir, StateError},
};

/// Why a join step did not complete.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Plane(#[from] PlaneError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0}")]
    Identity(crate::state::BadIdentity),
    /// Someone else (`leave`, another `join`) changed the identity meanwhile.
    #[error("the identity changed while this join was asked; nothing was overwritten")]
    Superseded,
}

/// A new identity for `management_node`, not yet asked or saved.
pub fn new_identity(management_node: &str, name: &str) -> Identity {
    Identity::new(
        management_node.to_string(),
        name.to_string(),
        &NodeKey::generate(),
        Pairing::Pending {
            request_id: Uuid::nil(),
            asked_at: Utc::now(),
        },
    )
}

/// Saves `identity` only if the file still holds the key `expected` (or no identity, when
/// `expected` is `None`), so a stale holder never undoes a `leave` or a newer key.
pub fn save_if_current(
    state: &StateDir,
    identity: &Identity,
    expected: Option<&str>,
) -> Result<(), JoinError> {
    let current = state.identity()?;
    if current.as_ref().map(|found| found.fingerprint.as_str()) != expected {
        return Err(JoinError::Superseded);
    }
    state.save_identity(identity)?;
    Ok(())
}

/// The source addresses this machine uses toward the plane (the join's `addresses` are claims
/// an operator reads; loopback and private-to-this-box addresses say nothing and are left out).
async fn addresses_toward(plane: &Plane) -> Vec<String> {
    let base = plane.base().to_string();
    let local_address = plane.local_address();
    tokio::task::spawn_blocking(move || {
        let Ok(url) = url::Url::parse(&base) else {
            return Vec::new();
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Vec::new();
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let Ok(targets) = (host.as_str(), port).to_socket_addrs() else {
            return Vec::new();
        };
        let mut found: Vec<String> = Vec::new();
        for target in targets {
            // The set local address is the one the plane's connections come from.
            let bind = match local_address {
                Some(address) if address.is_ipv4() != target.is_ipv4() => continue,
                Some(address) => SocketAddr::new(address, 0),
                None if target.is_ipv4() => SocketAddr::from(([0, 0, 0, 0], 0)),
                None => SocketAddr::from(([0u16; 8], 0)),
            };
            let local = UdpSocket::bind(bind)
                .and_then(|socket| socket.connect(target).map(|()| socket))
                .and_then(|socket| socket.local_addr());
            if let Ok(local) = local {
                let address: IpAddr = local.ip();
                let text = address.to_string();
                if !address.is_loopback() && !address.is_unspecified() && !found.contains(&text) {
                    found.push(text);
                }
            }
        }
        found.truncate(16);
        found
    })
    .await
    .unwrap_or_default()
}

fn join_body(identity: &Identity, config: &Config, addresses: Vec<String>) -> Value {
    json!({
        "name": identity.name,
        "public_key": identity.public_key,
        "agent_version": AGENT_VERSION,
        "site_root": config.site_root.as_ref().map(|root| root.display().to_string()),
        "container": null,
        "addresses": addresses,
    })
}

/// Sends `join` for `identity` (a first ask, a renewal, or a rejected key's re-ask) and saves
/// what the plane answered. `409 key_retired` makes a new key and asks with it;
/// `409 already_joined` asks `join_status` which node the key is.
pub async fn ask(
    state: &StateDir,
    config: &Config,
    plane: &Plane,
    identity: Identity,
    saved: Option<&str>,
) -> Result<Identity, JoinError> {
    let mut identity = identity;
    // At most one fresh key per ask: a plane that retires every key is not asked forever.
    for _ in 0..2 {
        let key = identity.key().map_err(JoinError::Identity)?;
        let body = join_body(&identity, config, addresses_toward(plane).await);
        match plane
            .send(&key, "join", "", &body, MAX_ANSWER_BYTES, Duration::ZERO)
            .await
        {
            Ok(answer) => {
                let request_id = answer["request_id"]
                    .as_str()
                    .and_then(|id| id.parse::<Uuid>().ok());
                let state_word = answer["state"].as_str().unwrap_or_default();
                let Some(pairing) =
                    request_id.and_then(|id| after_join(state_word, id, Utc::now()))
                else {
                    return Err(PlaneError::BadAnswer(format!(
                        "the join answer has no request or an unknown state: {answer}"
                    ))
                    .into());
                };
                identity.pairing = pairing;
                save_if_current(state, &identity, saved)?;
                info!(fingerprint = %identity.fingerprint, state = state_word, "join asked");
                return Ok(identity);
            }
            Err(error) if error.code() == Some("already_joined") => {
                return check(state, config, plane, identity).await;
            }
            Err(error) if error.code() == Some("key_retired") => {
                let fresh = new_identity(&identity.management_node, &identity.name);
                warn!(
                    retired = %identity.fingerprint,
                    fingerprint = %fresh.fingerprint,
                    "the plane retired this key (rejected more than a day ago); asking with a new key"
                );
                // The file still holds the old key (or nothing); the new one replaces it only
                // once it is lodged.
                identity = fresh;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(JoinError::Identity(
        "the plane retired the new key too; ask an operator".into(),
    ))
}

/// Asks `join_status` for a pending or rejected identity and saves what changed. An approval
/// pairs the node; an expired request, or one the plane no longer has, is asked again.
pub async fn check(
    state: &StateDir,
    config: &Config,
    plane: &Plane,
    identity: Identity,
) -> Result<Identity, JoinError> {
    let request_id = match &identity.pairing {
        Pairing::Pending { request_id, .. } | Pairing::Rejected { request_id, .. } => *request_id,
        _ => return Ok(identity),
    };
    let key = identity.key().map_err(JoinError::Identity)?;
    let fingerprint = identity.fingerprint.clone();
    match plane
        .send(
            &key,
            "join_status",
            "",
            &json!({"request_id": request_id}),
            MAX_ANSWER_BYTES,
            Duration::ZERO,
        )
        .await
    {
        Ok(answer) => {
            let outcome = after_status(
                &identity.pairing,
                answer["state"].as_str().unwrap_or_default(),
                answer["node_id"].as_i64(),
                Utc::now(),
            );
            match outcome {
                StatusOutcome::Stay => Ok(identity),
                StatusOutcome::Become(pairing) => {
                    let mut identity = identity;
                    identity.pairing = pairing;
                    save_if_current(state, &identity, Some(&fingerprint))?;
                    info!(fingerprint = %identity.fingerprint, pairing = %identity.pairing.describe(), "join answered");
                    Ok(identity)
                }
                StatusOutcome::AskAgain => {
                    Box::pin(ask(state, config, plane, identity, Some(&fingerprint))).await
                }
            }
        }
        Err(PlaneError::Refused { status: 404, .. }) => {
            Box::pin(ask(state, config, plane, identity, Some(&fingerprint))).await
        }
        Err(error) => Err(error.into()),
    }
}
