//! AG-37 for site releases: the deployment files (`deploy/…` of the installed release) are
//! kept before every apply and settled afterwards and on the manifest clock. A copy is kept of
//! each one that matches the installed release's signed manifest, in the agent's state
//! directory (`release-files/<version>/<sha256>`, root's alone); settling writes back, from the
//! copy kept for the release still installed, each one that no longer matches — never while the
//! site lock is held, and only bytes whose SHA-256 is the one the manifest lists. The rules are
//! `domain::release_files`'.

use std::{ops::ControlFlow, os::unix::fs::DirBuilderExt as _};

use capstan_signing::manifest::{ManifestError, Seen};

use super::*;
use crate::domain::release_files::{
    self as files_rules, deployment_files, kept_name, kept_to_remove, settle_gate, Settle,
    SettleGate, KEEP_DIR, MAX_KEPT_BYTES,
};

/// Linux's `dev_t` as (major, minor), as `/proc/locks` prints them.
pub(super) fn dev_parts(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    (major, minor)
}

/// Whether a process holds the site lock, read from `/proc/locks` by the lock file's device and
/// inode, never by taking it (AG-39).
pub(super) fn site_lock_held(root: &Path) -> Result<bool, SiteError> {
    let metadata = match fs::symlink_metadata(root.join(LOCK_FILE)) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(SiteError::disk("the site lock cannot be read")(error)),
        Ok(metadata) => metadata,
    };
    let locks =
        fs::read_to_string("/proc/locks").map_err(SiteError::disk("/proc/locks cannot be read"))?;
    let (major, minor) = dev_parts(metadata.dev());
    Ok(rules::lock_held(&locks, major, minor, metadata.ino()))
}

/// The installed release: its version, its directory (opened without following a link) and
/// its manifest as loaded. `Ok(None)` when no release is installed.
type Installed = (String, OwnedFd, Result<FileManifest, ManifestError>);

fn installed(root: &Path, trusted: &[PublicKey]) -> Result<Option<Installed>, SiteError> {
    let Some(version) = current_version(root)? else {
        return Ok(None);
    };
    let dir = root.join(RELEASES_DIR).join(&version);
    let fd = tree::open_root(&dir).map_err(SiteError::disk(format!(
        "releases/{version} cannot be opened"
    )))?;
    let manifest = tree::load_manifest(&fd, trusted);
    Ok(Some((version, fd, manifest)))
}

/// What is at `path` of the release, as the manifest's comparison takes it.
fn on_disk(release: &OwnedFd, path: &str) -> Result<Option<Seen>, SiteError> {
    match tree::read_file(release, path) {
        Ok(None) => Ok(None),
        Ok(Some(tree::Found::File(bytes, mode))) => Ok(Some(Seen::of(&bytes, mode))),
        Ok(Some(tree::Found::NotAFile)) => Ok(Some(Seen::Other)),
        Err(error) => Err(SiteError::disk(format!("{path} cannot be read"))(error)),
    }
}

/// The directory of copies kept for `version`, made (root's alone) when `make`.
fn keep_dir(state_dir: &Path, version: &str, make: bool) -> Result<Option<OwnedFd>, SiteError> {
    let dir = state_dir.join(KEEP_DIR).join(version);
    if make {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(SiteError::disk(format!("{} cannot be made", dir.display())))?;
    }
    match tree::open_root(&dir) {
        Ok(fd) => Ok(Some(fd)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(SiteError::disk(format!(
            "{} cannot be opened",
            dir.display()
        ))(error)),
    }
}

/// The kept copy named `sha256` and the hash of its bytes as read now, if there is one.
fn read_kept(dir: &OwnedFd, sha256: &str) -> Option<(Vec<u8>, String)> {
    match tree::read_file(dir, sha256) {
        Ok(Some(tree::Found::File(bytes, _))) if bytes.len() as u64 <= MAX_KEPT_BYTES => {
            let Seen::File { sha256, .. } = Seen::of(&bytes, 0o600) else {
                return None;
            };
            Some((bytes, sha256))
        }
        _ => None,
    }
}

/// Keeps a copy of each deployment file of the installed release that matches its manifest
/// (AG-37) and is not kept yet; the paths newly kept. Nothing installed, or a manifest that
/// cannot be used, keeps nothing.
fn keep_matching(
    state_dir: &Path,
    version: &str,
    release: &OwnedFd,
    manifest: &FileManifest,
) -> Result<Vec<String>, SiteError> {
    let files = deployment_files(manifest);
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let mut kept = Vec::new();
    let mut dir = keep_dir(state_dir, version, false)?;
    for (path, entry) in files {
        if dir
            .as_ref()
            .and_then(|dir| read_kept(dir, &entry.sha256))
            .is_some_and(|(_, sha256)| sha256 == entry.sha256)
        {
            continue;
        }
        let Ok(Some(tree::Found::File(bytes, mode))) = tree::read_file(release, path) else {
            continue;
        };
        if !files_rules::keep(entry, Some(&Seen::of(&bytes, mode))) {
            continue;
        }
        if dir.is_none() {
            dir = keep_dir(state_dir, version, true)?;
        }
        let Some(target) = dir.as_ref() else {
            return Err(SiteError::NotMade(format!("{KEEP_DIR}/{version}")));
        };
        tree::replace_file(target, &entry.sha256, &bytes, 0o600, None).map_err(SiteError::disk(
            format!(
                "a copy of {path} cannot be kept as {KEEP_DIR}/{}",
                kept_name(version, &entry.sha256)
            ),
        ))?;
        kept.push(path.to_string());
    }
    Ok(kept)
}

/// Before an apply (AG-37): keeps a copy of each deployment file of the installed release that
/// matches its manifest. What it did, as lines for the job's output.
pub fn keep(root: &Path, state_dir: &Path, trusted: &[PublicKey]) -> Vec<String> {
    let (version, release, manifest) = match installed(root, trusted) {
        Ok(None) => return Vec::new(),
        Ok(Some((version, release, Ok(manifest)))) => (version, release, manifest),
        Ok(Some((version, _, Err(error)))) => {
            return vec![format!(
                "no deployment file of {version} was kept: its manifest cannot be used ({error})"
            )]
        }
        Err(why) => return vec![format!("no deployment file was kept: {why}")],
    };
    match keep_matching(state_dir, &version, &release, &manifest) {
        Ok(kept) if kept.is_empty() => Vec::new(),
        Ok(kept) => vec![format!(
            "kept a copy of {} of {version} (matching its manifest)",
            kept.join(", ")
        )],
        Err(why) => {
            warn!(%why, "a deployment file could not be kept");
            vec![why.to_string()]
        }
    }
}

/// What settling did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Why nothing was settled, when it was not.
    pub skipped: Option<String>,
    /// The deployment files written back from their kept copy.
    pub written_back: Vec<String>,
    /// The deployment files that differ and could not be written back, with why.
    pub left: Vec<String>,
    /// The deployment files newly kept.
    pub kept: Vec<String>,
}

impl Settled {
    /// As lines for a job's output or the log.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.written_back.is_empty() {
            lines.push(format!(
                "wrote back from the kept copy (no longer matching the signed release): {}",
                self.written_back.join(", ")
            ));
        }
        if !self.left.is_empty() {
            lines.push(format!(
                "deployment files that differ and were not written back: {}",
                self.left.join("; ")
            ));
        }
        lines
    }
}

/// Afterwards and on the manifest clock (AG-37): each deployment file of the installed release
/// that no longer matches its manifest is written back from the copy kept for that release,
/// when the copy's bytes have the hash the manifest lists; never while the site lock is held.
/// Files that match and are not kept yet are kept, and copies of releases no longer on disk
/// are removed.
pub fn settle(root: &Path, state_dir: &Path, trusted: &[PublicKey]) -> Settled {
    let mut settled = Settled::default();
    let lock_held = match site_lock_held(root) {
        Ok(held) => held,
        Err(why) => {
            settled.skipped = Some(why.to_string());
            return settled;
        }
    };
    let installed = match installed(root, trusted) {
        Ok(installed) => installed,
        Err(why) => {
            settled.skipped = Some(why.to_string());
            return settled;
        }
    };
    let gate = settle_gate(
        lock_held,
        installed.as_ref().map(|(version, _, _)| version.as_str()),
        match &installed {
            Some((_, _, Err(error))) => Err(error),
            _ => Ok(()),
        },
    );
    if let SettleGate::Skip(why) = gate {
        settled.skipped = Some(why);
        return settled;
    }
    let Some((version, release, Ok(manifest))) = installed else {
        return settled;
    };
    let dir = match keep_dir(state_dir, &version, false) {
        Ok(dir) => dir,
        Err(why) => {
            settled.skipped = Some(why.to_string());
            return settled;
        }
    };
    if settle_files(
        root,
        &version,
        &release,
        &manifest,
        dir.as_ref(),
        &mut settled,
    )
    .is_break()
    {
        return settled;
    }
    match keep_matching(state_dir, &version, &release, &manifest) {
        Ok(kept) => settled.kept = kept,
        Err(why) => settled.left.push(why.to_string()),
    }
    prune_kept(root, state_dir);
    settled
}

/// Each deployment file of the installed release judged against its manifest and, where the
/// rule says so, written back from its kept copy (AG-37); `Break` when a deploy began meanwhile
/// and the rest is left to the next tick.
fn settle_files(
    root: &Path,
    version: &str,
    release: &OwnedFd,
    manifest: &FileManifest,
    dir: Option<&OwnedFd>,
    settled: &mut Settled,
) -> ControlFlow<()> {
    for (path, entry) in deployment_files(manifest) {
        let seen = match on_disk(release, path) {
            Ok(seen) => seen,
            Err(why) => {
                settled.left.push(why.to_string());
                continue;
            }
        };
        let kept = dir.and_then(|dir| read_kept(dir, &entry.sha256));
        let decision = files_rules::settle(
            version,
            entry,
            seen.as_ref(),
            kept.as_ref().map(|(_, sha256)| (version, sha256.as_str())),
        );
        match decision {
            Settle::Matches => {}
            Settle::NoVerifyingCopy => settled.left.push(format!(
                "{path} (no kept copy of {version} with the hash its manifest lists)"
            )),
            Settle::WriteBack => {
                // Looked at again just before the write: an apply may have begun meanwhile.
                if site_lock_held(root).unwrap_or(true)
                    || current_version(root).ok().flatten().as_deref() != Some(version)
                {
                    settled.skipped = Some(
                        "a deploy began while settling; the rest is left to the next tick".into(),
                    );
                    return ControlFlow::Break(());
                }
                let Some((bytes, _)) = kept else { continue };
                match tree::replace_file(release, path, &bytes, entry.mode, None) {
                    Ok(()) => {
                        info!(%version, path, "a deployment file that no longer matched the signed release was written back from its kept copy");
                        settled.written_back.push(path.to_string());
                    }
                    Err(error) => settled
                        .left
                        .push(format!("{path} (could not be written back: {error})")),
                }
            }
        }
    }
    ControlFlow::Continue(())
}

/// Removes the copies kept for releases no longer on disk.
fn prune_kept(root: &Path, state_dir: &Path) {
    let names = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .filter(|name| check_version(name).is_ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let keep_root = state_dir.join(KEEP_DIR);
    let kept_for = names(&keep_root);
    if kept_for.is_empty() {
        return;
    }
    let on_disk = names(&root.join(RELEASES_DIR));
    let Ok(parent) = tree::open_root(&keep_root) else {
        return;
    };
    for version in kept_to_remove(&kept_for, &on_disk) {
        if let Err(error) = tree::remove_tree(&parent, &version) {
            warn!(%version, %error, "the kept deployment files of a removed release could not be removed");
        }
    }
}
