//! Signals (IN-14): exactly one mail and one webhook per opening, at a real SMTP server and a
//! receiver that checks each delivery with the Standard Webhooks reference library; a silence
//! tells nobody; a receiver that fails is retried until it takes the signal, once, and the
//! delivery log shows every attempt.

use capstan_events::incidents::rpc::WebhookDeliveriesRequest;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Python's aiosmtpd on a free port, keeping every mail it takes in a maildir.
struct Smtp {
    port: u16,
    maildir: tempfile::TempDir,
    child: Child,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Smtp {
    async fn start() -> Smtp {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let maildir = tempfile::tempdir().unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "aiosmtpd",
                "-n",
                "-l",
                &format!("127.0.0.1:{port}"),
                "-c",
                "aiosmtpd.handlers.Mailbox",
            ])
            .arg(maildir.path().join("mail"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with aiosmtpd (deploy/local/test installs it)");
        wait_for("the SMTP server to listen", PATIENCE, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
        })
        .await;
        Smtp {
            port,
            maildir,
            child,
        }
    }

    fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Every mail taken so far, as text.
    fn mails(&self) -> Vec<String> {
        let new: PathBuf = self.maildir.path().join("mail").join("new");
        let mut mails: Vec<String> = std::fs::read_dir(new)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
            .collect();
        mails.sort();
        mails
    }
}

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    verified: bool,
    body: Value,
    answered: u16,
}

/// A webhook receiver: answers 500 to the first `failures` requests and 200 after, and checks
/// each with the Standard Webhooks reference library against the secret it is given.
#[derive(Clone)]
struct Receiver {
    url: String,
    secret: Arc<Mutex<Option<String>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(failures: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let receiver = Receiver {
            url,
            secret: Arc::default(),
            received: Arc::default(),
        };
        let serving = receiver.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let serving = serving.clone();
                tokio::spawn(async move {
                    let Some((headers, body)) = read_request(&mut stream).await else {
                        return;
                    };
                    let verified = serving
                        .secret
                        .lock()
                        .unwrap()
                        .as_deref()
                        .and_then(|secret| standardwebhooks::Webhook::new(secret).ok())
                        .is_some_and(|hook| hook.verify(&body, &headers).is_ok());
                    let answered = {
                        let mut received = serving.received.lock().unwrap();
                        let answered = if received.len() < failures { 500 } else { 200 };
                        received.push(Received {
                            id: headers
                                .get("webhook-id")
                                .and_then(|id| id.to_str().ok())
                                .unwrap_or_default()
                                .to_string(),
                            verified,
                            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                            answered,
                        });
                        answered
                    };
                    let reply = format!(
                        "HTTP/1.1 {answered} {}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        if answered == 200 { "OK" } else { "Internal Server Error" }
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        receiver
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn taken(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|received| received.answered == 200)
            .collect()
    }
}

/// Reads one HTTP/1.1 request framed by Content-Length: its headers and body.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(http::HeaderMap, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
        if let Some(at) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let mut headers = http::HeaderMap::new();
    for line in head.lines().skip(1).filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.append(
            http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            http::HeaderValue::from_str(value.trim()).ok()?,
        );
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
    Some((headers, bytes[head_end..head_end + length].to_vec()))
}

/// Ada (level 10) is mailed warnings too, and the incidents service knows her address.
async fn mail_ada_warnings(plane: &Plane) {
    let (status, body) = plane
        .api(
            &plane.admin,
            "PUT",
            "/api/v1/me/notifications",
            Some(
                json!({"email": "ada@example.org", "email_warning": true, "email_critical": true}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["email"], "ada@example.org");
    let database = plane.database.url().to_string();
    wait_for(
        "ada's address to reach the incidents service",
        PATIENCE,
        || {
            let database = database.clone();
            async move {
                let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(&database)
                    .await
                    .ok()?;
                sqlx::query_scalar::<_, Option<String>>(
                    "SELECT email FROM incidents.operators WHERE name = 'ada'",
                )
                .fetch_optional(&mut connection)
                .await
                .ok()
                .flatten()
                .flatten()
            }
        },
    )
    .await;
}

/// A standard webhook at `receiver` for warnings and above; the receiver learns its secret.
async fn hook(plane: &Plane, receiver: &Receiver) -> Value {
    let (status, created) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/webhooks",
            Some(json!({"url": receiver.url, "kind": "standard", "min_severity": "warning"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    *receiver.secret.lock().unwrap() = Some(secret);
    let (_, listed) = plane
        .api(&plane.admin, "GET", "/api/v1/webhooks", None)
        .await;
    assert!(
        listed.to_string().find("whsec_").is_none(),
        "the secret is shown once: {listed}"
    );
    created
}

/// IN-14, IN-15 (silences): an opening is mailed once and posted once, signed; a case that
/// rides every later claim tells nobody again; a silenced node's incident opens and tells
/// nobody, and says so among its signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_14_an_opening_is_mailed_once_and_posted_once_signed_and_a_silence_tells_nobody() {
    let smtp = Smtp::start().await;
    let receiver = Receiver::start(0).await;
    let plane = plane_with(&[("CAPSTAN__INCIDENTS__SMTP_URL", &smtp.url())]).await;
    mail_ada_warnings(&plane).await;
    hook(&plane, &receiver).await;
    let (told, told_node) = plane.paired_agent("web-told").await;
    let (quiet, quiet_node) = plane.paired_agent("web-quiet").await;
    let ends_at = rfc3339(Utc::now() + chrono::Duration::hours(2));
    let (status, silence) = plane
        .api(
            &plane.changer,
            "POST",
            "/api/v1/silences",
            Some(json!({"node_id": quiet_node, "ends_at": ends_at, "reason": "moving racks"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{silence}");
    assert_eq!(silence["active"], true);

    claim(
        &quiet,
        carrying(
            "disk_headroom",
            open_case(1, "the site filesystem has 1% free"),
        ),
    )
    .await;
    let silenced = wait_incident(
        &plane,
        quiet_node,
        "agent:disk_headroom",
        "the silenced incident",
        |i| i["status"] == "open",
    )
    .await;
    let signals = detail(&plane, silenced["id"].as_i64().unwrap()).await["signals"].clone();
    assert_eq!(
        signals,
        json!([{"at": signals[0]["at"], "channel": "held", "target": "silenced",
                                "state": "held", "attempts": 0, "log": []}])
    );

    claim(
        &told,
        carrying(
            "disk_headroom",
            open_case(1, "the site filesystem has 3% free"),
        ),
    )
    .await;
    wait_for("the opening's mail and webhook", PATIENCE, || async {
        (smtp.mails().len() == 1 && receiver.taken().len() == 1).then_some(())
    })
    .await;
    // The case rides later claims with new notes: no second signal. Then a marker opening on
    // another recipe, whose signals arriving prove the plane had its chance to repeat.
    let mut noted = open_case(1, "the site filesystem has 3% free");
    for notes in 1..=3 {
        noted["notes"] = json!(notes);
        noted["last_note"] = json!(format!("tried {notes} times"));
        claim(&told, carrying("disk_headroom", noted.clone())).await;
    }
    claim(
        &told,
        carrying("fail2ban", open_case(1, "fail2ban is not running")),
    )
    .await;
    wait_for("the marker's mail and webhook", PATIENCE, || async {
        (smtp.mails().len() >= 2 && receiver.taken().len() >= 2).then_some(())
    })
    .await;
    let mails = smtp.mails();
    let taken = receiver.taken();
    assert_eq!(mails.len(), 2, "one mail per opening: {mails:?}");
    assert_eq!(taken.len(), 2, "one webhook per opening: {taken:?}");
    assert!(taken.iter().all(|received| received.verified), "{taken:?}");
    let sources: Vec<&str> = taken
        .iter()
        .map(|received| received.body["data"]["source"].as_str().unwrap_or_default())
        .collect();
    assert!(
        sources.contains(&"agent:disk_headroom") && sources.contains(&"agent:fail2ban"),
        "{sources:?}"
    );
    assert!(
        taken
            .iter()
            .all(|received| received.body["data"]["node_id"] == told_node),
        "{taken:?}"
    );
    assert_eq!(taken[0].body["type"], "incident.opened");
    let disk_mail = mails
        .iter()
        .find(|mail| mail.contains("disk is running out"))
        .unwrap();
    assert!(
        disk_mail.contains("Warning incident opened on web-told"),
        "{disk_mail}"
    );
    assert!(disk_mail.contains("To: ada@example.org"), "{disk_mail}");
    assert!(
        disk_mail
            .to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{disk_mail}"
    );
    plane.stop().await;
}

/// Signals are durable: a receiver that fails three times and then takes the signal gets it
/// once (the same webhook-id on every attempt), and the incident's delivery log shows the
/// four attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_fails_three_times_then_succeeds_gets_the_signal_once_and_the_log_shows_it()
{
    let receiver = Receiver::start(3).await;
    let plane = plane_with(&[]).await;
    hook(&plane, &receiver).await;
    let (agent, node) = plane.paired_agent("web-retry").await;
    claim(
        &agent,
        carrying(
            "disk_headroom",
            open_case(1, "the site filesystem has 3% free"),
        ),
    )
    .await;
    let incident = wait_incident(&plane, node, "agent:disk_headroom", "the incident", |i| {
        i["status"] == "open"
    })
    .await;
    let id = incident["id"].as_i64().unwrap();
    let delivered = wait_for(
        "the webhook delivered after its failures",
        PATIENCE,
        || async {
            let signals = detail(&plane, id).await["signals"].clone();
            signals
                .as_array()
                .unwrap()
                .iter()
                .find(|signal| signal["channel"] == "webhook" && signal["state"] == "delivered")
                .cloned()
        },
    )
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 4, "{received:?}");
    assert_eq!(receiver.taken().len(), 1);
    assert!(
        received
            .iter()
            .all(|one| one.verified && one.id == received[0].id),
        "{received:?}"
    );
    assert_eq!(delivered["attempts"], 4);
    let log: Vec<bool> = delivered["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(log, [false, false, false, true], "{delivered}");
    assert!(
        delivered["log"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("http 500"),
        "{delivered}"
    );
    // The Webhooks page's delivery log (rpc `webhook_deliveries`, level 10) shows the same.
    let actor = json!({"name": "ada", "level": 10});
    let asked: WebhookDeliveriesRequest =
        serde_json::from_value(json!({"actor": actor, "limit": 50})).unwrap();
    let deliveries = serde_json::to_value(plane.bus.ask(&asked, PATIENCE).await.unwrap()).unwrap();
    let logged = &deliveries["deliveries"][0];
    assert_eq!(logged["incident_id"], id, "{deliveries}");
    assert_eq!(logged["state"], "delivered");
    assert_eq!(logged["log"], delivered["log"], "{deliveries}");
    let asked: WebhookDeliveriesRequest =
        serde_json::from_value(json!({"actor": {"name": "chris", "level": 8}, "limit": 50}))
            .unwrap();
    let refused = plane.bus.ask(&asked, PATIENCE).await;
    assert!(refused.is_err(), "level 8 may not read the delivery log");
    plane.stop().await;
}

/// The incidents service's projection of `node`'s Docker host, once it is `host`.
async fn wait_placed(plane: &Plane, node: i64, host: i64) {
    let database = plane.database.url().to_string();
    wait_for(
        "the container's host to reach the incidents service",
        PATIENCE,
        || {
            let database = database.clone();
            async move {
                let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(&database)
                    .await
                    .ok()?;
                sqlx::query_scalar::<_, Option<i64>>(
                    "SELECT host_node_id FROM incidents.nodes WHERE node_id = $1",
                )
                .bind(node)
                .fetch_optional(&mut connection)
                .await
                .ok()
                .flatten()
                .flatten()
                .filter(|placed| *placed == host)
            }
        },
    )
    .await;
}

/// Grouping (issue 11, beyond the spec; IN-14): a Docker host and its container both go
/// silent. Both incidents open, the container's folded under the host's (its `group_id`), and
/// exactly one mail and one webhook are sent, for the host. The container's placement reaches
/// the incidents service as the agent channel's `placement_changed`, from the host's real
/// `host_report` and the container agent's claim naming its container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_host_and_its_container_going_silent_signal_once_for_the_host() {
    let smtp = Smtp::start().await;
    let receiver = Receiver::start(0).await;
    let plane = plane_with(&[
        ("CAPSTAN__INCIDENTS__SMTP_URL", &smtp.url()),
        ("CAPSTAN__INCIDENTS__AGENT_SILENT_SECS", "60"),
    ])
    .await;
    mail_ada_warnings(&plane).await;
    hook(&plane, &receiver).await;
    let (host_agent, host) = plane.paired_agent("dock-1").await;
    let (shop_agent, shop) = plane.paired_agent("shop-1").await;

    // The container's own host report: the kernel it runs on, its host's (issue 27: a host's
    // listing alone places no node).
    let own = plane.queue(shop, "host_report", json!({})).await;
    let (status, claimed) = shop_agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], own);
    let (status, answer) = shop_agent
        .send(
            "result",
            &json!({"job_id": own, "outcome": "completed", "output": "", "reason": null,
                    "result": {"docker": "absent", "boot_id": "boot-dock-1"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The host reports Docker with a container named "shop"; the container's agent says it runs
    // in "shop".
    let job = plane.queue(host, "host_report", json!({})).await;
    let (status, claimed) = host_agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], job);
    let (status, answer) = host_agent
        .send(
            "result",
            &json!({"job_id": job, "outcome": "completed", "output": "", "reason": null,
                    "result": {"docker": "installed", "boot_id": "boot-dock-1",
                               "containers": [{"name": "shop", "state": "running"}]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The container's agent checks in last, so it cannot fall silent before its host.
    claim(&shop_agent, json!({"container": "shop"})).await;
    wait_placed(&plane, shop, host).await;

    // Both stop checking in. The host's incident opens (critical, told); the container's opens
    // too, folded under it.
    let host_incident = wait_for("the host's silence", Duration::from_secs(240), || async {
        incidents_of(&plane, host, "plane:agent_silent")
            .await
            .into_iter()
            .find(|incident| incident["status"] == "open")
    })
    .await;
    let shop_incident = wait_incident(
        &plane,
        shop,
        "plane:agent_silent",
        "the container's silence",
        |incident| incident["status"] == "open",
    )
    .await;
    assert_eq!(host_incident["severity"], "critical");
    assert_eq!(host_incident["group_id"], Value::Null);
    assert_eq!(
        shop_incident["group_id"], host_incident["id"],
        "the container's incident is shown in its host's: {shop_incident}"
    );
    // A marker opening after both, whose signals arriving prove the container's had its chance.
    let (marker_agent, marker) = plane.paired_agent("web-marker").await;
    claim(
        &marker_agent,
        carrying(
            "disk_headroom",
            open_case(1, "the site filesystem has 2% free"),
        ),
    )
    .await;
    wait_for("the marker's mail and webhook", PATIENCE, || async {
        (receiver
            .taken()
            .iter()
            .any(|received| received.body["data"]["node_id"] == json!(marker))
            && smtp.mails().iter().any(|mail| mail.contains("web-marker")))
        .then_some(())
    })
    .await;
    let taken = receiver.taken();
    let told: Vec<&Value> = taken
        .iter()
        .map(|received| &received.body["data"]["node_id"])
        .filter(|node| **node != json!(marker))
        .collect();
    assert_eq!(told, [&json!(host)], "one webhook, for the host: {taken:?}");
    assert!(taken.iter().all(|received| received.verified), "{taken:?}");
    let mails = smtp.mails();
    let unmarked: Vec<&String> = mails
        .iter()
        .filter(|mail| !mail.contains("web-marker"))
        .collect();
    assert_eq!(unmarked.len(), 1, "one mail, for the host: {mails:?}");
    assert!(unmarked[0].contains("dock-1"), "{}", unmarked[0]);
    assert!(!unmarked[0].contains("shop-1"), "{}", unmarked[0]);
    // The container's incident says why it told nobody.
    let signals = detail(&plane, shop_incident["id"].as_i64().unwrap()).await["signals"].clone();
    assert_eq!(
        signals,
        json!([{"at": signals[0]["at"], "channel": "held", "target": "grouped",
                "state": "held", "attempts": 0, "log": []}])
    );
    plane.stop().await;
}
