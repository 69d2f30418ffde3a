//! The agent endpoints (PROTOCOL.md), reached through the gateway's `agent_request` rpc. Every
//! request is checked in the protocol's order before anything else happens; requests are
//! metered per node when their signature proves one and per source network otherwise.

use bytes::Bytes;
use capstan_events::agent_channel::{
    rpc::{AgentEndpoint, AgentRequest, AgentResponse, JobState, JoinState},
    JoinRequested,
};
use capstan_events::{
    backups::rpc::BackupUrls,
    rollouts::rpc::{AgentArtifactKind, Arch, ArtifactRequest},
    rpc::ErrorCode,
    Word,
};
use capstan_signing::{ParsedSignature, PublicKey};
use capstan_store::PgConnection;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::{claim, State};
use crate::{
    actions::{self, emit, PairingEnd},
    domain::{
        auth::{check_signature, check_unkeyed, AgentError},
        claims::{lane, Lane},
        joins::{
            decide, parse_join, pending_cap, JoinDecision, JoinRecordState, KnownKey, ValidJoin,
        },
        rate::source_network,
        JOIN_TTL, NONCE_WINDOW,
    },
    store::{self, NodeRow},
};

type Answer = Result<(u16, Value), AgentError>;

/// Answers one agent request: the JSON answer, and for an artifact with bytes, the bytes.
pub async fn handle(
    state: &State,
    bus: &capstan_bus::Bus,
    request: AgentRequest,
    body: Bytes,
) -> (AgentResponse, Bytes) {
    let endpoint = request.endpoint;
    // A long poll's wait counts from here, whatever it then waits for (a slot, the checks).
    let arrived = tokio::time::Instant::now();
    let mut bytes = Bytes::new();
    // The database work of each step is boxed (here and in the claim), and taken only once the
    // request has its agent slot, so what a request holds while it waits (for a slot, or for a
    // job in a long poll) is its own small state, not the largest future of any step.
    let answer = match endpoint {
        AgentEndpoint::Join => Box::pin(join(state, &request, &body)).await,
        AgentEndpoint::JoinStatus => Box::pin(join_status(state, &request, &body)).await,
        _ => match Box::pin(signed_by_node(state, bus, &request, &body, &mut bytes)).await {
            Proven::Answered(answer) => answer,
            // A claim may sleep in a long poll for seconds: it takes the request and its body
            // and lets both go once read, so a parked poll holds neither (nor the node's row
            // twice).
            Proven::Claim { glance, generation } => {
                Box::pin(claim::claim(
                    state, request, *glance, generation, body, arrived,
                ))
                .await
            }
        },
    };
    let response = match answer {
        Ok((status, body)) => AgentResponse {
            status,
            body,
            retry_after: None,
        },
        Err(error) => AgentResponse {
            status: error.status(),
            body: error.body(),
            retry_after: error.retry_after(),
        },
    };
    metrics::counter!("capstan_agent_requests_total", "endpoint" => endpoint.as_str(), "status" => response.status.to_string())
        .increment(1);
    (response, bytes)
}

fn body_of<T: for<'de> Deserialize<'de>>(body: &[u8], what: &str) -> Result<T, AgentError> {
    serde_json::from_slice(body).map_err(|error| {
        AgentError::InvalidRequest(format!("the {what} body is not valid: {error}"))
    })
}

/// Counts a request that proves no node against its source network; refuses when the network
/// is out of requests.
fn meter_network(state: &State, request: &AgentRequest) -> Result<(), AgentError> {
    state.limits.take_network(&request.source_address)
}

/// Checks 1-3, then the key and the signature, and only then the nonce: a nonce is remembered
/// once a signature over it has verified, so a forger who saw a nonce cannot spend it first.
/// A failure is metered against the network (a flood of bad requests never costs the node
/// behind the same address anything). `now` is the one clock of both the skew and the nonce
/// window.
async fn authenticate(
    state: &State,
    request: &AgentRequest,
    body: &[u8],
    now: DateTime<Utc>,
    key_of: impl AsyncFnOnce(&ParsedSignature) -> Result<PublicKey, AgentError>,
) -> Result<ParsedSignature, AgentError> {
    let checked = async {
        let parsed = check_unkeyed(request, body, now.timestamp())?;
        let key = key_of(&parsed).await?;
        check_signature(&parsed, &key, request)?;
        Ok(parsed)
    }
    .await;
    match checked {
        Ok(parsed) => {
            let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
            let fresh = store::record_nonce(
                &mut connection,
                parsed.keyid().as_str(),
                parsed.nonce(),
                now,
                NONCE_WINDOW,
            )
            .await
            .map_err(AgentError::unavailable)?;
            if fresh {
                Ok(parsed)
            } else {
                Err(AgentError::replayed())
            }
        }
        Err(error) => {
            meter_network(state, request)?;
            Err(error)
        }
    }
}

/// A node-signed request proven and counted: answered, or a claim to take with the node's
/// first read of its jobs (taken when the wake-ups had rung `generation` times).
enum Proven {
    Answered(Answer),
    Claim {
        glance: Box<store::Glance>,
        generation: u64,
    },
}

/// Why a node-signed request was refused: before its signature proved a node (counted against
/// its network) or after (already counted against the node).
enum Refusal {
    Unproved(AgentError),
    Proved(AgentError),
}

/// Node-signed requests: checks 1-3 need no key; then the key, the signature, the node's meter
/// and the nonce, in that order, reported in protocol order (unknown key, bad signature,
/// replay). Every request whose signature proves a node counts against that node, whatever
/// its answer; one that fails before counts against its network.
///
/// A key this replica knows is checked before the request waits for a slot, and a proven
/// request that moves a job along (a claim for a node with work waiting, a result) waits in
/// the work lane, ahead of plain renewals (`domain::claims::lane`).
async fn signed_by_node(
    state: &State,
    bus: &capstan_bus::Bus,
    request: &AgentRequest,
    body: &[u8],
    bytes: &mut Bytes,
) -> Proven {
    // Before the first read of the node's jobs (see `Wake::rung_since`).
    let generation = state.wake.generation();
    let now = Utc::now();
    let proved = async {
        let parsed = check_unkeyed(request, body, now.timestamp()).map_err(Refusal::Unproved)?;
        let keyid = parsed.keyid().as_str();
        // The signature checks of a burst are the plane's CPU work: plain requests take theirs
        // in turn, so a request that moves a job goes ahead even when thousands are in (see
        // `State::intake_for`).
        let _intake = state
            .intake_for(state.keys.node_of(keyid), request.endpoint)
            .await
            .map_err(Refusal::Unproved)?;
        let proven = state
            .keys
            .by_fingerprint(keyid)
            .is_some_and(|key| check_signature(&parsed, &key, request).is_ok());
        let node = state.keys.node_of(keyid).filter(|_| proven);
        let lane = lane(proven, state.asking(node, request.endpoint));
        // A request this replica could not prove from memory looks its key up in the database:
        // that takes a slot. A proven one goes straight to its lane's queue of arrivals.
        let _slot = match proven {
            true => None,
            false => Some(
                state
                    .agent_slot_for(node, lane)
                    .await
                    .map_err(Refusal::Unproved)?,
            ),
        };
        Box::pin(prove(state, request, body, parsed, proven, now, lane)).await
    }
    .await;
    let arrival = match proved {
        Ok(arrival) => arrival,
        Err(Refusal::Unproved(error)) => {
            return Proven::Answered(meter_network(state, request).and(Err(error)));
        }
        Err(Refusal::Proved(error)) => return Proven::Answered(Err(error)),
    };
    let glance = Box::new(arrival.into_glance());
    if request.endpoint == AgentEndpoint::Claim {
        return Proven::Claim { glance, generation };
    }
    let node = &glance.node;
    Proven::Answered(match request.endpoint {
        AgentEndpoint::Result => Box::pin(claim::result(state, node, body)).await,
        AgentEndpoint::JobStatus => Box::pin(job_status(state, node, body)).await,
        AgentEndpoint::Leave => Box::pin(leave(state, node)).await,
        AgentEndpoint::BackupUrls => Box::pin(backup_urls(state, bus, node, body)).await,
        _ => Box::pin(artifact(bus, body, bytes)).await,
    })
}

/// In an agent slot: the signature is checked with the key `keyid` names (unless `verified`
/// already, by a key this replica knew), then the request is counted against that node, then
/// one statement finds the node, records the nonce, glances at its jobs and, for a claim the
/// plane will take, stamps its heartbeat when due. A key this replica has seen before is
/// checked from memory, so a good request costs that one statement; a forged one writes
/// nothing.
async fn prove(
    state: &State,
    request: &AgentRequest,
    body: &[u8],
    parsed: ParsedSignature,
    verified: bool,
    now: DateTime<Utc>,
    lane: Lane,
) -> Result<store::Arrival, Refusal> {
    let keyid = parsed.keyid().as_str();
    let unavailable = |error| Refusal::Unproved(AgentError::unavailable(error));
    match state.keys.by_fingerprint(keyid) {
        Some(_) if verified => {}
        Some(key) => {
            if let Err(bad) = check_signature(&parsed, &key, request) {
                // An unknown key is named before a bad signature.
                let mut connection = state.connection().await.map_err(unavailable)?;
                let held = store::node_by_fingerprint(&mut connection, keyid)
                    .await
                    .map_err(unavailable)?
                    .is_some();
                return Err(Refusal::Unproved(if held {
                    bad
                } else {
                    AgentError::unknown_key()
                }));
            }
        }
        None => {
            let mut connection = state.connection().await.map_err(unavailable)?;
            let node = store::node_by_fingerprint(&mut connection, keyid)
                .await
                .map_err(unavailable)?
                .ok_or_else(|| Refusal::Unproved(AgentError::unknown_key()))?;
            let key = node
                .public_key
                .as_deref()
                .and_then(|key| state.keys.decode(key))
                .ok_or_else(|| Refusal::Unproved(AgentError::unknown_key()))?;
            check_signature(&parsed, &key, request).map_err(Refusal::Unproved)?;
        }
    }
    state.limits.take_node(keyid).map_err(Refusal::Proved)?;
    // A claim that will be taken stamps its heartbeat here (a refused one changes nothing).
    let stamp = request.endpoint == AgentEndpoint::Claim && claim::will_be_taken(request, body);
    let arriving = store::Arriving {
        fingerprint: keyid.to_owned(),
        nonce: parsed.nonce().to_owned(),
        now,
        stamp,
    };
    let arrival = state
        .arrivals
        .arrive(arriving, state.keys.node_of(keyid), lane)
        .await
        .map_err(|error| Refusal::Proved(AgentError::Unavailable(error.to_string())))?
        // The key verified but no node holds it any more (it left meanwhile).
        .ok_or_else(|| Refusal::Unproved(AgentError::unknown_key()))?;
    if !arrival.fresh {
        return Err(Refusal::Proved(AgentError::replayed()));
    }
    state.keys.learn(keyid, arrival.node.id);
    Ok(arrival)
}

/// What the plane knows of a joining key: its latest request, and whether it is paired,
/// pending, rejected or retired. The key's latest request is locked first, as an approval
/// locks it: an approval that commits while this waits is then seen whole (its node too),
/// never a half that would make this key's request anew or set an approved one back to
/// pending.
async fn known_key(
    connection: &mut PgConnection,
    fingerprint: &str,
) -> Result<(Option<store::JoinRow>, KnownKey), AgentError> {
    let latest = store::latest_join_of_key(connection, fingerprint)
        .await
        .map_err(AgentError::unavailable)?;
    let paired = store::node_by_fingerprint(connection, fingerprint)
        .await
        .map_err(AgentError::unavailable)?
        .is_some();
    let known = match (&latest, paired) {
        (_, true) => KnownKey::Paired,
        (Some(row), _) => match row.state {
            JoinRecordState::Pending => KnownKey::Pending,
            JoinRecordState::Rejected => KnownKey::Rejected {
                rejected_at: row.decided_at.unwrap_or(row.requested_at),
            },
            JoinRecordState::Retired => KnownKey::Retired,
            JoinRecordState::Approved | JoinRecordState::Expired => KnownKey::Unknown,
        },
        (None, _) => KnownKey::Unknown,
    };
    Ok((latest, known))
}

/// A join's body, read, and signed by the key it introduces.
async fn signed_join(
    state: &State,
    request: &AgentRequest,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<ValidJoin, AgentError> {
    let mut proposed = None;
    authenticate(state, request, body, now, async |parsed| {
        let join = parse_join(body)?;
        if parsed.keyid() != &join.fingerprint {
            return Err(AgentError::Unauthorized {
                code: "unknown_key",
                message: "a join must be signed by the key it introduces".into(),
            });
        }
        let key = join.public_key;
        proposed = Some(join);
        Ok(key)
    })
    .await?;
    proposed.ok_or_else(AgentError::unknown_key)
}

async fn join(state: &State, request: &AgentRequest, body: &[u8]) -> Answer {
    meter_network(state, request)?;
    let _slot = state.agent_slot().await?;
    let now = Utc::now();
    let join = signed_join(state, request, body, now).await?;
    let mut transaction = state.store.begin().await.map_err(AgentError::unavailable)?;
    let fingerprint = join.fingerprint.as_str().to_string();
    let (latest, known) = known_key(&mut transaction, &fingerprint).await?;
    let addresses: Vec<String> = join.addresses.iter().map(ToString::to_string).collect();
    let expires_at = now + chrono::Duration::from_std(JOIN_TTL).expect("an hour fits");
    let new = store::NewJoin {
        id: Uuid::now_v7(),
        public_key: &join.public_key.to_base64(),
        fingerprint: &fingerprint,
        name: &join.name,
        source_address: &request.source_address,
        source_network: &source_network(&request.source_address),
        addresses: &addresses,
        agent_version: &join.agent_version,
        site_root: join.site_root.as_deref(),
        container: join.container.as_deref(),
        expires_at,
    };
    let answer = |id: Uuid, state: JoinState, expires_at| {
        (
            202,
            json!({"request_id": id, "fingerprint": fingerprint, "state": state, "expires_at": expires_at}),
        )
    };
    let reply = match decide(&known, now) {
        JoinDecision::AlreadyJoined => return Err(AgentError::AlreadyJoined),
        JoinDecision::Retired => return Err(AgentError::KeyRetired),
        JoinDecision::AnswerRejected => {
            let row = latest.expect("a rejected key has its request");
            return Ok(answer(row.id, JoinState::Rejected, row.expires_at));
        }
        JoinDecision::Renew => {
            let row = latest.expect("a pending key has its request");
            store::renew_join(&mut transaction, row.id, &new)
                .await
                .map_err(AgentError::unavailable)?;
            answer(row.id, JoinState::Pending, expires_at)
        }
        JoinDecision::Create => {
            let (from_network, total) = store::pending_counts(&mut transaction, new.source_network)
                .await
                .map_err(AgentError::unavailable)?;
            pending_cap(from_network, total)?;
            store::insert_join(&mut transaction, &new)
                .await
                .map_err(AgentError::unavailable)?;
            let requested = JoinRequested {
                request_id: new.id,
                name: join.name.clone(),
                fingerprint: fingerprint.clone(),
                source_address: request.source_address.clone(),
                addresses: addresses.clone(),
                agent_version: join.agent_version.clone(),
                expires_at,
            };
            emit(&mut transaction, requested, format!("join/{}", new.id))
                .await
                .map_err(AgentError::unavailable)?;
            answer(new.id, JoinState::Pending, expires_at)
        }
    };
    transaction
        .commit()
        .await
        .map_err(AgentError::unavailable)?;
    Ok(reply)
}

#[derive(Deserialize)]
struct JoinStatusBody {
    request_id: Uuid,
}

async fn join_status(state: &State, request: &AgentRequest, body: &[u8]) -> Answer {
    meter_network(state, request)?;
    let _slot = state.agent_slot().await?;
    let mut found = None;
    let now = Utc::now();
    authenticate(state, request, body, now, async |parsed| {
        let asked: JoinStatusBody = body_of(body, "join_status")?;
        let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
        let join = store::join_by_id(&mut connection, asked.request_id)
            .await
            .map_err(AgentError::unavailable)?
            .ok_or_else(|| AgentError::NotFound(format!("no join request {}", asked.request_id)))?;
        if parsed.keyid().as_str() != join.fingerprint {
            return Err(AgentError::Unauthorized {
                code: "unknown_key",
                message: "join_status must be signed by the key that asked to join".into(),
            });
        }
        let key =
            PublicKey::from_base64(&join.public_key).map_err(|_| AgentError::unknown_key())?;
        found = Some(join);
        Ok(key)
    })
    .await?;
    let join = found.ok_or_else(AgentError::unknown_key)?;
    let view = actions::join_view(&join, None, now);
    Ok((200, json!({"state": view.state, "node_id": join.node_id})))
}

#[derive(Deserialize)]
struct JobStatusBody {
    job_id: i64,
}

async fn job_status(state: &State, node: &NodeRow, body: &[u8]) -> Answer {
    let asked: JobStatusBody = body_of(body, "job_status")?;
    let _slot = state.agent_slot().await?;
    let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
    let job = store::job_by_id(&mut connection, asked.job_id)
        .await
        .map_err(AgentError::unavailable)?
        .filter(|job| job.node_id == node.id)
        .ok_or_else(|| AgentError::NotFound(format!("job {} is not this node's", asked.job_id)))?;
    Ok((200, json!({"state": job.state})))
}

async fn leave(state: &State, node: &NodeRow) -> Answer {
    let _slot = state.agent_slot().await?;
    let mut transaction = state.store.begin().await.map_err(AgentError::unavailable)?;
    let node = store::lock_node(&mut transaction, node.id)
        .await
        .map_err(AgentError::unavailable)?
        .ok_or_else(AgentError::unknown_key)?;
    actions::forget_agent(&mut transaction, &node, PairingEnd::Left)
        .await
        .map_err(AgentError::unavailable)?;
    transaction
        .commit()
        .await
        .map_err(AgentError::unavailable)?;
    Ok((200, json!({})))
}

/// How long rollouts has to answer an artifact question (a binary is megabytes through the
/// object store).
const ARTIFACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Every name of a closed word, for a refusal that says what would have been taken.
fn words<W: Word>(all: &[W]) -> String {
    all.iter()
        .map(|word| word.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// PROTOCOL.md "artifact": a request names a kind, never a path. Checked here (kind, arch),
/// then asked of rollouts, which keeps the releases: the metadata comes back as JSON, an
/// artifact as bytes beside it.
async fn artifact(bus: &capstan_bus::Bus, body: &[u8], bytes: &mut Bytes) -> Answer {
    let asked: Value = body_of(body, "artifact")?;
    let Some(kind) = asked
        .get("kind")
        .and_then(Value::as_str)
        .and_then(AgentArtifactKind::parse)
    else {
        return Err(AgentError::BadKind(format!(
            "kind must be one of {}",
            words(&AgentArtifactKind::ALL)
        )));
    };
    let arch = match asked.get("arch") {
        None => None,
        Some(arch) => match arch.as_str().and_then(Arch::parse) {
            Some(arch) => Some(arch),
            None => {
                return Err(AgentError::BadArch(format!(
                    "arch must be one of {}",
                    words(&Arch::ALL)
                )))
            }
        },
    };
    let version = match asked.get("version") {
        None | Some(Value::Null) => None,
        Some(Value::String(version)) if version.len() <= 64 => Some(version.clone()),
        Some(_) => {
            return Err(AgentError::InvalidRequest(
                "version must be a version string".into(),
            ))
        }
    };
    let sha256 = match asked.get("sha256") {
        None | Some(Value::Null) => None,
        Some(Value::String(sha256))
            if sha256.len() == 64 && sha256.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) =>
        {
            Some(sha256.clone())
        }
        Some(_) => {
            return Err(AgentError::InvalidRequest(
                "sha256 must be 64 lowercase hex digits".into(),
            ))
        }
    };
    let question = ArtifactRequest {
        sha256,
        kind,
        arch,
        version,
    };
    let answer = bus
        .ask_with_body(&question, Bytes::new(), ARTIFACT_TIMEOUT)
        .await;
    match answer {
        Ok((found, artifact)) => match found.metadata {
            Some(metadata) => Ok((200, metadata)),
            None => {
                *bytes = artifact;
                Ok((200, Value::Null))
            }
        },
        Err(error) if error.code == ErrorCode::NotFound => Err(AgentError::NotFound(error.message)),
        Err(error) if error.code == ErrorCode::InvalidRequest => {
            Err(AgentError::InvalidRequest(error.message))
        }
        Err(error) => {
            tracing::warn!(error = %error.message, "rollouts did not answer an artifact request");
            Err(AgentError::Unavailable(
                "the releases cannot be read just now".into(),
            ))
        }
    }
}

#[derive(Deserialize)]
struct BackupUrlsBody {
    job_id: i64,
    op: String,
    keys: Vec<String>,
}

/// How long the backups service has to answer the broker's question (it asks the storage
/// whether each key to write exists).
const BACKUP_URLS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `backup_urls` (BACKUPS-CONTRACT.md, docs/agent-protocol.md): the job must be this node's
/// and running (else `404`); the backups service, which keeps the runs and the storage
/// credentials, checks the rest (`403` the word does not allow the op, `400` a bad key, `404` a
/// seq not this node's, `409 exists` a key already stored) and presigns.
async fn backup_urls(state: &State, bus: &capstan_bus::Bus, node: &NodeRow, body: &[u8]) -> Answer {
    let asked: BackupUrlsBody = body_of(body, "backup_urls")?;
    let job = {
        let _slot = state.agent_slot().await?;
        let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
        store::job_by_id(&mut connection, asked.job_id)
            .await
            .map_err(AgentError::unavailable)?
    };
    let job = job
        .filter(|job| job.node_id == node.id && job.state == JobState::Running)
        .ok_or_else(|| {
            AgentError::NotFound(format!("job {} is not running for this node", asked.job_id))
        })?;
    let question = BackupUrls {
        node_id: node.id,
        job_id: job.id,
        primitive: job.primitive.clone(),
        params: job.params.0.clone(),
        op: asked.op,
        keys: asked.keys,
        correlation_id: job.correlation_id,
    };
    let answer = bus.ask(&question, BACKUP_URLS_TIMEOUT).await;
    match answer {
        Ok(answer) => Ok((200, json!({"urls": answer.urls}))),
        Err(error) => Err(match error.code {
            ErrorCode::InvalidRequest => AgentError::InvalidRequest(error.message),
            ErrorCode::NotFound => AgentError::NotFound(error.message),
            ErrorCode::Forbidden => AgentError::Forbidden(error.message),
            ErrorCode::AlreadyExists => AgentError::Exists(error.message),
            ErrorCode::Conflict => AgentError::Unavailable(error.message),
            _ => {
                tracing::warn!(error = %error.message, "backups did not answer a backup_urls request");
                AgentError::Unavailable("backup storage cannot be reached just now".into())
            }
        }),
    }
}
