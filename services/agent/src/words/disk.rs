//! `disk_usage`: the largest directories under the site root, bounded. The walk stays on the
//! site's filesystem, never follows a link, stops after a fixed number of entries and says
//! so when it did, and counts the space files take on disk.
//!
//! The site tree belongs to the web user, who may swap a directory for a link while the walk
//! runs. So the walk holds each directory open and goes on from the descriptor, never from a
//! path: a child is opened with `openat(parent, name, O_NOFOLLOW | O_DIRECTORY)`, which refuses
//! a link put where the directory was listed, and a parent swapped behind the walk's back does
//! not move a walk that already holds it open.

use rustix::fs::{fstat, openat, statat, AtFlags, Dir, FileType, Mode, OFlags, Stat, CWD};
use serde_json::{json, Value};
use std::{
    ffi::{CStr, OsStr},
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

use super::{Failed, Finished, Redaction};
use crate::config::Config;

/// The most entries one walk looks at.
const MAX_VISITED: u64 = 1_000_000;
/// Directories this deep under the site root (1 = its children) are listed.
const LISTED_DEPTH: usize = 3;
/// The walk descends no deeper than this (also the most directories it holds open at once).
const MAX_DEPTH: usize = 64;

/// How a directory of the walk is opened: by name in its open parent, never through a link.
const DIRECTORY_OPEN: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What the walk needs of one `stat`: (device, bytes on disk, whether a directory).
// The fields' integer types differ between architectures, hence the casts.
#[allow(clippy::unnecessary_cast)]
fn facts(stat: &Stat) -> (u64, u64, bool) {
    let is_directory = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
    (
        stat.st_dev as u64,
        (stat.st_blocks as u64).saturating_mul(512),
        is_directory,
    )
}

/// A test's hook into the walk: see [`Walk::before_descend`].
#[cfg(test)]
type BeforeDescend = Box<dyn FnMut(&Path)>;

struct Walk {
    device: u64,
    visited: u64,
    partial: Option<String>,
    listed: Vec<(PathBuf, u64)>,
    /// A test's hook, called between listing a directory and opening it (the race window).
    #[cfg(test)]
    before_descend: Option<BeforeDescend>,
}

impl Walk {
    /// Opens the site root (not through a link) and starts a walk on its filesystem.
    fn start(root: &Path) -> Result<(Walk, OwnedFd), Failed> {
        let opened = openat(CWD, root, DIRECTORY_OPEN, Mode::empty()).map_err(|error| {
            if error == rustix::io::Errno::NOTDIR || error == rustix::io::Errno::LOOP {
                Failed::new(format!(
                    "{} is not a directory (a link is not followed)",
                    root.display()
                ))
            } else {
                Failed::new(format!("{}: {error}", root.display()))
            }
        })?;
        let stat =
            fstat(&opened).map_err(|error| Failed::new(format!("{}: {error}", root.display())))?;
        let walk = Walk {
            device: facts(&stat).0,
            visited: 0,
            partial: None,
            listed: Vec::new(),
            #[cfg(test)]
            before_descend: None,
        };
        Ok((walk, opened))
    }

    /// Notes the first thing that made the walk partial.
    fn partial(&mut self, why: impl FnOnce() -> String) {
        self.partial.get_or_insert_with(why);
    }

    /// The bytes on disk under the directory open as `directory`, named `path` in what the
    /// word reports (its own entry is counted by its parent).
    fn directory(&mut self, directory: OwnedFd, path: &Path, depth: usize) -> u64 {
        let mut total = 0;
        let mut entries = match Dir::new(directory) {
            Ok(entries) => entries,
            Err(error) => {
                self.partial(|| format!("{}: {error}", path.display()));
                return 0;
            }
        };
        while let Some(entry) = entries.read() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    self.partial(|| format!("{}: {error}", path.display()));
                    break;
                }
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            if self.visited >= MAX_VISITED {
                self.partial(|| {
                    format!("stopped after {MAX_VISITED} entries; sizes are at least these")
                });
                break;
            }
            self.visited += 1;
            let Ok(parent) = entries.fd() else { break };
            let Ok(stat) = statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let (device, own, is_directory) = facts(&stat);
            total += own;
            if !is_directory || device != self.device {
                continue;
            }
            if depth >= MAX_DEPTH {
                self.partial(|| format!("directories deeper than {MAX_DEPTH} were not entered"));
                continue;
            }
            let child_path = path.join(OsStr::from_bytes(name.to_bytes()));
            #[cfg(test)]
            if let Some(hook) = self.before_descend.as_mut() {
                hook(&child_path);
            }
            match self.open_child(parent, name) {
                Ok(child) => total += self.directory(child, &child_path, depth + 1),
                Err(why) => self.partial(|| format!("{}: {why}", child_path.display())),
            }
        }
        if (1..=LISTED_DEPTH).contains(&depth) {
            self.listed.push((path.to_path_buf(), total));
        }
        total
    }

    /// Opens the directory listed as `name` in `parent`, as long as it still is a directory
    /// on the walked filesystem: a link swapped in since the listing is refused by the open.
    fn open_child(&self, parent: impl AsFd, name: &CStr) -> Result<OwnedFd, NotEntered> {
        let child = openat(parent, name, DIRECTORY_OPEN, Mode::empty()).map_err(|error| {
            if error == rustix::io::Errno::LOOP || error == rustix::io::Errno::NOTDIR {
                NotEntered::NoLongerADirectory
            } else {
                error.into()
            }
        })?;
        let stat = fstat(&child)?;
        if facts(&stat).0 != self.device {
            return Err(NotEntered::OtherFilesystem);
        }
        Ok(child)
    }
}

/// Why the walk did not enter a directory it listed.
#[derive(Debug, thiserror::Error)]
enum NotEntered {
    #[error("it stopped being a directory while the walk ran (a link is not followed)")]
    NoLongerADirectory,
    #[error("it is on another filesystem now, which the walk does not enter")]
    OtherFilesystem,
    #[error(transparent)]
    Errno(#[from] rustix::io::Errno),
}

pub async fn disk_usage(config: &Config, params: &Value) -> Result<Finished, Failed> {
    let Some(root) = config.site_root.clone() else {
        return Err(Failed::new("this machine has no site"));
    };
    let max_entries = params
        .get("max_entries")
        .and_then(Value::as_u64)
        .unwrap_or(20) as usize;
    tokio::task::spawn_blocking(move || {
        let (mut walk, opened) = Walk::start(&root)?;
        let total = walk.directory(opened, &root, 0);
        walk.listed
            .sort_by(|left, right| right.1.cmp(&left.1).then(left.0.cmp(&right.0)));
        walk.listed.truncate(max_entries);
        let entries: Vec<Value> = walk
            .listed
            .iter()
            .map(|(path, bytes)| json!({"path": path.display().to_string(), "bytes": bytes}))
            .collect();
        let mut output: Vec<String> = walk
            .listed
            .iter()
            .map(|(path, bytes)| format!("{bytes:>16}  {}", path.display()))
            .collect();
        output.insert(0, format!("{total:>16}  {} (total)", root.display()));
        if let Some(why) = &walk.partial {
            output.push(format!("partial: {why}"));
        }
        Ok(Finished {
            output: output.join("\n"),
            result: json!({"root": root.display().to_string(), "total_bytes": total,
                           "entries": entries, "visited": walk.visited,
                           "partial": walk.partial}),
            redaction: Redaction::Text,
        })
    })
    .await
    .map_err(|error| Failed::new(error.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Walks `root` as the word does, calling `before_descend` with each directory's path
    /// after it was listed as a directory and before the walk goes into it: (total, partial).
    fn measure(root: &Path, before_descend: impl FnMut(&Path) + 'static) -> (u64, Option<String>) {
        let (mut walk, opened) = Walk::start(root).unwrap();
        walk.before_descend = Some(Box::new(before_descend));
        let total = walk.directory(opened, root, 0);
        (total, walk.partial)
    }

    /// A directory outside the site holding a large file, as root's own data would be.
    fn outside_with_large_file(under: &str) -> tempfile::TempDir {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join(under)).unwrap();
        std::fs::write(
            outside.path().join(under).join("huge"),
            vec![1u8; 1024 * 1024],
        )
        .unwrap();
        outside
    }

    #[test]
    fn a_directory_swapped_for_a_link_between_listing_and_descending_is_not_followed() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir(site.path().join("uploads")).unwrap();
        std::fs::write(site.path().join("uploads/small"), b"x").unwrap();
        let outside = outside_with_large_file(".");
        let moved = tempfile::tempdir().unwrap();
        let uploads = site.path().join("uploads");
        let target = outside.path().to_path_buf();
        let parked = moved.path().join("uploads");
        let mut swapped = false;
        let (total, partial) = measure(site.path(), move |path| {
            if path == uploads && !swapped {
                swapped = true;
                std::fs::rename(&uploads, &parked).unwrap();
                symlink(&target, &uploads).unwrap();
            }
        });
        assert!(
            total < 1024 * 1024,
            "the walk counted {total} bytes through the link"
        );
        let partial = partial.expect("the walk says what it could not enter");
        assert!(partial.contains("uploads"), "{partial}");
    }

    #[test]
    fn a_parent_swapped_for_a_link_mid_walk_does_not_lead_the_walk_outside() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(site.path().join("a/b")).unwrap();
        std::fs::write(site.path().join("a/b/small"), b"x").unwrap();
        let outside = outside_with_large_file("b");
        let moved = tempfile::tempdir().unwrap();
        let parent = site.path().join("a");
        let child = parent.join("b");
        let target = outside.path().to_path_buf();
        let parked = moved.path().join("a");
        let mut swapped = false;
        // While the walk is inside `a`, about to enter `a/b`, `a` becomes a link to a
        // directory that also has a `b`: the walk must go on in the `a` it opened.
        let (total, _) = measure(site.path(), move |path| {
            if path == child && !swapped {
                swapped = true;
                std::fs::rename(&parent, &parked).unwrap();
                symlink(&target, &parent).unwrap();
            }
        });
        assert!(
            total < 1024 * 1024,
            "the walk counted {total} bytes through the link"
        );
    }

    #[tokio::test]
    async fn the_largest_directories_are_listed_first_and_links_are_not_followed() {
        let site = tempfile::tempdir().unwrap();
        let big = site.path().join("uploads");
        std::fs::create_dir_all(big.join("2024")).unwrap();
        std::fs::write(big.join("2024/photo"), vec![7u8; 256 * 1024]).unwrap();
        std::fs::create_dir(site.path().join("cache")).unwrap();
        std::fs::write(site.path().join("cache/x"), b"x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("huge"), vec![1u8; 1024 * 1024]).unwrap();
        std::os::unix::fs::symlink(outside.path(), site.path().join("link")).unwrap();
        let config = Config {
            site_root: Some(site.path().to_path_buf()),
            letsencrypt_dir: "/nonexistent".into(),
            postgres: "127.0.0.1:1".into(),
            ..Config::default()
        };
        let finished = disk_usage(&config, &json!({"max_entries": 2}))
            .await
            .unwrap();
        let entries = finished.result["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries[0]["path"].as_str().unwrap().ends_with("uploads"));
        assert!(entries[0]["bytes"].as_u64().unwrap() >= 256 * 1024);
        assert!(finished.result["total_bytes"].as_u64().unwrap() < 1024 * 1024);
    }
}
