//! A manifest's archive: a tar held in memory read against its manifest (AG-32), and the tar
//! the same files always give byte for byte.

use std::{collections::BTreeMap, io::Read as _};

use super::files::{valid_path, Difference, FileManifest, Seen, MAX_FILE_BYTES};

/// A file read out of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedFile {
    pub path: String,
    pub mode: u32,
    pub bytes: Vec<u8>,
}

/// Why an archive is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("the archive cannot be read: {0}")]
    Unreadable(String),
    #[error("the archive does not match its manifest: {}", list(.0))]
    Differs(Vec<Difference>),
}

fn list(differences: &[Difference]) -> String {
    differences
        .iter()
        .map(Difference::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl ArchiveError {
    /// The files the refusal names.
    pub fn files(&self) -> Vec<String> {
        match self {
            ArchiveError::Unreadable(_) => Vec::new(),
            ArchiveError::Differs(differences) => differences
                .iter()
                .map(|difference| difference.path.clone())
                .collect(),
        }
    }
}

/// Reads a tar archive held in memory against `manifest` (AG-32): only regular files and
/// directories, at plain relative paths, each file once; every listed file present with its
/// listed bytes and mode, nothing unlisted but `allowed` (the manifest's own files). Returns
/// the files, in the archive's order, to land.
pub fn read_archive(
    bytes: &[u8],
    manifest: &FileManifest,
    allowed: &[&str],
) -> Result<Vec<ArchivedFile>, ArchiveError> {
    let unreadable = |error: std::io::Error| ArchiveError::Unreadable(error.to_string());
    let mut archive = tar::Archive::new(bytes);
    let mut files = Vec::new();
    let mut seen = BTreeMap::new();
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let raw = String::from_utf8(entry.path_bytes().into_owned())
            .map_err(|_| ArchiveError::Unreadable("an entry's path is not UTF-8".into()))?;
        let path = raw.trim_end_matches('/').to_string();
        if !valid_path(&path) {
            return Err(ArchiveError::Unreadable(format!(
                "the entry {raw:?} is not a plain relative path"
            )));
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if seen.contains_key(&path) {
            return Err(ArchiveError::Unreadable(format!(
                "{path} is in the archive twice"
            )));
        }
        if !kind.is_file() {
            seen.insert(path, Seen::Other);
            continue;
        }
        let size = entry.size();
        if size > MAX_FILE_BYTES {
            return Err(ArchiveError::Unreadable(format!(
                "{path} is {size} bytes, more than {MAX_FILE_BYTES}"
            )));
        }
        let mode = entry.header().mode().map_err(unreadable)? & 0o7777;
        let mut content = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(MAX_FILE_BYTES)
            .read_to_end(&mut content)
            .map_err(unreadable)?;
        seen.insert(path.clone(), Seen::of(&content, mode));
        files.push(ArchivedFile {
            path,
            mode,
            bytes: content,
        });
    }
    let differences = manifest.compare(&seen, true, allowed);
    if !differences.is_empty() {
        return Err(ArchiveError::Differs(differences));
    }
    Ok(files)
}

/// A tar of `files` (path, mode, bytes) that the same files always give byte for byte: sorted
/// by path, owned by root, every time the epoch, each directory listed before its files.
pub fn write_archive<'a>(files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>) -> Vec<u8> {
    let mut sorted: Vec<_> = files.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut builder = tar::Builder::new(Vec::new());
    let mut directories = std::collections::BTreeSet::new();
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        let _ = header.set_username("root");
        let _ = header.set_groupname("root");
        header
    };
    for (path, mode, bytes) in sorted {
        let parts: Vec<&str> = path.split('/').collect();
        for depth in 1..parts.len() {
            let directory = parts[..depth].join("/");
            if directories.insert(directory.clone()) {
                let mut header = header(tar::EntryType::Directory, 0o755, 0);
                builder
                    .append_data(&mut header, format!("{directory}/"), std::io::empty())
                    .expect("writing to memory");
            }
        }
        let mut header = header(tar::EntryType::Regular, mode & 0o7777, bytes.len() as u64);
        builder
            .append_data(&mut header, path, bytes)
            .expect("writing to memory");
    }
    builder.into_inner().expect("writing to memory")
}
