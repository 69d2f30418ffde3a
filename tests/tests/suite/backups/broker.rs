//! The broker (BK-14, BACKUPS-CONTRACT.md): a node's running backup job gets presigned URLs for
//! new keys under its own run, and nothing else; what the node then tries beyond them (delete,
//! list, read, another key, an overwrite) is refused by the storage itself.

use super::*;
use crate::agent_channel::{PairedAgent, TestAgent, VOCABULARY};

/// The words the test agent reports here: the agent channel's and the backups'.
fn vocabulary() -> Vec<&'static str> {
    let mut words = VOCABULARY.to_vec();
    words.extend(["backup_run", "verify_backup", "restore_database"]);
    words
}

/// A job of `primitive` for `node` as the backups service would have asked for it, claimed by
/// `agent`: it is running.
async fn running(
    plane: &Plane,
    agent: &TestAgent,
    node: i64,
    primitive: &str,
    params: Value,
) -> i64 {
    // Its agent offers the backups' words first, as a real one does on every claim.
    let (status, offered) = agent.claim(&json!({"vocabulary": vocabulary()})).await;
    assert_eq!(status, StatusCode::OK, "{offered}");
    assert_eq!(offered["job"], Value::Null, "{offered}");
    let job = queue_as_backups(plane, node, primitive, params).await;
    claimed(agent, job).await
}

/// A job of `primitive` for `node` that no service asked for (written into the agent
/// channel's table, as a plane that did not check who asked would hold it), claimed by
/// `agent`: it is running.
async fn hand_made(
    plane: &Plane,
    agent: &TestAgent,
    node: i64,
    primitive: &str,
    params: Value,
) -> i64 {
    let job = plane
        .queue_unchecked(node, primitive, "change", params)
        .await;
    claimed(agent, job).await
}

/// `agent` claims `job`, which was the next for it: it is running.
async fn claimed(agent: &TestAgent, job: i64) -> i64 {
    let (status, claimed) = agent.claim(&json!({"vocabulary": vocabulary()})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], job, "{claimed}");
    job
}

/// Ends `job` (the operator withdraws it).
async fn end(plane: &Plane, job: i64) {
    let (status, body) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/jobs/{job}/cancel"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    assert_ne!(plane.job(job).await["state"], "running");
}

async fn urls(agent: &TestAgent, job: i64, op: &str, keys: &[&str]) -> (StatusCode, Value) {
    agent
        .send(
            "backup_urls",
            &json!({"job_id": job, "op": op, "keys": keys}),
        )
        .await
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

/// Issue 27: a job the backups service did not ask for itself (a level-8 operator's hand-made
/// `backup_run` with sequence 2^53, made before the generic route refused it) gets no storage
/// URL, to write or to read: else its run would be opened and every later run of the node
/// refused for ever.
#[tokio::test]
async fn a_job_the_backups_service_did_not_ask_for_gets_no_storage_urls() {
    let s3 = S3Server::start().await;
    let plane = Plane::start().await;
    default_target(&plane, &s3).await;
    let (agent, node) = plane.paired_agent("web-hand-made").await;
    let seq = 1_i64 << 53;
    let job = hand_made(
        &plane,
        &agent,
        node,
        "backup_run",
        json!({"seq": seq, "kind": "full"}),
    )
    .await;
    for (op, key) in [
        ("put", format!("{seq}/db.dump.zst.age.000001")),
        ("get", "1/manifest-1.json".to_string()),
    ] {
        let (status, body) = urls(&agent, job, op, &[key.as_str()]).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "forbidden"),
            "{op}: {body}"
        );
        assert!(
            body.to_string()
                .contains("was not asked for by the backups service"),
            "{body}"
        );
    }
    let written = s3.keys();
    assert!(
        !written
            .iter()
            .any(|key| key.contains(&format!("/node-{node}/"))),
        "nothing of the node's was written: {written:?}"
    );
    // No run was opened for it: the node's backups list none.
    let (status, backups) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/nodes/{node}/backups"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{backups}");
    assert!(!backups.to_string().contains(&seq.to_string()), "{backups}");
    plane.stop().await;
}

#[tokio::test]
async fn bk_14_the_broker_hands_a_running_backup_only_its_own_new_keys_and_storage_refuses_the_rest(
) {
    let s3 = S3Server::start().await;
    let plane = Plane::start().await;
    default_target(&plane, &s3).await;
    let (agent, node) = plane.paired_agent("web-backup").await;
    let job = running(
        &plane,
        &agent,
        node,
        "backup_run",
        json!({"seq": 1, "kind": "full"}),
    )
    .await;

    let (status, answer) = urls(
        &agent,
        job,
        "put",
        &["1/db.dump.zst.age.000001", "1/manifest-1.json"],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let put = answer["urls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|url| url["key"] == "1/db.dump.zst.age.000001")
        .unwrap()
        .clone();
    assert_eq!(put["method"], "PUT");
    assert_eq!(put["headers"], json!({"if-none-match": "*"}));
    let url = put["url"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let sent = http
        .put(&url)
        .header("if-none-match", "*")
        .body("part one")
        .send()
        .await
        .unwrap();
    assert_eq!(
        sent.status(),
        StatusCode::OK,
        "{}",
        sent.text().await.unwrap()
    );
    // It landed where the plane keeps it: {folder}/{space}/node-{node}/{seq:010}/{name}.
    let stored: Vec<String> = s3.keys();
    let suffix = format!("/node-{node}/0000000001/db.dump.zst.age.000001");
    assert!(
        stored
            .iter()
            .any(|key| key.starts_with("fleet/") && key.ends_with(&suffix)),
        "{stored:?}"
    );

    // The storage refuses what the URL was not signed for.
    let again = http
        .put(&url)
        .header("if-none-match", "*")
        .body("over")
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status(),
        StatusCode::PRECONDITION_FAILED,
        "no key is written twice"
    );
    let unsigned = http.put(&url).body("over").send().await.unwrap();
    assert_eq!(
        unsigned.status(),
        StatusCode::FORBIDDEN,
        "the condition is signed in"
    );
    let delete = http.delete(&url).send().await.unwrap();
    assert_eq!(
        delete.status(),
        StatusCode::FORBIDDEN,
        "a PUT URL does not delete"
    );
    let read = http.get(&url).send().await.unwrap();
    assert_eq!(
        read.status(),
        StatusCode::FORBIDDEN,
        "a PUT URL does not read"
    );
    let (path, query) = url.split_once('?').unwrap();
    let bucket_root = format!("{}/{}/", s3.endpoint(), s3.bucket);
    assert!(path.starts_with(&bucket_root));
    let list = http
        .get(format!("{bucket_root}?list-type=2&{query}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        list.status(),
        StatusCode::FORBIDDEN,
        "a PUT URL does not list"
    );
    let other = http
        .put(format!("{}.evil?{query}", path))
        .header("if-none-match", "*")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        other.status(),
        StatusCode::FORBIDDEN,
        "a PUT URL writes its one key"
    );
    assert_eq!(
        std::fs::read_to_string(
            s3.object_path(stored.iter().find(|key| key.ends_with(&suffix)).unwrap())
        )
        .unwrap(),
        "part one"
    );

    // The broker's own refusals.
    let (status, body) = urls(&agent, job, "put", &["1/db.dump.zst.age.000001"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "exists"),
        "{body}"
    );
    assert!(
        body.to_string().contains("1/db.dump.zst.age.000001"),
        "{body}"
    );
    let (status, body) = urls(&agent, job, "put", &["2/x"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden"),
        "{body}"
    );
    let (status, body) = urls(&agent, job, "get", &["1/manifest-1.json"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden"),
        "{body}"
    );
    let (status, body) = urls(&agent, job, "put", &["1/../x"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
    let (status, body) = urls(&agent, job, "delete", &["1/x"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
    let (status, body) = urls(&agent, job + 1000, "put", &["1/x"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "not_found"),
        "{body}"
    );

    // Another node cannot use this node's job.
    let (stranger, _) = plane.paired_agent("web-stranger").await;
    let (status, body) = urls(&stranger, job, "put", &["1/y"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "not_found"),
        "{body}"
    );

    // Once the job has ended, its URLs are no longer handed out.
    end(&plane, job).await;
    let (status, body) = urls(&agent, job, "put", &["1/z"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "not_found"),
        "{body}"
    );

    // A verify reads this node's runs, and only those; it never writes.
    let verify = running(
        &plane,
        &agent,
        node,
        "verify_backup",
        json!({"seq": 1, "level": 2}),
    )
    .await;
    let (status, body) = urls(&agent, verify, "get", &["1/db.dump.zst.age.000001"]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let get = body["urls"][0]["url"].as_str().unwrap();
    let fetched = http.get(get).send().await.unwrap();
    assert_eq!(fetched.status(), StatusCode::OK);
    assert_eq!(fetched.text().await.unwrap(), "part one");
    assert_eq!(
        http.delete(get).send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let (status, body) = urls(&agent, verify, "get", &["7/db.dump.zst.age.000001"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "not_found"),
        "{body}"
    );
    let (status, body) = urls(&agent, verify, "put", &["1/x"]).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden"),
        "{body}"
    );
    // The stranger's verify of seq 1 is not this node's run.
    plane.stop().await;
}
