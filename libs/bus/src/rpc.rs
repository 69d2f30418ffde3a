//! Request/reply over core NATS: `capstan.rpc.<domain>.<op>`, answered by one replica of the
//! owning service (queue group `<domain>`). Every reply is `{"ok": ...}` or
//! `{"error": {"code", "message"}}`; the trace travels in a `traceparent` header both ways.

use async_nats::HeaderMap;
use bytes::Bytes;
use capstan_events::{
    rpc::{ErrorCode, Reply, RpcError},
    rpc_subject, Domain, SUBJECT_ROOT,
};
use capstan_telemetry::propagation::{current_traceparent, set_parent, TRACEPARENT};
use futures::{future::BoxFuture, StreamExt};
use serde::{de::DeserializeOwned, Serialize};
use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info_span, warn, Instrument};

use crate::{Bus, BusError};

type Route =
    Arc<dyn Fn(Bytes) -> BoxFuture<'static, Result<serde_json::Value, RpcError>> + Send + Sync>;

impl Bus {
    /// Asks `domain` the question `op` and waits up to `timeout` for the answer. No replica
    /// listening, or none answering in time, is `unavailable`.
    pub async fn request<Req, Resp>(
        &self,
        domain: Domain,
        op: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RpcError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let subject = rpc_subject(domain, op);
        let payload = serde_json::to_vec(request).map_err(|error| {
            RpcError::new(
                ErrorCode::InvalidRequest,
                format!("request to {subject}: {error}"),
            )
        })?;
        let mut headers = HeaderMap::new();
        if let Some(traceparent) = current_traceparent() {
            headers.insert(TRACEPARENT, traceparent.as_str());
        }
        let answer = tokio::time::timeout(
            timeout,
            self.client()
                .request_with_headers(subject.clone(), headers, payload.into()),
        )
        .await
        .map_err(|_| {
            RpcError::new(
                ErrorCode::Unavailable,
                format!("{domain} did not answer {op} within {timeout:?}"),
            )
        })?
        .map_err(|error| {
            RpcError::new(
                ErrorCode::Unavailable,
                format!("{domain} cannot be asked {op}: {error}"),
            )
        })?;
        let reply: Reply<Resp> = serde_json::from_slice(&answer.payload).map_err(|error| {
            RpcError::new(
                ErrorCode::Internal,
                format!("{domain} answered {op} with something unreadable: {error}"),
            )
        })?;
        reply.into()
    }
}

/// The rpc questions one service answers, registered by name and served together.
pub struct RpcServer {
    bus: Bus,
    domain: Domain,
    routes: HashMap<String, Route>,
}

impl RpcServer {
    pub fn new(bus: Bus, domain: Domain) -> RpcServer {
        RpcServer {
            bus,
            domain,
            routes: HashMap::new(),
        }
    }

    /// Answers `capstan.rpc.<domain>.<op>` with `handler`. A request that does not parse as
    /// `Req` is answered `invalid_request` without reaching it.
    pub fn route<Req, Resp, F, Fut>(mut self, op: &str, handler: F) -> RpcServer
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RpcError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let op_name = op.to_string();
        let route: Route = Arc::new(move |payload: Bytes| {
            let handler = handler.clone();
            let op_name = op_name.clone();
            Box::pin(async move {
                let request: Req = serde_json::from_slice(&payload).map_err(|error| {
                    RpcError::new(
                        ErrorCode::InvalidRequest,
                        format!("request for {op_name} is not valid: {error}"),
                    )
                })?;
                let response = handler(request).await?;
                serde_json::to_value(response).map_err(|error| {
                    RpcError::new(ErrorCode::Internal, format!("answer to {op_name}: {error}"))
                })
            })
        });
        self.routes.insert(op.to_string(), route);
        self
    }

    /// Serves until `shutdown`, then stops taking questions and finishes the ones in hand.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), BusError> {
        let client = self.bus.client().clone();
        let wildcard = format!("{SUBJECT_ROOT}.rpc.{}.>", self.domain.as_str());
        let prefix = format!("{SUBJECT_ROOT}.rpc.{}.", self.domain.as_str());
        let mut subscription = client
            .queue_subscribe(wildcard.clone(), self.domain.as_str().to_string())
            .await
            .map_err(|error| {
                BusError::Unavailable(format!("subscribing to {wildcard}: {error}"))
            })?;
        let tasks = TaskTracker::new();
        loop {
            let request = tokio::select! {
                _ = shutdown.cancelled() => break,
                request = subscription.next() => request,
            };
            let Some(request) = request else { break };
            let Some(reply_to) = request.reply.clone() else {
                warn!(subject = %request.subject, "rpc request without a reply subject ignored");
                continue;
            };
            let op = request
                .subject
                .as_str()
                .strip_prefix(&prefix)
                .unwrap_or_default()
                .to_string();
            let route = self.routes.get(&op).cloned();
            let traceparent = request
                .headers
                .as_ref()
                .and_then(|headers| headers.get(TRACEPARENT))
                .map(|value| value.to_string());
            let client = client.clone();
            let domain = self.domain;
            tasks.spawn(async move {
                let span = info_span!("rpc", %domain, op = %op);
                set_parent(&span, traceparent.as_deref());
                let answer: Result<serde_json::Value, RpcError> = match route {
                    Some(route) => route(request.payload).instrument(span.clone()).await,
                    None => Err(RpcError::new(
                        ErrorCode::NotFound,
                        format!("{domain} has no rpc named {op:?}"),
                    )),
                };
                let reply: Reply<serde_json::Value> = answer.into();
                let body = serde_json::to_vec(&reply).unwrap_or_else(|_| {
                    br#"{"error":{"code":"internal","message":"unserialisable answer"}}"#.to_vec()
                });
                if let Err(error) = client.publish(reply_to, body.into()).await {
                    warn!(parent: &span, %error, "rpc answer not sent");
                }
            });
        }
        let _ = subscription.unsubscribe().await;
        tasks.close();
        tasks.wait().await;
        let _ = client.flush().await;
        Ok(())
    }
}
