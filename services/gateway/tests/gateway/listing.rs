//! The node and join listings at the gateway: the API's paging and search parameters reach the
//! agent channel as asked (defaults keep the old answer with a `page` beside it), a bad one is
//! `400` naming it before anything is asked, and the UI's list pages carry what a person typed
//! only escaped, in the form and in the pager's links.

use capstan_events::{agent_channel::rpc as ops, rpc::Level, rpc::Rpc};
use serde_json::Value;

use crate::harness::{error_of, node_view, Gateway};

fn asked(gateway: &Gateway, op: &str) -> Vec<Value> {
    gateway
        .script
        .lock()
        .unwrap()
        .asked
        .iter()
        .filter(|(asked, _)| asked == op)
        .map(|(_, request)| request.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listings_take_paging_search_and_filters_and_refuse_bad_ones_naming_them() {
    let gateway = Gateway::start().await;
    let token = gateway.token(Level::Read).await;

    // The default: today's answer (`nodes`), with the page beside it.
    let answer: Value = gateway
        .get("/api/v1/nodes", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["nodes"][0]["id"], 17);
    assert_eq!(
        answer["page"],
        serde_json::json!({"offset": 0, "limit": 100, "total": 1, "next_offset": null})
    );
    let request = asked(&gateway, ops::ListNodes::OP).pop().unwrap();
    assert_eq!(
        request["page"],
        serde_json::json!({"offset": 0, "limit": 100})
    );
    assert_eq!(request["search"], Value::Null);

    let response = gateway
        .get(
            "/api/v1/nodes?q=web%201&health=red&online=false&placement=container&paired=true&offset=50&limit=25",
            &token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request = asked(&gateway, ops::ListNodes::OP).pop().unwrap();
    assert_eq!(request["search"], "web 1");
    assert_eq!(request["health"], "red");
    assert_eq!(request["online"], false);
    assert_eq!(request["placement"], "container");
    assert_eq!(request["paired"], true);
    assert_eq!(
        request["page"],
        serde_json::json!({"offset": 50, "limit": 25})
    );

    let response = gateway
        .get(
            "/api/v1/joins?state=rejected&q=asker&offset=10&limit=5",
            &token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["joins"].is_array() && body["page"]["limit"] == 5,
        "{body}"
    );
    let request = asked(&gateway, ops::ListJoins::OP).pop().unwrap();
    assert_eq!(request["state"], "rejected");
    assert_eq!(request["search"], "asker");
    assert_eq!(
        request["page"],
        serde_json::json!({"offset": 10, "limit": 5})
    );

    let before =
        asked(&gateway, ops::ListNodes::OP).len() + asked(&gateway, ops::ListJoins::OP).len();
    let long = "x".repeat(201);
    for (path, parameter) in [
        ("/api/v1/nodes?limit=0".to_string(), "limit"),
        ("/api/v1/nodes?limit=501".to_string(), "limit"),
        ("/api/v1/nodes?limit=many".to_string(), "limit"),
        ("/api/v1/nodes?offset=-1".to_string(), "offset"),
        ("/api/v1/nodes?offset=1000001".to_string(), "offset"),
        ("/api/v1/nodes?health=blue".to_string(), "health"),
        ("/api/v1/nodes?online=maybe".to_string(), "online"),
        ("/api/v1/nodes?placement=cloud".to_string(), "placement"),
        ("/api/v1/nodes?paired=1".to_string(), "paired"),
        (format!("/api/v1/nodes?q={long}"), "q"),
        ("/api/v1/nodes?q=a%00b".to_string(), "q"),
        ("/api/v1/nodes?page=2".to_string(), "page"),
        ("/api/v1/joins?limit=0".to_string(), "limit"),
        ("/api/v1/joins?offset=x".to_string(), "offset"),
        (format!("/api/v1/joins?q={long}"), "q"),
        ("/api/v1/joins?health=red".to_string(), "health"),
    ] {
        let response = gateway.get(&path, &token).send().await.unwrap();
        let (status, code, message) = error_of(response).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{path}");
        assert!(
            message.starts_with(&format!("{parameter}: ")),
            "{path}: {message}"
        );
    }
    let after =
        asked(&gateway, ops::ListNodes::OP).len() + asked(&gateway, ops::ListJoins::OP).len();
    assert_eq!(before, after, "nothing bad was asked of the agent channel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_pages_escape_what_was_typed_and_keep_it_in_their_links() {
    let gateway = Gateway::start().await;
    {
        let mut script = gateway.script.lock().unwrap();
        // Enough nodes that the page says there is a next one.
        script.nodes = Some((1..=60).map(node_view).collect());
    }
    let reader = gateway.signed_in(Level::Read).await;
    let typed = "<script>alert(1)</script> & \"x\"";
    let encoded: String = url::form_urlencoded::byte_serialize(typed.as_bytes()).collect();
    let page = reader
        .get(&format!("/ui/nodes?q={encoded}&health=red&online=true"))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.has("<script>alert"), "{}", page.body);
    assert!(page.has("alert(1)"), "the search is shown back, escaped");
    // The next page's link keeps the search and filters, encoded, and moves the offset.
    let next = page
        .body
        .split("data-test=\"next\"")
        .next()
        .and_then(|before| before.rsplit("href=\"").next())
        .and_then(|link| link.split('"').next())
        .unwrap();
    assert!(next.starts_with("/ui/nodes?q="), "{next}");
    assert!(
        next.contains("health=red") && next.contains("online=true"),
        "{next}"
    );
    assert!(next.contains("offset=50"), "{next}");
    assert!(
        !next.contains('<') && next.contains("%3Cscript%3E"),
        "{next}"
    );
    let request = asked(&gateway, ops::ListNodes::OP).pop().unwrap();
    assert_eq!(request["search"], typed);
    assert_eq!(request["page"]["limit"], 50);

    // A list's link, shared with someone not signed in, leads through sign-in back to it.
    let anonymous = crate::browser::Browser::new(&gateway);
    let shared = "/ui/nodes?q=web%201&health=red&offset=50";
    let sent = anonymous.get(shared).await;
    assert_eq!(sent.status, 303);
    let sign_in = sent.location.unwrap();
    assert_eq!(
        sign_in,
        "/ui/sign-in?next=%2Fui%2Fnodes%3Fq%3Dweb%25201%26health%3Dred%26offset%3D50"
    );
    let form = anonymous.get(&sign_in).await;
    assert!(
        form.has("value=\"/ui/nodes?q=web%201&#38;health=red&#38;offset=50\"")
            || form.has("value=\"/ui/nodes?q=web%201&amp;health=red&amp;offset=50\""),
        "{}",
        form.body
    );

    // A bad parameter is a 400 page naming it; nothing is asked.
    let page = reader.get("/ui/nodes?health=blue").await;
    assert_eq!(page.status, 400);
    assert!(page.has("health: "), "{}", page.body);
    let page = reader.get("/ui/joins?limit=100000").await;
    assert_eq!(page.status, 400);
    assert!(page.has("limit: "), "{}", page.body);

    // The joins page and its rejected tab.
    let page = reader.get("/ui/joins").await;
    assert_eq!(page.status, 200);
    assert!(page.has("id=\"join-00000000-0000-0000-0000-000000000000\""));
    assert!(
        !page.has("data-test=\"approve\""),
        "level 7 decides nothing"
    );
    let page = reader.get("/ui/joins?state=rejected").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        asked(&gateway, ops::ListJoins::OP).pop().unwrap()["state"],
        "rejected"
    );
    // The bind page is level 10's.
    let bind = "/ui/joins/00000000-0000-0000-0000-000000000000/bind?q=web";
    assert_eq!(reader.get(bind).await.status, 403);
    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get(bind).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.has("data-test=\"bind-to\""), "{}", page.body);
    let request = asked(&gateway, ops::ListNodes::OP).pop().unwrap();
    assert_eq!(
        request["paired"], false,
        "only unpaired nodes can take a key"
    );
    assert_eq!(request["search"], "web");
}
