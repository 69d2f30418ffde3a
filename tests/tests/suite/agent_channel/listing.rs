//! The node and join listings of the real agent channel over a seeded fleet of 2,000 nodes
//! (`capstan_e2e::fleet`): the pages cover every node once, in order; the health and placement
//! filters agree with each node's own view (MO-07, PV-15); bad paging or search asked over
//! rpc is `invalid_request` naming the parameter, and over HTTP `400` naming it.

use capstan_e2e::fleet;
use capstan_events::{
    agent_channel::rpc::{ListJoins, ListNodes},
    rpc::{ErrorCode, JsonRpc, Rpc, RpcError},
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::{collections::BTreeMap, time::Duration};

use super::Plane;

async fn page(plane: &Plane, query: &str) -> Value {
    let (status, answer) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes?{query}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{query}: {answer}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_07_pv_15_the_listings_page_every_node_once_and_their_filters_agree_with_each_view() {
    let plane = Plane::start().await;
    fleet::seed(plane.database.url(), 2_000, 120).await;

    // Every node once, by name, in pages of 500; the views say each one's dot and placement.
    let mut seen = Vec::new();
    let mut dots: BTreeMap<String, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut offset = Some(0);
    while let Some(at) = offset {
        let answer = page(&plane, &format!("limit=500&offset={at}")).await;
        assert_eq!(answer["page"]["total"], 2_000);
        for node in answer["nodes"].as_array().unwrap() {
            seen.push(node["name"].as_str().unwrap().to_string());
            *dots
                .entry(node["health"]["dot"].as_str().unwrap().into())
                .or_default() += 1;
            *kinds
                .entry(node["placement"]["kind"].as_str().unwrap().into())
                .or_default() += 1;
        }
        offset = answer["page"]["next_offset"].as_u64();
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen.len(), 2_000);
    assert_eq!(seen, sorted, "each node once, by name");
    assert_eq!(kinds["container"], 195, "{kinds:?}");
    assert_eq!(kinds["host"], 40, "{kinds:?}");

    // Each filter's total is the number of views that say so, and its page holds only them.
    for (dot, count) in &dots {
        let answer = page(&plane, &format!("health={dot}&limit=500")).await;
        assert_eq!(answer["page"]["total"], *count, "{dot}");
        for node in answer["nodes"].as_array().unwrap() {
            assert_eq!(node["health"]["dot"], dot.as_str());
        }
    }
    for (kind, count) in &kinds {
        let answer = page(&plane, &format!("placement={kind}&limit=500")).await;
        assert_eq!(answer["page"]["total"], *count, "{kind}");
        for node in answer["nodes"].as_array().unwrap() {
            assert_eq!(node["placement"]["kind"], kind.as_str());
        }
    }
    // Online: two thirds were heard just now, and only paired nodes count.
    let online = page(&plane, "online=true&limit=1").await["page"]["total"]
        .as_u64()
        .unwrap();
    let expected = (1..=2_000).filter(|i| i % 3 != 0 && i % 10 != 0).count() as u64;
    assert_eq!(online, expected);
    // Search by a fingerprint as the UI shows it, grouped, and by an address.
    let any = page(&plane, "q=node-01234").await;
    let fingerprint = any["nodes"][0]["fingerprint"].as_str().unwrap().to_string();
    let (prefix, rest) = fingerprint.split_once(':').unwrap();
    let grouped: Vec<String> = rest
        .as_bytes()
        .chunks(4)
        .map(|chunk| String::from_utf8_lossy(chunk).to_string())
        .collect();
    let shown = format!("{prefix}: {}", grouped.join(" "));
    let encoded: String = shown
        .bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect();
    let found = page(&plane, &format!("q={encoded}")).await;
    assert_eq!(found["page"]["total"], 1, "{shown}");
    assert_eq!(found["nodes"][0]["name"], "node-01234");
    let found = page(&plane, "q=10.4.210.7").await;
    assert_eq!(found["nodes"][0]["name"], "node-01234");

    // The joins, newest first, paged.
    let (status, joins) = plane
        .api(
            &plane.reader,
            "GET",
            "/api/v1/joins?limit=50&offset=100",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{joins}");
    assert_eq!(joins["page"]["total"], 120);
    assert_eq!(joins["joins"].as_array().unwrap().len(), 20);
    assert_eq!(joins["page"]["next_offset"], Value::Null);

    // Bad input asked of the agent channel itself is refused naming the parameter.
    for (request, parameter) in [
        (json!({"page": {"offset": 0, "limit": 0}}), "limit"),
        (json!({"page": {"offset": 0, "limit": 501}}), "limit"),
        (
            json!({"page": {"offset": 1_000_001, "limit": 10}}),
            "offset",
        ),
        (json!({"search": "x".repeat(201)}), "q"),
        (json!({"search": "a\u{7}b"}), "q"),
    ] {
        let mut asked = request.clone();
        asked["actor"] = json!({"name": "rita", "level": 7});
        for (op, refused) in [
            (ListNodes::OP, refused_by::<ListNodes>(&plane, &asked).await),
            (ListJoins::OP, refused_by::<ListJoins>(&plane, &asked).await),
        ] {
            assert_eq!(refused.code, ErrorCode::InvalidRequest, "{op} {request}");
            assert!(
                refused.message.starts_with(&format!("{parameter}: ")),
                "{op} {request}: {}",
                refused.message
            );
        }
    }
    // And over HTTP, before anything is asked.
    for (query, parameter) in [
        ("limit=0", "limit"),
        ("health=blue", "health"),
        ("tab=x", "tab"),
    ] {
        let (status, refused) = plane
            .api(
                &plane.reader,
                "GET",
                &format!("/api/v1/nodes?{query}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{parameter}: ")),
            "{refused}"
        );
    }
    plane.stop().await;
}

/// What the agent channel answers `asked` (a request of `R` as JSON), which it must refuse.
async fn refused_by<R: JsonRpc>(plane: &Plane, asked: &Value) -> RpcError {
    let request: R = serde_json::from_value(asked.clone()).expect("the request parses");
    match plane.bus.ask(&request, Duration::from_secs(5)).await {
        Ok(_) => panic!("{} {asked} was not refused", R::OP),
        Err(refused) => refused,
    }
}
