//! Request/reply over core NATS: `capstan.rpc.<domain>.<op>`, answered by one replica of the
//! owning service (queue group `<domain>`). Every reply is `{"ok": ...}` or
//! `{"error": {"code", "message"}}`; the trace travels in a `traceparent` header both ways.
//! A few questions are for every replica at once ([`RpcServer::route_on_every_replica`]): each
//! answers, and the asker takes the first answer.

use async_nats::HeaderMap;
use bytes::Bytes;
use capstan_events::{
    rpc::{BodyRpc, ErrorCode, Health, JsonRpc, Reply, RpcError, HEALTH},
    rpc_subject, Domain, SUBJECT_ROOT,
};
use capstan_telemetry::propagation::{current_traceparent, set_parent, TRACEPARENT};
use futures::{future::BoxFuture, StreamExt};
use serde::{de::DeserializeOwned, Serialize};
use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info_span, warn, Instrument};

pub use crate::bodies::META_HEADER;
use crate::{bodies::META_OBJECT_HEADER, Bus, BusError};
use capstan_events::Word as _;

/// How long a stopping server waits for NATS to take its last words.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A route's answer: the JSON reply, and a raw body when the route has one.
type Answer = Result<(serde_json::Value, Option<Bytes>), RpcError>;

type Route = Arc<dyn Fn(Option<String>, Bytes) -> BoxFuture<'static, Answer> + Send + Sync>;

/// What a question carries: JSON alone, or a JSON half beside a raw body.
enum Question {
    Json(Bytes),
    WithBody { meta: String, body: Bytes },
}

impl Bus {
    /// Asks the question `request` declares ([`Rpc`]: its domain and op) and waits up to
    /// `timeout` for its answer, of the type the declaration names. No replica listening, or
    /// none answering in time, is `unavailable`.
    pub async fn ask<R: JsonRpc>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, RpcError> {
        self.request(R::DOMAIN, R::OP, request, timeout).await
    }

    /// Asks `domain` whether it is up (every service answers `health`).
    pub async fn health(&self, domain: Domain, timeout: Duration) -> Result<Health, RpcError> {
        self.request(domain, HEALTH, &serde_json::json!({}), timeout)
            .await
    }

    async fn request<Req, Resp>(
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
        let payload = serde_json::to_vec(request).map_err(|error| unwritable(domain, op, error))?;
        let (_, payload) = self
            .exchange(domain, op, Question::Json(payload.into()), timeout)
            .await?;
        read_reply(domain, op, &payload)
    }

    /// Asks the question `meta` declares with a raw `body` carried byte for byte beside it (an
    /// agent's request, whose digest covers its exact bytes); the answer is the declared reply
    /// and a raw body likewise. A body too large for one message goes through the object store
    /// both ways (see [`crate::bodies`]).
    ///
    /// `meta` is written out before this returns, so the caller need not keep it while the
    /// answer is awaited (a long poll's seconds).
    pub fn ask_with_body<'a, R: BodyRpc>(
        &'a self,
        meta: &R,
        body: Bytes,
        timeout: Duration,
    ) -> impl Future<Output = Result<(R::Reply, Bytes), RpcError>> + 'a {
        let (domain, op) = (R::DOMAIN, R::OP);
        let meta = serde_json::to_string(meta).map_err(|error| unwritable(domain, op, error));
        async move {
            let question = Question::WithBody { meta: meta?, body };
            let (meta, body) = self.exchange(domain, op, question, timeout).await?;
            // A reply without a JSON half carries it in the payload (an answer from a server
            // that knew nothing of bodies).
            let (reply, body) = match meta {
                Some(meta) => (Bytes::from(meta), body),
                None => (body, Bytes::new()),
            };
            read_reply(domain, op, &reply).map(|response| (response, body))
        }
    }

    /// Sends one question and collects its answer (the JSON half, if any, and the payload).
    /// One deadline covers parking a large body in the object store, asking, and collecting.
    ///
    /// The future is held for as long as the answer takes (a long poll's seconds), so it is kept
    /// small: the object store's work is boxed (see [`crate::bodies`]), and the exchange is
    /// built in place inside the deadline rather than in a local moved into it (which would
    /// keep room for it twice).
    async fn exchange(
        &self,
        domain: Domain,
        op: &str,
        question: Question,
        timeout: Duration,
    ) -> Result<(Option<String>, Bytes), RpcError> {
        let subject = rpc_subject(domain, op);
        tokio::time::timeout(timeout, async {
            let mut headers = HeaderMap::new();
            if let Some(traceparent) = current_traceparent() {
                headers.insert(TRACEPARENT, traceparent.as_str());
            }
            let payload = match question {
                Question::Json(payload) => self.pack_body(&mut headers, payload).await?,
                Question::WithBody { meta, body } => self.pack(&mut headers, &meta, body).await?,
            };
            // The deadline around the exchange is the only one: the client's own (10 s by
            // default) would cut a long poll short while the service still holds it, and a
            // second timer per request is work for nothing.
            let request = async_nats::Request::new()
                .headers(headers)
                .payload(payload)
                .timeout(None);
            let answer = self
                .client()
                .send_request(subject, request)
                .await
                .map_err(|error| {
                    RpcError::new(
                        ErrorCode::Unavailable,
                        format!("{domain} cannot be asked {op}: {error}"),
                    )
                })?;
            self.unpack(answer.headers.as_ref(), answer.payload).await
        })
        .await
        .map_err(|_| {
            RpcError::new(
                ErrorCode::Unavailable,
                format!("{domain} did not answer {op} within {timeout:?}"),
            )
        })?
    }
}

fn unwritable(domain: Domain, op: &str, error: serde_json::Error) -> RpcError {
    RpcError::new(
        ErrorCode::InvalidRequest,
        format!("request to {}: {error}", rpc_subject(domain, op)),
    )
}

/// Reads a reply, `{"ok": ...}` or `{"error": ...}`, into the answer or its error.
fn read_reply<Resp: DeserializeOwned>(
    domain: Domain,
    op: &str,
    bytes: &[u8],
) -> Result<Resp, RpcError> {
    let reply: Reply<Resp> = serde_json::from_slice(bytes).map_err(|error| {
        RpcError::new(
            ErrorCode::Internal,
            format!("{domain} answered {op} with something unreadable: {error}"),
        )
    })?;
    reply.into()
}

/// A handler's failure in the rpc's words, told the domain of the server answering (so a
/// service's own error type, `capstan_runtime::ServiceError`, can name the service).
pub trait IntoRpcError {
    fn into_rpc_error(self, domain: Domain) -> RpcError;
}

impl IntoRpcError for RpcError {
    fn into_rpc_error(self, _domain: Domain) -> RpcError {
        self
    }
}

/// The rpc questions one service answers, registered by name and served together.
pub struct RpcServer {
    bus: Bus,
    domain: Domain,
    routes: HashMap<String, Route>,
    /// Routes every replica answers, each on a subscription outside the queue group.
    everyone: HashMap<String, Route>,
}

impl RpcServer {
    pub fn new(bus: Bus, domain: Domain) -> RpcServer {
        RpcServer {
            bus,
            domain,
            routes: HashMap::new(),
            everyone: HashMap::new(),
        }
    }

    /// As [`RpcServer::route`], for a handler that takes the service's state first: each
    /// request gets its own clone of `state` (what every service's handlers need, written once).
    /// The handler may fail with any [`IntoRpcError`] (an `RpcError`, or a service's error
    /// type), answered in the rpc's words.
    pub fn route_with_state<R, S, E, F, Fut>(self, state: &S, handler: F) -> RpcServer
    where
        R: JsonRpc,
        S: Clone + Send + Sync + 'static,
        E: IntoRpcError + Send + 'static,
        F: Fn(S, R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, E>> + Send + 'static,
    {
        let state = state.clone();
        let domain = self.domain;
        self.route(move |request: R| {
            let answer = handler(state.clone(), request);
            async move { answer.await.map_err(|error| error.into_rpc_error(domain)) }
        })
    }

    /// Answers `R` as [`RpcServer::route`] does, but on every replica rather than one: for a
    /// question about what each replica holds in memory (a stopping gateway's long polls).
    pub fn route_on_every_replica<R, F, Fut>(mut self, handler: F) -> RpcServer
    where
        R: JsonRpc,
        F: Fn(R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, RpcError>> + Send + 'static,
    {
        self = self.route(handler);
        if let Some(route) = self.routes.remove(R::OP) {
            self.everyone.insert(R::OP.to_string(), route);
        }
        self
    }

    /// Answers the question `R` declares (`capstan.rpc.<domain>.<op>`) with `handler`, whose
    /// answer must be the declared reply. A request that does not parse as `R` is answered
    /// `invalid_request` without reaching it.
    pub fn route<R, F, Fut>(self, handler: F) -> RpcServer
    where
        R: JsonRpc,
        F: Fn(R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, RpcError>> + Send + 'static,
    {
        self.route_json(R::DOMAIN, R::OP, handler)
    }

    /// Answers `health`, the question every service answers the same way.
    pub fn route_health<F, Fut>(self, handler: F) -> RpcServer
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Health, RpcError>> + Send + 'static,
    {
        let domain = self.domain;
        self.route_json(domain, HEALTH, move |_: serde_json::Value| handler())
    }

    fn route_json<Req, Resp, F, Fut>(mut self, domain: Domain, op: &str, handler: F) -> RpcServer
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RpcError>> + Send + 'static,
    {
        self.check_domain(domain, op);
        let handler = Arc::new(handler);
        let op_name = op.to_string();
        let route: Route = Arc::new(move |_meta: Option<String>, payload: Bytes| {
            let handler = handler.clone();
            let op_name = op_name.clone();
            Box::pin(async move {
                let request: Req = parse(&op_name, &payload)?;
                let response = handler(request).await?;
                Ok((to_value(&op_name, response)?, None))
            })
        });
        self.routes.insert(op.to_string(), route);
        self
    }

    /// Answers `R` for [`Bus::ask_with_body`]: `handler` gets the JSON meta and the raw body,
    /// and answers the declared reply and a raw body.
    pub fn route_with_body<R, F, Fut>(mut self, handler: F) -> RpcServer
    where
        R: BodyRpc,
        F: Fn(R, Bytes) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(R::Reply, Bytes), RpcError>> + Send + 'static,
    {
        self.check_domain(R::DOMAIN, R::OP);
        let handler = Arc::new(handler);
        let op_name = R::OP.to_string();
        let route: Route = Arc::new(move |meta: Option<String>, payload: Bytes| {
            let handler = handler.clone();
            let op_name = op_name.clone();
            Box::pin(async move {
                let meta = meta.ok_or_else(|| {
                    RpcError::new(
                        ErrorCode::InvalidRequest,
                        format!("request for {op_name} has no {META_HEADER} header"),
                    )
                })?;
                let meta: R = parse(&op_name, meta.as_bytes())?;
                let (response, body) = handler(meta, payload).await?;
                Ok((to_value(&op_name, response)?, Some(body)))
            })
        });
        self.routes.insert(R::OP.to_string(), route);
        self
    }

    /// A route of another domain's question would never be asked here: a wiring mistake, made
    /// when the server is put together, so it stops the service at its start.
    fn check_domain(&self, domain: Domain, op: &str) {
        assert_eq!(
            domain, self.domain,
            "{op} is a question for {domain}, not for {}",
            self.domain
        );
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
        // Shared by the questions in hand: a `Bus` is two clients' worth of handles.
        let bus = Arc::new(self.bus.clone());
        for (op, route) in self.everyone.clone() {
            let subject = format!("{prefix}{op}");
            let mut own = client.subscribe(subject.clone()).await.map_err(|error| {
                BusError::Unavailable(format!("subscribing to {subject}: {error}"))
            })?;
            let (bus, domain, shutdown) = (bus.clone(), self.domain, shutdown.clone());
            tasks.spawn(async move {
                loop {
                    let request = tokio::select! {
                        _ = shutdown.cancelled() => break,
                        request = own.next() => request,
                    };
                    let Some(request) = request else { break };
                    if request.reply.is_some() {
                        answer(
                            bus.clone(),
                            domain,
                            op.clone(),
                            Some(route.clone()),
                            request,
                        )
                        .await;
                    }
                }
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, own.unsubscribe()).await;
            });
        }
        loop {
            let request = tokio::select! {
                _ = shutdown.cancelled() => break,
                request = subscription.next() => request,
            };
            let Some(request) = request else { break };
            if request.reply.is_none() {
                warn!(subject = %request.subject, "rpc request without a reply subject ignored");
                continue;
            }
            let op = request
                .subject
                .as_str()
                .strip_prefix(&prefix)
                .unwrap_or_default()
                .to_string();
            if self.everyone.contains_key(&op) {
                // This replica's own subscription to it answers (see above).
                continue;
            }
            let route = self.routes.get(&op).cloned();
            tasks.spawn(answer(bus.clone(), self.domain, op, route, request));
        }
        // With the server gone these would wait for it forever; a stop must not.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, subscription.unsubscribe()).await;
        tasks.close();
        tasks.wait().await;
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, client.flush()).await;
        Ok(())
    }
}

/// Answers one question in a span that continues the asker's trace, and sends the reply. A
/// question asked with a body (its JSON half inline or in the bucket) is answered the same way.
/// The task lives as long as its route takes (a held long poll, seconds), so it holds little:
/// the message's headers are let go once read, and the route's own future is boxed.
async fn answer(
    bus: Arc<Bus>,
    domain: Domain,
    op: String,
    route: Option<Route>,
    mut request: async_nats::Message,
) {
    let Some(reply_to) = request.reply.take() else {
        return;
    };
    let span = info_span!("rpc", %domain, op = %op);
    let header = |name: &str| {
        request
            .headers
            .as_ref()
            .and_then(|headers| headers.get(name))
    };
    set_parent(&span, header(TRACEPARENT).map(|value| value.as_str()));
    let with_body = header(META_HEADER).is_some() || header(META_OBJECT_HEADER).is_some();
    let payload = std::mem::take(&mut request.payload);
    let unpacked = Box::pin(bus.unpack(request.headers.as_ref(), payload))
        .instrument(span.clone())
        .await;
    drop(request);
    let answer: Answer = match (unpacked, route) {
        (Ok((meta, payload)), Some(route)) => route(meta, payload).instrument(span.clone()).await,
        (Ok(_), None) => Err(RpcError::new(
            ErrorCode::NotFound,
            format!("{domain} has no rpc named {op:?}"),
        )),
        (Err(error), _) => Err(error),
    };
    let (reply, body) = match answer {
        Ok((value, body)) => (Reply::Ok(value), body),
        Err(error) => (Reply::Error(error), None),
    };
    let reply = serialise(&reply);
    // Boxed, as the unpacking is: neither is in hand while the route waits.
    let sent = if with_body {
        Box::pin(send_with_body(
            &bus,
            reply_to,
            reply,
            body.unwrap_or_default(),
        ))
        .await
    } else {
        Box::pin(send_plain(&bus, reply_to, reply)).await
    };
    if let Err(error) = sent {
        warn!(parent: &span, %error, "rpc answer not sent");
    }
}

fn serialise(reply: &Reply<serde_json::Value>) -> Vec<u8> {
    serde_json::to_vec(reply).unwrap_or_else(|_| {
        br#"{"error":{"code":"internal","message":"unserialisable answer"}}"#.to_vec()
    })
}

/// Sends a reply with a body: packed as a request is, and when storing the body fails, the
/// failure is the answer.
async fn send_with_body(
    bus: &Bus,
    reply_to: async_nats::Subject,
    reply: Vec<u8>,
    body: Bytes,
) -> Result<(), String> {
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let mut headers = HeaderMap::new();
    let payload = match bus.pack(&mut headers, &reply, body).await {
        Ok(payload) => payload,
        Err(error) => {
            headers = HeaderMap::new();
            let failed = serialise(&Reply::Error(error));
            headers.insert(META_HEADER, String::from_utf8_lossy(&failed).as_ref());
            Bytes::new()
        }
    };
    bus.client()
        .publish_with_headers(reply_to, headers, payload)
        .await
        .map_err(|error| error.to_string())
}

/// Sends a plain JSON reply, through the body store when it is too large for a message.
async fn send_plain(
    bus: &Bus,
    reply_to: async_nats::Subject,
    reply: Vec<u8>,
) -> Result<(), String> {
    let mut headers = HeaderMap::new();
    let payload = match bus.pack_body(&mut headers, reply.into()).await {
        Ok(payload) => payload,
        Err(error) => {
            headers = HeaderMap::new();
            serialise(&Reply::Error(error)).into()
        }
    };
    bus.client()
        .publish_with_headers(reply_to, headers, payload)
        .await
        .map_err(|error| error.to_string())
}

fn parse<T: DeserializeOwned>(op: &str, bytes: &[u8]) -> Result<T, RpcError> {
    serde_json::from_slice(bytes).map_err(|error| {
        RpcError::new(
            ErrorCode::InvalidRequest,
            format!("request for {op} is not valid: {error}"),
        )
    })
}

fn to_value<T: Serialize>(op: &str, value: T) -> Result<serde_json::Value, RpcError> {
    serde_json::to_value(value)
        .map_err(|error| RpcError::new(ErrorCode::Internal, format!("answer to {op}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of_val;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Probe(serde_json::Value);
    capstan_events::rpc! { Domain::AgentChannel; "op" [body]: Probe => serde_json::Value }

    /// A bus whose client connects in the background, to a port nobody listens on: enough to
    /// build futures and measure them.
    async fn unconnected() -> Bus {
        Bus::connect("nats://127.0.0.1:1", "sizes")
            .await
            .expect("the client starts without a server")
    }

    // Each open long poll holds one of each of these for its whole wait, so at thousands of
    // agents every byte counts thousands of times. They were 9 KiB each while the object store's
    // futures were inline; now about 1.6 KiB (most of it async-nats' own request future) and
    // 0.8 KiB.
    #[tokio::test]
    async fn a_question_and_its_answer_hold_little_while_they_wait() {
        let bus = unconnected().await;
        let meta = serde_json::json!({});
        let asking = bus.ask_with_body(&Probe(meta), Bytes::new(), Duration::from_secs(30));
        assert!(
            size_of_val(&asking) <= 2048,
            "{} bytes",
            size_of_val(&asking)
        );
        let question = async_nats::Message {
            subject: "capstan.rpc.agent_channel.op".into(),
            reply: Some("_INBOX.x".into()),
            payload: Bytes::new(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        };
        let answering = answer(
            Arc::new(bus.clone()),
            Domain::AgentChannel,
            "op".into(),
            None,
            question,
        );
        assert!(
            size_of_val(&answering) <= 1024,
            "{} bytes",
            size_of_val(&answering)
        );
    }
}
