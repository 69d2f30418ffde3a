//! File operations that stay beneath a directory the agent opened and follow no link (issue
//! 27). A restore runs as root on a tree whose names and links came from the site, so a path
//! such as `pwn/victim`, where the same archive just made `pwn` a link to `/`, must not reach
//! the real `/victim`. Every path here is resolved by the kernel from the opened directory with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, and the last name is unlinked with
//! `unlinkat` on its parent's descriptor, so neither a link nor a `..` is ever followed, not
//! even one planted while the walk runs.

use std::{
    ffi::OsStr,
    fmt,
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Component, Path},
};

use rustix::{
    fs::{openat2, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags},
    io::Errno,
};

/// Why a path was not removed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Absolute, empty, or with a `.` or `..` component: never a path of the site.
    NotRelative,
    /// A directory on the way is a link (or the way leaves the directory).
    ThroughLink,
    /// The system refused.
    Failed(Errno),
}

impl fmt::Display for Refused {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NotRelative => formatter.write_str("not a plain relative path"),
            Refused::ThroughLink => formatter.write_str("it passes through a link"),
            Refused::Failed(errno) => write!(formatter, "{}", std::io::Error::from(*errno)),
        }
    }
}

fn refused(errno: Errno) -> Refused {
    match errno {
        // ELOOP: a link on the way with RESOLVE_NO_SYMLINKS; EXDEV: the way left the root.
        Errno::LOOP | Errno::XDEV => Refused::ThroughLink,
        other => Refused::Failed(other),
    }
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The site's root could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct RootUnopened {
    path: std::path::PathBuf,
    #[source]
    source: std::io::Error,
}

/// Opens `root` itself (not following a link there either).
pub fn open_root(root: &Path) -> Result<OwnedFd, RootUnopened> {
    rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| RootUnopened {
        path: root.to_path_buf(),
        source: std::io::Error::from(errno),
    })
}

/// The parent of `relative` (opened beneath `root`, no link followed) and its last name.
fn split(root: impl AsFd, relative: &Path) -> Result<(OwnedFd, &OsStr), Refused> {
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            _ => return Err(Refused::NotRelative),
        }
    }
    let Some((last, parents)) = names.split_last() else {
        return Err(Refused::NotRelative);
    };
    let parent: std::path::PathBuf = if parents.is_empty() {
        ".".into()
    } else {
        parents.iter().collect()
    };
    let directory = openat2(
        root,
        &parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(refused)?;
    Ok((directory, last))
}

/// Checks that the directory `relative` would be unpacked into lies beneath `root` with no
/// link on the way (a missing directory is fine: it is made by the unpacking, with no link).
pub fn parent_is_beneath(root: impl AsFd, relative: &Path) -> Result<(), Refused> {
    match split(root, relative) {
        Ok(_) | Err(Refused::Failed(Errno::NOENT)) => Ok(()),
        Err(refusal) => Err(refusal),
    }
}

/// What `relative` is beneath `root` (a link is a link): `None` when it is not there.
pub fn kind_of(root: impl AsFd, relative: &Path) -> Result<Option<FileType>, Refused> {
    let (parent, name) = match split(root, relative) {
        Ok(split) => split,
        Err(Refused::Failed(Errno::NOENT)) => return Ok(None),
        Err(refusal) => return Err(refusal),
    };
    match statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(errno) => Err(Refused::Failed(errno)),
    }
}

/// Removes `relative` beneath `root`: a file or link (the link itself, never its target), or a
/// directory with everything in it. `Ok(false)` when nothing was there.
pub fn remove(root: impl AsFd, relative: &Path) -> Result<bool, Refused> {
    let (parent, name) = match split(root, relative) {
        Ok(split) => split,
        Err(Refused::Failed(Errno::NOENT)) => return Ok(false),
        Err(refusal) => return Err(refusal),
    };
    remove_at(&parent, name).map_err(Refused::Failed)
}

/// Removes `name` in `parent`, recursively through directory descriptors.
fn remove_at(parent: &OwnedFd, name: &OsStr) -> Result<bool, Errno> {
    let stat = match statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(false),
        Err(errno) => return Err(errno),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        unlinkat(parent, name, AtFlags::empty())?;
        return Ok(true);
    }
    let directory = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // The names first, then the removals: the listing is not changed under its own reading.
    let mut names = Vec::new();
    for entry in Dir::read_from(&directory)? {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            names.push(OsStr::from_bytes(child).to_os_string());
        }
    }
    for child in names {
        remove_at(&directory, &child)?;
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_through_a_planted_link_to_outside_leaves_the_victim_and_says_why() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        std::fs::create_dir(outside.path().join("tree")).unwrap();
        std::fs::write(outside.path().join("tree/leaf"), "keep").unwrap();
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), target.path().join("pwn")).unwrap();
        std::fs::create_dir(target.path().join("real")).unwrap();
        std::os::unix::fs::symlink(outside.path(), target.path().join("real/deeper")).unwrap();
        let root = open_root(target.path()).unwrap();

        for through in ["pwn/victim", "pwn/tree", "real/deeper/victim"] {
            assert_eq!(
                remove(&root, Path::new(through)),
                Err(Refused::ThroughLink),
                "{through}"
            );
        }
        assert!(outside.path().join("victim").exists());
        assert!(outside.path().join("tree/leaf").exists());
        // The link itself is the site's: removing it removes the link, not what it names.
        assert_eq!(remove(&root, Path::new("pwn")), Ok(true));
        assert!(!target.path().join("pwn").exists());
        assert!(outside.path().join("victim").exists());
    }

    #[test]
    fn paths_that_are_absolute_or_climb_are_refused_before_anything_is_touched() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        let target = tempfile::tempdir().unwrap();
        std::fs::create_dir(target.path().join("a")).unwrap();
        let root = open_root(target.path()).unwrap();
        let climbing = format!("a/../../{}/victim", outside.path().display());
        let absolute = outside.path().join("victim");
        for path in [
            Path::new(&climbing),
            &absolute,
            Path::new(""),
            Path::new("./a"),
        ] {
            assert_eq!(remove(&root, path), Err(Refused::NotRelative), "{path:?}");
        }
        assert!(outside.path().join("victim").exists());
        assert!(target.path().join("a").exists());
    }

    #[test]
    fn a_directory_is_removed_whole_without_following_the_links_inside_it() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        let target = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(target.path().join("old/deep/er")).unwrap();
        std::fs::write(target.path().join("old/deep/er/file"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), target.path().join("old/deep/out")).unwrap();
        let root = open_root(target.path()).unwrap();
        assert_eq!(remove(&root, Path::new("old")), Ok(true));
        assert!(!target.path().join("old").exists());
        assert!(outside.path().join("victim").exists());
        assert_eq!(remove(&root, Path::new("old")), Ok(false));
        assert_eq!(remove(&root, Path::new("never/was")), Ok(false));
    }

    #[test]
    fn a_member_is_beneath_unless_a_link_is_on_its_way() {
        let outside = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        std::fs::create_dir(target.path().join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.path(), target.path().join("pwn")).unwrap();
        let root = open_root(target.path()).unwrap();
        assert_eq!(parent_is_beneath(&root, Path::new("dir/file")), Ok(()));
        assert_eq!(parent_is_beneath(&root, Path::new("new/dir/file")), Ok(()));
        assert_eq!(parent_is_beneath(&root, Path::new("pwn")), Ok(()));
        assert_eq!(
            parent_is_beneath(&root, Path::new("pwn/file")),
            Err(Refused::ThroughLink)
        );
        assert_eq!(
            kind_of(&root, Path::new("pwn")),
            Ok(Some(FileType::Symlink))
        );
        assert_eq!(kind_of(&root, Path::new("dir/none")), Ok(None));
        assert_eq!(
            kind_of(&root, Path::new("pwn/x")),
            Err(Refused::ThroughLink)
        );
    }
}
