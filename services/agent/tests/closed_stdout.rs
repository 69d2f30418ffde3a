//! Every command of the CLI ends quietly when the reader of its output goes away
//! (`capstan-agent recipes | head`): no panic, no backtrace, the same exit code as when its
//! output is read.

use capstan_agent::cli::Cli;
use clap::CommandFactory as _;
use std::{
    os::unix::{fs::PermissionsExt as _, process::ExitStatusExt as _},
    path::Path,
    process::{Command, Stdio},
};

const AGENT: &str = env!("CARGO_BIN_EXE_capstan-agent");

/// Each command with arguments it can run with here (no plane), named by its first word.
fn every_command(state: &Path) -> Vec<Vec<String>> {
    let recipient = age::x25519::Identity::generate().to_public().to_string();
    [
        vec!["--help"],
        vec!["--version"],
        vec!["status"],
        vec!["enable"],
        vec!["disable"],
        vec!["log-access", "on"],
        vec!["recipes"],
        vec!["start-guard", "--binary", AGENT],
        vec!["recovery-key", "set", &recipient],
        vec!["recovery-key", "show"],
        vec!["recovery-key", "prove", "not-the-answer"],
        vec!["approve", "1"],
        vec!["deny", "2"],
        vec!["leave"],
        // Refused before any output: the management node does not answer.
        vec!["join", "--management-node=http://127.0.0.1:9", "--no-wait"],
        // `run` writes its log to stderr, never stdout, and runs until stopped: here a bad
        // setting ends it at once.
        vec!["--recipe-tick-secs=0", "run"],
    ]
    .into_iter()
    .map(|args| {
        std::iter::once(format!("--state-dir={}", state.display()))
            .chain(args.into_iter().map(str::to_string))
            .collect()
    })
    .collect()
}

/// A job held for approval, as the running agent leaves it.
fn awaiting(state: &Path, job: i64) {
    let path = state.join(format!("awaiting-{job}.json"));
    std::fs::write(
        &path,
        format!(r#"{{"job_id":{job},"primitive":"check_status","params":{{}}}}"#),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Runs the agent with `args`, its stdout `stdout`: (exit code, stderr).
fn run(args: &[String], stdout: Stdio) -> (i32, String) {
    let output = Command::new(AGENT)
        .args(args)
        .env_remove("CAPSTAN_AGENT_LOG")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let code = output.status.code().unwrap_or_else(|| {
        panic!(
            "{args:?} was killed by signal {:?}: {stderr}",
            output.status.signal()
        )
    });
    (code, stderr)
}

#[test]
fn every_command_ends_quietly_when_its_reader_has_gone_away() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // The state directory exists (0700) before the jobs held for approval are put in it.
    let (code, stderr) = run(
        &[format!("--state-dir={}", state.display()), "status".into()],
        Stdio::null(),
    );
    assert_eq!(code, 0, "{stderr}");
    awaiting(&state, 1);
    awaiting(&state, 2);

    let commands = every_command(&state);
    // The table names every command the CLI has.
    let named: std::collections::BTreeSet<String> = commands
        .iter()
        .filter_map(|args| args.iter().skip(1).find(|arg| !arg.starts_with('-')))
        .cloned()
        .collect();
    for command in Cli::command().get_subcommands() {
        assert!(
            named.contains(command.get_name()),
            "{} is not in the table",
            command.get_name()
        );
    }

    for args in &commands {
        let (read_code, read_stderr) = run(args, Stdio::null());
        // A pipe whose reading end is closed before the agent starts: its first write
        // fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let (code, stderr) = run(args, Stdio::from(writer));
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            code, read_code,
            "{args:?}: the same exit as with its output read ({read_stderr}), not: {stderr}"
        );
    }
}
