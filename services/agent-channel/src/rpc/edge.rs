//! What the gateway asks about its connections (docs/security.md, "The gateway's
//! connections"): whether a large agent body is worth reading at all (`vet_agent_request`), and
//! handing back a job whose answer never reached its agent (`hand_back`). A claim whose agent
//! hung up, or whose answer the gateway gave up waiting for, is released by `release_poll`
//! ([`release_poll`], [`crate::wake::Wake::release_poll`]).

use capstan_events::{
    agent_channel::rpc::{
        AgentEndpoint, AgentResponse, ClaimsReleased, HandBack, HandedBack, ReleasePoll,
        VetAgentRequest, Vetted, HAND_BACK_WITHIN_SECONDS,
    },
    rpc::RpcError,
};
use chrono::Utc;

use capstan_runtime::ServiceError;

use super::State;
use crate::{
    domain::auth::{check_head, check_signature, AgentError},
    store,
};

/// The refusal a node-signed request gets whatever its body: `missing_signature`,
/// `clock_skew`, `unknown_key`, `bad_signature` (the signature covers the `Content-Digest`
/// header, not the body) or the rate of its network or node; `None` when its body is worth
/// reading. Nothing is counted for a request that goes on (its `agent_request` is); a refused
/// one that proves no node is counted against its network, as `agent_request` would count it.
/// A join's body is small and never vetted.
pub async fn vet(state: State, question: VetAgentRequest) -> Result<Vetted, RpcError> {
    let request = &question.request;
    if matches!(
        request.endpoint,
        AgentEndpoint::Join | AgentEndpoint::JoinStatus
    ) {
        let refusal = state.limits.check_network(&request.source_address).err();
        return Ok(Vetted {
            refusal: refusal.map(refused),
        });
    }
    let proved = async {
        let parsed = check_head(request, Utc::now().timestamp())?;
        let keyid = parsed.keyid().as_str();
        let key = match state.keys.by_fingerprint(keyid) {
            Some(key) => key,
            None => {
                let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
                store::node_by_fingerprint(&mut connection, keyid)
                    .await
                    .map_err(AgentError::unavailable)?
                    .and_then(|node| node.public_key)
                    .and_then(|key| state.keys.decode(&key))
                    .ok_or_else(AgentError::unknown_key)?
            }
        };
        if let Err(bad) = check_signature(&parsed, &key, request) {
            // An unknown key is named before a bad signature, as `agent_request` names it.
            let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
            let held = store::node_by_fingerprint(&mut connection, keyid)
                .await
                .map_err(AgentError::unavailable)?
                .is_some();
            return Err(if held { bad } else { AgentError::unknown_key() });
        }
        Ok(keyid.to_string())
    }
    .await;
    let refusal = match proved {
        Ok(keyid) => state.limits.check_node(&keyid).err(),
        Err(error @ AgentError::Unavailable(_)) => Some(error),
        Err(error) => Some(
            state
                .limits
                .take_network(&request.source_address)
                .err()
                .unwrap_or(error),
        ),
    };
    if let Some(refusal) = &refusal {
        metrics::counter!("capstan_agent_requests_vetted_out_total", "code" => refusal.code())
            .increment(1);
    }
    Ok(Vetted {
        refusal: refusal.map(refused),
    })
}

fn refused(error: AgentError) -> AgentResponse {
    AgentResponse {
        status: error.status(),
        body: error.body(),
        retry_after: error.retry_after(),
    }
}

/// Puts back to `pending` a job whose claim's answer the gateway could not write at all (its
/// agent had hung up): the node never had it, so it is not lost. A job that moved on (a result
/// came, it was lost or handed out long ago) stays as it is.
pub async fn hand_back(state: State, request: HandBack) -> Result<HandedBack, ServiceError> {
    let returned = give_back(&state, request.job_id, "its answer never reached the agent").await?;
    Ok(HandedBack { returned })
}

/// Releases one claim (answered by every replica): its agent hung up, or its gateway gave up
/// waiting for its answer and answered the agent itself. The replica holding the claim ends it
/// without a job; a job the claim had handed out already reached nobody and goes back to
/// `pending` here, on the replica that remembers the hand-out.
pub async fn release_poll(
    state: State,
    request: ReleasePoll,
) -> Result<ClaimsReleased, ServiceError> {
    let (released, handed) = state.wake.release_poll(request.poll);
    if let Some(job_id) = handed {
        give_back(&state, job_id, "its claim was released after the hand-out").await?;
    }
    Ok(ClaimsReleased { released })
}

/// Puts `job_id` back to `pending` if it is still running and was handed out within
/// [`HAND_BACK_WITHIN_SECONDS`] (its node's bell rings); whether it did. `why` is logged.
pub(crate) async fn give_back(
    state: &State,
    job_id: i64,
    why: &'static str,
) -> Result<bool, capstan_store::StoreError> {
    let mut connection = state.connection().await?;
    let returned = store::hand_back(&mut connection, job_id, HAND_BACK_WITHIN_SECONDS).await?;
    if returned {
        tracing::info!(job_id, why, "job handed back");
        metrics::counter!("capstan_agent_jobs_handed_back_total").increment(1);
    }
    Ok(returned)
}
