//! The compiled words, as they run on a Linux machine. Each takes parameters the node already
//! checked against the word's declared shape, measures what it can, and says plainly what it
//! could not measure instead of failing whole (no systemd in a container is "unknown", not an
//! error). What a word returns is redacted by the job runner before it leaves the node.

mod disk;
pub mod docker;
pub mod host;
mod logs;
pub mod patching;
pub mod status;
pub mod supervision;
#[cfg(test)]
pub mod test_engine;
pub mod units;

use serde_json::{json, Map, Value};
use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use crate::{config::Config, domain::vocabulary::Word};

/// How the runner redacts what a word returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redaction {
    /// Log lines and command output (AG-64).
    Text,
    /// Configuration files, line by line (AG-65).
    Config,
    /// As `Text`, except the named top-level fields of the result, which are signed public
    /// material the plane verifies (a backup run's manifest bytes, their signature and the
    /// node's public key: no secret, no site text, and a redaction would break the signature).
    TextExcept(&'static [&'static str]),
}

/// What a word that ran to its end returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Text for a person (the job's output).
    pub output: String,
    /// The structured result (always a JSON object).
    pub result: Value,
    pub redaction: Redaction,
}

/// A word that could not do what it is for, with what it could say.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub reason: String,
    pub output: String,
    pub result: Value,
    /// The node refused the job rather than failing it (a script that does not match the
    /// signed release, AG-33): reported as `refused`, which changed nothing.
    pub refused: bool,
}

impl Failed {
    pub fn new(reason: impl std::fmt::Display) -> Failed {
        Failed {
            reason: reason.to_string(),
            output: String::new(),
            result: Value::Null,
            refused: false,
        }
    }

    /// A refusal with its structured result.
    pub fn refused(reason: impl std::fmt::Display, result: Value) -> Failed {
        Failed {
            reason: reason.to_string(),
            output: String::new(),
            result,
            refused: true,
        }
    }
}

/// Runs `word` with `params` (already validated).
pub async fn run(word: &Word, params: &Value, config: &Config) -> Result<Finished, Failed> {
    match word.name() {
        "check_status" => Ok(status::check_status(config).await),
        "host_report" => Ok(host::host_report(config).await),
        "disk_usage" => disk::disk_usage(config, params).await,
        "unit_journal" => units::unit_journal(params).await,
        "restart_unit" => units::restart_unit(config, params).await,
        "reset_failed_unit" => units::reset_failed_unit(params).await,
        "site_log" => logs::site_log(config, params).await,
        "file_head" => logs::file_head(params).await,
        "restart_container" => docker::restart_container(config, params).await,
        "agent_converge" => supervision::agent_converge(config).await,
        "install_security_updates" => patching::install_security_updates(config).await,
        other => Err(Failed::new(format!(
            "{other} is in the vocabulary but has no implementation in this build"
        ))),
    }
}

/// What a word could not measure, with why, collected as it goes.
#[derive(Debug, Default)]
pub struct Unmeasured(Vec<Value>);

impl Unmeasured {
    pub fn add(&mut self, what: &str, why: impl std::fmt::Display) {
        self.0.push(json!({"what": what, "why": why.to_string()}));
    }

    pub fn into_value(self) -> Value {
        Value::Array(self.0)
    }

    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|entry| {
                format!(
                    "could not measure {}: {}",
                    entry["what"].as_str().unwrap_or_default(),
                    entry["why"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }
}

/// Renders a result object as `key: value` lines for the job's output.
pub fn describe(result: &Map<String, Value>) -> String {
    let mut lines = Vec::new();
    for (key, value) in result {
        match value {
            Value::String(text) => lines.push(format!("{key}: {text}")),
            Value::Null => lines.push(format!("{key}: unknown")),
            other => lines.push(format!("{key}: {other}")),
        }
    }
    lines.join("\n")
}

/// The directories a program is looked for in: a fixed list, never the caller's `PATH`.
pub(crate) const PROGRAM_DIRECTORIES: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The absolute path of `name`, if installed in one of the fixed directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    PROGRAM_DIRECTORIES
        .iter()
        .map(|directory| Path::new(directory).join(name))
        .find(|path| path.is_file())
}

/// Whether systemd is the running init (its runtime directory exists).
pub fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// What a program said.
#[derive(Debug)]
pub struct Ran {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The longest one helper program may take inside a word.
pub const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a helper program gave no answer: it could not start, took too long, or was lost.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("{} could not start: {source}", program.display())]
    NotStarted {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} took longer than {} seconds and was stopped", program.display(), PROGRAM_TIMEOUT.as_secs())]
    Timeout { program: PathBuf },
    #[error("{} failed: {source}", program.display())]
    Lost {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It ran and said no: what was run, and the last of what it said.
    #[error("{what}: {stderr}")]
    Refused { what: String, stderr: String },
    /// The program (or what it speaks to) is not on this machine.
    #[error("{0}")]
    Unavailable(&'static str),
}

impl ProgramError {
    /// `what` ran and failed, saying `stderr`.
    pub fn refused(what: impl Into<String>, stderr: &str) -> ProgramError {
        ProgramError::Refused {
            what: what.into(),
            stderr: stderr.trim().to_string(),
        }
    }
}

/// A file or directory a word reads or writes could not be, with its path.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    /// The error of an operation on `path`.
    pub fn at(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
        move |source| FileError {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The filesystem's space could not be read.
#[derive(Debug, thiserror::Error)]
#[error("statvfs: {0}")]
pub struct SpaceUnknown(#[source] rustix::io::Errno);

/// Runs `program` with `args`, no shell, no stdin, a fixed environment, killed when it takes
/// longer than [`PROGRAM_TIMEOUT`] or when the word is stopped.
pub async fn run_program(program: &Path, args: &[&str]) -> Result<Ran, ProgramError> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PROGRAM_DIRECTORIES.join(":"))
        .env("LANG", "C.UTF-8")
        .env("SYSTEMD_PAGER", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ProgramError::NotStarted {
            program: program.to_path_buf(),
            source,
        })?;
    let output = tokio::time::timeout(PROGRAM_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| ProgramError::Timeout {
            program: program.to_path_buf(),
        })?
        .map_err(|source| ProgramError::Lost {
            program: program.to_path_buf(),
            source,
        })?;
    Ok(Ran {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Space on the filesystem holding `path`: (total, available to unprivileged users) in bytes.
pub fn filesystem_space(path: &Path) -> Result<(u64, u64), SpaceUnknown> {
    let stat = rustix::fs::statvfs(path).map_err(SpaceUnknown)?;
    let block = stat.f_frsize;
    Ok((
        stat.f_blocks.saturating_mul(block),
        stat.f_bavail.saturating_mul(block),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AG-21: a word stopped at its time budget does not leave its programs running.
    #[tokio::test]
    async fn a_program_is_killed_when_its_word_is_stopped() {
        let scratch = tempfile::tempdir().unwrap();
        let pid_file = scratch.path().join("pid");
        let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        let sh = find_program("sh").unwrap();
        let started = std::time::Instant::now();
        let stopped = tokio::time::timeout(
            Duration::from_millis(500),
            run_program(&sh, &["-c", &script]),
        )
        .await;
        assert!(stopped.is_err(), "the budget ran out first");
        assert!(started.elapsed() < Duration::from_secs(5));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let mut gone = false;
        for _ in 0..50 {
            // Gone, or a zombie waiting to be reaped: either way it runs no more.
            match std::fs::read_to_string(&stat) {
                Err(_) => gone = true,
                Ok(text) => gone = text.split_whitespace().nth(2) == Some("Z"),
            }
            if gone {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "the program still runs after its word was stopped");
    }

    #[test]
    fn programs_are_found_only_in_the_fixed_directories() {
        assert!(find_program("sh").is_some());
        assert!(find_program("no-such-program-anywhere").is_none());
    }
}
