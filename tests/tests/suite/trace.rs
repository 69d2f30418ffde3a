//! One trace id spans an HTTP request at the gateway, the rpc it makes into a service, the
//! event that service emits through its outbox, and the consumer that takes the event.

use capstan_bus::{testsuite::NatsServer, ConsumerSpec, Delivery, HandlerError};
use capstan_e2e::{service, settings, wait_for, Tick};
use capstan_events::{Domain, Envelope, Message};
use capstan_runtime::{consume_with_inbox, Apply, Part};
use capstan_store::{outbox, testsuite::TestDatabase, PgConnection};
use capstan_telemetry::{propagation, LogFormat, TelemetryConfig};
use futures::future::BoxFuture;
use opentelemetry::trace::TraceId;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use std::{sync::Arc, time::Duration};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{info_span, Instrument};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

struct Takes;

impl Apply for Takes {
    type Message = ();

    /// Every message on its subject.
    fn read(&self, _delivery: &Delivery) -> Option<Result<(), HandlerError>> {
        Some(Ok(()))
    }

    fn apply<'c>(
        &'c self,
        _connection: &'c mut PgConnection,
        _message: (),
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| attribute.value.to_string())
}

/// The test service's `record`: writes the tick to its outbox.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Record(Tick);
capstan_events::rpc! { Domain::Incidents; "record": Record => serde_json::Value }

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_gateway_through_an_rpc_and_an_event_into_its_consumer() {
    let exporter = InMemorySpanExporter::default();
    let _telemetry = capstan_telemetry::init_with_exporter(
        &TelemetryConfig {
            service_name: "capstan-test".into(),
            log_format: LogFormat::Pretty,
            // Spans travel whatever the logs are set to.
            log_level: "error".into(),
            otlp_endpoint: None,
            logs_to_stderr: false,
        },
        exporter.clone(),
    )
    .unwrap();
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Incidents).await;
    let bus = service.bus.clone();

    // The service: `record` writes a tick to its outbox; its consumer takes ticks.
    let store = service.store.clone();
    let rpc = service.rpc().route(move |Record(tick): Record| {
        let store = store.clone();
        async move {
            let mut transaction = store.begin().await.unwrap();
            outbox::push(&mut transaction, Envelope::new(tick, None))
                .await
                .unwrap();
            transaction.commit().await.unwrap();
            Ok(serde_json::json!({}))
        }
    });
    let consuming = service.clone();
    let consumer: Part = Box::new(move |stop| {
        Box::pin(async move {
            let spec = ConsumerSpec {
                domain: Domain::Incidents,
                stream: Tick::stream(),
                durable: "traced".into(),
                filter_subject: Tick::subject(),
                max_deliver: 3,
                ack_wait: Duration::from_secs(5),
            };
            consume_with_inbox(&consuming, spec, Arc::new(Takes), stop).await
        })
    });
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.run(rpc, vec![consumer], shutdown.clone()));

    // The gateway, in process: a request carrying the caller's trace asks every service for
    // its health over rpc.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let gateway_store = capstan_store::Store::connect(database.url(), "gateway", 2)
        .await
        .unwrap();
    gateway_store
        .migrate(&capstan_gateway::MIGRATOR)
        .await
        .unwrap();
    let state = capstan_gateway::AppState::from(capstan_gateway::Shared {
        bus: bus.clone(),
        store: gateway_store,
        rpc_timeout: Duration::from_secs(1),
        metrics: capstan_telemetry::metrics(None).unwrap(),
        client_addresses: Default::default(),
    });
    tokio::spawn(async move { axum_serve(listener, state).await });
    let mut connection = tokio::net::TcpStream::connect(address).await.unwrap();
    connection
        .write_all(
            format!(
                "GET /healthz HTTP/1.1\r\nhost: plane\r\ntraceparent: {TRACEPARENT}\r\nconnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    connection.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");

    // The same trace goes on: the request asks the service to record a tick.
    let request = info_span!("operator_request");
    propagation::set_parent(&request, Some(TRACEPARENT));
    let _: serde_json::Value = bus
        .ask(&Record(Tick { sequence: 1 }), Duration::from_secs(5))
        .instrument(request)
        .await
        .unwrap();

    let spans = wait_for("the consumer's span", Duration::from_secs(30), || {
        let spans = exporter.get_finished_spans().unwrap();
        async move {
            spans
                .iter()
                .any(|span| span.name == "consume")
                .then_some(spans)
        }
    })
    .await;
    let trace = TraceId::from_hex(TRACE).unwrap();
    let in_trace = |name: &str, op: Option<&str>| {
        spans.iter().any(|span| {
            span.name == name
                && span.span_context.trace_id() == trace
                && op.is_none_or(|op| attribute(span, "op").as_deref() == Some(op))
        })
    };
    assert!(
        in_trace("http", None),
        "the gateway's request span continues the caller's trace"
    );
    assert!(
        in_trace("rpc", Some("health")),
        "the service's rpc span from the gateway is in the trace"
    );
    assert!(
        in_trace("rpc", Some("record")),
        "the rpc that emits the event is in the trace"
    );
    assert!(
        in_trace("consume", None),
        "the consumer of the emitted event is in the trace"
    );

    shutdown.cancel();
    running.await.unwrap().unwrap();
}

async fn axum_serve(listener: tokio::net::TcpListener, state: capstan_gateway::AppState) {
    capstan_gateway::serve(listener, state, CancellationToken::new())
        .await
        .unwrap();
}
