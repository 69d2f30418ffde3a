//! The site's files as a tar stream. The walk goes depth first with each directory's names
//! sorted, never follows a link (a link is stored as a link), stays out of excluded paths, and
//! writes the local index as it goes, in the same order as the index of the run it extends, so
//! an incremental is cut by merging the two in one pass: a file is in the tar when it is new or
//! its size, mtime or inode changed, and a path of the old index the walk no longer meets is
//! listed in the tar's last member, `/.capstan/removed` (an absolute name no path of the walk
//! can have; the manifest names it with its sha256). Nothing here holds more than one
//! directory's names and one file's buffer at a time.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    os::{
        fd::OwnedFd,
        unix::{
            ffi::{OsStrExt, OsStringExt},
            fs::{MetadataExt, OpenOptionsExt},
        },
    },
    path::{Path, PathBuf},
};

use super::beneath;
use crate::domain::{
    backup::{
        check_removed_list, member_role, path_order, sha256_hex, FileCounts, IndexEntry,
        MemberRole, Removal, RemovedList, OLD_REMOVED_MEMBER, REMOVED_MEMBER,
    },
    site::Site,
};

/// What went wrong reading or writing the site's files or their archive.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing the tar: {0}")]
    Tar(#[source] io::Error),
    #[error("the files archive: {0}")]
    Archive(#[source] io::Error),
    #[error("unpacking the files archive: {0}")]
    Unpacking(#[source] io::Error),
    #[error("the index: {0}")]
    Index(#[source] io::Error),
    #[error(transparent)]
    Root(#[from] beneath::RootUnopened),
    #[error(transparent)]
    BadBackup(#[from] crate::domain::backup::BadBackup),
    /// A site or an archive this node will not read or write, the fault named.
    #[error("{0}")]
    Refused(String),
}

impl FilesError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> FilesError + '_ {
        move |source| FilesError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<String> for FilesError {
    fn from(refusal: String) -> FilesError {
        FilesError::Refused(refusal)
    }
}

impl From<&str> for FilesError {
    fn from(refusal: &str) -> FilesError {
        FilesError::Refused(refusal.to_string())
    }
}

const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// The index of the run being extended, read one line at a time.
pub struct OldIndex {
    lines: io::Lines<BufReader<File>>,
    next: Option<IndexEntry>,
}

impl OldIndex {
    pub fn open(path: &Path) -> Result<OldIndex, FilesError> {
        let file = File::open(path).map_err(FilesError::io(path))?;
        let mut index = OldIndex {
            lines: BufReader::new(file).lines(),
            next: None,
        };
        index.advance()?;
        Ok(index)
    }

    fn advance(&mut self) -> Result<(), FilesError> {
        self.next = match self.lines.next() {
            None => None,
            Some(line) => Some(IndexEntry::parse(&line.map_err(FilesError::Index)?)?),
        };
        Ok(())
    }
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Walked {
    pub counts: FileCounts,
    /// Files that changed size while they were read (stored as far as they went).
    pub notes: Vec<String>,
    /// An incremental's removal list, for its manifest.
    pub removed_list: Option<RemovedList>,
}

/// Writes the tar of `site` into `out`: everything (`old` is `None`) or what changed since
/// `old`. The new index goes to `index_out`; removed paths are spooled to `removed_spool`.
pub fn write_tar(
    site: &Site,
    out: &mut dyn Write,
    mut old: Option<OldIndex>,
    index_out: &Path,
    removed_spool: &Path,
) -> Result<Walked, FilesError> {
    let root = &site.root;
    check_root(root)?;
    let mut index = create_spool(index_out)?;
    let mut removed = create_spool(removed_spool)?;
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut walked = Walked::default();
    let incremental = old.is_some();
    // Depth first, each directory's names sorted: (relative path, open listing).
    let mut stack: Vec<(PathBuf, std::vec::IntoIter<std::ffi::OsString>)> =
        vec![(PathBuf::new(), sorted_names(root)?.into_iter())];
    let io_error = FilesError::Tar;
    while let Some((directory, names)) = stack.last_mut() {
        let Some(name) = names.next() else {
            stack.pop();
            continue;
        };
        let relative = directory.join(&name);
        if site.excluded(&relative) {
            continue;
        }
        let full = root.join(&relative);
        let Some(meta) = content_at(&full) else {
            continue;
        };
        let kind = meta.file_type();
        let entry = index_entry(&relative, &meta);
        let unchanged = match old.as_mut() {
            Some(old) => merge_old(old, &entry, kind.is_dir(), &mut removed, &mut walked.counts)?,
            None => false,
        };
        index.write_all(entry.line().as_bytes()).map_err(io_error)?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        if kind.is_dir() {
            header.set_size(0);
            builder
                .append_data(&mut header, &relative, io::empty())
                .map_err(io_error)?;
            let listing = listing_or_note(&full, &mut walked.notes);
            stack.push((relative, listing.into_iter()));
            continue;
        }
        walked.counts.total += 1;
        if unchanged && incremental {
            continue;
        }
        if kind.is_symlink() {
            append_link(&mut builder, &mut header, &relative, &full)?;
        } else if !append_file(
            &mut builder,
            &mut header,
            &relative,
            &full,
            &meta,
            &mut walked,
        )? {
            continue;
        }
        walked.counts.count += 1;
    }
    if let Some(old) = old {
        drain_removed(old, &mut removed, &mut walked.counts)?;
    }
    close_spools(index, removed)?;
    if incremental {
        let list = append_removed_list(&mut builder, removed_spool, walked.counts.removed)?;
        walked.removed_list = Some(list);
    }
    builder.finish().map_err(io_error)?;
    Ok(walked)
}

/// What is at `full`, when it is the site's content: a directory, a file or a link (not a
/// socket, fifo or device, and not gone since the listing).
fn content_at(full: &Path) -> Option<fs::Metadata> {
    let meta = fs::symlink_metadata(full).ok()?;
    let kind = meta.file_type();
    (kind.is_dir() || kind.is_file() || kind.is_symlink()).then_some(meta)
}

/// A link is stored as a link, never followed.
fn append_link(
    builder: &mut tar::Builder<&mut dyn Write>,
    header: &mut tar::Header,
    relative: &Path,
    full: &Path,
) -> Result<(), FilesError> {
    let target = fs::read_link(full).map_err(FilesError::io(full))?;
    header.set_size(0);
    builder
        .append_link(header, relative, &target)
        .map_err(FilesError::Tar)
}

/// The new index flushed and synced, the removal spool flushed and closed.
fn close_spools(
    mut index: BufWriter<File>,
    mut removed: BufWriter<File>,
) -> Result<(), FilesError> {
    index.flush().map_err(FilesError::Tar)?;
    index.get_ref().sync_all().map_err(FilesError::Tar)?;
    removed.flush().map_err(FilesError::Tar)?;
    Ok(())
}

/// The index line of what is at `relative` (a directory's size counts as 0).
fn index_entry(relative: &Path, meta: &fs::Metadata) -> IndexEntry {
    IndexEntry {
        path: relative.as_os_str().as_bytes().to_vec(),
        size: if meta.file_type().is_dir() {
            0
        } else {
            meta.len()
        },
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        inode: meta.ino(),
    }
}

/// A directory's names, sorted; a directory that cannot be listed is noted and walked as
/// empty.
fn listing_or_note(directory: &Path, notes: &mut Vec<String>) -> Vec<std::ffi::OsString> {
    match sorted_names(directory) {
        Ok(listing) => listing,
        Err(why) => {
            notes.push(why.to_string());
            Vec::new()
        }
    }
}

/// What the old index lists after the walk's last path was removed: spooled and counted.
fn drain_removed(
    mut old: OldIndex,
    removed: &mut BufWriter<File>,
    counts: &mut FileCounts,
) -> Result<(), FilesError> {
    while let Some(previous) = old.next.take() {
        spool_removed(removed, &previous.path)?;
        counts.removed += 1;
        old.advance()?;
    }
    Ok(())
}

/// The site root must be a directory itself: a link is not followed.
fn check_root(root: &Path) -> Result<(), FilesError> {
    let root_meta = fs::symlink_metadata(root)
        .map_err(|error| format!("the site root {}: {error}", root.display()))?;
    if !root_meta.is_dir() {
        return Err(format!(
            "the site root {} is not a directory (a link is not followed)",
            root.display()
        )
        .into());
    }
    Ok(())
}

/// A new spool file (the index, the removal list), root's alone, never through a link.
fn create_spool(path: &Path) -> Result<BufWriter<File>, FilesError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(NOFOLLOW)
        .open(path)
        .map(BufWriter::new)
        .map_err(FilesError::io(path))
}

fn spool_removed(removed: &mut BufWriter<File>, path: &[u8]) -> Result<(), FilesError> {
    removed
        .write_all(path)
        .and_then(|()| removed.write_all(b"\n"))
        .map_err(FilesError::Tar)
}

/// Merges `entry` with the old index: what sorts before it was removed (spooled and counted);
/// whether `entry` is a file unchanged since the old index listed it.
fn merge_old(
    old: &mut OldIndex,
    entry: &IndexEntry,
    is_dir: bool,
    removed: &mut BufWriter<File>,
    counts: &mut FileCounts,
) -> Result<bool, FilesError> {
    while let Some(previous) = &old.next {
        match path_order(&previous.path, &entry.path) {
            std::cmp::Ordering::Less => {
                spool_removed(removed, &previous.path)?;
                counts.removed += 1;
                old.advance()?;
            }
            std::cmp::Ordering::Equal => {
                let unchanged = !is_dir && !entry.changed_since(previous);
                old.advance()?;
                return Ok(unchanged);
            }
            std::cmp::Ordering::Greater => break,
        }
    }
    Ok(false)
}

/// Appends the regular file at `relative` with exactly the size its metadata said (a file that
/// shrank while read is padded with zeros, and noted). `false` when it could not be opened
/// (noted, and not counted).
fn append_file(
    builder: &mut tar::Builder<&mut dyn Write>,
    header: &mut tar::Header,
    relative: &Path,
    full: &Path,
    meta: &fs::Metadata,
    walked: &mut Walked,
) -> Result<bool, FilesError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(NOFOLLOW)
        .open(full)
    {
        Ok(file) => file,
        Err(error) => {
            walked
                .notes
                .push(format!("{}: {error}", relative.display()));
            return Ok(false);
        }
    };
    let mut exact = Exact {
        inner: file.take(meta.len()),
        left: meta.len(),
        short: false,
    };
    builder
        .append_data(header, relative, &mut exact)
        .map_err(FilesError::Tar)?;
    if exact.short {
        walked.notes.push(format!(
            "{} shrank while it was read; the rest is stored as zeros",
            relative.display()
        ));
    }
    walked.counts.bytes += meta.len();
    Ok(true)
}

/// Appends an incremental's removal list, read back from its spool, under its absolute member
/// name; its record for the manifest.
fn append_removed_list(
    builder: &mut tar::Builder<&mut dyn Write>,
    removed_spool: &Path,
    paths: u64,
) -> Result<RemovedList, FilesError> {
    let listed = fs::read(removed_spool).map_err(FilesError::Tar)?;
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(listed.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(chrono::Utc::now().timestamp().max(0) as u64);
    // The tar crate writes only relative names; the list's absolute one (which no path of
    // the walk can be) goes into the header's name field as it is.
    let field = &mut header.as_old_mut().name;
    field.fill(0);
    field[..REMOVED_MEMBER.len()].copy_from_slice(REMOVED_MEMBER.as_bytes());
    header.set_cksum();
    builder
        .append(&header, listed.as_slice())
        .map_err(FilesError::Tar)?;
    Ok(RemovedList {
        member: REMOVED_MEMBER.to_string(),
        sha256: sha256_hex(&listed),
        paths,
    })
}

/// The names in `directory`, sorted by their bytes.
fn sorted_names(directory: &Path) -> Result<Vec<std::ffi::OsString>, FilesError> {
    let mut names: Vec<std::ffi::OsString> = fs::read_dir(directory)
        .map_err(FilesError::io(directory))?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .collect();
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// Yields exactly `left` bytes: the file's, then zeros if it shrank under the read.
struct Exact<R> {
    inner: R,
    left: u64,
    short: bool,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buffer.len().min(self.left.min(usize::MAX as u64) as usize);
        let mut got = self.inner.read(&mut buffer[..want])?;
        if got == 0 {
            self.short = true;
            buffer[..want].fill(0);
            got = want;
        }
        self.left -= got as u64;
        Ok(got)
    }
}

/// What reading or applying a tar found.
#[derive(Debug, Default, Clone)]
pub struct Applied {
    /// Files and links in the tar.
    pub files: u64,
    pub bytes: u64,
    /// Paths removed by the run's removal list.
    pub removed: u64,
    /// Paths of the removal list left alone because a link lies on their way (the link
    /// replaced a directory since the run before: what was under it went with it).
    pub skipped: Vec<String>,
}

/// A member read whole: an old incremental's `.capstan/removed`, which is the site's own file
/// unless it is the archive's last member.
struct Held {
    bytes: Vec<u8>,
    mode: u32,
    mtime: u64,
}

fn read_member(entry: &mut tar::Entry<'_, &mut dyn Read>) -> Result<Held, FilesError> {
    let mut bytes = Vec::new();
    entry.read_to_end(&mut bytes).map_err(FilesError::Archive)?;
    Ok(Held {
        bytes,
        mode: entry.header().mode().unwrap_or(0o600) & 0o777,
        mtime: entry.header().mtime().unwrap_or(0),
    })
}

fn foreign(name: &[u8]) -> String {
    format!(
        "the files archive has a member no backup of this site writes: {}",
        String::from_utf8_lossy(name)
    )
}

/// The list the manifest named, checked; or the old incremental's last member.
fn chosen_list(
    removal: &Removal,
    named: Option<Vec<u8>>,
    last_held: Option<Held>,
) -> Result<Option<Vec<u8>>, FilesError> {
    match removal {
        Removal::None => Ok(None),
        Removal::Named(list) => {
            let bytes = named.ok_or("the removal list the manifest names is not in the archive")?;
            check_removed_list(list, &bytes)?;
            Ok(Some(bytes))
        }
        Removal::OldLastMember => Ok(last_held.map(|held| held.bytes)),
    }
}

/// Walks every member of `archive`, telling the removal list (and an old incremental's
/// member that may be it) from the site's own members: `site` takes each of the site's members
/// and answers the bytes it counts (`None` for a directory), `held_site_file` an old-style
/// `.capstan/removed` that turned out not to be the last member, so the site's own file. Adds
/// what it counts to `applied`; answers the removal list the run vouches for, if any.
fn walk_members(
    archive: &mut tar::Archive<&mut dyn Read>,
    removal: &Removal,
    applied: &mut Applied,
    mut site: impl FnMut(&mut tar::Entry<'_, &mut dyn Read>, Vec<u8>) -> Result<Option<u64>, FilesError>,
    mut held_site_file: impl FnMut(&Held) -> Result<(), FilesError>,
) -> Result<Option<Vec<u8>>, FilesError> {
    let mut named = None;
    let mut held: Option<Held> = None;
    for entry in archive.entries().map_err(FilesError::Archive)? {
        let mut entry = entry.map_err(FilesError::Archive)?;
        if let Some(site_file) = held.take() {
            held_site_file(&site_file)?;
            applied.files += 1;
            applied.bytes += site_file.bytes.len() as u64;
        }
        let name = entry.path_bytes().into_owned();
        match member_role(removal, &name) {
            MemberRole::Foreign => return Err(foreign(&name).into()),
            MemberRole::RemovedList => named = Some(read_member(&mut entry)?.bytes),
            MemberRole::RemovedListIfLast => held = Some(read_member(&mut entry)?),
            MemberRole::Site => {
                if let Some(bytes) = site(&mut entry, name)? {
                    applied.files += 1;
                    applied.bytes += bytes;
                }
            }
        }
    }
    chosen_list(removal, named, held)
}

/// Reads every member of a tar to its end (level 2: every byte is decrypted and
/// decompressed, every header parsed), and checks its removal list against the manifest.
pub fn read_tar(input: &mut dyn Read, removal: &Removal) -> Result<Applied, FilesError> {
    let mut archive = tar::Archive::new(input);
    let mut applied = Applied::default();
    walk_members(
        &mut archive,
        removal,
        &mut applied,
        |entry, _| {
            let kind = entry.header().entry_type();
            let read = io::copy(entry, &mut io::sink()).map_err(FilesError::Archive)?;
            Ok((kind.is_file() || kind.is_symlink()).then_some(read))
        },
        |_| Ok(()),
    )?;
    Ok(applied)
}

/// Unpacks a tar into `target`, then removes what the run's removal list names (issue 27:
/// only the list `removal` vouches for). Nothing is followed out of `target`: each member's
/// directory is checked to lie beneath it with no link on the way, and every removal goes
/// through `beneath`, which follows no link.
pub fn apply_tar(
    input: &mut dyn Read,
    target: &Path,
    removal: &Removal,
) -> Result<Applied, FilesError> {
    let root = beneath::open_root(target)?;
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let mut applied = Applied::default();
    let list = walk_members(
        &mut archive,
        removal,
        &mut applied,
        |entry, name| {
            let path = PathBuf::from(std::ffi::OsString::from_vec(name));
            let refused = |refusal: beneath::Refused| {
                format!("unpacking the files archive: {}: {refusal}", path.display())
            };
            beneath::parent_is_beneath(&root, &path).map_err(refused)?;
            let kind = entry.header().entry_type();
            let size = entry.header().size().unwrap_or(0);
            // A file replaced by a directory (or the other way) since the previous run.
            if let Some(existing) = beneath::kind_of(&root, &path).map_err(refused)? {
                if (existing == rustix::fs::FileType::Directory) != kind.is_dir() {
                    beneath::remove(&root, &path).map_err(refused)?;
                }
            }
            entry.unpack_in(target).map_err(FilesError::Unpacking)?;
            Ok((kind.is_file() || kind.is_symlink()).then_some(size))
        },
        |site_file| write_site_file(&root, target, Path::new(OLD_REMOVED_MEMBER), site_file),
    )?;
    let Some(list) = list else {
        return Ok(applied);
    };
    for line in list
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
    {
        let relative = PathBuf::from(std::ffi::OsString::from_vec(line.to_vec()));
        match beneath::remove(&root, &relative) {
            Ok(_) => applied.removed += 1,
            Err(beneath::Refused::ThroughLink) => {
                tracing::warn!(path = %relative.display(), "a removed path lies through a link: left alone");
                applied.skipped.push(relative.display().to_string());
            }
            Err(beneath::Refused::NotRelative) => {
                return Err(format!(
                    "the removal list names a path outside the site: {}",
                    relative.display()
                )
                .into())
            }
            Err(refusal) => {
                return Err(format!("removing {}: {refusal}", relative.display()).into())
            }
        }
    }
    Ok(applied)
}

/// Writes a held member as the site's own file at `relative` (beneath `target`, no link
/// followed, replacing what is there).
fn write_site_file(
    root: &OwnedFd,
    target: &Path,
    relative: &Path,
    held: &Held,
) -> Result<(), FilesError> {
    let refused =
        |refusal: beneath::Refused| format!("unpacking {}: {refusal}", relative.display());
    beneath::parent_is_beneath(root, relative).map_err(refused)?;
    beneath::remove(root, relative).map_err(refused)?;
    let path = target.join(relative);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(FilesError::io(parent))?;
    }
    // Checked again now that the directories exist (create_dir_all made no link).
    beneath::parent_is_beneath(root, relative).map_err(refused)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(held.mode)
        .custom_flags(NOFOLLOW)
        .open(&path)
        .map_err(FilesError::io(&path))?;
    file.write_all(&held.bytes).map_err(FilesError::io(&path))?;
    let _ = file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(held.mtime));
    Ok(())
}

/// Files (and links) under `root`, and their bytes, without following links.
pub fn count_files(root: &Path) -> Result<(u64, u64), FilesError> {
    let mut count = 0;
    let mut bytes = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(directory) = stack.pop() {
        for entry in fs::read_dir(&directory).map_err(FilesError::io(&directory))? {
            let entry = entry.map_err(|error| error.to_string())?;
            let meta = entry.metadata().map_err(|error| error.to_string())?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() || meta.file_type().is_symlink() {
                count += 1;
                if meta.is_file() {
                    bytes += meta.len();
                }
            }
        }
    }
    Ok((count, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(members: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, body) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            let field = &mut header.as_old_mut().name;
            field.fill(0);
            field[..name.len()].copy_from_slice(name.as_bytes());
            header.set_cksum();
            builder.append(&header, body.as_bytes()).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn site_with(names: &[&str]) -> tempfile::TempDir {
        let target = tempfile::tempdir().unwrap();
        std::fs::create_dir(target.path().join(".capstan")).unwrap();
        for name in names {
            std::fs::write(target.path().join(name), "x").unwrap();
        }
        target
    }

    #[test]
    fn an_old_incremental_honours_only_its_last_member_named_capstan_removed() {
        let target = site_with(&["gone.txt", "kept.txt"]);
        let archive = tar_of(&[
            (".capstan/removed", "kept.txt\n"),
            ("index.php", "v2"),
            (".capstan/removed", "gone.txt\n"),
        ]);
        let applied = apply_tar(
            &mut archive.as_slice(),
            target.path(),
            &Removal::OldLastMember,
        )
        .unwrap();
        assert_eq!((applied.files, applied.removed), (2, 1));
        assert!(!target.path().join("gone.txt").exists());
        assert!(target.path().join("kept.txt").exists());
        assert_eq!(
            std::fs::read_to_string(target.path().join(".capstan/removed")).unwrap(),
            "kept.txt\n"
        );
        let read = read_tar(&mut archive.as_slice(), &Removal::OldLastMember).unwrap();
        assert_eq!(read.files, 2);
    }

    #[test]
    fn a_full_removes_nothing_and_refuses_a_member_with_an_absolute_name() {
        let target = site_with(&["kept.txt"]);
        let archive = tar_of(&[(".capstan/removed", "kept.txt\n")]);
        let applied = apply_tar(&mut archive.as_slice(), target.path(), &Removal::None).unwrap();
        assert_eq!((applied.files, applied.removed), (1, 0));
        assert!(target.path().join("kept.txt").exists());
        let forged = tar_of(&[("/.capstan/removed", "kept.txt\n")]);
        let refused = apply_tar(&mut forged.as_slice(), target.path(), &Removal::None);
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("no backup of this site writes"));
        assert!(read_tar(&mut forged.as_slice(), &Removal::None).is_err());
        assert!(target.path().join("kept.txt").exists());
    }

    #[test]
    fn a_removal_list_that_does_not_match_its_manifest_removes_nothing() {
        let target = site_with(&["kept.txt"]);
        let archive = tar_of(&[(REMOVED_MEMBER, "kept.txt\n")]);
        let named = Removal::Named(RemovedList {
            member: REMOVED_MEMBER.into(),
            sha256: sha256_hex(b"other.txt\n"),
            paths: 1,
        });
        let refused = apply_tar(&mut archive.as_slice(), target.path(), &named);
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("does not match its manifest"));
        assert!(target.path().join("kept.txt").exists());
    }
}
