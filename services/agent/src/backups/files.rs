//! The site's files as a tar stream. The walk goes depth first with each directory's names
//! sorted, never follows a link (a link is stored as a link), stays out of excluded paths, and
//! writes the local index as it goes, in the same order as the index of the run it extends, so
//! an incremental is cut by merging the two in one pass: a file is in the tar when it is new or
//! its size, mtime or inode changed, and a path of the old index the walk no longer meets is
//! listed in the tar's last member, `.capstan/removed`. Nothing here holds more than one
//! directory's names and one file's buffer at a time.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    os::unix::{
        ffi::{OsStrExt, OsStringExt},
        fs::{MetadataExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
};

use crate::domain::{
    backup::{path_order, FileCounts, IndexEntry, REMOVED_MEMBER},
    site::Site,
};

const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// The index of the run being extended, read one line at a time.
pub struct OldIndex {
    lines: io::Lines<BufReader<File>>,
    next: Option<IndexEntry>,
}

impl OldIndex {
    pub fn open(path: &Path) -> Result<OldIndex, String> {
        let file = File::open(path).map_err(|error| format!("{}: {error}", path.display()))?;
        let mut index = OldIndex {
            lines: BufReader::new(file).lines(),
            next: None,
        };
        index.advance()?;
        Ok(index)
    }

    fn advance(&mut self) -> Result<(), String> {
        self.next = match self.lines.next() {
            None => None,
            Some(line) => Some(IndexEntry::parse(
                &line.map_err(|error| format!("the index: {error}"))?,
            )?),
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
}

/// Writes the tar of `site` into `out`: everything (`old` is `None`) or what changed since
/// `old`. The new index goes to `index_out`; removed paths are spooled to `removed_spool`.
pub fn write_tar(
    site: &Site,
    out: &mut dyn Write,
    mut old: Option<OldIndex>,
    index_out: &Path,
    removed_spool: &Path,
) -> Result<Walked, String> {
    let root = &site.root;
    let root_meta = fs::symlink_metadata(root)
        .map_err(|error| format!("the site root {}: {error}", root.display()))?;
    if !root_meta.is_dir() {
        return Err(format!(
            "the site root {} is not a directory (a link is not followed)",
            root.display()
        ));
    }
    let create = |path: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(NOFOLLOW)
            .open(path)
            .map(BufWriter::new)
            .map_err(|error| format!("{}: {error}", path.display()))
    };
    let mut index = create(index_out)?;
    let mut removed = create(removed_spool)?;
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut walked = Walked::default();
    let incremental = old.is_some();
    // Depth first, each directory's names sorted: (relative path, open listing).
    let mut stack: Vec<(PathBuf, std::vec::IntoIter<std::ffi::OsString>)> =
        vec![(PathBuf::new(), sorted_names(root)?.into_iter())];
    let io_error = |error: io::Error| format!("writing the tar: {error}");
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
        let Ok(meta) = fs::symlink_metadata(&full) else {
            continue; // gone since the listing
        };
        let kind = meta.file_type();
        if !(kind.is_dir() || kind.is_file() || kind.is_symlink()) {
            continue; // sockets, fifos and devices are not the site's content
        }
        let entry = IndexEntry {
            path: relative.as_os_str().as_bytes().to_vec(),
            size: if kind.is_dir() { 0 } else { meta.len() },
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
        };
        // Merge with the old index: what sorts before this path was removed.
        let mut unchanged = false;
        if let Some(old) = old.as_mut() {
            while let Some(previous) = &old.next {
                match path_order(&previous.path, &entry.path) {
                    std::cmp::Ordering::Less => {
                        removed
                            .write_all(&previous.path)
                            .and_then(|()| removed.write_all(b"\n"))
                            .map_err(io_error)?;
                        walked.counts.removed += 1;
                        old.advance()?;
                    }
                    std::cmp::Ordering::Equal => {
                        unchanged = !kind.is_dir() && !entry.changed_since(previous);
                        old.advance()?;
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
        }
        index.write_all(entry.line().as_bytes()).map_err(io_error)?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        if kind.is_dir() {
            header.set_size(0);
            builder
                .append_data(&mut header, &relative, io::empty())
                .map_err(io_error)?;
            let listing = match sorted_names(&full) {
                Ok(listing) => listing,
                Err(why) => {
                    walked.notes.push(why);
                    Vec::new()
                }
            };
            stack.push((relative, listing.into_iter()));
            continue;
        }
        walked.counts.total += 1;
        if unchanged && incremental {
            continue;
        }
        if kind.is_symlink() {
            let target =
                fs::read_link(&full).map_err(|error| format!("{}: {error}", full.display()))?;
            header.set_size(0);
            builder
                .append_link(&mut header, &relative, &target)
                .map_err(io_error)?;
        } else {
            let file = match OpenOptions::new()
                .read(true)
                .custom_flags(NOFOLLOW)
                .open(&full)
            {
                Ok(file) => file,
                Err(error) => {
                    walked
                        .notes
                        .push(format!("{}: {error}", relative.display()));
                    continue;
                }
            };
            let mut exact = Exact {
                inner: file.take(meta.len()),
                left: meta.len(),
                short: false,
            };
            builder
                .append_data(&mut header, &relative, &mut exact)
                .map_err(io_error)?;
            if exact.short {
                walked.notes.push(format!(
                    "{} shrank while it was read; the rest is stored as zeros",
                    relative.display()
                ));
            }
            walked.counts.bytes += meta.len();
        }
        walked.counts.count += 1;
    }
    if let Some(mut old) = old {
        while let Some(previous) = old.next.take() {
            removed
                .write_all(&previous.path)
                .and_then(|()| removed.write_all(b"\n"))
                .map_err(io_error)?;
            walked.counts.removed += 1;
            old.advance()?;
        }
    }
    index.flush().map_err(io_error)?;
    index.get_ref().sync_all().map_err(io_error)?;
    removed.flush().map_err(io_error)?;
    drop(removed);
    if incremental {
        let spool = File::open(removed_spool).map_err(io_error)?;
        let length = spool.metadata().map_err(io_error)?.len();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(length);
        header.set_mode(0o600);
        header.set_mtime(chrono::Utc::now().timestamp().max(0) as u64);
        builder
            .append_data(&mut header, REMOVED_MEMBER, spool)
            .map_err(io_error)?;
    }
    builder.finish().map_err(io_error)?;
    Ok(walked)
}

/// The names in `directory`, sorted by their bytes.
fn sorted_names(directory: &Path) -> Result<Vec<std::ffi::OsString>, String> {
    let mut names: Vec<std::ffi::OsString> = fs::read_dir(directory)
        .map_err(|error| format!("{}: {error}", directory.display()))?
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
#[derive(Debug, Default, Clone, Copy)]
pub struct Applied {
    /// Files and links in the tar.
    pub files: u64,
    pub bytes: u64,
    /// Paths removed by its `.capstan/removed`.
    pub removed: u64,
}

/// Reads every member of a tar to its end (level 2: every byte is decrypted and
/// decompressed, every header parsed).
pub fn read_tar(input: &mut dyn Read) -> Result<Applied, String> {
    let mut archive = tar::Archive::new(input);
    let mut applied = Applied::default();
    for entry in archive
        .entries()
        .map_err(|error| format!("the files archive: {error}"))?
    {
        let mut entry = entry.map_err(|error| format!("the files archive: {error}"))?;
        let kind = entry.header().entry_type();
        let is_removed = entry.path_bytes().as_ref() == REMOVED_MEMBER.as_bytes();
        let read = io::copy(&mut entry, &mut io::sink())
            .map_err(|error| format!("the files archive: {error}"))?;
        if is_removed {
            continue;
        }
        if kind.is_file() || kind.is_symlink() {
            applied.files += 1;
            applied.bytes += read;
        }
    }
    Ok(applied)
}

/// Unpacks a tar into `target` (never outside it: the tar crate refuses `..` and absolute
/// paths), then removes what its `.capstan/removed` lists.
pub fn apply_tar(input: &mut dyn Read, target: &Path) -> Result<Applied, String> {
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let mut applied = Applied::default();
    let mut removed_list: Option<Vec<u8>> = None;
    for entry in archive
        .entries()
        .map_err(|error| format!("the files archive: {error}"))?
    {
        let mut entry = entry.map_err(|error| format!("the files archive: {error}"))?;
        if entry.path_bytes().as_ref() == REMOVED_MEMBER.as_bytes() {
            let mut list = Vec::new();
            entry
                .read_to_end(&mut list)
                .map_err(|error| format!("the removed list: {error}"))?;
            removed_list = Some(list);
            continue;
        }
        let kind = entry.header().entry_type();
        let size = entry.header().size().unwrap_or(0);
        // A file replaced by a directory (or the other way) since the previous run.
        if let Ok(path) = entry.path() {
            let at = target.join(path);
            if let Ok(meta) = fs::symlink_metadata(&at) {
                if meta.is_dir() != kind.is_dir() {
                    remove_path(&at);
                }
            }
        }
        entry
            .unpack_in(target)
            .map_err(|error| format!("unpacking the files archive: {error}"))?;
        if kind.is_file() || kind.is_symlink() {
            applied.files += 1;
            applied.bytes += size;
        }
    }
    if let Some(list) = removed_list {
        for line in list
            .split(|byte| *byte == b'\n')
            .filter(|line| !line.is_empty())
        {
            let relative = PathBuf::from(std::ffi::OsString::from_vec(line.to_vec()));
            if relative.is_absolute()
                || relative
                    .components()
                    .any(|component| !matches!(component, std::path::Component::Normal(_)))
            {
                return Err("the removed list names a path outside the site".into());
            }
            remove_path(&target.join(relative));
            applied.removed += 1;
        }
    }
    Ok(applied)
}

fn remove_path(path: &Path) {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let _ = fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Files (and links) under `root`, and their bytes, without following links.
pub fn count_files(root: &Path) -> Result<(u64, u64), String> {
    let mut count = 0;
    let mut bytes = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(directory) = stack.pop() {
        for entry in
            fs::read_dir(&directory).map_err(|error| format!("{}: {error}", directory.display()))?
        {
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
