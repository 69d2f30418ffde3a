//! The agent channel's rpc: `agent_request` (agent traffic the gateway forwards) and the
//! operator acts. Each operator question names the level it needs.

mod agent;
mod claim;
mod operator;

use bytes::Bytes;
use capstan_bus::RpcServer;
use capstan_events::agent_channel::rpc::{
    ops, AgentRequest, AgentResponse, ClaimsReleased, ReleaseClaims,
};
use capstan_store::Store;
use std::{sync::Arc, sync::Mutex};
use tokio::time::Instant;

use crate::{
    domain::{
        auth::AgentError, rate::Buckets, ADDRESS_REQUESTS_PER_MINUTE, NODE_REQUESTS_PER_MINUTE,
    },
    wake::Wake,
};

/// Request meters: per source address for requests that prove no node, per node for the rest.
/// Kept in each replica's memory (coarse by design: N replicas allow up to N times as much).
pub struct Limits {
    addresses: Mutex<Buckets<String>>,
    nodes: Mutex<Buckets<i64>>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            addresses: Mutex::new(Buckets::new(ADDRESS_REQUESTS_PER_MINUTE)),
            nodes: Mutex::new(Buckets::new(NODE_REQUESTS_PER_MINUTE)),
        }
    }
}

fn limited(wait: std::time::Duration) -> AgentError {
    AgentError::RateLimited {
        retry_after: wait.as_secs().max(1),
    }
}

impl Limits {
    pub fn take_address(&self, address: &str) -> Result<(), AgentError> {
        let mut buckets = self.addresses.lock().expect("limits are never poisoned");
        let now = Instant::now();
        let key = address.to_string();
        buckets.check(&key, now).map_err(limited)?;
        buckets.take(&key, now);
        Ok(())
    }

    pub fn check_node(&self, node_id: i64) -> Result<(), AgentError> {
        let buckets = self.nodes.lock().expect("limits are never poisoned");
        buckets.check(&node_id, Instant::now()).map_err(limited)
    }

    pub fn take_node(&self, node_id: i64) {
        let mut buckets = self.nodes.lock().expect("limits are never poisoned");
        buckets.take(&node_id, Instant::now());
    }

    pub fn prune(&self) {
        let now = Instant::now();
        self.addresses
            .lock()
            .expect("limits are never poisoned")
            .prune(now);
        self.nodes
            .lock()
            .expect("limits are never poisoned")
            .prune(now);
    }
}

/// Decoded node keys by their base64 form. Decoding a key decompresses a curve point, which
/// costs about as much as verifying a signature; the mapping never changes, so it is kept.
#[derive(Default)]
pub struct Keys {
    decoded: Mutex<std::collections::HashMap<String, capstan_signing::PublicKey>>,
}

/// Keys kept at most; past it the cache starts over (a fleet is far smaller).
const MAX_CACHED_KEYS: usize = 100_000;

impl Keys {
    pub fn decode(&self, base64: &str) -> Option<capstan_signing::PublicKey> {
        let mut decoded = self
            .decoded
            .lock()
            .expect("the key cache is never poisoned");
        if let Some(key) = decoded.get(base64) {
            return Some(*key);
        }
        let key = capstan_signing::PublicKey::from_base64(base64).ok()?;
        if decoded.len() >= MAX_CACHED_KEYS {
            decoded.clear();
        }
        decoded.insert(base64.to_string(), key);
        Some(key)
    }
}

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
    pub wake: Arc<Wake>,
    pub limits: Arc<Limits>,
    pub keys: Arc<Keys>,
    /// Ends long polls at once when the service stops, so a stop does not wait out a claim.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Agent requests doing database work at once: fewer than the pool holds, so a burst of
    /// claims (a fleet coming back) never takes the connections an operator's act needs. A
    /// long poll holds no slot while it waits.
    pub agent_slots: Arc<tokio::sync::Semaphore>,
}

/// Connections of the pool kept for operator acts, commands and the sweep.
pub const RESERVED_CONNECTIONS: u32 = 2;

/// Agent slots for a pool of `max_connections`.
pub fn agent_slots(max_connections: u32) -> usize {
    max_connections.saturating_sub(RESERVED_CONNECTIONS).max(1) as usize
}

impl State {
    /// A connection from the service's pool.
    pub async fn connection(
        &self,
    ) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, capstan_store::StoreError> {
        self.store.pool().acquire().await.map_err(Into::into)
    }

    /// Waits for a slot to do an agent request's database work.
    pub async fn agent_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, AgentError> {
        self.agent_slots
            .acquire()
            .await
            .map_err(|_| AgentError::Unavailable("the agent channel is stopping".into()))
    }
}

/// Adds the agent channel's questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    let agent_state = state.clone();
    server
        .route_with_body(
            ops::AGENT_REQUEST,
            move |request: AgentRequest, body: Bytes| {
                let state = agent_state.clone();
                async move {
                    let response: AgentResponse = agent::handle(&state, request, body).await;
                    Ok((response, Bytes::new()))
                }
            },
        )
        .route_on_every_replica(ops::RELEASE_CLAIMS, {
            let wake = state.wake.clone();
            move |request: ReleaseClaims| {
                let released = wake.release(request.gateway);
                if released > 0 {
                    tracing::info!(gateway = %request.gateway, released, "long polls released: their gateway stops");
                }
                async move { Ok(ClaimsReleased { released }) }
            }
        })
        .route_with_state(ops::LIST_JOINS, &state, operator::list_joins)
        .route_with_state(ops::APPROVE_JOIN, &state, operator::approve_join)
        .route_with_state(ops::REJECT_JOIN, &state, operator::reject_join)
        .route_with_state(ops::REOPEN_JOIN, &state, operator::reopen_join)
        .route_with_state(ops::LIST_NODES, &state, operator::list_nodes)
        .route_with_state(ops::GET_NODE, &state, operator::get_node)
        .route_with_state(ops::DISCONNECT_NODE, &state, operator::disconnect_node)
        .route_with_state(ops::CREATE_JOB, &state, operator::create_job)
        .route_with_state(ops::LIST_JOBS, &state, operator::list_jobs)
        .route_with_state(ops::GET_JOB, &state, operator::get_job)
        .route_with_state(ops::JOB_OUTPUT, &state, operator::job_output)
        .route_with_state(ops::CANCEL_JOB, &state, operator::cancel_job)
        .route_with_state(ops::MARK_JOB_FAILED, &state, operator::mark_job_failed)
        .route_with_state(ops::REFUSAL_COUNT, &state, operator::refusal_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_work_always_leaves_connections_for_operator_acts() {
        assert_eq!(agent_slots(5), 3);
        assert_eq!(agent_slots(16), 14);
        assert_eq!(
            agent_slots(2),
            1,
            "at least one slot, however small the pool"
        );
    }

    #[test]
    fn a_decoded_key_is_the_key_and_a_bad_one_is_refused_and_not_kept() {
        let keys = Keys::default();
        let key = capstan_signing::NodeKey::generate().public_key();
        assert_eq!(keys.decode(&key.to_base64()), Some(key));
        assert_eq!(
            keys.decode(&key.to_base64()),
            Some(key),
            "the second time from the cache"
        );
        assert_eq!(keys.decode("not a key"), None);
        assert_eq!(keys.decoded.lock().unwrap().len(), 1);
    }
}
