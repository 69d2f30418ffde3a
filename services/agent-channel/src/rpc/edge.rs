//! What the gateway asks about its connections (docs/security.md, "The gateway's
//! connections"): whether a large agent body is worth reading at all (`vet_agent_request`), and
//! handing back a job whose answer never reached its agent (`hand_back`). A claim whose agent
//! hung up is released by `release_poll` ([`crate::wake::Wake::released_for`]).

use capstan_events::{
    agent_channel::rpc::{
        AgentEndpoint, AgentResponse, HandBack, HandedBack, VetAgentRequest, Vetted,
        HAND_BACK_WITHIN_SECONDS,
    },
    rpc::RpcError,
};
use chrono::Utc;

use super::State;
use crate::{
    actions::unavailable,
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
pub async fn hand_back(state: State, request: HandBack) -> Result<HandedBack, RpcError> {
    let mut connection = state.connection().await.map_err(unavailable)?;
    let returned = store::hand_back(&mut connection, request.job_id, HAND_BACK_WITHIN_SECONDS)
        .await
        .map_err(unavailable)?;
    if returned {
        tracing::info!(
            job_id = request.job_id,
            "job handed back: its answer never reached the agent"
        );
        metrics::counter!("capstan_agent_jobs_handed_back_total").increment(1);
    }
    Ok(HandedBack { returned })
}
