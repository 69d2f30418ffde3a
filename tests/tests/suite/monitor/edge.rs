//! Edge versus direct (MO-11, MO-12) end to end: the real monitor and gateway, a DNS server the
//! test runs naming the site's edge, and three sites of the test's own on one port — the edge
//! (127.0.0.1) stalls its first round on purpose, the origin asked directly at 127.0.0.2 is
//! fast, and 127.0.0.3 answers every request with 429 (the site's own limit).

use std::time::Duration;

use capstan_e2e::dns::DnsServer;
use capstan_e2e::wait_for;
use capstan_e2e::web::{Answer, Site};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{loopback, monitored_plane, node_at, set_uptime};

/// Three sites on one port, at 127.0.0.1, .2 and .3.
async fn trio() -> [Site; 3] {
    loop {
        let first = Site::start(loopback(1), 0).await;
        let port = first.address.port();
        let (Ok(second), Ok(third)) = (
            tokio::net::TcpListener::bind((loopback(2), port)).await,
            tokio::net::TcpListener::bind((loopback(3), port)).await,
        ) else {
            continue;
        };
        drop((second, third));
        return [
            first,
            Site::start(loopback(2), port).await,
            Site::start(loopback(3), port).await,
        ];
    }
}

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

/// MO-11, MO-12: a run sends 20 rounds of `GET /login` and `POST {}` down every path at once,
/// as JoineryEdgeProbe/1 with the public name as `Host` on the direct legs too; the edge's two
/// unanswered requests are stalls (given up at 10 s), the 429s are counted apart and are not
/// stalls, and the verdict is "Slow through the edge, fast direct"; the run ends inside 100 s.
/// A reader (level 7) may run it; the 11th run in an hour is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_11_mo_12_edge_stalls_direct_fast_and_429s_apart_give_slow_through_the_edge() {
    let [edge, direct, limited] = trio().await;
    let port = edge.address.port();
    let dns = DnsServer::start().await;
    dns.set("edge.shop.test", &[loopback(1)]);
    let plane = monitored_plane(&dns).await;
    let node = node_at(&plane, "web-edge", &["127.0.0.2", "127.0.0.3"]).await;
    // The check is off, so only the probe asks the sites; its URL is the site's address.
    let url = format!("http://edge.shop.test:{port}/shop");
    let (status, set) = set_uptime(&plane, node, json!({"enabled": false, "url": url})).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    edge.stall_next(2);
    limited.answer(Answer::TooMany);

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
        Duration::from_secs(120),
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
    assert_eq!(run["node_id"], node);
    assert_eq!(run["url"], format!("http://edge.shop.test:{port}/"));
    assert_eq!(run["rounds"], 20, "{run}");
    assert_eq!(
        run["verdict"], "Slow through the edge, fast direct",
        "{run}"
    );
    let took = time(&run["finished_at"]) - time(&run["started_at"]);
    assert!(
        took >= chrono::Duration::seconds(10),
        "a stall is given up at 10 s: {took}"
    );
    assert!(took < chrono::Duration::seconds(100), "{took}");
    let paths = run["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 3, "{run}");

    let (through, fast, rate) = (&paths[0], &paths[1], &paths[2]);
    assert_eq!(through["kind"], "edge");
    assert_eq!(through["target"], "edge.shop.test");
    assert_eq!(through["addresses"], json!(["127.0.0.1"]));
    assert_eq!(through["requests"], 40);
    assert_eq!(through["stalls"], 2, "{through}");
    assert_eq!(through["statuses"], json!({"200": 38}), "{through}");
    assert_eq!(through["errors"], 0);
    assert!(through["p95_ms"].as_u64().unwrap() < 5_000, "{through}");

    assert_eq!(fast["kind"], "direct");
    assert_eq!(fast["target"], "127.0.0.2");
    assert_eq!(fast["stalls"], 0, "{fast}");
    assert_eq!(fast["statuses"], json!({"200": 40}), "{fast}");

    assert_eq!(rate["target"], "127.0.0.3");
    assert_eq!(rate["stalls"], 0, "a 429 is not a stall: {rate}");
    assert_eq!(rate["rate_limited"], 40, "{rate}");
    assert_eq!(rate["statuses"], json!({"429": 40}), "{rate}");
    let notes = run["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|note| note
            .as_str()
            .unwrap()
            .starts_with("40 answers were 429: the site's own per-address limit")),
        "{run}"
    );

    // Every path was asked the same: 20 GETs of /login and 20 POSTs {} to the heartbeat, as
    // JoineryEdgeProbe/1, with the public name as Host.
    for site in [&edge, &direct, &limited] {
        let heads = site.heads();
        assert_eq!(heads.len(), 40, "{heads:?}");
        let gets = heads
            .iter()
            .filter(|head| head.starts_with("GET /login HTTP/1.1\r\n"))
            .count();
        let posts = heads
            .iter()
            .filter(|head| head.starts_with("POST /api/v1/action/vault_heartbeat HTTP/1.1\r\n"))
            .count();
        assert_eq!((gets, posts), (20, 20), "{heads:?}");
        for head in &heads {
            let lower = head.to_ascii_lowercase();
            assert!(
                lower.contains(&format!("\r\nhost: edge.shop.test:{port}")),
                "{head}"
            );
            assert!(
                lower.contains("\r\nuser-agent: joineryedgeprobe/1"),
                "{head}"
            );
        }
    }

    // MO-12: at most 10 runs per node an hour; the 11th is refused, saying so.
    for _ in 1..10 {
        let (status, body) = plane
            .api(
                &plane.reader,
                "POST",
                &format!("/api/v1/nodes/{node}/edge-probe"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let (status, refused) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/nodes/{node}/edge-probe"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], "rate_limited");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 10 times an hour"),
        "{refused}"
    );
    let (status, listed) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{node}/edge-probes"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["probes"].as_array().unwrap().len(), 10);
    assert_eq!(listed["probes"][9]["id"], id, "newest first");
}

/// A node with no site address, or none of its own, cannot be compared: refused, naming why,
/// and nothing is queued; an unknown node or run is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_11_an_edge_probe_needs_a_site_address_and_an_address_of_the_nodes_own() {
    let dns = DnsServer::start().await;
    let plane = monitored_plane(&dns).await;
    let bare = node_at(&plane, "web-no-url", &["127.0.0.2"]).await;
    let post = |node: i64| {
        let plane = &plane;
        async move {
            plane
                .api(
                    &plane.reader,
                    "POST",
                    &format!("/api/v1/nodes/{node}/edge-probe"),
                    None,
                )
                .await
        }
    };
    let (status, refused) = post(bare).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("set its uptime URL first"),
        "{refused}"
    );
    let nameless = node_at(&plane, "web-no-address", &[]).await;
    let (status, _) = set_uptime(
        &plane,
        nameless,
        json!({"enabled": false, "url": "http://shop.test/"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) = post(nameless).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no address of its own"),
        "{refused}"
    );
    for node in [bare, nameless] {
        let (_, listed) = plane
            .api(
                &plane.reader,
                "GET",
                &format!("/api/v1/nodes/{node}/edge-probes"),
                None,
            )
            .await;
        assert_eq!(listed["probes"], json!([]), "nothing queued");
    }
    let (status, _) = post(999_999).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = plane
        .api(&plane.reader, "GET", "/api/v1/edge-probes/999999", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
