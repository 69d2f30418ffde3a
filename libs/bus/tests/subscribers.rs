//! Outside programs on a secured bus: a subscriber user (`capstan admin nats-config
//! --subscriber NAME`) follows an event stream through a durable consumer of its own name,
//! as docs/subscribing.md tells, and may do nothing else; and the passwords the project
//! generates always read as strings to nats-server.

use async_nats::jetstream::{self, consumer::pull};
use async_nats::ConnectOptions as RawOptions;
use capstan_bus::{
    access::{authorization, generate_password, Auth, BusUser},
    testsuite::NatsServer,
    Outgoing,
};
use capstan_events::{Domain, RawEnvelope};
use futures::StreamExt;
use serde_json::json;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

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
    .unwrap()
}

#[tokio::test]
async fn a_subscriber_consumes_an_event_stream_durably_and_may_not_publish_or_delete() {
    let server = NatsServer::start_with_subscribers(&["warehouse"]);
    let domain = Domain::AgentChannel;
    let stream_name = domain.events_stream();
    let service = server.connect_as(BusUser::Service(domain)).await;
    service.ensure_streams(domain).await.unwrap();
    let event = envelope("capstan.agent_channel.node_reported");
    service
        .publish(Outgoing::raw(
            "capstan.events.agent_channel.node_reported".into(),
            &event,
        ))
        .await
        .unwrap();

    // The outside program: a plain NATS client, as docs/subscribing.md says.
    let client = RawOptions::with_user_and_password(
        "warehouse".into(),
        server.subscriber_password("warehouse"),
    )
    .custom_inbox_prefix("_INBOX.warehouse")
    .connect(server.url())
    .await
    .expect("the subscriber connects");
    let events = jetstream::new(client.clone());
    let stream = events.get_stream(&stream_name).await.unwrap();
    let consumer = stream
        .get_or_create_consumer(
            "warehouse",
            pull::Config {
                durable_name: Some("warehouse".into()),
                filter_subject: domain.events_subjects(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut messages = consumer
        .fetch()
        .max_messages(1)
        .expires(WAIT)
        .messages()
        .await
        .unwrap();
    let message = tokio::time::timeout(WAIT, messages.next())
        .await
        .expect("an event within the wait")
        .expect("one event")
        .unwrap();
    let received = RawEnvelope::from_slice(&message.payload).unwrap();
    assert_eq!(received.id, event.id);
    // Acknowledged and confirmed by the server: the durable consumer keeps it, and has
    // nothing left to deliver.
    message.double_ack().await.unwrap();
    let mut consumer = stream
        .get_consumer::<pull::Config>("warehouse")
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(
        (info.ack_floor.stream_sequence, info.num_ack_pending),
        (1, 0),
        "{info:?}"
    );

    // Refused: a command to the plane, and deleting the stream (it still holds its event).
    client
        .publish("capstan.cmd.agent_channel.request_job", "{}".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    server
        .logged(&[
            "Publish Violation",
            "warehouse",
            "capstan.cmd.agent_channel.request_job",
        ])
        .await;
    let deleted =
        tokio::time::timeout(Duration::from_secs(2), events.delete_stream(&stream_name)).await;
    assert!(
        !matches!(deleted, Ok(Ok(_))),
        "the subscriber deleted the stream"
    );
    server
        .logged(&[
            "Publish Violation",
            "warehouse",
            &format!("$JS.API.STREAM.DELETE.{stream_name}"),
        ])
        .await;
    let mut kept = jetstream::new(
        RawOptions::with_user_and_password(
            BusUser::Service(domain).name().into(),
            server.password(BusUser::Service(domain)),
        )
        .custom_inbox_prefix(domain.inbox_prefix())
        .connect(server.url())
        .await
        .unwrap(),
    )
    .get_stream(&stream_name)
    .await
    .unwrap();
    assert_eq!(kept.info().await.unwrap().state.messages, 1);
}

/// The server checks its configuration with `-t`; every user's password in its environment.
fn configuration_accepted(config: &std::path::Path, password_of: impl Fn(usize) -> String) -> bool {
    let mut command = Command::new(nats_server());
    command.arg("-c").arg(config).arg("-t");
    for (index, user) in BusUser::every().into_iter().enumerate() {
        command.env(user.secret_variable(Auth::Password), password_of(index));
    }
    command.output().expect("nats-server runs").status.success()
}

fn nats_server() -> std::path::PathBuf {
    std::env::var_os("NATS_SERVER")
        .map(Into::into)
        .unwrap_or_else(|| {
            ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
                .into_iter()
                .map(std::path::PathBuf::from)
                .find(|path| path.exists())
                .unwrap_or_else(|| "nats-server".into())
        })
}

/// nats-server reads `password: $VARIABLE` as configuration: a value like `1e5…` stops it
/// (about one in fourteen `openssl rand -hex 24` passwords did, so one configuration of ten
/// such failed about every other time); the project's generated passwords begin with a
/// letter, and 100 configurations of ten generated passwords each are all accepted.
#[test]
fn generated_passwords_always_read_as_strings_to_nats_server() {
    let directory = tempfile::tempdir().unwrap();
    let config = directory.path().join("auth.conf");
    std::fs::write(
        &config,
        format!("port: -1\n{}", authorization(Auth::Password)),
    )
    .unwrap();
    assert!(
        !configuration_accepted(&config, |index| if index == 0 {
            "1e5d0c2a9".to_string()
        } else {
            generate_password()
        }),
        "a password beginning with a digit is expected to stop nats-server"
    );
    for _ in 0..100 {
        assert!(configuration_accepted(&config, |_| generate_password()));
    }
}
