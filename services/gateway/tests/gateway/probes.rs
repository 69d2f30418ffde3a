//! `/healthz` and `/metrics` (issue 10, housekeeping): anyone is told only whether the plane is
//! ready; the services' states, versions and rpc errors, and the metrics, need an operator's
//! token (level 7). A scraper without one reads `telemetry.metrics_listen`.

use crate::harness::Gateway;
use capstan_events::rpc::Level;
use serde_json::Value;

// Here only the fake agent channel answers, and not its health: the plane is starting, and
// each other service's rpc error says why. That reason is an operator's to read, not anyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_tells_a_stranger_only_ready_or_not_and_an_operator_why() {
    let gateway = Gateway::start().await;
    let anyone = gateway
        .client
        .get(format!("{}/healthz", gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anyone.status(), 503);
    let said: Value = anyone.json().await.unwrap();
    assert_eq!(said, serde_json::json!({"status": "starting"}));

    let forged = gateway
        .get("/healthz", "capstan_not_a_real_token")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 503);
    assert_eq!(
        forged.json::<Value>().await.unwrap(),
        serde_json::json!({"status": "starting"}),
        "an unknown token is anyone"
    );

    let token = gateway.token(Level::Read).await;
    let operator = gateway.get("/healthz", &token).send().await.unwrap();
    assert_eq!(operator.status(), 503);
    let said: Value = operator.json().await.unwrap();
    let services = said["services"].as_object().expect("services, by name");
    assert!(
        services
            .values()
            .any(|service| service["error"].as_str().is_some_and(|e| !e.is_empty())),
        "an operator reads why a service is not ready: {said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_an_operators_token_on_the_public_listener() {
    let gateway = Gateway::start().await;
    let anyone = gateway
        .client
        .get(format!("{}/metrics", gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anyone.status(), 401);
    assert!(!anyone.text().await.unwrap().contains("capstan_"));
    let token = gateway.token(Level::Read).await;
    let operator = gateway.get("/metrics", &token).send().await.unwrap();
    assert_eq!(operator.status(), 200);
    assert!(operator
        .headers()
        .get("content-type")
        .is_some_and(|value| value.to_str().unwrap().starts_with("text/plain")));
}
