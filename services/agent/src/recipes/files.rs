//! The recipes' files (AG-45, AG-47, AG-61): the root-only ledger per recipe in the state
//! directory (`ledger/<recipe>.jsonl`, 0600 in a 0700 directory), read back by the loop and
//! rotated by size (the lines the loop needs are carried into the fresh file); the outward copy
//! `{site}/cache/recipes/<recipe>.jsonl`, written and never read, with the rendered case
//! `<recipe>.case.json` beside it; and the hold markers `hold/<recipe>`.
//!
//! The site tree is the web user's, who may plant a link anywhere in it: the outward files are
//! reached one directory at a time from the site root with `O_NOFOLLOW`, never by path.

use chrono::{DateTime, Utc};
use rustix::fs::{mkdirat, openat, renameat, Mode, OFlags, CWD};
use std::{
    fs::{self, File, OpenOptions},
    io::{ErrorKind, Read, Write},
    os::{
        fd::OwnedFd,
        unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
};

use crate::{
    domain::{
        recipes::{
            ledger::{Event, Line, Memory},
            tick::Hold,
        },
        trust::{self, FileFacts},
    },
    state::StateDir,
};

/// Why a ledger or its outward copy could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The outward copy (the site's own view of the ledger) under `name`.
    #[error("{name}: {reason}")]
    Outward { name: String, reason: String },
    #[error("{name}: {source} (a link is not followed)")]
    Link {
        name: String,
        #[source]
        source: rustix::io::Errno,
    },
    #[error("{name} is not a regular file")]
    NotRegular { name: String },
}

impl LedgerError {
    fn io(path: &Path) -> impl Fn(std::io::Error) -> LedgerError + Copy + '_ {
        move |source| LedgerError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn outward(name: &str, reason: impl std::fmt::Display) -> LedgerError {
        LedgerError::Outward {
            name: name.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// A ledger is rotated when it grows past this.
pub const MAX_LEDGER_BYTES: u64 = 1024 * 1024;
/// The root-only ledgers' directory in the state directory.
pub const LEDGER_DIR: &str = "ledger";
/// The hold markers' directory in the state directory (AG-45).
pub const HOLD_DIR: &str = "hold";

const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// The ledgers of one state directory, and the outward copies under the site (if any).
#[derive(Debug, Clone)]
pub struct Ledgers {
    dir: PathBuf,
    hold_dir: PathBuf,
    agent_uid: u32,
    site_root: Option<PathBuf>,
}

impl Ledgers {
    pub fn new(state: &StateDir, site_root: Option<&Path>) -> Ledgers {
        Ledgers {
            dir: state.file(LEDGER_DIR),
            hold_dir: state.file(HOLD_DIR),
            agent_uid: state.agent_uid(),
            site_root: site_root.map(Path::to_path_buf),
        }
    }

    fn path(&self, recipe: &str) -> PathBuf {
        self.dir.join(format!("{recipe}.jsonl"))
    }

    /// What the loop reads back (AG-47); an absent ledger is an empty memory.
    pub fn read(&self, recipe: &str) -> Result<Memory, LedgerError> {
        let path = self.path(recipe);
        let mut file = match OpenOptions::new()
            .read(true)
            .custom_flags(NOFOLLOW)
            .open(&path)
        {
            Ok(file) => file,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Memory::default()),
            Err(error) => return Err(LedgerError::io(&path)(error)),
        };
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(LedgerError::io(&path))?;
        Ok(Memory::read(&text))
    }

    /// Appends `event` to the recipe's ledger and its outward copy; the root-only line is on
    /// disk (fsynced) before this returns, so an attempt is recorded before its repair runs.
    pub fn write(
        &self,
        recipe: &str,
        at: DateTime<Utc>,
        event: Event,
    ) -> Result<Line, LedgerError> {
        let line = Line { at, event };
        self.rotate_if_full(recipe, at)?;
        self.append(recipe, std::slice::from_ref(&line))?;
        if let Err(why) = self.append_outward(recipe, &line) {
            tracing::debug!(recipe, %why, "the outward ledger copy could not be written");
        }
        Ok(line)
    }

    fn append(&self, recipe: &str, lines: &[Line]) -> Result<(), LedgerError> {
        let path = self.path(recipe);
        let fail = LedgerError::io(&path);
        if !self.dir.is_dir() {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&self.dir)
                .or_else(|error| {
                    if error.kind() == ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(error)
                    }
                })
                .map_err(fail)?;
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(NOFOLLOW)
            .open(&path)
            .map_err(fail)?;
        let text: String = lines.iter().map(|line| line.to_json() + "\n").collect();
        file.write_all(text.as_bytes()).map_err(fail)?;
        file.sync_data().map_err(fail)
    }

    /// Rotation by size: the full ledger becomes `<recipe>.jsonl.1` (replacing the one
    /// before) and the fresh one starts with the lines the loop needs.
    fn rotate_if_full(&self, recipe: &str, at: DateTime<Utc>) -> Result<(), LedgerError> {
        let path = self.path(recipe);
        let full = fs::symlink_metadata(&path).is_ok_and(|meta| meta.len() > MAX_LEDGER_BYTES);
        if !full {
            return Ok(());
        }
        let memory = self.read(recipe)?;
        let rotated = self.dir.join(format!("{recipe}.jsonl.1"));
        fs::rename(&path, &rotated).map_err(LedgerError::io(&path))?;
        self.append(recipe, &memory.carried(at))
    }

    /// The outward directory `{site}/cache/recipes`, opened without following any link.
    fn outward_dir(&self) -> Result<Option<OwnedFd>, LedgerError> {
        let Some(root) = &self.site_root else {
            return Ok(None);
        };
        let directory = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = openat(CWD, root, directory, Mode::empty())
            .map_err(|errno| LedgerError::io(root)(errno.into()))?;
        for name in ["cache", "recipes"] {
            match mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(error) if error == rustix::io::Errno::EXIST => {}
                Err(error) => return Err(LedgerError::outward(name, error)),
            }
            dir = openat(&dir, name, directory, Mode::empty()).map_err(|source| {
                LedgerError::Link {
                    name: name.to_string(),
                    source,
                }
            })?;
        }
        Ok(Some(dir))
    }

    fn append_outward(&self, recipe: &str, line: &Line) -> Result<(), LedgerError> {
        let Some(dir) = self.outward_dir()? else {
            return Ok(());
        };
        let name = format!("{recipe}.jsonl");
        let flags =
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = openat(&dir, &name, flags, Mode::from_raw_mode(0o644))
            .map_err(|error| LedgerError::outward(&name, error))?;
        let mut file = File::from(opened);
        let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        if !file.metadata().is_ok_and(|meta| meta.is_file()) {
            return Err(LedgerError::NotRegular {
                name: name.to_string(),
            });
        }
        if size > MAX_LEDGER_BYTES {
            renameat(&dir, &name, &dir, format!("{name}.1"))
                .map_err(|error| LedgerError::outward(&name, error))?;
            let opened = openat(&dir, &name, flags, Mode::from_raw_mode(0o644))
                .map_err(|error| LedgerError::outward(&name, error))?;
            file = File::from(opened);
        }
        file.write_all((line.to_json() + "\n").as_bytes())
            .map_err(|error| LedgerError::outward(&name, error))
    }

    /// AG-61: the rendered case, written whole beside the outward ledger, never read back.
    pub fn render_case(
        &self,
        recipe: &str,
        rendered: &serde_json::Value,
    ) -> Result<(), LedgerError> {
        let Some(dir) = self.outward_dir()? else {
            return Ok(());
        };
        let name = format!("{recipe}.case.json");
        let temporary = format!(".{name}.{:016x}.tmp", rand::random::<u64>());
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = openat(&dir, &temporary, flags, Mode::from_raw_mode(0o644))
            .map_err(|error| LedgerError::outward(&temporary, error))?;
        let mut file = File::from(opened);
        let mut bytes = serde_json::to_vec_pretty(rendered).expect("a case serializes");
        bytes.push(b'\n');
        let written = file.write_all(&bytes).and_then(|()| file.sync_all());
        if let Err(error) = written {
            let _ = rustix::fs::unlinkat(&dir, &temporary, rustix::fs::AtFlags::empty());
            return Err(LedgerError::outward(&name, error));
        }
        renameat(&dir, &temporary, &dir, &name).map_err(|error| LedgerError::outward(&name, error))
    }

    /// AG-45: whether `hold/<recipe>` holds the recipe.
    pub fn hold(&self, recipe: &str) -> Hold {
        let marker = self.hold_dir.join(recipe);
        if fs::symlink_metadata(&marker).is_err() {
            return Hold::None;
        }
        let path = self.hold_dir.display().to_string();
        match fs::symlink_metadata(&self.hold_dir) {
            Err(error) => Hold::Ignored(format!("{path}: {error}")),
            Ok(meta) => {
                let facts = FileFacts {
                    is_symlink: meta.file_type().is_symlink(),
                    is_dir: meta.is_dir(),
                    is_file: meta.is_file(),
                    uid: meta.uid(),
                    mode: meta.permissions().mode() & 0o7777,
                };
                match trust::hold_directory(&facts, &path, self.agent_uid) {
                    Ok(()) => Hold::Honoured,
                    Err(distrust) => Hold::Ignored(format!(
                        "the hold marker {} is ignored: {distrust}",
                        marker.display()
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::Verdict;

    fn scratch() -> (tempfile::TempDir, StateDir, Ledgers) {
        let parent = tempfile::tempdir().unwrap();
        let state = StateDir::open(&parent.path().join("state")).unwrap();
        let site = parent.path().join("site");
        fs::create_dir(&site).unwrap();
        let ledgers = Ledgers::new(&state, Some(&site));
        (parent, state, ledgers)
    }

    fn fail() -> Event {
        Event::Check {
            verdict: Verdict::Fail,
            detail: "x".repeat(300),
        }
    }

    fn long_fail() -> Event {
        Event::Check {
            verdict: Verdict::Fail,
            detail: "x".repeat(8000),
        }
    }

    #[test]
    fn ag_47_the_root_only_ledger_is_0600_read_back_and_the_outward_copy_is_the_same_lines() {
        let (parent, _state, ledgers) = scratch();
        ledgers.write("disk_headroom", Utc::now(), fail()).unwrap();
        ledgers.write("disk_headroom", Utc::now(), fail()).unwrap();
        assert_eq!(ledgers.read("disk_headroom").unwrap().failing_ticks, 2);
        let inner = parent.path().join("state/ledger/disk_headroom.jsonl");
        assert_eq!(
            fs::metadata(&inner).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let outward = parent.path().join("site/cache/recipes/disk_headroom.jsonl");
        assert_eq!(fs::read(&inner).unwrap(), fs::read(&outward).unwrap());
    }

    #[test]
    fn ag_47_the_outward_copy_is_never_read_back_and_a_link_in_the_site_is_not_followed() {
        let (parent, _state, ledgers) = scratch();
        let elsewhere = parent.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, parent.path().join("site/cache")).unwrap();
        ledgers.write("disk_headroom", Utc::now(), fail()).unwrap();
        assert!(
            fs::read_dir(&elsewhere).unwrap().next().is_none(),
            "nothing written through the link"
        );
        // A forged outward line changes nothing the loop reads.
        let (parent, _state, ledgers) = scratch();
        let outward = parent.path().join("site/cache/recipes");
        fs::create_dir_all(&outward).unwrap();
        fs::write(
            outward.join("disk_headroom.jsonl"),
            (Line {
                at: Utc::now(),
                event: fail(),
            })
            .to_json()
                + "\n",
        )
        .unwrap();
        assert_eq!(ledgers.read("disk_headroom").unwrap(), Memory::default());
    }

    #[test]
    fn ag_47_a_full_ledger_rotates_and_keeps_what_the_loop_needs() {
        let (parent, _state, ledgers) = scratch();
        let at = Utc::now();
        let mut written = 0;
        while written <= MAX_LEDGER_BYTES + 1 {
            written += ledgers
                .write("service_health", at, long_fail())
                .unwrap()
                .to_json()
                .len() as u64
                + 1;
        }
        ledgers.write("service_health", at, long_fail()).unwrap();
        let rotated = parent.path().join("state/ledger/service_health.jsonl.1");
        assert!(rotated.is_file());
        let fresh = fs::metadata(parent.path().join("state/ledger/service_health.jsonl")).unwrap();
        assert!(fresh.len() < MAX_LEDGER_BYTES / 10);
        assert_eq!(ledgers.read("service_health").unwrap().failing_ticks, 3);
    }

    #[test]
    fn ag_45_a_hold_is_honoured_in_a_closed_directory_and_ignored_in_an_open_one() {
        let (parent, _state, ledgers) = scratch();
        assert_eq!(ledgers.hold("service_health"), Hold::None);
        let hold = parent.path().join("state/hold");
        fs::DirBuilder::new().mode(0o700).create(&hold).unwrap();
        fs::write(hold.join("service_health"), b"").unwrap();
        assert_eq!(ledgers.hold("service_health"), Hold::Honoured);
        assert_eq!(ledgers.hold("disk_headroom"), Hold::None);
        fs::set_permissions(&hold, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            matches!(ledgers.hold("service_health"), Hold::Ignored(why) if why.contains("mode 777"))
        );
    }
}
