//! The bus is not open: against a nats-server running the generated authorization, a stranger
//! cannot connect, a service cannot send another's operator questions nor serve another's rpc,
//! and every service still does its own work (serve its rpc, publish its events, consume its
//! commands, carry large bodies) under its own user without one permission violation.

use async_nats::ConnectOptions as RawOptions;
use bytes::Bytes;
use capstan_bus::{
    access::BusUser, testsuite::NatsServer, Bus, ConnectOptions, ConsumerSpec, Credentials,
    Delivery, HandlerError, Outgoing, RpcServer,
};
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::rpc::{ApproveJoin, Approved},
    rpc::{Actor, JsonRpc, Level, Rpc},
    rpc_subject, Domain, RawEnvelope,
};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

/// A question of the agent channel's that answers its JSON and body as they came.
#[derive(serde::Serialize, serde::Deserialize)]
struct Echo(Value);
capstan_events::rpc! { Domain::AgentChannel; "echo" [body]: Echo => Value }

/// A plain client of `user`, for what the `Bus` never does (subscribing where it should not).
async fn raw(server: &NatsServer, user: BusUser) -> async_nats::Client {
    let domain = match user {
        BusUser::Service(domain) => domain,
        BusUser::AllInOne => Domain::Gateway,
    };
    RawOptions::with_user_and_password(user.name().to_string(), server.password(user))
        .custom_inbox_prefix(domain.inbox_prefix())
        .connect(server.url())
        .await
        .expect("the user connects")
}

#[tokio::test]
async fn a_connection_without_credentials_is_refused() {
    let server = NatsServer::start_secured();
    let anonymous = async_nats::connect(server.url()).await;
    assert!(anonymous.is_err(), "an anonymous client was let in");
    let wrong = RawOptions::with_user_and_password("gateway".into(), "guessed".into())
        .connect(server.url())
        .await;
    assert!(wrong.is_err(), "a wrong password was let in");
    // The bus itself, given no credentials, cannot ensure a stream: nothing is let through.
    let bus = Bus::connect(&server.url(), "anonymous").await.unwrap();
    let ensured = tokio::time::timeout(WAIT * 2, bus.ensure_streams(Domain::Billing)).await;
    assert!(
        !matches!(ensured, Ok(Ok(()))),
        "streams were created without credentials"
    );
    // Its own user gets in.
    let billing = server.connect_as(BusUser::Service(Domain::Billing)).await;
    billing.ensure_streams(Domain::Billing).await.unwrap();
}

#[tokio::test]
async fn the_agent_channel_user_cannot_publish_an_operator_rpc() {
    let server = NatsServer::start_secured();
    let approve = ApproveJoin::subject();
    // The real service's user listens as its queue group.
    let listener = raw(&server, BusUser::Service(Domain::AgentChannel)).await;
    let mut questions = listener
        .queue_subscribe(
            rpc_subject(Domain::AgentChannel, ">"),
            "agent_channel".into(),
        )
        .await
        .unwrap();
    listener.flush().await.unwrap();

    // Another connection of the agent channel's own user claims level 10...
    let forger = raw(&server, BusUser::Service(Domain::AgentChannel)).await;
    forger
        .publish(
            approve.clone(),
            r#"{"actor":{"name":"forged","level":10}}"#.into(),
        )
        .await
        .unwrap();
    // ...flushed, so the server has judged it before the marker below is sent.
    forger.flush().await.unwrap();
    let refused = server
        .logged(&["Publish Violation", "agent_channel", &approve])
        .await;
    assert!(refused.contains("agent_channel"), "{refused}");

    // The gateway's question, sent after, is the first the listener sees.
    let gateway = raw(&server, BusUser::Service(Domain::Gateway)).await;
    gateway
        .publish(approve.clone(), r#"{"marker":true}"#.into())
        .await
        .unwrap();
    gateway.flush().await.unwrap();
    let first = tokio::time::timeout(WAIT, questions.next())
        .await
        .expect("the gateway's question arrives")
        .unwrap();
    assert_eq!(
        first.payload,
        Bytes::from_static(br#"{"marker":true}"#),
        "the forged question reached the service"
    );
}

#[tokio::test]
async fn the_gateway_user_can_ask_an_operator_rpc() {
    let server = NatsServer::start_secured();
    let agent_channel = server
        .connect_as(BusUser::Service(Domain::AgentChannel))
        .await;
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(
        RpcServer::new(agent_channel, Domain::AgentChannel)
            .route(|request: ApproveJoin| async move {
                Ok(Approved {
                    node_id: request.node_id.unwrap_or(NodeId(0)),
                })
            })
            .serve(shutdown.clone()),
    );
    let gateway = server.connect_as(BusUser::Service(Domain::Gateway)).await;
    let approve = ApproveJoin {
        actor: Actor {
            name: "ada".into(),
            level: Level::Admin,
            address: None,
        },
        join_id: uuid::Uuid::nil(),
        node_id: Some(NodeId(7)),
    };
    let answer = wait_for_answer(&gateway, &approve).await;
    assert_eq!(answer, Approved { node_id: NodeId(7) });
    // The service asking its own health (what `capstan health` runs with its credentials).
    let own = server
        .connect_as(BusUser::Service(Domain::AgentChannel))
        .await;
    let health = own.health(Domain::AgentChannel, WAIT).await;
    assert!(
        matches!(&health, Err(error) if error.message.contains("no rpc named")),
        "{health:?}"
    );
    shutdown.cancel();
    serving.await.unwrap().unwrap();
    assert_eq!(server.violations(), Vec::<String>::new());
}

/// Asks until the server's subscription is in place (a fresh server answers `no responders`
/// for a moment), then returns the answer.
async fn wait_for_answer<R: JsonRpc>(bus: &Bus, request: &R) -> R::Reply {
    let (deadline, op) = (tokio::time::Instant::now() + WAIT, R::OP);
    loop {
        match bus.ask(request, Duration::from_secs(2)).await {
            Ok(answer) => return answer,
            Err(error) if tokio::time::Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("no answer to {op}: {error}"),
        }
    }
}

/// Waits until the agent channel's rpc subscription is in place: any answer but `unavailable`
/// (here `not_found`, as the test's server answers no `health`).
async fn wait_until_served(bus: &Bus) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let asked = bus
            .health(Domain::AgentChannel, Duration::from_secs(2))
            .await;
        match asked {
            Err(error) if error.code == capstan_events::rpc::ErrorCode::Unavailable => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never served: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => return,
        }
    }
}

#[tokio::test]
async fn no_other_user_can_serve_a_services_rpc() {
    let server = NatsServer::start_secured();
    let claims = rpc_subject(Domain::AgentChannel, ">");
    let billing = raw(&server, BusUser::Service(Domain::Billing)).await;
    let _stolen = billing
        .queue_subscribe(claims.clone(), "agent_channel".into())
        .await
        .unwrap();
    billing.flush().await.unwrap();
    server
        .logged(&["Subscription Violation", "billing", &claims])
        .await;
    // Even the owner may serve only as its own queue group, never a plain subscription that
    // would see every question beside the real replicas.
    let owner = raw(&server, BusUser::Service(Domain::AgentChannel)).await;
    let _plain = owner.subscribe(claims.clone()).await.unwrap();
    owner.flush().await.unwrap();
    server
        .logged(&["Subscription Violation", "agent_channel", &claims])
        .await;
    // Nor read another user's replies.
    let _replies = billing.subscribe("_INBOX.gateway.>").await.unwrap();
    billing.flush().await.unwrap();
    server
        .logged(&["Subscription Violation", "billing", "_INBOX.gateway.>"])
        .await;
}

#[tokio::test]
async fn a_service_serves_its_rpc_publishes_its_events_and_consumes_its_commands_under_its_own_user(
) {
    let server = NatsServer::start_secured();
    let domain = Domain::AgentChannel;
    let service = server.connect_as(BusUser::Service(domain)).await;
    service.ensure_streams(domain).await.unwrap();

    // rpc, with a body too large for a message both ways (the claim check's object store).
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(
        RpcServer::new(service.clone(), domain)
            .route_with_body(|meta: Echo, body: Bytes| async move { Ok((meta.0, body)) })
            .serve(shutdown.clone()),
    );
    let gateway = server.connect_as(BusUser::Service(Domain::Gateway)).await;
    wait_until_served(&gateway).await;
    let large = Bytes::from(vec![7u8; 2 * 1024 * 1024]);
    let (meta, body): (Value, Bytes) = gateway
        .ask_with_body(&Echo(json!({"n": 1})), large.clone(), WAIT)
        .await
        .unwrap();
    assert_eq!(meta, json!({"n": 1}));
    assert_eq!(body, large);

    // Its events, acknowledged by JetStream.
    let event = envelope("capstan.agent_channel.node_reported");
    service
        .publish(Outgoing::raw(
            "capstan.events.agent_channel.node_reported".into(),
            &event,
        ))
        .await
        .unwrap();

    // A command for it (sent by `capstan all`'s user), taken by its durable consumer.
    let all = server.connect_as(BusUser::AllInOne).await;
    let command = envelope("capstan.agent_channel.request_job");
    all.publish(Outgoing::raw(
        "capstan.cmd.agent_channel.request_job".into(),
        &command,
    ))
    .await
    .unwrap();
    let (taken, mut received) = tokio::sync::mpsc::unbounded_channel();
    let consuming = {
        let service = service.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            service
                .consume(
                    ConsumerSpec {
                        domain,
                        stream: domain.commands_stream(),
                        durable: domain.commands_consumer(),
                        filter_subject: domain.commands_subjects(),
                        max_deliver: 3,
                        ack_wait: Duration::from_secs(5),
                    },
                    move |delivery: Delivery| {
                        let taken = taken.clone();
                        async move {
                            taken
                                .send(delivery.envelope.id)
                                .map_err(|error| HandlerError::Retry(error.to_string()))
                        }
                    },
                    shutdown,
                )
                .await
        })
    };
    let id = tokio::time::timeout(WAIT, received.recv())
        .await
        .expect("the command is consumed")
        .unwrap();
    assert_eq!(id, command.id);

    shutdown.cancel();
    serving.await.unwrap().unwrap();
    consuming.await.unwrap().unwrap();
    assert_eq!(
        server.violations(),
        Vec::<String>::new(),
        "a service's own work met a permissions violation"
    );
}

fn envelope(event_type: &str) -> RawEnvelope {
    RawEnvelope::from_slice(
        json!({
            "specversion": "1.0",
            "id": uuid::Uuid::now_v7(),
            "source": "capstan/test",
            "type": event_type,
            "time": "2026-01-01T00:00:00Z",
            "datacontenttype": "application/json",
            "dataversion": 1,
            "data": {}
        })
        .to_string()
        .as_bytes(),
    )
    .expect("a valid envelope")
}

/// What a service's connection options look like: its credentials never show when printed.
#[test]
fn connection_options_never_print_a_password() {
    let mut options = ConnectOptions::new("nats://127.0.0.1:4222", "x");
    options.credentials = Credentials::UserPassword {
        user: "gateway".into(),
        password: "hunter2".to_string().into(),
    };
    let printed = format!("{options:?}");
    assert!(
        printed.contains("gateway") && !printed.contains("hunter2"),
        "{printed}"
    );
}
