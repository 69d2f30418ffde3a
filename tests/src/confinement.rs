//! The file-system view of the agent's systemd unit, for the real agents the tests run
//! (issue 27): a mount namespace of the agent's own in which the whole tree is read-only, as
//! `ProtectSystem=strict` makes it, but `/dev`, `/proc`, `/sys` and the unit's
//! `ReadWritePaths=`, each translated to the test's own path ([`crate::agent::Agent`] says
//! which path stands for which). A word that writes where the unit forbids then fails here as
//! it would on a machine (`Read-only file system`).
//!
//! The writable paths are read from the shipped unit file itself, the file
//! `services/agent/tests/systemd_unit.rs` keeps to the confinement table
//! (`services/agent/src/domain/confinement.rs`), so there is no second list to keep.
//!
//! Where the machine cannot make the view (no `unshare`, not root, a mount refused), the
//! harness says so once on stderr and runs the agent unconfined.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::OnceLock,
};

/// The unit the installer copies (`deploy/systemd/capstan-agent.service`).
pub const UNIT_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/systemd/capstan-agent.service"
);

/// The unit's state directory (`ConfigurationDirectory=`, which the unit makes 0700).
pub const STATE_DIR: &str = "/etc/capstan-agent";

/// One `ReadWritePaths=` entry of the unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The path the unit names.
    pub path: String,
    /// Written with a leading `-`: the unit starts when the path is absent.
    pub optional: bool,
}

/// The `ReadWritePaths=` entries of a unit file's `[Service]` section.
pub fn read_write_paths(unit: &str) -> Vec<Granted> {
    let service = unit
        .split_once("[Service]")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let service = service.split("\n[").next().unwrap_or_default();
    service
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(key, _)| key.trim() == "ReadWritePaths")
        .flat_map(|(_, value)| value.split_whitespace())
        .map(|path| Granted {
            path: path.trim_start_matches('-').to_string(),
            optional: path.starts_with('-'),
        })
        .collect()
}

/// The shipped unit's `ReadWritePaths=`.
pub fn unit_read_write_paths() -> Vec<Granted> {
    let unit = std::fs::read_to_string(UNIT_PATH)
        .unwrap_or_else(|error| panic!("the agent's unit {UNIT_PATH} cannot be read: {error}"));
    read_write_paths(&unit)
}

/// Run by `sh` inside the new mount namespace: `$1` writable paths follow, then the program
/// and its arguments. Each writable path is bound onto itself (a mount of its own, so it keeps
/// its write access), then every other mount but the API file systems is made read-only. Only
/// `remount,bind,ro`: the flag of this namespace's mount, never the file system's.
const VIEW_SCRIPT: &str = r#"set -eu
n=$1; shift
rw=""
while [ "$n" -gt 0 ]; do
    mount --bind -- "$1" "$1"
    rw="$rw
$1"
    shift; n=$((n - 1))
done
awk '{ print $5 }' /proc/self/mountinfo | while IFS= read -r point; do
    point=$(printf '%b' "$point")
    case "$point" in
        /dev | /dev/* | /proc | /proc/* | /sys | /sys/*) continue ;;
    esac
    if printf '%s\n' "$rw" | grep -qxF -- "$point"; then continue; fi
    mount -o remount,bind,ro -- "$point"
done
exec "$@"
"#;

/// `program args` in the unit's view with `writable` (the test's paths standing for the
/// unit's `ReadWritePaths=`) writable, or unconfined where this machine cannot make the view.
pub fn command(program: &Path, writable: &[PathBuf]) -> tokio::process::Command {
    if !available() {
        return tokio::process::Command::new(program);
    }
    let mut command = tokio::process::Command::new("unshare");
    command.args(view_args(writable)).arg(program);
    command
}

/// `unshare`'s arguments up to the program: a private mount namespace running the view script.
fn view_args(writable: &[PathBuf]) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        VIEW_SCRIPT,
        "capstan-agent-view",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.push(writable.len().to_string().into());
    args.extend(writable.iter().map(|path| path.as_os_str().to_owned()));
    args
}

/// Whether this machine makes the view (checked once: a view of nothing writable running
/// `true`); when it does not, says so once and why.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let probe = std::process::Command::new("unshare")
            .args(view_args(&[]))
            .arg("true")
            .stdin(Stdio::null())
            .output();
        let refused = match probe {
            Ok(output) if output.status.success() => return true,
            Ok(output) => format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => format!("unshare cannot run: {error}"),
        };
        eprintln!(
            "capstan-e2e: this machine cannot give the test agents their unit's file-system \
             view ({refused}); they run unconfined"
        );
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writable_paths_are_the_units_read_write_paths_each_marked_when_optional() {
        let unit = "[Unit]\nReadWritePaths=/nowhere\n[Service]\nReadWritePaths=/etc/capstan-agent \
                    -/var/www\nReadWritePaths=/usr/local/bin\n[Install]\nReadWritePaths=/x\n";
        let granted = read_write_paths(unit);
        let named: Vec<(&str, bool)> = granted
            .iter()
            .map(|granted| (granted.path.as_str(), granted.optional))
            .collect();
        assert_eq!(
            named,
            [
                ("/etc/capstan-agent", false),
                ("/var/www", true),
                ("/usr/local/bin", false)
            ]
        );
        assert!(
            !unit_read_write_paths().is_empty(),
            "the shipped unit grants paths"
        );
    }
}
