//! The plane's address policy in the monitor, end to end, with its default (private targets
//! not allowed): a node that reports a loopback address, and a site name that resolves to
//! one, get no connection from the uptime check, the certificate read or the edge probe; and
//! an uptime URL naming loopback or the cloud metadata address is refused when it is set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use capstan_e2e::dns::DnsServer;
use capstan_e2e::wait_for;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{loopback, monitored_plane_with, node_at, set_uptime, uptime, wait_check};

/// A listener that only counts the connections it is offered.
struct Counter {
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Counter {
    fn start(listener: tokio::net::TcpListener) -> Counter {
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Counter { connections, task }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Two counters on one port, at 127.0.0.1 (where the site's name will resolve) and 127.0.0.2
/// (the node's own address).
async fn counters() -> (u16, Counter, Counter) {
    loop {
        let first = tokio::net::TcpListener::bind((loopback(1), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        if let Ok(second) = tokio::net::TcpListener::bind((loopback(2), port)).await {
            return (port, Counter::start(first), Counter::start(second));
        }
    }
}

/// With the default policy, a node reporting 127.0.0.2 and a site name resolving to 127.0.0.1:
/// the uptime check fails saying the address is not allowed, the certificate read is recorded
/// as done, the edge probe finishes with every path refused — and neither address was ever
/// connected to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reporting_loopback_gets_no_check_certificate_read_or_probe_connection() {
    let (port, named, own) = counters().await;
    let port_text = port.to_string();
    let dns = DnsServer::start().await;
    let plane =
        monitored_plane_with(&dns, &[("CAPSTAN__MONITOR__TLS_PORT", port_text.as_str())]).await;
    let node = node_at(&plane, "web-inside", &["127.0.0.2"]).await;
    // The name does not resolve yet, so the URL may be set; it resolves inside afterwards,
    // which every check and probe must notice on its own.
    let url = format!("https://shop.inside.test:{port}/");
    let (status, set) = set_uptime(
        &plane,
        node,
        json!({"enabled": true, "url": url, "interval_secs": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    dns.set("shop.inside.test", &[loopback(1)]);

    let refused = |text: &Value| {
        text.as_str()
            .is_some_and(|text| text.contains("is not a public address"))
    };
    let check = wait_check(&plane, node, "a check refusing the address", |detail| {
        refused(&detail["reason"])
    })
    .await;
    assert!(
        check["reason"].as_str().unwrap().contains(
            "shop.inside.test resolves to 127.0.0.1, which is not a public address (loopback"
        ),
        "{check}"
    );
    wait_for(
        "the certificate read to be recorded",
        Duration::from_secs(30),
        || async {
            let (status, certificate) = plane
                .api(
                    &plane.reader,
                    "GET",
                    &format!("/api/v1/nodes/{node}/certificate"),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{certificate}");
            (!certificate["checked_at"].is_null()).then_some(())
        },
    )
    .await;

    let (status, started) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/nodes/{node}/edge-probe"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let id = started["id"].as_i64().unwrap();
    let run = wait_for(
        "the edge probe to finish",
        Duration::from_secs(60),
        || async {
            let (status, run) = plane
                .api(
                    &plane.reader,
                    "GET",
                    &format!("/api/v1/edge-probes/{id}"),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{run}");
            (run["status"] != "queued" && run["status"] != "running").then_some(run)
        },
    )
    .await;
    assert_eq!(run["status"], "done", "{run}");
    let paths = run["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2, "{run}");
    for path in paths {
        assert_eq!(path["errors"], path["requests"], "{path}");
        assert!(refused(&path["last_error"]), "{path}");
    }
    assert_eq!(paths[1]["target"], "127.0.0.2", "{run}");

    assert_eq!(
        (named.connections(), own.connections()),
        (0, 0),
        "no connection reached the loopback listeners"
    );
}

/// An uptime URL naming a loopback address, the cloud metadata address, or a name resolving to
/// loopback is refused when it is set (422, naming the URL and the range), and the check keeps
/// its old URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uptime_url_to_loopback_or_the_metadata_address_is_refused_when_set() {
    let dns = DnsServer::start().await;
    dns.set("inside.test", &[loopback(1)]);
    let plane = monitored_plane_with(&dns, &[]).await;
    let node = node_at(&plane, "web-url", &["127.0.0.2"]).await;
    for (url, range) in [
        ("http://127.0.0.1:4222/", "loopback, 127.0.0.0/8"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "link-local, 169.254.0.0/16",
        ),
        ("https://[::1]:8222/varz", "loopback, ::1/128"),
        ("https://inside.test/", "loopback, 127.0.0.0/8"),
    ] {
        let (status, body) = set_uptime(
            &plane,
            node,
            json!({"enabled": true, "kind": "keyword", "keyword": "x", "url": url}),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {body}");
        assert_eq!(body["error"]["code"], "refused", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("url: {url} is refused: ")),
            "{message}"
        );
        assert!(message.contains(range), "{message}");
    }
    let (status, detail) = uptime(&plane, node).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert!(detail["url"].is_null(), "nothing was set: {detail}");
}
