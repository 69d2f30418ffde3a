//! The files beside the binary (`.bak`, `.pending`, `.rejected`, `.new`) and how each is
//! written: whole, by rename, never through a link.

use std::{
    fs::{self, OpenOptions},
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use tracing::warn;

use crate::domain::update::{parse_rejected, Pending};

/// The files beside the binary.
#[derive(Debug, Clone)]
pub struct Paths {
    pub binary: PathBuf,
    pub bak: PathBuf,
    pub pending: PathBuf,
    pub rejected: PathBuf,
    pub staged: PathBuf,
}

impl Paths {
    pub fn of(binary: &Path) -> Paths {
        let beside = |suffix: &str| {
            let mut name = binary.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        Paths {
            binary: binary.to_path_buf(),
            bak: beside(".bak"),
            pending: beside(".pending"),
            rejected: beside(".rejected"),
            staged: beside(".new"),
        }
    }

    /// The running binary's files.
    pub fn current() -> anyhow::Result<Paths> {
        let binary = std::env::current_exe()
            .map_err(|error| anyhow::anyhow!("cannot tell where this binary is: {error}"))?;
        Ok(Paths::of(&binary))
    }

    pub(super) fn read_pending(&self) -> Option<Pending> {
        let bytes = fs::read(&self.pending).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(pending) => Some(pending),
            Err(error) => {
                warn!(%error, path = %self.pending.display(), "=== Self-update === the trial record cannot be read; it is ignored");
                None
            }
        }
    }

    pub(super) fn write_pending(&self, pending: &Pending) -> std::io::Result<()> {
        write_whole(
            &self.pending,
            &serde_json::to_vec(pending).expect("a trial record serializes"),
            0o644,
        )
    }

    pub fn rejected_versions(&self) -> Vec<String> {
        fs::read_to_string(&self.rejected)
            .map(|text| parse_rejected(&text))
            .unwrap_or_default()
    }

    fn reject(&self, version: &str) -> std::io::Result<()> {
        let mut versions = self.rejected_versions();
        if !versions.iter().any(|held| held == version) {
            versions.push(version.to_string());
        }
        write_whole(
            &self.rejected,
            format!("{}\n", versions.join("\n")).as_bytes(),
            0o644,
        )
    }

    /// Puts the `.bak` back in place of the binary (one rename) and records `version` as
    /// rejected, ending its trial.
    pub(super) fn roll_back(&self, version: &str) -> std::io::Result<()> {
        self.reject(version)?;
        fs::rename(&self.bak, &self.binary)?;
        let _ = fs::remove_file(&self.pending);
        Ok(())
    }
}

/// Writes `path` whole: a temporary file beside it (created exclusively, never through a
/// link), synced, renamed over it.
fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{:016x}.tmp", rand::random::<u64>()));
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temporary)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}
