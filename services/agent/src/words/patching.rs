//! `install_security_updates` (RO-25, RO-29): install what waits from the machine's security
//! origin, and nothing else, without ever prompting.
//!
//! The machine's own sources (`/etc/apt/sources.list`, `sources.list.d/*.list` and
//! `*.sources`) are read and their security suites written, with their options and keys, into
//! a sources directory of the agent's own (`<state>/apt-security/`); apt is then pointed at
//! that directory alone (`Dir::Etc::SourceList`, `Dir::Etc::SourceParts`), so the only
//! candidates it can pick are the security origin's: `apt-get update` of those sources (other
//! lists are kept: `APT::Get::List-Cleanup=false`), then `apt-get upgrade` — no new packages,
//! no removals, local configuration files kept (`--force-confdef --force-confold`), no
//! prompt (`DEBIAN_FRONTEND=noninteractive`, needrestart listing only). apt asks its locks
//! with `DPkg::Lock::Timeout=0`: a lock held by another package run answers "in the way" at
//! once, never after a wait. Under systemd apt runs as a transient unit of its own
//! ([`apt_command`]): the agent's unit is read-only and cannot install packages. See
//! `domain::patching` for the rules.

use serde_json::{json, Value};
use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use super::FileError;
use super::{find_program, Failed, Finished, Redaction};
use crate::{
    config::Config,
    domain::patching::{self, AptRun, Outcome},
};

/// The longest one apt run may take (the word's claim budget is an hour; its run budget stops
/// the word before that in any case).
pub const APT_TIMEOUT: Duration = Duration::from_secs(45 * 60);
/// The most output of one apt run kept for the job's output.
const OUTPUT_TAIL: usize = 16 * 1024;

/// Where apt's files are: the machine's (`/`), or a test's root (`-o Dir=<root>`).
#[derive(Debug, Clone)]
pub struct AptRoot {
    pub root: PathBuf,
}

impl AptRoot {
    pub fn machine() -> AptRoot {
        AptRoot {
            root: PathBuf::from("/"),
        }
    }

    fn etc(&self) -> PathBuf {
        self.root.join("etc/apt")
    }
}

pub async fn install_security_updates(config: &Config) -> Result<Finished, Failed> {
    install_from(&AptRoot::machine(), &config.state_dir.join("apt-security")).await
}

/// The word against `root`, writing its sources into `work` (emptied first).
pub async fn install_from(root: &AptRoot, work: &Path) -> Result<Finished, Failed> {
    let apt = find_program("apt-get")
        .ok_or_else(|| Failed::new("the updater failed: apt-get is not installed"))?;
    let sources = security_sources(&root.etc())
        .await
        .map_err(|why| failed(format!("reading the machine's apt sources: {why}")))?;
    if sources.is_empty() {
        return Err(failed(format!(
            "{} names no security suite (such as bookworm-security or noble-security), so there is no security origin to install from",
            root.etc().display()
        )));
    }
    write_sources(work, &sources)
        .await
        .map_err(|why| failed(format!("writing the security sources: {why}")))?;

    let common = apt_options(root, work);
    let mut update_args = common.clone();
    update_args.extend([
        "-o".into(),
        "APT::Get::List-Cleanup=false".into(),
        "update".into(),
    ]);
    let update = run_apt(&apt, &update_args)
        .await
        .map_err(|error| failed(error.to_string()))?;
    let update_run = AptRun {
        success: update.success,
        stdout: &update.stdout,
        stderr: &update.stderr,
    };
    let settled = patching::outcome(&update_run, None);
    let upgrade =
        if matches!(settled, Outcome::Busy(_)) || !update.success || update_run_has_errors(&update)
        {
            None
        } else {
            let mut upgrade_args = common.clone();
            upgrade_args.extend(
                [
                    "-y",
                    "-o",
                    "Dpkg::Options::=--force-confdef",
                    "-o",
                    "Dpkg::Options::=--force-confold",
                    "upgrade",
                ]
                .map(String::from),
            );
            Some(
                run_apt(&apt, &upgrade_args)
                    .await
                    .map_err(|error| failed(error.to_string()))?,
            )
        };
    let upgrade_run = upgrade.as_ref().map(|ran| AptRun {
        success: ran.success,
        stdout: &ran.stdout,
        stderr: &ran.stderr,
    });
    let outcome = patching::outcome(&update_run, upgrade_run.as_ref());
    let held_back = upgrade_run.as_ref().map_or(0, patching::held_back);
    let output = [&update, upgrade.as_ref().unwrap_or(&update)]
        .iter()
        .take(if upgrade.is_some() { 2 } else { 1 })
        .map(|ran| tail(&format!("{}{}", ran.stdout, ran.stderr)))
        .collect::<Vec<_>>()
        .join("\n");
    let result = json!({
        "outcome": outcome.word(),
        "sources": sources.iter().map(Source::describe).collect::<Vec<_>>(),
        "held_back": held_back,
    });
    finish(outcome, result, output)
}

/// The options every apt run takes: the machine's root (when not `/`), only the security
/// sources written into `work`, no waiting for a lock, quiet.
fn apt_options(root: &AptRoot, work: &Path) -> Vec<String> {
    let mut options: Vec<String> = Vec::new();
    if root.root != Path::new("/") {
        options.push(format!("Dir={}", root.root.display()));
    }
    options.push(format!(
        "Dir::Etc::SourceList={}",
        work.join("none.list").display()
    ));
    options.push(format!(
        "Dir::Etc::SourceParts={}",
        work.join("parts").display()
    ));
    options.push("DPkg::Lock::Timeout=0".into());
    let mut common: Vec<String> = Vec::new();
    for option in &options {
        common.push("-o".into());
        common.push(option.clone());
    }
    common.push("-q".into());
    common
}

/// RO-29: the word's answer for what the run came to; a failed updater fails the job.
fn finish(outcome: Outcome, mut result: Value, output: String) -> Result<Finished, Failed> {
    match outcome {
        Outcome::Installed(packages) => {
            result["installed"] = json!(packages);
            Ok(done(result, output))
        }
        Outcome::NothingToInstall => {
            result["installed"] = json!([]);
            Ok(done(result, output))
        }
        Outcome::Busy(lock) => {
            result["lock"] = json!(lock);
            Ok(done(result, output))
        }
        Outcome::Failed(detail) => {
            result["detail"] = json!(detail);
            Err(Failed {
                reason: format!("the updater failed: {detail}"),
                output,
                result,
                refused: false,
            })
        }
    }
}

fn update_run_has_errors(update: &Ran) -> bool {
    update
        .stderr
        .lines()
        .chain(update.stdout.lines())
        .any(|line| line.trim().starts_with("E: "))
}

fn done(result: serde_json::Value, output: String) -> Finished {
    Finished {
        output,
        result,
        redaction: Redaction::Text,
    }
}

/// An updater failure the plane reads as one (RO-29: it stops the run, naming the node).
fn failed(detail: String) -> Failed {
    Failed {
        reason: format!("the updater failed: {detail}"),
        output: String::new(),
        result: json!({"outcome": "failed", "detail": detail}),
        refused: false,
    }
}

fn tail(text: &str) -> String {
    if text.len() <= OUTPUT_TAIL {
        return text.to_string();
    }
    let mut start = text.len() - OUTPUT_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// One kept source: a one-line entry or a deb822 stanza.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Line(String),
    Stanza(String),
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Line(line) => line.clone(),
            Source::Stanza(stanza) => stanza
                .lines()
                .filter(|line| line.starts_with("URIs:") || line.starts_with("Suites:"))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The security sources of the machine whose apt configuration is `etc`.
pub async fn security_sources(etc: &Path) -> Result<Vec<Source>, FileError> {
    let mut sources = Vec::new();
    let main = etc.join("sources.list");
    match tokio::fs::read_to_string(&main).await {
        Ok(text) => sources.extend(
            patching::security_lines(&text)
                .into_iter()
                .map(Source::Line),
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(FileError {
                path: main.clone(),
                source,
            })
        }
    }
    let parts = etc.join("sources.list.d");
    let mut names = Vec::new();
    match tokio::fs::read_dir(&parts).await {
        Ok(mut entries) => {
            while let Some(entry) = entries.next_entry().await.map_err(FileError::at(&parts))? {
                names.push(entry.path());
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(FileError::at(&parts)(error)),
    }
    // apt reads the parts in name order; so do we.
    names.sort();
    for path in names {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if extension != "list" && extension != "sources" {
            continue;
        }
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(FileError::at(&path))?;
        if extension == "list" {
            sources.extend(
                patching::security_lines(&text)
                    .into_iter()
                    .map(Source::Line),
            );
        } else {
            sources.extend(
                patching::security_stanzas(&text)
                    .into_iter()
                    .map(Source::Stanza),
            );
        }
    }
    Ok(sources)
}

/// Writes `sources` into `work`: an empty main list and a parts directory holding
/// `security.list` (one-line entries) and `security.sources` (deb822 stanzas).
async fn write_sources(work: &Path, sources: &[Source]) -> std::io::Result<()> {
    if tokio::fs::metadata(work).await.is_ok() {
        tokio::fs::remove_dir_all(work).await?;
    }
    let parts = work.join("parts");
    tokio::fs::create_dir_all(&parts).await?;
    tokio::fs::write(work.join("none.list"), "").await?;
    let mut lines = String::new();
    let mut stanzas = Vec::new();
    for source in sources {
        match source {
            Source::Line(line) => {
                lines.push_str(line);
                lines.push('\n');
            }
            Source::Stanza(stanza) => stanzas.push(stanza.clone()),
        }
    }
    if !lines.is_empty() {
        tokio::fs::write(parts.join("security.list"), lines).await?;
    }
    if !stanzas.is_empty() {
        tokio::fs::write(parts.join("security.sources"), stanzas.join("\n")).await?;
    }
    Ok(())
}

struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// The environment apt runs in: it never prompts.
const APT_ENVIRONMENT: &[(&str, &str)] = &[
    ("LANG", "C.UTF-8"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("APT_LISTCHANGES_FRONTEND", "none"),
    // needrestart (Ubuntu runs it after apt) lists what to restart instead of asking.
    ("NEEDRESTART_MODE", "l"),
    ("UCF_FORCE_CONFFOLD", "1"),
];

/// The transient unit a package run goes in under systemd (one at a time: a second start of
/// the same name is refused by systemd).
pub const APT_UNIT: &str = "capstan-security-updates";

/// The program and arguments that run apt-get with `args`. Under systemd the agent's own unit
/// is read-only and holds none of the capabilities dpkg needs (docs/agent-confinement.md), so
/// apt runs as a transient service of its own (`systemd-run --wait --pipe`), as the machine's
/// own apt-daily-upgrade.service would, with its output and exit status piped back; elsewhere
/// (no systemd, a container, a test) it runs directly.
pub fn apt_command(systemd: bool, apt: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
    if !systemd {
        return (apt.to_path_buf(), args.to_vec());
    }
    let mut wrapped = vec![
        "--quiet".to_string(),
        "--wait".into(),
        "--pipe".into(),
        "--collect".into(),
        format!("--unit={APT_UNIT}"),
        "--description=capstan-agent install_security_updates".into(),
    ];
    for (name, value) in APT_ENVIRONMENT {
        wrapped.push(format!("--setenv={name}={value}"));
    }
    wrapped.push("--".into());
    wrapped.push(apt.display().to_string());
    wrapped.extend(args.iter().cloned());
    (
        find_program("systemd-run").unwrap_or_else(|| PathBuf::from("/usr/bin/systemd-run")),
        wrapped,
    )
}

/// Why apt-get gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum AptError {
    #[error("{} could not start: {source}", program.display())]
    NotStarted {
        program: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("apt-get took longer than {} minutes and was stopped", APT_TIMEOUT.as_secs() / 60)]
    Timeout,
    #[error("apt-get failed: {0}")]
    Lost(#[source] std::io::Error),
}

/// Runs apt-get with `args`: no shell, no stdin, a fixed environment that never prompts.
async fn run_apt(apt: &Path, args: &[String]) -> Result<Ran, AptError> {
    let (program, args) = apt_command(super::systemd_running(), apt, args);
    let child = tokio::process::Command::new(&program)
        .args(&args)
        .env_clear()
        .env("PATH", super::PROGRAM_DIRECTORIES.join(":"))
        .envs(APT_ENVIRONMENT.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| AptError::NotStarted {
            program: program.clone(),
            source,
        })?;
    let output = tokio::time::timeout(APT_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| AptError::Timeout)?
        .map_err(AptError::Lost)?;
    Ok(Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A test root apt is pointed at with `-o Dir=`: a dpkg database holding one package at
    /// 1.0, and a local `bookworm-security` suite (`file:`, trusted) offering `offered`, plus
    /// a `bookworm` suite offering 9.9 of the same package, which a security run must ignore.
    struct TestRoot {
        _scratch: tempfile::TempDir,
        root: AptRoot,
        work: PathBuf,
    }

    fn suite(repo: &Path, suite: &str, version: &str) {
        let dir = repo.join(format!("dists/{suite}/main/binary-amd64"));
        fs::create_dir_all(&dir).unwrap();
        let packages = format!(
            "Package: capstan-fixture\nVersion: {version}\nArchitecture: all\nMaintainer: Capstan <ops@example.org>\nFilename: pool/capstan-fixture_{version}_all.deb\nSize: 1000\nSHA256: {}\nDescription: a package for tests\n\n",
            "0".repeat(64)
        );
        fs::write(dir.join("Packages"), &packages).unwrap();
        let digest = {
            use sha2::Digest;
            hex(&sha2::Sha256::digest(packages.as_bytes()))
        };
        let label = if suite.ends_with("-security") {
            "Debian-Security"
        } else {
            "Debian"
        };
        fs::write(
            repo.join(format!("dists/{suite}/Release")),
            format!(
                "Origin: Debian\nLabel: {label}\nSuite: {suite}\nCodename: {suite}\nDate: Wed, 02 Dec 2026 12:00:00 UTC\nComponents: main\nArchitectures: amd64 all\nSHA256:\n {digest} {} main/binary-amd64/Packages\n",
                packages.len()
            ),
        )
        .unwrap();
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn test_root(offered: &str, security_uri: Option<&str>) -> TestRoot {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("root");
        let repo = scratch.path().join("repo");
        for dir in [
            "etc/apt/sources.list.d",
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/dpkg/updates",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
        ] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        fs::write(
            root.join("var/lib/dpkg/status"),
            "Package: capstan-fixture\nStatus: install ok installed\nPriority: optional\nSection: misc\nMaintainer: Capstan <ops@example.org>\nArchitecture: all\nVersion: 1.0\nDescription: a package for tests\n\n",
        )
        .unwrap();
        suite(&repo, "bookworm-security", offered);
        suite(&repo, "bookworm", "9.9");
        let security = security_uri
            .map(str::to_string)
            .unwrap_or_else(|| format!("file:{}", repo.display()));
        fs::write(
            root.join("etc/apt/sources.list"),
            format!("deb [trusted=yes] file:{} bookworm main\n", repo.display()),
        )
        .unwrap();
        fs::write(
            root.join("etc/apt/sources.list.d/security.sources"),
            format!("Types: deb\nURIs: {security}\nSuites: bookworm-security\nComponents: main\nTrusted: yes\n"),
        )
        .unwrap();
        let work = scratch.path().join("state/apt-security");
        TestRoot {
            root: AptRoot { root },
            work,
            _scratch: scratch,
        }
    }

    /// Holds `path` with a POSIX record lock (the kind apt and dpkg take) from a process of
    /// its own, as another package run would, until dropped.
    struct HeldLock(std::process::Child);

    impl HeldLock {
        fn hold(path: &Path) -> HeldLock {
            let perl = find_program("perl").expect("perl holds the lock in these tests");
            let ready = path.with_extension("held");
            let script = r#"use Fcntl; open(my $f, ">>", $ARGV[0]) or die; my $lock = pack("s x30", F_WRLCK); fcntl($f, F_SETLK, $lock) or die "lock: $!"; open(my $r, ">", $ARGV[1]); close($r); sleep 60;"#;
            // Held (and so killed and reaped on drop) from the moment it is spawned.
            let held = HeldLock(
                std::process::Command::new(perl)
                    .args(["-e", script])
                    .arg(path)
                    .arg(&ready)
                    .spawn()
                    .unwrap(),
            );
            for _ in 0..200 {
                if ready.exists() {
                    return held;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            panic!("the lock on {} was never taken", path.display());
        }
    }

    impl Drop for HeldLock {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn apt_here() -> bool {
        find_program("apt-get").is_some()
    }

    /// RO-29 for real: another package run holding dpkg's frontend lock is "in the way", at
    /// once; apt was asked, never waited, and nothing was installed.
    #[tokio::test]
    async fn ro_29_another_package_run_holding_the_dpkg_lock_is_in_the_way() {
        if !apt_here() {
            return;
        }
        let test = test_root("1.1", None);
        let _held = HeldLock::hold(&test.root.root.join("var/lib/dpkg/lock-frontend"));
        let started = std::time::Instant::now();
        let finished = install_from(&test.root, &test.work).await.unwrap();
        assert_eq!(finished.result["outcome"], "busy", "{}", finished.output);
        assert!(
            finished.result["lock"]
                .as_str()
                .unwrap()
                .ends_with("var/lib/dpkg/lock-frontend"),
            "{}",
            finished.result
        );
        assert!(started.elapsed() < Duration::from_secs(30), "apt waited");
        let status = fs::read_to_string(test.root.root.join("var/lib/dpkg/status")).unwrap();
        assert!(status.contains("Version: 1.0"));
    }

    /// RO-25: only the security suite is read — the 9.9 in the main suite is never a candidate,
    /// so with the security suite offering what is installed there is nothing to install.
    #[tokio::test]
    async fn ro_25_ro_29_only_the_security_origin_is_read_and_nothing_waits_there() {
        if !apt_here() {
            return;
        }
        let test = test_root("1.0", None);
        let finished = install_from(&test.root, &test.work).await.unwrap();
        assert_eq!(
            finished.result["outcome"], "nothing_to_install",
            "{}",
            finished.output
        );
        assert_eq!(finished.result["installed"], json!([]));
        let sources = finished.result["sources"].as_array().unwrap();
        assert_eq!(sources.len(), 1, "{sources:?}");
        assert!(sources[0].as_str().unwrap().contains("bookworm-security"));
        let written = fs::read_to_string(test.work.join("parts/security.sources")).unwrap();
        assert!(written.contains("Suites: bookworm-security\n"), "{written}");
        assert!(!test.work.join("parts/security.list").exists());
    }

    /// RO-29: a security source apt cannot read is an updater failure carrying apt's reason.
    #[tokio::test]
    async fn ro_29_an_unreadable_security_source_is_an_updater_failure_with_apts_reason() {
        if !apt_here() {
            return;
        }
        let test = test_root("1.1", Some("file:/nonexistent/capstan-test-repo"));
        let failed = install_from(&test.root, &test.work).await.unwrap_err();
        assert_eq!(failed.result["outcome"], "failed");
        assert!(
            failed
                .reason
                .starts_with("the updater failed: apt-get update"),
            "{}",
            failed.reason
        );
        assert!(failed.reason.contains("nonexistent"), "{}", failed.reason);
    }

    /// RO-25: a machine whose sources name no security suite has no origin to install from.
    #[tokio::test]
    async fn ro_25_a_machine_without_a_security_suite_is_refused_by_name() {
        let test = test_root("1.1", None);
        fs::remove_file(
            test.root
                .root
                .join("etc/apt/sources.list.d/security.sources"),
        )
        .unwrap();
        let failed = install_from(&test.root, &test.work).await.unwrap_err();
        assert_eq!(failed.result["outcome"], "failed");
        assert!(
            failed.reason.contains("names no security suite"),
            "{}",
            failed.reason
        );
    }

    /// Under systemd apt runs as a transient unit of its own (the agent's unit is read-only),
    /// with the same never-prompting environment; elsewhere directly.
    #[test]
    fn under_systemd_apt_runs_in_a_transient_unit_of_its_own() {
        let apt = Path::new("/usr/bin/apt-get");
        let args = vec!["-q".to_string(), "update".to_string()];
        assert_eq!(
            apt_command(false, apt, &args),
            (apt.to_path_buf(), args.clone())
        );
        let (program, wrapped) = apt_command(true, apt, &args);
        assert!(program.ends_with("systemd-run"), "{}", program.display());
        let dash = wrapped.iter().position(|arg| arg == "--").unwrap();
        assert_eq!(wrapped[dash + 1..], ["/usr/bin/apt-get", "-q", "update"]);
        for wanted in [
            "--wait",
            "--pipe",
            "--unit=capstan-security-updates",
            "--setenv=DEBIAN_FRONTEND=noninteractive",
            "--setenv=NEEDRESTART_MODE=l",
        ] {
            assert!(
                wrapped[..dash].contains(&wanted.to_string()),
                "{wanted}: {wrapped:?}"
            );
        }
    }
}
