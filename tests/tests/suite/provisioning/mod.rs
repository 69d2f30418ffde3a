//! Provisioning end to end (issue 29), with the real plane, the real agent binary, the
//! providers' stand-ins and a real sshd per instance (`capstan_provisioning::standin`): a
//! server asked for over the API is made, boots, is bootstrapped over SSH, its agent joins from
//! the instance's own address and is auto-approved, and its node comes online and operational.

mod approval;
mod flow;
mod secrets;

use std::time::Duration;

use capstan_e2e::plane::Plane;
use capstan_e2e::{agent, wait_for};
use capstan_provisioning::standin::{sshd, Flavor, StandIn};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The stand-ins' token.
pub const TOKEN: &str = "standin-token";
/// Where a site's database is made on a test machine (the machines share this host's
/// PostgreSQL; each test's own names keep them apart).
pub const SITE_DATABASE_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A name no other test (nor an earlier run: the sites' databases live in this host's
/// PostgreSQL) has used: `stem` and eight random letters and digits.
pub fn unique(stem: &str) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = (0..8)
        .map(|_| CHARS[rand::random::<u8>() as usize % CHARS.len()] as char)
        .collect();
    format!("{stem}{tail}")
}

/// Drops a site's database and role made on this host by a test machine's install.
pub async fn drop_site_database(name: &str) {
    let database = format!("site_{}", name.replace(['-', '.'], "_"));
    if let Ok(pool) = sqlx::PgPool::connect(SITE_DATABASE_ADMIN_URL).await {
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)"
        ))
        .execute(&pool)
        .await;
        let _ = sqlx::query(&format!("DROP ROLE IF EXISTS \"{database}\""))
            .execute(&pool)
            .await;
        pool.close().await;
    }
}

/// A plane whose provisioning talks to `linode` and `hetzner`, and whose stand-ins give every
/// server they make a real sshd.
pub struct World {
    pub plane: Plane,
    /// The port every machine's sshd listens on.
    pub ssh_port: u16,
    pub linode: StandIn,
    pub hetzner: StandIn,
}

impl World {
    pub async fn start() -> World {
        World::start_with(&[]).await
    }

    pub async fn start_with(extra: &[(&str, &str)]) -> World {
        let linode = StandIn::start(Flavor::Linode).await;
        let hetzner = StandIn::start(Flavor::Hetzner).await;
        // A port of this test's own: tests side by side hand out the same loopback addresses.
        let port = sshd::free_port();
        for standin in [&linode, &hetzner] {
            standin.start_machines(
                port,
                vec![
                    ("CAPSTAN_AGENT_LOCAL_ADDRESS".into(), "{address}".into()),
                    (
                        "CAPSTAN_SITE_DATABASE_ADMIN_URL".into(),
                        SITE_DATABASE_ADMIN_URL.into(),
                    ),
                ],
            );
        }
        let agent = agent::binary().display().to_string();
        let port = port.to_string();
        let (linode_url, hetzner_url) = (linode.base_url(), hetzner.base_url());
        let mut settings = vec![
            (
                "CAPSTAN__PROVISIONING__LINODE_BASE_URL",
                linode_url.as_str(),
            ),
            (
                "CAPSTAN__PROVISIONING__HETZNER_BASE_URL",
                hetzner_url.as_str(),
            ),
            ("CAPSTAN__PROVISIONING__AGENT_BINARY", agent.as_str()),
            ("CAPSTAN__PROVISIONING__SSH_PORT", port.as_str()),
            ("CAPSTAN__PROVISIONING__BOOT_POLL_MILLIS", "100"),
            ("CAPSTAN__PROVISIONING__CALL_TIMEOUT_SECS", "5"),
            // The instances live at loopback addresses: the address policy allows them here.
            ("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true"),
        ];
        settings.extend_from_slice(extra);
        let plane = Plane::start_with(&settings).await;
        World {
            plane,
            ssh_port: port.parse().unwrap(),
            linode,
            hetzner,
        }
    }

    /// Adds a cloud account of `provider` over the API (level 10); its id.
    pub async fn account(&self, provider: &str, label: &str, flag: &str) -> i64 {
        let (status, body) = self
            .plane
            .api(
                &self.plane.admin,
                "POST",
                "/api/v1/provisioning/accounts",
                Some(json!({"provider": provider, "label": label, "flag": flag, "token": TOKEN})),
            )
            .await;
        assert!(status.is_success(), "{status} {body}");
        body["id"].as_i64().unwrap()
    }

    /// Asks for a server over the API; the provision as answered.
    pub async fn ask(&self, account: i64, kind: &str, name: &str, provider: &str) -> Value {
        let (region, size) = match provider {
            "linode" => ("us-east", "g6-nanode-1"),
            _ => ("fsn1", "cx22"),
        };
        let (status, body) = self
            .plane
            .api(
                &self.plane.admin,
                "POST",
                "/api/v1/provisioning/provisions",
                Some(json!({"account_id": account, "kind": kind, "name": name,
                    "region": region, "size": size})),
            )
            .await;
        assert!(status.is_success(), "{status} {body}");
        body
    }

    pub async fn provision(&self, id: i64) -> Value {
        let (status, body) = self
            .plane
            .api(
                &self.plane.reader,
                "GET",
                &format!("/api/v1/provisioning/provisions/{id}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Waits until provision `id` is at `step` (failing at once on another end).
    pub async fn until_step(&self, id: i64, step: &str) -> Value {
        wait_for(
            &format!("provision {id} to reach {step}"),
            Duration::from_secs(120),
            || async {
                let provision = self.provision(id).await;
                let now = provision["step"].as_str().unwrap_or_default().to_string();
                if now != step && (now == "done" || now == "install_failed") {
                    panic!("provision {id} ended {now}, not {step}: {provision}");
                }
                (now == step).then_some(provision)
            },
        )
        .await
    }

    /// Waits until the provision's join was auto-approved and its node is online.
    pub async fn online(&self, id: i64) -> (i64, Value) {
        let provision = self.until_step(id, "done").await;
        let node = provision["node_id"].as_i64().expect("a node");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let approved = loop {
            let provision = self.provision(id).await;
            if provision["approval"]["approved"] == true {
                break provision;
            }
            if tokio::time::Instant::now() >= deadline {
                let (_, joins) = self
                    .plane
                    .api(&self.plane.admin, "GET", "/api/v1/joins?state=all", None)
                    .await;
                panic!("provision {id}'s join was not approved in 60 s: {provision}; the plane's joins: {joins}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let view = self.plane.wait_online(node).await;
        assert_eq!(approved["node_id"], node);
        (node, view)
    }
}
