//! `host_report`: operating system, kernel, boot id, disk available and total, failed units
//! when systemd runs, containers when docker is installed, and the patching facts the fleet
//! security view reads (MO-16): security fixes waiting, what runs replaced code, a reboot owed,
//! the last automatic update run and packages left half done. A fact whose source is missing
//! is null with its reason in `unmeasured`, never a guess.

use serde_json::{json, Map, Value};

use super::{
    describe, filesystem_space, find_program, run_program, systemd_running, Finished, ProgramError,
    Redaction, Unmeasured,
};
use crate::{
    config::Config,
    domain::packages,
    domain::recipes::data_root::{self, DataRoot},
};

/// The most units or containers one report lists.
const MAX_LISTED: usize = 500;

pub async fn host_report(config: &Config) -> Finished {
    let mut unmeasured = Unmeasured::default();
    let mut result = Map::new();

    os_facts(&mut result, &mut unmeasured).await;
    disk_fact(config, &mut result, &mut unmeasured).await;
    let systemd = systemd_running();
    result.insert(
        "systemd".into(),
        json!(if systemd { "running" } else { "absent" }),
    );
    let failed_units = failed_units(systemd, &mut unmeasured).await;
    result.insert("failed_units".into(), failed_units);

    let containers = containers(&mut result, &mut unmeasured).await;
    result.insert("containers".into(), containers);
    security(&mut result, &mut unmeasured).await;

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

/// The operating system, kernel and boot id.
async fn os_facts(result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
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
}

/// The space on the site's file system (the root's when no site is configured).
async fn disk_fact(config: &Config, result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    let disk_path = config.site_root.clone().unwrap_or_else(|| "/".into());
    let space_path = disk_path.clone();
    match tokio::task::spawn_blocking(move || filesystem_space(&space_path))
        .await
        .map_err(|error| error.to_string())
        .and_then(|space| space.map_err(|error| error.to_string()))
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
}

/// The failed units, when systemd runs and systemctl answers.
async fn failed_units(systemd: bool, unmeasured: &mut Unmeasured) -> Value {
    match (systemd, find_program("systemctl")) {
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
    }
}

/// The containers, when docker is installed (and whether it is, into `result`).
async fn containers(result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) -> Value {
    match find_program("docker") {
        None => {
            result.insert("docker".into(), json!("absent"));
            Value::Null
        }
        Some(docker) => {
            result.insert("docker".into(), json!("installed"));
            // The site label names a site container (MO-16 lists those under their host).
            let format = format!(
                "{{{{.Names}}}}\t{{{{.State}}}}\t{{{{.Status}}}}\t{{{{.Label \"{}\"}}}}",
                super::docker::SITE_LABEL
            );
            match run_program(&docker, &["ps", "--all", "--format", &format]).await {
                Ok(ran) if ran.success => Value::Array(
                    ran.stdout
                        .lines()
                        .take(MAX_LISTED)
                        .map(|line| {
                            let mut fields = line.split('\t');
                            json!({"name": fields.next().unwrap_or_default(),
                                   "state": fields.next().unwrap_or_default(),
                                   "status": fields.next().unwrap_or_default(),
                                   "site": fields.next().unwrap_or_default()})
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
    data_root::judge(
        path.as_deref(),
        table
            .as_deref()
            .map_err(|why| why as &dyn std::fmt::Display),
    )
}

/// Where the patching facts are read.
pub struct Sources<'a> {
    /// apt's package lists and configuration: with dpkg's status, the state a simulated
    /// upgrade's answer is kept for.
    pub apt_lists: &'a str,
    pub apt_config: &'a str,
    pub dpkg_status: &'a str,
    pub dpkg_updates: &'a str,
    pub reboot_required: &'a str,
    pub reboot_required_packages: &'a str,
    /// Present where the reboot-required file is written by the packages (update-notifier).
    pub reboot_notifier: &'a str,
    pub unattended_log: &'a str,
}

/// The sources of a Debian or Ubuntu machine.
pub const SOURCES: Sources<'static> = Sources {
    apt_lists: "/var/lib/apt/lists",
    apt_config: "/etc/apt",
    dpkg_status: "/var/lib/dpkg/status",
    dpkg_updates: "/var/lib/dpkg/updates",
    reboot_required: "/var/run/reboot-required",
    reboot_required_packages: "/var/run/reboot-required.pkgs",
    reboot_notifier: "/usr/share/update-notifier/notify-reboot-required",
    unattended_log: "/var/log/unattended-upgrades/unattended-upgrades.log",
};

/// The last simulated upgrade and the apt/dpkg state it was made in (one per agent process).
static UPGRADES: std::sync::Mutex<packages::UpgradeCache> =
    std::sync::Mutex::new(packages::UpgradeCache::new());

/// The modification time of `path` in nanoseconds since the epoch, if it can be read.
fn modified_nanos(path: &str) -> Option<i128> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(since.as_nanos() as i128)
}

/// The key of the apt and dpkg state `sources` are in now.
fn apt_state(sources: &Sources<'_>) -> String {
    packages::apt_state_key(&[
        (sources.apt_lists, modified_nanos(sources.apt_lists)),
        (sources.apt_config, modified_nanos(sources.apt_config)),
        (sources.dpkg_status, modified_nanos(sources.dpkg_status)),
    ])
}

/// What `apt-get -s upgrade` finds and when it was simulated: from the cache when apt's lists,
/// its configuration and dpkg's status are as they were then, else simulated now (and kept).
async fn simulated_upgrades(
    sources: &Sources<'_>,
    apt: &std::path::Path,
) -> Result<(packages::Upgrades, chrono::DateTime<chrono::Utc>), ProgramError> {
    cached_upgrades(sources, || async {
        let ran = run_program(apt, &["-s", "-q", "upgrade"]).await?;
        if !ran.success {
            return Err(ProgramError::refused("apt-get -s upgrade", &ran.stderr));
        }
        Ok(ran.stdout)
    })
    .await
}

/// As [`simulated_upgrades`], with the simulation given (its output, or why it failed). A
/// failed simulation is not kept.
async fn cached_upgrades<F, R, E>(
    sources: &Sources<'_>,
    simulate: F,
) -> Result<(packages::Upgrades, chrono::DateTime<chrono::Utc>), E>
where
    F: FnOnce() -> R,
    R: std::future::Future<Output = Result<String, E>>,
{
    let key = apt_state(sources);
    if let Some((found, at)) = UPGRADES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .answer(&key)
    {
        return Ok((found.clone(), at));
    }
    let at = chrono::Utc::now();
    let found = packages::upgrades(&simulate().await?);
    UPGRADES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .keep(key, found.clone(), at);
    Ok((found, at))
}

/// The patching facts (MO-16), from this machine's sources.
async fn security(result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    security_from(&SOURCES, result, unmeasured).await
}

/// The patching facts from `sources`: `upgrades_pending`, `security_pending` (with
/// `upgrades_simulated_at`, when the simulated upgrade they come from ran: an unchanged apt
/// and dpkg state answers from the last one),
/// `security_packages`, `dpkg_unfinished`, `dpkg_interrupted`, `services_needing_restart`,
/// `kernel_upgrade_pending`, `reboot_required` (`{"owed", "since", "packages"}`) and
/// `last_auto_update`.
pub async fn security_from(
    sources: &Sources<'_>,
    result: &mut Map<String, Value>,
    unmeasured: &mut Unmeasured,
) {
    apt_facts(sources, result, unmeasured).await;
    dpkg_facts(sources, result, unmeasured).await;
    restart_facts(result, unmeasured).await;
    result.insert("reboot_required".into(), reboot_fact(sources, unmeasured));
    // The last automatic update run.
    let last = match tokio::fs::read_to_string(sources.unattended_log).await {
        Ok(text) => match packages::last_unattended_run(&text) {
            Some(at) => json!(at.to_rfc3339()),
            None => {
                unmeasured.add(
                    "last_auto_update",
                    format!("{} has no dated line", sources.unattended_log),
                );
                Value::Null
            }
        },
        Err(error) => {
            unmeasured.add(
                "last_auto_update",
                format!("{}: {error}", sources.unattended_log),
            );
            Value::Null
        }
    };
    result.insert("last_auto_update".into(), last);
}

/// Security fixes waiting: a simulated upgrade (no lock taken, nothing changed).
async fn apt_facts(
    sources: &Sources<'_>,
    result: &mut Map<String, Value>,
    unmeasured: &mut Unmeasured,
) {
    let (pending, security) = match find_program("apt-get") {
        None => {
            unmeasured.add("security_pending", "apt-get is not installed");
            (Value::Null, Value::Null)
        }
        Some(apt) => match simulated_upgrades(sources, &apt).await {
            Ok((found, at)) => {
                result.insert("security_pending".into(), json!(found.security.len()));
                result.insert("upgrades_simulated_at".into(), json!(at.to_rfc3339()));
                (json!(found.pending), json!(found.security))
            }
            Err(why) => {
                unmeasured.add("security_pending", why);
                (Value::Null, Value::Null)
            }
        },
    };
    result.entry("security_pending").or_insert(Value::Null);
    result.insert("upgrades_pending".into(), pending);
    result.insert("security_packages".into(), security);
}

/// Packages a package run left half done, and a run interrupted mid-way.
async fn dpkg_facts(
    sources: &Sources<'_>,
    result: &mut Map<String, Value>,
    unmeasured: &mut Unmeasured,
) {
    let unfinished = match tokio::fs::read_to_string(sources.dpkg_status).await {
        Ok(text) => json!(packages::unfinished(&text)),
        Err(error) => {
            unmeasured.add(
                "dpkg_unfinished",
                format!("{}: {error}", sources.dpkg_status),
            );
            Value::Null
        }
    };
    result.insert("dpkg_unfinished".into(), unfinished);
    let interrupted = match std::fs::read_dir(sources.dpkg_updates) {
        Ok(entries) => json!(entries.filter_map(Result::ok).any(|entry| entry
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit()))),
        Err(error) => {
            unmeasured.add(
                "dpkg_interrupted",
                format!("{}: {error}", sources.dpkg_updates),
            );
            Value::Null
        }
    };
    result.insert("dpkg_interrupted".into(), interrupted);
}

/// What runs replaced code, and a newer kernel installed than runs.
async fn restart_facts(result: &mut Map<String, Value>, unmeasured: &mut Unmeasured) {
    let (services, kernel) = match find_program("needrestart") {
        None => {
            unmeasured.add("services_needing_restart", "needrestart is not installed");
            (Value::Null, Value::Null)
        }
        Some(needrestart) => match run_program(&needrestart, &["-b", "-r", "l"]).await {
            Ok(ran) if ran.success => {
                let found = packages::restarts(&ran.stdout);
                (json!(found.services), json!(found.kernel_pending))
            }
            Ok(ran) => {
                unmeasured.add(
                    "services_needing_restart",
                    format!("needrestart -b: {}", ran.stderr.trim()),
                );
                (Value::Null, Value::Null)
            }
            Err(why) => {
                unmeasured.add("services_needing_restart", why);
                (Value::Null, Value::Null)
            }
        },
    };
    result.insert("services_needing_restart".into(), services);
    result.insert("kernel_upgrade_pending".into(), kernel);
}

/// A reboot owed: the file the packages write, with when it was written.
fn reboot_fact(sources: &Sources<'_>, unmeasured: &mut Unmeasured) -> Value {
    match std::fs::metadata(sources.reboot_required) {
        Ok(found) => {
            let since = found
                .modified()
                .ok()
                .map(chrono::DateTime::<chrono::Utc>::from)
                .map(|at| at.to_rfc3339());
            let listed = std::fs::read_to_string(sources.reboot_required_packages)
                .map(|text| {
                    text.lines()
                        .map(str::trim)
                        .filter(|line| !line.is_empty())
                        .take(packages::MAX_NAMES)
                        .map(|line| json!(line))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            json!({"owed": true, "since": since, "packages": listed})
        }
        Err(_) if std::path::Path::new(sources.reboot_notifier).exists() => {
            json!({"owed": false, "since": null, "packages": []})
        }
        Err(_) => {
            unmeasured.add(
                "reboot_required",
                format!(
                    "{} is absent and nothing here writes it ({} is not installed)",
                    sources.reboot_required, sources.reboot_notifier
                ),
            );
            Value::Null
        }
    }
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

    fn fact<'a>(
        result: &'a Map<String, Value>,
        unmeasured: &'a Value,
        what: &str,
    ) -> (&'a Value, Option<&'a str>) {
        let why = unmeasured
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["what"] == what)
            .and_then(|item| item["why"].as_str());
        (&result[what], why)
    }

    /// MO-16 on this machine (Debian 12): every patching fact is either read from its source
    /// or null with the reason it could not be, never a guess; what this machine has is read.
    #[tokio::test]
    async fn mo_16_the_patching_facts_of_this_machine_are_read_or_said_unknown() {
        let mut result = Map::new();
        let mut unmeasured = Unmeasured::default();
        security(&mut result, &mut unmeasured).await;
        let unmeasured = unmeasured.into_value();
        for what in [
            "security_pending",
            "dpkg_unfinished",
            "dpkg_interrupted",
            "services_needing_restart",
            "reboot_required",
            "last_auto_update",
        ] {
            let (value, why) = fact(&result, &unmeasured, what);
            assert!(
                value.is_null() == why.is_some(),
                "{what}: {value} (unmeasured: {why:?})"
            );
        }
        // apt-get and the dpkg database are here: the counts are read, and agree with what a
        // simulated upgrade lists.
        if find_program("apt-get").is_some() {
            let simulated =
                run_program(&find_program("apt-get").unwrap(), &["-s", "-q", "upgrade"])
                    .await
                    .unwrap();
            let security = simulated
                .stdout
                .lines()
                .filter(|line| {
                    line.starts_with("Inst ") && line.to_ascii_lowercase().contains("security")
                })
                .count();
            assert_eq!(result["security_pending"], json!(security));
            assert_eq!(
                result["security_packages"].as_array().unwrap().len(),
                security
            );
        }
        if std::path::Path::new("/var/lib/dpkg/status").exists() {
            assert!(result["dpkg_unfinished"].is_array());
        }
        // Without needrestart, update-notifier or unattended-upgrades those facts are unknown.
        if find_program("needrestart").is_none() {
            assert_eq!(result["services_needing_restart"], Value::Null);
        }
        if !std::path::Path::new("/var/run/reboot-required").exists()
            && !std::path::Path::new(SOURCES.reboot_notifier).exists()
        {
            assert_eq!(result["reboot_required"], Value::Null);
        }
    }

    /// MO-16: a machine that owes a reboot, has an interrupted package run and a log of
    /// automatic updates says so (the sources written by the test).
    #[tokio::test]
    async fn mo_16_a_reboot_owed_an_interrupted_run_and_the_last_update_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::create_dir(dir.path().join("updates")).unwrap();
        std::fs::write(dir.path().join("updates/0001"), "").unwrap();
        std::fs::write(
            dir.path().join("status"),
            "Package: php8.2-fpm\nStatus: install ok half-configured\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("reboot-required"),
            "*** System restart required ***\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("reboot-required.pkgs"),
            "linux-image-6.1.0-21-amd64\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("unattended.log"),
            "2026-12-01 06:31:02,456 INFO Packages that will be upgraded: libssl3\n",
        )
        .unwrap();
        let (status, updates, reboot, pkgs, log) = (
            path("status"),
            path("updates"),
            path("reboot-required"),
            path("reboot-required.pkgs"),
            path("unattended.log"),
        );
        let sources = Sources {
            apt_lists: &updates,
            apt_config: &updates,
            dpkg_status: &status,
            dpkg_updates: &updates,
            reboot_required: &reboot,
            reboot_required_packages: &pkgs,
            reboot_notifier: "/nonexistent",
            unattended_log: &log,
        };
        let mut result = Map::new();
        let mut unmeasured = Unmeasured::default();
        security_from(&sources, &mut result, &mut unmeasured).await;
        assert_eq!(result["dpkg_unfinished"], json!(["php8.2-fpm"]));
        assert_eq!(result["dpkg_interrupted"], json!(true));
        assert_eq!(result["reboot_required"]["owed"], json!(true));
        assert!(result["reboot_required"]["since"].is_string());
        assert_eq!(
            result["reboot_required"]["packages"],
            json!(["linux-image-6.1.0-21-amd64"])
        );
        assert_eq!(
            result["last_auto_update"],
            json!("2026-12-01T06:31:02+00:00")
        );
    }

    #[test]
    fn os_release_gives_id_version_and_pretty_name() {
        let text = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(
            os_release(text),
            json!({"pretty_name": "Debian GNU/Linux 12 (bookworm)", "version_id": "12", "id": "debian"})
        );
    }

    /// MO-16: a second report with apt's lists, its configuration and dpkg's status unchanged
    /// answers from the last simulated upgrade without simulating again; a package run (dpkg's
    /// status rewritten) or an `apt-get update` (a list replaced) simulates again; a failed
    /// simulation is not kept. The sources are paths in a scratch directory, with their real
    /// modification times; the simulation counts its runs.
    #[tokio::test]
    async fn mo_16_an_unchanged_machine_answers_security_pending_from_the_cache() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::create_dir(dir.path().join("lists")).unwrap();
        std::fs::create_dir(dir.path().join("apt")).unwrap();
        std::fs::write(dir.path().join("status"), "").unwrap();
        let (lists, apt, status) = (path("lists"), path("apt"), path("status"));
        let sources = Sources {
            apt_lists: &lists,
            apt_config: &apt,
            dpkg_status: &status,
            ..SOURCES
        };
        let runs = AtomicUsize::new(0);
        let output =
            "Inst libssl3 [3.0.11-1] (3.0.13-1 Debian-Security:12/stable-security [amd64])\n\
                      Inst zstd [1.5.4-2] (1.5.4-3 Debian:12.5/stable [amd64])\n";
        let report = |fails: bool| {
            let runs = &runs;
            let sources = &sources;
            async move {
                cached_upgrades(sources, || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    if fails {
                        Err("apt-get -s upgrade: could not get lock".to_string())
                    } else {
                        Ok(output.to_string())
                    }
                })
                .await
            }
        };
        let (first, at) = report(false).await.unwrap();
        assert_eq!(first.security, ["libssl3"]);
        assert_eq!(first.pending, 2);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let (second, second_at) = report(false).await.unwrap();
        assert_eq!((second, second_at), (first.clone(), at));
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "an unchanged state simulated again"
        );
        // a package run rewrites dpkg's status: simulated again, and a failure is not kept
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&status)
            .unwrap();
        file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
        assert!(report(true).await.is_err());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        report(false).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        report(false).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        // an apt-get update replaces the lists: simulated again
        std::fs::write(dir.path().join("lists/new_Packages"), "").unwrap();
        let list_dir = std::fs::File::open(dir.path().join("lists")).unwrap();
        list_dir
            .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
            .unwrap();
        report(false).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }
}
