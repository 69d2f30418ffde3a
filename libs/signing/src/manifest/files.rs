//! The manifest itself: its bounds, its entries, reading and writing its bytes, and judging
//! what was seen at each path against it. No signatures ([`super::signed`]) and no archives
//! ([`super::archive`]).

use std::{collections::BTreeMap, fmt};

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;

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
