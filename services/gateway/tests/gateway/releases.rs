//! `POST /api/v1/releases` (issue 15): the upload's artifacts reach rollouts as raw bytes in
//! the order it reads them, and bad input is refused naming the field before anything is asked.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_events::rpc::Level;
use capstan_events::{rollouts::rpc as ops, rpc::Rpc};
use serde_json::json;

use crate::harness::{error_of, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_reaches_rollouts_as_the_metadata_and_the_artifacts_in_order() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let response = gateway
        .client
        .post(format!("{}/api/v1/releases", gateway.url))
        .bearer_auth(&admin)
        .json(&json!({
            "metadata": "{\"signed\": {}}",
            "binaries": {"linux-arm64": STANDARD.encode(b"ARM"), "linux-amd64": STANDARD.encode(b"AMD")},
            "support_bundle": STANDARD.encode(b"BUNDLE"),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let asked = gateway.script.lock().unwrap().asked.clone();
    let (op, question) = asked.last().unwrap();
    assert_eq!(op, ops::PublishRelease::OP);
    assert_eq!(question["metadata"], "{\"signed\": {}}");
    assert_eq!(
        question["artifact_bytes"],
        json!(b"AMDARMBUNDLE".to_vec()),
        "binaries by architecture, then the bundle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_with_an_artifact_that_is_not_base64_is_refused_naming_it() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let response = gateway
        .client
        .post(format!("{}/api/v1/releases", gateway.url))
        .bearer_auth(&admin)
        .json(&json!({"metadata": "{}", "binaries": {"linux-amd64": "not base64!"}}))
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(response).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    assert!(message.contains("binaries.linux-amd64"), "{message}");
    let asked = gateway.script.lock().unwrap().asked.clone();
    assert!(
        asked.iter().all(|(op, _)| op != ops::PublishRelease::OP),
        "nothing was asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_release_upload_reaches_rollouts_with_its_archive_as_raw_bytes() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let response = gateway
        .client
        .post(format!("{}/api/v1/site-releases", gateway.url))
        .bearer_auth(&admin)
        .json(
            &json!({"version": "2.1.0", "manifest": "{}", "signatures": "{}",
            "archive": STANDARD.encode(b"TAR")}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let asked = gateway.script.lock().unwrap().asked.clone();
    let (op, question) = asked.last().unwrap();
    assert_eq!(op, ops::PublishSiteRelease::OP);
    assert_eq!(question["version"], "2.1.0");
    assert_eq!(question["archive_bytes"], json!(b"TAR".to_vec()));
    // An archive that is not base64 is refused naming it, and nothing is asked.
    let before = gateway.script.lock().unwrap().asked.len();
    let response = gateway
        .client
        .post(format!("{}/api/v1/site-releases", gateway.url))
        .bearer_auth(&admin)
        .json(
            &json!({"version": "2.1.0", "manifest": "{}", "signatures": "{}",
            "archive": "not base64!"}),
        )
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(response).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    assert!(message.contains("archive"), "{message}");
    assert_eq!(gateway.script.lock().unwrap().asked.len(), before);
}
