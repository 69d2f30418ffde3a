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
        auth::AgentError,
        rate::{source_network, Buckets},
        NETWORK_REQUESTS_PER_MINUTE, NODE_REQUESTS_PER_MINUTE,
    },
    wake::Wake,
};

/// Request meters: per source network for requests that prove no node, per node (by its key's
/// fingerprint) for every request whose signature proves one. Kept in each replica's memory
/// (coarse by design: N replicas allow up to N times as much).
pub struct Limits {
    networks: Mutex<Buckets<String>>,
    nodes: Mutex<Buckets<String>>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(NETWORK_REQUESTS_PER_MINUTE, NODE_REQUESTS_PER_MINUTE)
    }
}

fn limited(wait: std::time::Duration) -> AgentError {
    AgentError::RateLimited {
        retry_after: wait.as_secs().max(1),
    }
}

fn take(buckets: &Mutex<Buckets<String>>, key: String) -> Result<(), AgentError> {
    let mut buckets = buckets.lock().expect("limits are never poisoned");
    let now = Instant::now();
    buckets.check(&key, now).map_err(limited)?;
    buckets.take(&key, now);
    Ok(())
}

impl Limits {
    pub fn new(network_per_minute: u32, node_per_minute: u32) -> Limits {
        Limits {
            networks: Mutex::new(Buckets::new(network_per_minute)),
            nodes: Mutex::new(Buckets::new(node_per_minute)),
        }
    }

    pub fn from_settings(settings: &capstan_settings::AgentChannelSettings) -> Limits {
        Limits::new(
            settings.network_requests_per_minute,
            settings.node_requests_per_minute,
        )
    }

    /// Counts a request that proves no node against its source network ([`source_network`]);
    /// refuses when the network is out of requests.
    pub fn take_network(&self, address: &str) -> Result<(), AgentError> {
        take(&self.networks, source_network(address))
    }

    /// Counts a request whose signature proved the key `fingerprint`; refuses when its node is
    /// out of requests.
    pub fn take_node(&self, fingerprint: &str) -> Result<(), AgentError> {
        take(&self.nodes, fingerprint.to_string())
    }

    pub fn prune(&self) {
        let now = Instant::now();
        self.networks
            .lock()
            .expect("limits are never poisoned")
            .prune(now);
        self.nodes
            .lock()
            .expect("limits are never poisoned")
            .prune(now);
    }
}

/// Decoded node keys by their base64 form and by their fingerprint. Decoding a key decompresses
/// a curve point, which costs about as much as verifying a signature; the mapping never changes
/// (a fingerprint is the digest of its key), so it is kept. Knowing a key by its fingerprint
/// lets a request's signature be checked before anything of it is written.
#[derive(Default)]
pub struct Keys {
    decoded: Mutex<std::collections::HashMap<String, capstan_signing::PublicKey>>,
    by_fingerprint: Mutex<std::collections::HashMap<String, capstan_signing::PublicKey>>,
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
        drop(decoded);
        let mut by_fingerprint = self
            .by_fingerprint
            .lock()
            .expect("the key cache is never poisoned");
        if by_fingerprint.len() >= MAX_CACHED_KEYS {
            by_fingerprint.clear();
        }
        by_fingerprint.insert(key.fingerprint().to_string(), key);
        Some(key)
    }

    /// Decodes every paired node's key once at start-up, so the first request of each node
    /// after a restart (a whole fleet renewing its polls together) is checked from memory too,
    /// costing one statement rather than two. Returns how many keys are known.
    pub async fn warm(&self, store: &Store) -> Result<usize, capstan_store::StoreError> {
        let mut connection = store.pool().acquire().await?;
        let keys = crate::store::paired_keys(&mut connection).await?;
        drop(connection);
        Ok(keys.iter().filter(|key| self.decode(key).is_some()).count())
    }

    /// The key whose fingerprint is `fingerprint`, if this replica has decoded it before.
    /// Whether a node still holds it is the store's to say.
    pub fn by_fingerprint(&self, fingerprint: &str) -> Option<capstan_signing::PublicKey> {
        self.by_fingerprint
            .lock()
            .expect("the key cache is never poisoned")
            .get(fingerprint)
            .copied()
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

/// Adds the agent channel's questions to `server`. `bus` asks the one question the agent
/// channel asks another service: an artifact of rollouts.
pub fn routes(server: RpcServer, state: State, bus: capstan_bus::Bus) -> RpcServer {
    let agent_state = state.clone();
    server
        .route_with_body(
            ops::AGENT_REQUEST,
            move |request: AgentRequest, body: Bytes| {
                let state = agent_state.clone();
                let bus = bus.clone();
                async move {
                    let (response, bytes): (AgentResponse, Bytes) =
                        agent::handle(&state, &bus, request, body).await;
                    Ok((response, bytes))
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
        .route_with_state(ops::FLEET_VERSIONS, &state, operator::fleet_versions)
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

    // After a restart every node's first request is checked from memory: the keys of paired
    // nodes are decoded at start-up (and a node without a key is skipped).
    #[tokio::test]
    async fn warming_knows_every_paired_nodes_key_by_its_fingerprint() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = Store::connect(database.url(), "agent_channel", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        let key = capstan_signing::NodeKey::generate().public_key();
        sqlx::query(
            "INSERT INTO nodes (name, public_key, fingerprint) VALUES ('web-1', $1, $2), ('web-2', NULL, NULL)",
        )
        .bind(key.to_base64())
        .bind(key.fingerprint().as_str())
        .execute(store.pool())
        .await
        .unwrap();
        let keys = Keys::default();
        assert_eq!(keys.by_fingerprint(key.fingerprint().as_str()), None);
        assert_eq!(keys.warm(&store).await.unwrap(), 1);
        assert_eq!(keys.by_fingerprint(key.fingerprint().as_str()), Some(key));
    }

    #[test]
    fn a_network_runs_dry_as_one_whatever_its_ipv6_addresses_and_a_node_apart_from_it() {
        let limits = Limits::new(3, 2);
        for last in 1..=3 {
            assert!(limits.take_network(&format!("2001:db8::{last}")).is_ok());
        }
        assert_eq!(
            limits.take_network("2001:db8::ff").unwrap_err().code(),
            "rate_limited"
        );
        assert!(
            limits.take_network("2001:db8:0:1::1").is_ok(),
            "another /64"
        );
        assert!(limits.take_network("192.0.2.1").is_ok());
        assert!(limits.take_node("SHA256:a").is_ok());
        assert!(limits.take_node("SHA256:a").is_ok());
        assert!(limits.take_node("SHA256:a").is_err());
        assert!(limits.take_node("SHA256:b").is_ok());
    }

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
        assert_eq!(
            keys.by_fingerprint(key.fingerprint().as_str()),
            Some(key),
            "known by its fingerprint once decoded"
        );
        let other = capstan_signing::NodeKey::generate().public_key();
        assert_eq!(keys.by_fingerprint(other.fingerprint().as_str()), None);
    }
}
