//! The agent channel's rpc: `agent_request` (agent traffic the gateway forwards), the
//! operator acts, and the provisioning service's three questions (`provisioning.rs`). Each
//! operator question names the level it needs; each of provisioning's, the service.

mod agent;
mod claim;
mod edge;
mod operator;
mod provisioning;

use bytes::Bytes;
use capstan_bus::RpcServer;
use capstan_events::agent_channel::rpc::{
    AgentRequest, AgentResponse, ClaimsReleased, ReleaseClaims,
};
use capstan_events::NodeId;
use capstan_store::Store;
use std::sync::{Arc, Mutex};

use crate::{
    domain::{
        auth::AgentError,
        claims::{self, Asking, Intake, Lane},
        rate::{source_network, Meters},
        NETWORK_REQUESTS_PER_MINUTE, NODE_REQUESTS_PER_MINUTE,
    },
    wake::Wake,
};

/// Request meters: per source network for requests that prove no node, per node (by its key's
/// fingerprint) for every request whose signature proves one. Kept in each replica's memory
/// (coarse by design: N replicas allow up to N times as much).
pub struct Limits {
    networks: Meters<String>,
    nodes: Meters<String>,
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

impl Limits {
    pub fn new(network_per_minute: u32, node_per_minute: u32) -> Limits {
        Limits {
            networks: Meters::new(network_per_minute),
            nodes: Meters::new(node_per_minute),
        }
    }

    pub fn from_settings(settings: &crate::settings::AgentChannelSettings) -> Limits {
        Limits::new(
            settings.network_requests_per_minute,
            settings.node_requests_per_minute,
        )
    }

    /// Counts a request that proves no node against its source network ([`source_network`]);
    /// refuses when the network is out of requests.
    pub fn take_network(&self, address: &str) -> Result<(), AgentError> {
        self.networks
            .take(&source_network(address))
            .map_err(limited)
    }

    /// Whether a request that proves no node would be refused for its network's rate, without
    /// counting it.
    pub fn check_network(&self, address: &str) -> Result<(), AgentError> {
        self.networks
            .check(&source_network(address))
            .map_err(limited)
    }

    /// Whether a request proving the key `fingerprint` would be refused for its node's rate,
    /// without counting it.
    pub fn check_node(&self, fingerprint: &str) -> Result<(), AgentError> {
        self.nodes.check(&fingerprint.to_string()).map_err(limited)
    }

    /// Counts a request whose signature proved the key `fingerprint`; refuses when its node is
    /// out of requests.
    pub fn take_node(&self, fingerprint: &str) -> Result<(), AgentError> {
        self.nodes.take(&fingerprint.to_string()).map_err(limited)
    }

    pub fn prune(&self) {
        self.networks.prune();
        self.nodes.prune();
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
    /// The node each fingerprint last proved, so a request is known for its node (and whether
    /// work waits for it) before it waits for a slot. A hint for its place in line only: which
    /// node a request is for is always the store's to say.
    nodes: Mutex<std::collections::HashMap<String, NodeId>>,
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
        let mut known = 0;
        for (node, key) in &keys {
            if let Some(key) = self.decode(key) {
                self.learn(key.fingerprint().as_str(), *node);
                known += 1;
            }
        }
        Ok(known)
    }

    /// Remembers that `fingerprint` proved `node`.
    pub fn learn(&self, fingerprint: &str, node: NodeId) {
        let mut nodes = self.nodes.lock().expect("the key cache is never poisoned");
        if nodes.get(fingerprint) == Some(&node) {
            return;
        }
        if nodes.len() >= MAX_CACHED_KEYS {
            nodes.clear();
        }
        nodes.insert(fingerprint.to_string(), node);
    }

    /// The node `fingerprint` last proved here, if any.
    pub fn node_of(&self, fingerprint: &str) -> Option<NodeId> {
        self.nodes
            .lock()
            .expect("the key cache is never poisoned")
            .get(fingerprint)
            .copied()
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
    /// Node-signed requests' arrivals (node, nonce, glance, heartbeat), many to a statement.
    pub arrivals: crate::arrivals::Arrivals,
    /// Ends long polls at once when the service stops, so a stop does not wait out a claim.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Agent requests doing database work at once: fewer than the pool holds, so a burst of
    /// claims (a fleet coming back) never takes the connections an operator's act needs. A
    /// long poll holds no slot while it waits.
    pub agent_slots: Arc<tokio::sync::Semaphore>,
    /// Plain requests (`domain::claims::Lane::Plain`) pass this first: fewer than
    /// `agent_slots`, so the rest are always there for the work lane, and a
    /// request that moves a job never waits behind a storm of renewals
    /// (`domain::claims::plain_slots`).
    pub plain_slots: Arc<tokio::sync::Semaphore>,
    /// Plain node-signed requests checking their signatures and arriving at once
    /// ([`INTAKE_PERMITS`]); see [`State::intake_for`].
    pub intake: Arc<tokio::sync::Semaphore>,
}

/// Plain node-signed requests taken in at once: enough to keep both cores and the arrivals'
/// statements busy, few enough that a burst waits here, where a request that moves a job
/// passes it, and not in the runtime's queue, where it would not.
pub const INTAKE_PERMITS: usize = 64;

/// Connections of the pool kept for operator acts, commands and the sweep.
pub const RESERVED_CONNECTIONS: u32 = 2;

/// Connections of the pool the arrivals' statements take ([`crate::arrivals`]), one at a time.
pub const ARRIVALS_CONNECTIONS: u32 = 1;

/// Agent slots for a pool of `max_connections`: what is left beside the reserved connections
/// and the arrivals' own.
pub fn agent_slots(max_connections: u32) -> usize {
    max_connections
        .saturating_sub(RESERVED_CONNECTIONS + ARRIVALS_CONNECTIONS)
        .max(1) as usize
}

/// A slot to do an agent request's database work; a plain request's holds its place among the
/// plain ones too.
pub struct Slot<'a> {
    _slot: tokio::sync::SemaphorePermit<'a>,
    _plain: Option<tokio::sync::SemaphorePermit<'a>>,
}

fn stopping(_: tokio::sync::AcquireError) -> AgentError {
    AgentError::Unavailable("the agent channel is stopping".into())
}

impl State {
    /// A connection from the service's pool.
    pub async fn connection(
        &self,
    ) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, capstan_store::StoreError> {
        self.store.pool().acquire().await.map_err(Into::into)
    }

    /// Waits for a slot to do an agent request's database work, in the plain lane.
    pub async fn agent_slot(&self) -> Result<Slot<'_>, AgentError> {
        self.agent_slot_in(Lane::Plain).await
    }

    /// Waits for a slot in `lane`: a plain request behind the plain ones before it, a work
    /// request only for a slot (plain requests never hold them all).
    pub async fn agent_slot_in(&self, lane: Lane) -> Result<Slot<'_>, AgentError> {
        let plain = match lane {
            Lane::Work => None,
            Lane::Plain => Some(self.plain_slots.acquire().await.map_err(stopping)?),
        };
        let slot = self.agent_slots.acquire().await.map_err(stopping)?;
        Ok(Slot {
            _slot: slot,
            _plain: plain,
        })
    }

    /// What a request to `endpoint` of `node` is, as far as its place in line goes: a claim
    /// with or without work waiting for its node (as this replica has heard), a result, or
    /// anything else.
    pub fn asking(
        &self,
        node: Option<NodeId>,
        endpoint: capstan_events::agent_channel::rpc::AgentEndpoint,
    ) -> Asking {
        use capstan_events::agent_channel::rpc::AgentEndpoint;
        match endpoint {
            AgentEndpoint::Claim => Asking::Claim {
                work_waiting: node.is_some_and(|node| self.wake.has_work(node)),
            },
            AgentEndpoint::Result => Asking::Result,
            _ => Asking::Other,
        }
    }

    /// Waits for its turn to be taken in (its signature checked, its arrival queued), by
    /// [`claims::intake`]: a request whose key names a node this replica knows and that moves a
    /// job along goes at once; the rest take one of [`INTAKE_PERMITS`] in order, a claim of a
    /// known node unless its node is rung for while it waits. The key is not verified yet, so a
    /// forger naming a busy node's key gains only an earlier refusal: the slots and the
    /// arrivals' work lane are chosen again once the signature has proved the node.
    pub async fn intake_for(
        &self,
        node: Option<NodeId>,
        endpoint: capstan_events::agent_channel::rpc::AgentEndpoint,
    ) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, AgentError> {
        match (
            claims::intake(node.is_some(), self.asking(node, endpoint)),
            node,
        ) {
            (Intake::AtOnce, _) => Ok(None),
            (Intake::InTurn { unless_rung: true }, Some(node)) => self
                .wake
                .until_work(node, self.intake.acquire())
                .await
                .transpose()
                .map_err(stopping),
            (Intake::InTurn { .. }, _) => Ok(Some(self.intake.acquire().await.map_err(stopping)?)),
        }
    }

    /// Waits for a slot for a request of `node` in `lane`. A plain request whose node is rung
    /// for while it waits (a job was queued for it) moves to the work lane: its claim will hand
    /// that job out, and must not wait out the renewals before it.
    pub async fn agent_slot_for(
        &self,
        node: Option<NodeId>,
        lane: Lane,
    ) -> Result<Slot<'_>, AgentError> {
        let Some(node) = node.filter(|_| lane == Lane::Plain) else {
            return self.agent_slot_in(lane).await;
        };
        let plain = self
            .wake
            .until_work(node, self.plain_slots.acquire())
            .await
            .transpose()
            .map_err(stopping)?;
        let slot = self.agent_slots.acquire().await.map_err(stopping)?;
        Ok(Slot {
            _slot: slot,
            _plain: plain,
        })
    }
}

/// Adds the agent channel's questions to `server`. `bus` asks the one question the agent
/// channel asks another service: an artifact of rollouts.
pub fn routes(server: RpcServer, state: State, bus: capstan_bus::Bus) -> RpcServer {
    let agent_state = state.clone();
    server
        .route_with_body(move |request: AgentRequest, body: Bytes| {
                let state = agent_state.clone();
                let bus = bus.clone();
                async move {
                    let (response, bytes): (AgentResponse, Bytes) =
                        agent::handle(&state, &bus, request, body).await;
                    Ok((response, bytes))
                }
            },
        )
        .route_on_every_replica({
            let wake = state.wake.clone();
            move |request: ReleaseClaims| {
                let released = wake.release(request.gateway);
                if released > 0 {
                    tracing::info!(gateway = %request.gateway, released, "long polls released: their gateway stops");
                }
                async move { Ok(ClaimsReleased { released }) }
            }
        })
        .route_on_every_replica({
            let state = state.clone();
            move |request: capstan_events::agent_channel::rpc::ReleasePoll| {
                let answer = edge::release_poll(state.clone(), request);
                async move {
                    use capstan_bus::IntoRpcError as _;
                    answer
                        .await
                        .map_err(|error| error.into_rpc_error(crate::DOMAIN))
                }
            }
        })
        .route_with_state(&state, edge::hand_back)
        .route_with_state(&state, edge::vet)
        .route_with_state(&state, operator::list_joins)
        .route_with_state(&state, operator::approve_join)
        .route_with_state(&state, operator::reject_join)
        .route_with_state(&state, operator::reopen_join)
        .route_with_state(&state, operator::list_nodes)
        .route_with_state(&state, operator::fleet_versions)
        .route_with_state(&state, operator::get_node)
        .route_with_state(&state, operator::disconnect_node)
        .route_with_state(&state, operator::create_job)
        .route_with_state(&state, operator::list_jobs)
        .route_with_state(&state, operator::get_job)
        .route_with_state(&state, operator::job_output)
        .route_with_state(&state, operator::cancel_job)
        .route_with_state(&state, operator::mark_job_failed)
        .route_with_state(&state, operator::refusal_count)
        .route_with_state(&state, provisioning::register_node)
        .route_with_state(&state, provisioning::approve_provisioned_join)
        .route_with_state(&state, provisioning::refuse_join)
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
    fn agent_work_always_leaves_connections_for_operator_acts_and_the_arrivals() {
        assert_eq!(agent_slots(5), 2);
        assert_eq!(agent_slots(16), 13);
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
