//! `host_report`: operating system, kernel, boot id, disk available and total, failed units
//! when systemd runs, containers when docker is installed.

use serde_json::{json, Map, Value};

use super::{
    describe, filesystem_space, find_program, run_program, systemd_running, Finished, Redaction,
    Unmeasured,
};
use crate::{
    config::Config,
    domain::recipes::data_root::{self, DataRoot},
};

/// The most units or containers one report lists.
const MAX_LISTED: usize = 500;

pub async fn host_report(config: &Config) -> Finished {
    let mut unmeasured = Unmeasured::default();
    let mut result = Map::new();

    match tokio::fs::read_to_string("/etc/os-release").await {
        Ok(text) => {
            result.insert("os".into(), os_release(&text));
        }
        Err(error) => {
            result.insert("os".into(), Value::Null);
            unmeasured.add("os", format!("/etc/os-release: {error}"));
        }
    }
    for (field, file) in [
        ("kernel", "/proc/sys/kernel/osrelease"),
        ("boot_id", "/proc/sys/kernel/random/boot_id"),
    ] {
        match tokio::fs::read_to_string(file).await {
            Ok(text) => {
                result.insert(field.into(), json!(text.trim()));
            }
            Err(error) => {
                result.insert(field.into(), Value::Null);
                unmeasured.add(field, format!("{file}: {error}"));
            }
        }
    }

    let disk_path = config.site_root.clone().unwrap_or_else(|| "/".into());
    let space_path = disk_path.clone();
    match tokio::task::spawn_blocking(move || filesystem_space(&space_path))
        .await
        .unwrap_or_else(|error| Err(error.to_string()))
    {
        Ok((total, avail)) => {
            result.insert(
                "disk".into(),
                json!({"path": disk_path.display().to_string(), "avail_bytes": avail, "total_bytes": total}),
            );
        }
        Err(error) => {
            result.insert(
                "disk".into(),
                json!({"path": disk_path.display().to_string(), "avail_bytes": null, "total_bytes": null}),
            );
            unmeasured.add("disk", format!("{}: {error}", disk_path.display()));
        }
    }

    let systemd = systemd_running();
    result.insert(
        "systemd".into(),
        json!(if systemd { "running" } else { "absent" }),
    );
    let failed_units = match (systemd, find_program("systemctl")) {
        (false, _) => {
            unmeasured.add("failed_units", "systemd is not running on this machine");
            Value::Null
        }
        (true, None) => {
            unmeasured.add("failed_units", "systemctl is not installed");
            Value::Null
        }
        (true, Some(systemctl)) => {
            match run_program(
                &systemctl,
                &[
                    "list-units",
                    "--state=failed",
                    "--no-legend",
                    "--plain",
                    "--no-pager",
                ],
            )
            .await
            {
                Ok(ran) if ran.success => Value::Array(
                    ran.stdout
                        .lines()
                        .filter_map(|line| line.split_whitespace().next())
                        .take(MAX_LISTED)
                        .map(|unit| json!(unit))
                        .collect(),
                ),
                Ok(ran) => {
                    unmeasured.add("failed_units", format!("systemctl: {}", ran.stderr.trim()));
                    Value::Null
                }
                Err(why) => {
                    unmeasured.add("failed_units", why);
                    Value::Null
                }
            }
        }
    };
    result.insert("failed_units".into(), failed_units);

    let containers = match find_program("docker") {
        None => {
            result.insert("docker".into(), json!("absent"));
            Value::Null
        }
        Some(docker) => {
            result.insert("docker".into(), json!("installed"));
            match run_program(
                &docker,
                &[
                    "ps",
                    "--all",
                    "--format",
                    "{{.Names}}\t{{.State}}\t{{.Status}}",
                ],
            )
            .await
            {
                Ok(ran) if ran.success => Value::Array(
                    ran.stdout
                        .lines()
                        .take(MAX_LISTED)
                        .map(|line| {
                            let mut fields = line.split('\t');
                            json!({"name": fields.next().unwrap_or_default(),
                                   "state": fields.next().unwrap_or_default(),
                                   "status": fields.next().unwrap_or_default()})
                        })
                        .collect(),
                ),
                Ok(ran) => {
                    unmeasured.add("containers", format!("docker ps: {}", ran.stderr.trim()));
                    Value::Null
                }
                Err(why) => {
                    unmeasured.add("containers", why);
                    Value::Null
                }
            }
        }
    };
    result.insert("containers".into(), containers);

    // AG-55: the data root and whether it is stopped (not mounted).
    let root = data_root(config);
    result.insert(
        "data_root".into(),
        json!({"path": config.data_root.as_ref().map(|path| path.display().to_string()),
               "state": root.state()}),
    );
    result.insert("data_root_stopped".into(), json!(root.stopped()));
    if let DataRoot::Unknown(why) = &root {
        unmeasured.add("data_root_stopped", why);
    }

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

/// The data root as this process's mount table shows it (AG-55).
pub fn data_root(config: &Config) -> DataRoot {
    let path = config
        .data_root
        .as_ref()
        .map(|path| path.display().to_string());
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("/proc/self/mountinfo: {error}"));
    data_root::judge(path.as_deref(), table.as_deref().map_err(Clone::clone))
}

/// `ID`, `VERSION_ID` and `PRETTY_NAME` of an os-release file.
fn os_release(text: &str) -> Value {
    let mut os = Map::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let field = match key.trim() {
            "ID" => "id",
            "VERSION_ID" => "version_id",
            "PRETTY_NAME" => "pretty_name",
            _ => continue,
        };
        os.insert(field.into(), json!(value.trim().trim_matches('"')));
    }
    Value::Object(os)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AG-55, on this machine's real mount table: `/` is mounted; a directory that is not a
    /// mount point is a stopped data root, and host_report says so.
    #[tokio::test]
    async fn ag_55_host_report_says_data_root_stopped_when_the_data_root_is_not_mounted() {
        let scratch = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        assert_eq!(data_root(&config), DataRoot::NotConfigured);
        config.data_root = Some("/".into());
        assert_eq!(data_root(&config), DataRoot::Mounted("/".into()));
        config.data_root = Some(scratch.path().to_path_buf());
        assert!(matches!(data_root(&config), DataRoot::Stopped(_)));
        let report = host_report(&config).await;
        assert_eq!(report.result["data_root_stopped"], true);
        assert_eq!(report.result["data_root"]["state"], "stopped");
    }

    #[test]
    fn os_release_gives_id_version_and_pretty_name() {
        let text = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(
            os_release(text),
            json!({"pretty_name": "Debian GNU/Linux 12 (bookworm)", "version_id": "12", "id": "debian"})
        );
    }
}
