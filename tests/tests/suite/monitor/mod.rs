//! The monitor end to end: the real monitor, incidents, agent channel and gateway on a database
//! and NATS server of the test's own, checking sites the test runs (HTTP servers that answer,
//! fail or stall) through a DNS server the test runs in process.

mod cadence;
mod certificates;
mod edge;
mod outbound;
mod pinning;

use capstan_e2e::dns::DnsServer;
use capstan_e2e::plane::Plane;
use capstan_e2e::wait_for;
use capstan_e2e::web::{Answer, Site};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::net::IpAddr;

use crate::agent_channel::TestAgent;
use crate::incidents::{incidents_of, wait_incident, PATIENCE};

pub fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A plane whose monitor resolves through `dns`, may check every second and gives up on a
/// check after two seconds; its incidents pass every second. The test's sites are on
/// loopback, so private targets are allowed.
pub(crate) async fn monitored_plane(dns: &DnsServer) -> Plane {
    monitored_plane_with(dns, &[("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true")]).await
}

/// As [`monitored_plane`], with `extra` settings instead of allowing private targets.
pub(crate) async fn monitored_plane_with(dns: &DnsServer, extra: &[(&str, &str)]) -> Plane {
    let resolver = dns.address.to_string();
    let mut settings = vec![
        ("CAPSTAN__MONITOR__RESOLVER", resolver.as_str()),
        ("CAPSTAN__MONITOR__MIN_INTERVAL_SECS", "1"),
        ("CAPSTAN__MONITOR__TIMEOUT_SECS", "2"),
        ("CAPSTAN__MONITOR__TICK_MS", "100"),
        ("CAPSTAN__INCIDENTS__PASS_SECS", "1"),
    ];
    settings.extend_from_slice(extra);
    Plane::start_with(&settings).await
}

/// A node paired with `addresses` as its own, known to the monitor.
pub(crate) async fn node_at(plane: &Plane, name: &str, addresses: &[&str]) -> i64 {
    let agent = TestAgent::new(plane);
    let (status, body) = agent
        .send(
            "join",
            &json!({"name": name, "public_key": agent.key.public_key().to_base64(),
                    "agent_version": "0.1.0", "site_root": "/var/www/site", "container": null,
                    "addresses": addresses}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let node = plane.approve(&agent.fingerprint()).await;
    wait_for("the monitor to know the node", PATIENCE, || async {
        let (status, _) = uptime(plane, node).await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    node
}

async fn uptime(plane: &Plane, node: i64) -> (StatusCode, Value) {
    plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{node}/uptime"),
            None,
        )
        .await
}

pub(crate) async fn set_uptime(plane: &Plane, node: i64, body: Value) -> (StatusCode, Value) {
    plane
        .api(
            &plane.changer,
            "PUT",
            &format!("/api/v1/nodes/{node}/uptime"),
            Some(body),
        )
        .await
}

/// Waits until the node's check satisfies `check`, and answers it.
pub(crate) async fn wait_check(
    plane: &Plane,
    node: i64,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, PATIENCE, || async {
        let (status, body) = uptime(plane, node).await;
        (status == StatusCode::OK && check(&body)).then_some(body)
    })
    .await
}

fn failing_points(check: &Value) -> Vec<Value> {
    check["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|point| point["ok"] == false)
        .cloned()
        .collect()
}

/// Decision 6.1-9, MO-01: one failure leaves the site up; the second makes it down, from the
/// first failure's time, with the newest reason.
async fn goes_down_after_exactly_two_failures(
    plane: &Plane,
    node: i64,
    site: &Site,
    answer: Answer,
    reason: &str,
) -> Value {
    site.answer(answer);
    let first = wait_check(plane, node, "the first failing check", |check| {
        check["consecutive_failures"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(first["consecutive_failures"], 1, "{first}");
    assert_eq!(first["status"], "up", "one failure is not down: {first}");
    assert_eq!(first["down_since"], Value::Null);
    assert!(
        first["reason"].as_str().unwrap().contains(reason),
        "{first}"
    );
    let down = wait_check(plane, node, "the site to be down", |check| {
        check["status"] == "down"
    })
    .await;
    let failures = failing_points(&down);
    // exactly two: the check that made it down was the second failure (the next is a second
    // or more away, and this is read within 50 ms of each change)
    assert_eq!(down["consecutive_failures"], 2, "{down}");
    assert_eq!(failures.len(), 2, "{down}");
    // the outage began with the first failing check of the streak
    assert_eq!(down["down_since"], failures[0]["at"], "{down}");
    assert!(down["reason"].as_str().unwrap().contains(reason), "{down}");
    // it was down as soon as it had two failures: the first view above had one and was up, and
    // the list filtered by status shows it
    let (status, list) = plane
        .api(&plane.reader, "GET", "/api/v1/uptime?status=down", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(list["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|check| check["node_id"] == node));
    down
}

/// MO-01, MO-04, decision 6.1-9: a site answering 500 is down after exactly two failing checks;
/// `plane:site_down` (critical) opens once through the real incidents service, stays one
/// incident while the site keeps failing, and clears when the site answers; one success is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_04_a_site_answering_500_is_down_after_two_failures_opens_site_down_once_and_clears() {
    let dns = DnsServer::start().await;
    let site = Site::start(loopback(1), 0).await;
    dns.set("shop.test", &[loopback(1)]);
    let plane = monitored_plane(&dns).await;
    let node = node_at(&plane, "web-uptime", &["127.0.0.1"]).await;
    let url = format!("http://shop.test:{}/", site.address.port());
    let (status, set) = set_uptime(
        &plane,
        node,
        json!({"enabled": true, "url": url, "interval_secs": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(
        set["kind"], "http_status",
        "MO-01: http_status is the default"
    );
    assert_eq!(set["status"], "unknown");
    wait_check(&plane, node, "the site to be up", |check| {
        check["status"] == "up"
    })
    .await;

    let down =
        goes_down_after_exactly_two_failures(&plane, node, &site, Answer::ServerError, "HTTP 500")
            .await;
    let incident = wait_incident(
        &plane,
        node,
        "plane:site_down",
        "plane:site_down to open",
        |incident| incident["status"] == "open",
    )
    .await;
    assert_eq!(incident["severity"], "critical");
    assert_eq!(incident["title"], "The site is down");
    assert_eq!(incident["detail"], "HTTP 500");
    assert_eq!(incident["opened_at"], down["down_since"]);

    // Nothing opens twice: wait for two more failing checks after the opening (the marker),
    // then the node still has the one incident, opened once.
    let failures_then = failing_points(&down).len();
    wait_check(&plane, node, "two more failing checks", |check| {
        failing_points(check).len() >= failures_then + 2 && check["status"] == "down"
    })
    .await;
    let all = incidents_of(&plane, node, "plane:site_down").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let (status, detail) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/incidents/{}", incident["id"]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let opened = detail["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["kind"] == "opened")
        .count();
    assert_eq!(opened, 1, "{detail}");

    // One success is up, and the incident clears.
    site.answer(Answer::Ok);
    let up = wait_check(&plane, node, "the site to be up again", |check| {
        check["status"] == "up"
    })
    .await;
    assert_eq!(up["consecutive_failures"], 0);
    assert_eq!(up["down_since"], Value::Null);
    assert_eq!(up["reason"], Value::Null);
    wait_incident(
        &plane,
        node,
        "plane:site_down",
        "plane:site_down to clear",
        |incident| incident["status"] == "closed",
    )
    .await;
    assert_eq!(incidents_of(&plane, node, "plane:site_down").await.len(), 1);
}

/// MO-01, decision 6.1-9: a site that takes the request and never answers fails each check at
/// the timeout, and is down after exactly two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_01_a_stalled_site_is_down_after_two_timeouts() {
    let dns = DnsServer::start().await;
    let site = Site::start(loopback(1), 0).await;
    dns.set("stall.test", &[loopback(1)]);
    let plane = monitored_plane(&dns).await;
    let node = node_at(&plane, "web-stall", &["127.0.0.1"]).await;
    let url = format!("http://stall.test:{}/", site.address.port());
    let (status, _) = set_uptime(
        &plane,
        node,
        json!({"enabled": true, "url": url, "interval_secs": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    wait_check(&plane, node, "the site to be up", |check| {
        check["status"] == "up"
    })
    .await;
    goes_down_after_exactly_two_failures(
        &plane,
        node,
        &site,
        Answer::Stall,
        "no answer within 2 s",
    )
    .await;
    wait_incident(
        &plane,
        node,
        "plane:site_down",
        "plane:site_down to open",
        |incident| incident["status"] == "open",
    )
    .await;
}

/// Bad input is `400 invalid_request` naming the field and changes nothing; a reader may not
/// change a check; an unknown node is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_uptime_setting_is_refused_naming_the_field_and_changes_nothing() {
    let dns = DnsServer::start().await;
    let plane = monitored_plane(&dns).await;
    let node = node_at(&plane, "web-input", &["127.0.0.1"]).await;
    for (body, field) in [
        (
            json!({"enabled": true, "kind": "ping", "url": "http://a.test/"}),
            "kind",
        ),
        (json!({"enabled": true, "url": "ftp://a.test/"}), "url"),
        (
            json!({"enabled": true, "kind": "keyword", "url": "http://a.test/"}),
            "keyword",
        ),
        (
            json!({"enabled": true, "url": "http://a.test/", "interval_secs": 0}),
            "interval_secs",
        ),
    ] {
        let (status, answer) = set_uptime(&plane, node, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{answer}"
        );
    }
    let (_, check) = uptime(&plane, node).await;
    assert_eq!(check["url"], Value::Null, "nothing changed: {check}");
    let (status, _) = plane
        .api(
            &plane.reader,
            "PUT",
            &format!("/api/v1/nodes/{node}/uptime"),
            Some(json!({"enabled": true, "url": "http://a.test/"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = set_uptime(
        &plane,
        999_999,
        json!({"enabled": true, "url": "http://a.test/"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
