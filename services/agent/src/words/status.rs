//! `check_status`: agent version, uptime, load, memory, disk use of the site's filesystem,
//! certificate lineages with their expiry, and whether PostgreSQL answers.

use chrono::Utc;
use serde_json::{json, Map, Value};
use std::{path::Path, time::Duration};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::FileError;
use super::{describe, filesystem_space, Finished, Redaction, Unmeasured};
use crate::{
    config::Config,
    domain::{certificates, AGENT_VERSION},
};

/// The most certificate lineages one report lists.
const MAX_LINEAGES: usize = 200;
/// How long PostgreSQL has to answer.
const POSTGRES_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn check_status(config: &Config) -> Finished {
    let mut unmeasured = Unmeasured::default();
    let mut result = Map::new();
    result.insert("agent_version".into(), json!(AGENT_VERSION));

    proc_facts(&mut result, &mut unmeasured).await;
    disk_fact(config, &mut result, &mut unmeasured).await;
    match certificate_lineages(&config.letsencrypt_dir).await {
        Ok(lineages) => {
            result.insert("certificates".into(), Value::Array(lineages));
        }
        Err(why) => {
            result.insert("certificates".into(), Value::Null);
            unmeasured.add("certificates", why);
        }
    }

    result.insert("postgresql".into(), postgres_fact(config).await);

    backup_facts(config, &mut result, &mut unmeasured);

    let mut output = describe(&result);
    for line in unmeasured.lines() {
        output.push('\n');
        output.push_str(&line);
    }
    result.insert("unmeasured".into(), unmeasured.into_value());
    Finished {
        output,
        result: Value::Object(result),
        redaction: Redaction::Text,
    }
}

/// Uptime, load and memory, from `/proc`.
async fn proc_facts(result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    match tokio::fs::read_to_string("/proc/uptime").await {
        Ok(text) => match text
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<f64>().ok())
        {
            Some(seconds) => {
                result.insert("uptime_s".into(), json!(seconds as u64));
            }
            None => unmeasured.add("uptime", "/proc/uptime has an unexpected shape"),
        },
        Err(error) => unmeasured.add("uptime", format!("/proc/uptime: {error}")),
    }

    match tokio::fs::read_to_string("/proc/loadavg").await {
        Ok(text) => {
            let load: Vec<f64> = text
                .split_whitespace()
                .take(3)
                .filter_map(|s| s.parse().ok())
                .collect();
            if load.len() == 3 {
                result.insert(
                    "load".into(),
                    json!({"1m": load[0], "5m": load[1], "15m": load[2]}),
                );
            } else {
                unmeasured.add("load", "/proc/loadavg has an unexpected shape");
            }
        }
        Err(error) => unmeasured.add("load", format!("/proc/loadavg: {error}")),
    }

    match tokio::fs::read_to_string("/proc/meminfo").await {
        Ok(text) => match memory(&text) {
            Some(memory) => {
                result.insert("memory".into(), memory);
            }
            None => unmeasured.add("memory", "/proc/meminfo lacks MemTotal or MemAvailable"),
        },
        Err(error) => unmeasured.add("memory", format!("/proc/meminfo: {error}")),
    }
}

/// The use of the site's file system (the root's when this machine has no site).
async fn disk_fact(config: &Config, result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    let (disk_path, disk_note) = match &config.site_root {
        Some(root) => (root.clone(), "the site's filesystem"),
        None => ("/".into(), "the root filesystem (this machine has no site)"),
    };
    let space_path = disk_path.clone();
    match tokio::task::spawn_blocking(move || filesystem_space(&space_path))
        .await
        .map_err(|error| error.to_string())
        .and_then(|space| space.map_err(|error| error.to_string()))
    {
        Ok((total, avail)) => {
            let used_percent = if total == 0 {
                0.0
            } else {
                ((total - avail.min(total)) as f64 * 1000.0 / total as f64).round() / 10.0
            };
            result.insert(
                "disk".into(),
                json!({"path": disk_path.display().to_string(), "of": disk_note,
                       "total_bytes": total, "avail_bytes": avail, "used_percent": used_percent}),
            );
        }
        Err(error) => unmeasured.add("disk", format!("{}: {error}", disk_path.display())),
    }
}

/// Whether PostgreSQL answers at its configured address.
async fn postgres_fact(config: &Config) -> Value {
    let postgres = postgres_answers(&config.postgres).await;
    let detail = match &postgres {
        Ok(true) => "accepting connections".to_string(),
        Ok(false) => "something listens but did not answer as PostgreSQL".to_string(),
        Err(why) => why.to_string(),
    };
    json!({"address": config.postgres, "answers": postgres.as_ref().ok(), "detail": detail})
}

/// Backups (issue 14): whether this node holds a site, and the owner's recovery key.
/// (A state directory that is not there yet, as in a word's unit test, says nothing.)
fn backup_facts(config: &Config, result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    if config.state_dir.is_dir() {
        let state_dir = &config.state_dir;
        match crate::state::StateDir::open(state_dir) {
            Ok(state) => {
                let site = state.site();
                if let Err(why) = &site {
                    unmeasured.add("site", why);
                }
                result.insert("site".into(), json!(matches!(site, Ok(Some(_)))));
                result.insert(
                    "recovery_key".into(),
                    crate::domain::backup::recovery_key_report(
                        &crate::backups::keys::recovery_key(&state),
                        crate::backups::keys::recipient_parses,
                    ),
                );
            }
            Err(error) => unmeasured.add("site", error),
        }
    }
}

/// `MemTotal` and `MemAvailable` (kB in the file) as bytes.
fn memory(meminfo: &str) -> Option<Value> {
    let field = |name: &str| {
        meminfo.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let total = field("MemTotal")?.saturating_mul(1024);
    let available = field("MemAvailable")?.saturating_mul(1024);
    Some(json!({"total_bytes": total, "available_bytes": available}))
}

/// Each lineage directory under `dir` with its certificate's expiry; a lineage whose
/// certificate cannot be read is listed with why.
async fn certificate_lineages(dir: &Path) -> Result<Vec<Value>, FileError> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FileError {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        if let Ok(name) = entry.file_name().into_string() {
            if !name.starts_with('.') && entry.path().is_dir() {
                names.push(name);
            }
        }
    }
    names.sort();
    let now = Utc::now();
    let mut lineages = Vec::new();
    for name in names.into_iter().take(MAX_LINEAGES) {
        let cert = dir.join(&name).join("cert.pem");
        let lineage = match tokio::fs::read_to_string(&cert).await {
            Ok(pem) => match certificates::not_after_of_pem(&pem) {
                Ok(not_after) => json!({"lineage": name, "not_after": not_after.to_rfc3339(),
                                        "days_left": certificates::days_left(not_after, now)}),
                Err(why) => json!({"lineage": name, "not_after": null, "why": why.to_string()}),
            },
            Err(error) => {
                json!({"lineage": name, "not_after": null, "why": format!("cert.pem: {error}")})
            }
        };
        lineages.push(lineage);
    }
    Ok(lineages)
}

/// Why nothing answered at PostgreSQL's address: refused or unreachable, or silent too long.
#[derive(Debug, thiserror::Error)]
pub enum NoAnswer {
    #[error("no answer at {address}: {source}")]
    Refused {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no answer at {address} within {} seconds", POSTGRES_TIMEOUT.as_secs())]
    Timeout { address: String },
}

/// Whether PostgreSQL answers at `address`: it is sent an `SSLRequest` (the first message of
/// the protocol) and must answer `S` or `N`, which only PostgreSQL does. `Ok(false)` when
/// something else listens there.
pub async fn postgres_answers(address: &str) -> Result<bool, NoAnswer> {
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(&SSL_REQUEST).await?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await?;
        Ok::<bool, std::io::Error>(matches!(answer[0], b'S' | b'N'))
    };
    match tokio::time::timeout(POSTGRES_TIMEOUT, exchange).await {
        Ok(Ok(answers)) => Ok(answers),
        Ok(Err(source)) => Err(NoAnswer::Refused {
            address: address.to_string(),
            source,
        }),
        Err(_) => Err(NoAnswer::Timeout {
            address: address.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BK-22, issue 14: check_status says whether the node holds a site and where the owner's
    /// recovery key stands, read from the state directory.
    #[tokio::test]
    async fn bk_22_check_status_reports_the_site_and_the_recovery_key() {
        let parent = tempfile::tempdir().unwrap();
        let state_dir = parent.path().join("state");
        let state = crate::state::StateDir::open(&state_dir).unwrap();
        let config = Config {
            state_dir,
            letsencrypt_dir: "/nonexistent".into(),
            postgres: "127.0.0.1:1".into(),
            ..Config::default()
        };
        let before = check_status(&config).await.result;
        assert_eq!(before["site"], false);
        assert_eq!(
            before["recovery_key"],
            json!({"state": "none", "fingerprint": null})
        );
        state
            .write(crate::state::SITE, br#"{"root": "/srv/site"}"#, 0o600)
            .unwrap();
        let owner = age::x25519::Identity::generate().to_public().to_string();
        std::fs::write(
            state.file(crate::backups::keys::RECOVERY_KEY),
            json!({"recipient": owner, "state": "proven", "answer_sha256": "00",
                   "set_at": Utc::now(), "proven_at": Utc::now()})
            .to_string(),
        )
        .unwrap();
        let after = check_status(&config).await.result;
        assert_eq!(after["site"], true);
        assert_eq!(after["recovery_key"]["state"], "already");
        assert_eq!(
            after["recovery_key"]["fingerprint"],
            crate::domain::backup::sha256_hex(owner.as_bytes())
        );
    }

    #[test]
    fn memory_is_read_from_meminfo_in_bytes() {
        let meminfo = "MemTotal:        2048 kB\nMemFree:  10 kB\nMemAvailable:    1024 kB\n";
        assert_eq!(
            memory(meminfo),
            Some(json!({"total_bytes": 2_097_152, "available_bytes": 1_048_576}))
        );
        assert_eq!(memory("MemTotal: 5 kB\n"), None);
    }
}
