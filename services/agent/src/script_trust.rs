//! Script trust and the support bundle on a real machine (issue 15; AG-32, AG-33, AG-36,
//! AG-39): [`verify_script`], which every word that runs a script as root calls first and
//! whose verified bytes are the only ones it may run; [`look`], the claim's `script_trust`
//! report; and [`refresh_bundle`], which fetches, checks and lands a siteless machine's
//! support bundle. The rules are `domain::script_trust`'s; the trees are read and written by
//! `capstan_signing::tree`, descriptor by descriptor, never through a link.

use std::{
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    time::Duration,
};

use capstan_signing::{
    manifest::{
        valid_path, ArchivedFile, Difference, FileManifest, ManifestError, Problem, MANIFEST_FILE,
        SIGNATURE_FILE,
    },
    release::Release,
    tree, NodeKey, PublicKey,
};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    config::Config,
    domain::script_trust::{
        check_bundle, check_script, wanted, BundleState, BundleVerdict, FileStamp, Landed,
        ScriptRefusal, ScriptRoot, ScriptTrust, TrustReport, VerifiedKey, VerifierCache,
        DEPLOYMENT_FILES,
    },
    plane::Plane,
    state::StateDir,
    update::keys::trusted_keys,
};

/// AG-35: the manifests verified in this process, each kept while its files keep their stamps.
static VERIFIED: std::sync::LazyLock<std::sync::Mutex<VerifierCache>> =
    std::sync::LazyLock::new(Default::default);

/// The stamp of `name` in the directory `root` (never through a link).
fn stamp_at(root: &OwnedFd, name: &str) -> std::io::Result<FileStamp> {
    let stat = rustix::fs::statat(root, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileStamp {
        size: stat.st_size as u64,
        mtime_sec: stat.st_mtime as i64,
        mtime_nsec: stat.st_mtime_nsec as i64,
        mode: stat.st_mode as u32,
        inode: stat.st_ino as u64,
    })
}

/// The usable manifest of the tree at `root` (`fd`): from [`VERIFIED`] when `RELEASE_MANIFEST`
/// and its `.sig` have the size, mtime, mode and inode they had when it was verified against
/// the same keys (AG-35), otherwise read and verified again ([`tree::load_manifest`]). The
/// stamps are taken before the read, so a file changed during it is read again next time.
pub fn verified_manifest(
    root: &Path,
    fd: &OwnedFd,
    trusted: &[PublicKey],
) -> Result<FileManifest, ManifestError> {
    verified_with(&VERIFIED, root, fd, trusted)
}

fn verified_with(
    cache: &std::sync::Mutex<VerifierCache>,
    root: &Path,
    fd: &OwnedFd,
    trusted: &[PublicKey],
) -> Result<FileManifest, ManifestError> {
    let key = match (stamp_at(fd, MANIFEST_FILE), stamp_at(fd, SIGNATURE_FILE)) {
        (Ok(manifest), Ok(signature)) => Some(VerifiedKey {
            manifest,
            signature,
            trusted: trusted.to_vec(),
        }),
        _ => None,
    };
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(kept) = key.as_ref().and_then(|key| cache.get(root, key)) {
        return Ok(kept.clone());
    }
    match (tree::load_manifest(fd, trusted), key) {
        (Ok(manifest), Some(key)) => {
            cache.put(root, key, manifest.clone());
            Ok(manifest)
        }
        (loaded, _) => {
            cache.forget(root);
            loaded
        }
    }
}

/// What the state directory remembers of the landed bundle.
pub const LANDED: &str = "bundle.json";

/// A script that passed AG-33's check: run these bytes (never the file again by its path,
/// which could have changed since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedScript {
    /// The tree it was verified in (the site root or the bundle's tree).
    pub root: PathBuf,
    /// Its path relative to the tree.
    pub path: String,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

fn landed(state: &StateDir) -> Option<Landed> {
    state.read_json::<Landed>(LANDED).ok().flatten()
}

/// The tree scripts run from on this machine, if any.
pub fn script_root(config: &Config, state: &StateDir) -> Option<ScriptRoot> {
    let bundle_landed = landed(state).is_some() && config.bundle_dir.is_dir();
    ScriptRoot::of(
        config.site_root.as_deref(),
        &config.bundle_dir,
        bundle_landed,
    )
}

/// AG-33: the check every word that runs a script as root makes before it runs it. The
/// manifest beside the tree (`RELEASE_MANIFEST` and `.sig`) must verify against the compiled
/// key or a held one, and `script` (a path relative to the tree) must be listed with exactly
/// the bytes and mode found. A refusal says why in the words the plane classifies; nothing is
/// repaired.
pub fn verify_script(
    config: &Config,
    state: &StateDir,
    script: &str,
) -> Result<VerifiedScript, ScriptRefusal> {
    let root = script_root(config, state).ok_or_else(|| ScriptRefusal::NoTree {
        script: script.to_string(),
    })?;
    verify_in(root.path(), &trusted_keys(state), script)
}

/// [`verify_script`] against the tree at `root` and the keys `trusted`.
pub fn verify_in(
    root: &Path,
    trusted: &[PublicKey],
    script: &str,
) -> Result<VerifiedScript, ScriptRefusal> {
    if !valid_path(script) {
        return Err(ScriptRefusal::BadPath {
            script: script.to_string(),
            path: script.to_string(),
        });
    }
    let shown = root.display().to_string();
    let unreadable = |error: String| ScriptRefusal::Unreadable {
        script: script.to_string(),
        root: shown.clone(),
        error,
    };
    let fd = tree::open_root(root).map_err(|error| unreadable(error.to_string()))?;
    let manifest =
        verified_manifest(root, &fd, trusted).map_err(|error| ScriptRefusal::UnusableManifest {
            script: script.to_string(),
            root: shown.clone(),
            error,
        })?;
    let untrusted = |problem: Problem| ScriptRefusal::UntrustedFile {
        script: script.to_string(),
        root: shown.clone(),
        difference: Difference {
            path: script.to_string(),
            problem,
        },
    };
    let (bytes, mode) = match tree::read_file(&fd, script) {
        Ok(Some(tree::Found::File(bytes, mode))) => (bytes, mode),
        Ok(Some(tree::Found::NotAFile)) => return Err(untrusted(Problem::NotAFile)),
        Ok(None) => return Err(untrusted(Problem::Missing)),
        Err(error) => return Err(unreadable(error.to_string())),
    };
    check_script(&manifest, script, root, &bytes, mode)?;
    Ok(VerifiedScript {
        root: root.to_path_buf(),
        path: script.to_string(),
        bytes,
        mode,
    })
}

/// AG-39: one look at the script tree for the claim. `None` when there is no tree to look at
/// (a siteless machine whose bundle has not landed: an absent report, never a healthy one).
///
/// A site whose root holds no `RELEASE_MANIFEST` at all reports nothing either: this plane
/// publishes no site releases yet, so such a site was never installed from one (its scripts
/// still refuse, [`verify_script`]); once a manifest is there, any fault in it is reported.
pub fn look(config: &Config, state: &StateDir) -> Option<TrustReport> {
    let root = script_root(config, state)?;
    let report = look_in(&root, &trusted_keys(state));
    let never_installed = matches!(root, ScriptRoot::Site(_))
        && report.state == ScriptTrust::UnusableManifest
        && !root.path().join(MANIFEST_FILE).exists()
        && !root.path().join(SIGNATURE_FILE).exists();
    (!never_installed).then_some(report)
}

/// [`look`] at `root` with the keys `trusted`.
pub fn look_in(root: &ScriptRoot, trusted: &[PublicKey]) -> TrustReport {
    let looked = (|| {
        let fd = tree::open_root(root.path()).map_err(|error| {
            capstan_signing::manifest::ManifestError::Unreadable(format!(
                "{} cannot be opened: {error}",
                root.path().display()
            ))
        })?;
        let manifest = verified_manifest(root.path(), &fd, trusted)?;
        let unreadable = |error: std::io::Error| {
            capstan_signing::manifest::ManifestError::Unreadable(format!(
                "the tree {} cannot be read: {error}",
                root.path().display()
            ))
        };
        if root.whole() {
            let seen = tree::observe(&fd).map_err(unreadable)?;
            Ok(manifest.compare(&seen, true, &[MANIFEST_FILE, SIGNATURE_FILE]))
        } else {
            // A site: the five deployment files the release lists, and no other (AG-38).
            let scope = FileManifest {
                files: manifest
                    .files
                    .into_iter()
                    .filter(|(path, _)| DEPLOYMENT_FILES.contains(&path.as_str()))
                    .collect(),
            };
            let seen = tree::observe_listed(&fd, scope.files.keys().map(String::as_str))
                .map_err(unreadable)?;
            Ok(scope.compare(&seen, false, &[]))
        }
    })();
    TrustReport::of(looked)
}

/// Who owns a landed bundle: root, when the agent runs as root (AG-32: "unpacked
/// root-owned"); otherwise the agent's own user (a test, or an agent run unprivileged).
fn owner() -> tree::Owner {
    let (uid, _) = tree::this_process_owner();
    (uid == 0).then_some((0, 0))
}

/// The support bundle step of a check (AG-32), after the release's metadata was accepted: on
/// a machine with no site, a bundle on offer whose bytes differ from the landed one's is
/// fetched, checked and landed. Returns the verdict to report, or `None` when nothing was
/// concluded (no bundle on offer, a fetch that failed and is tried again next time, a refusal
/// already reported for these bytes).
pub async fn refresh_bundle(
    config: &Config,
    state: &StateDir,
    plane: &Plane,
    key: &NodeKey,
    release: &Release,
    trusted: &[PublicKey],
    refused: &mut Option<String>,
) -> Option<BundleVerdict> {
    let offered = release.support_bundle.as_ref()?;
    let landed_now = landed(state);
    let Some(bundle) = wanted(
        config.site_root.is_some(),
        Some(offered),
        landed_now.as_ref(),
    ) else {
        return (config.site_root.is_none()).then_some(BundleVerdict {
            state: BundleState::Current,
            reason: None,
            files: Vec::new(),
        });
    };
    if refused.as_deref() == Some(bundle.archive.sha256.as_str()) {
        return None;
    }
    let asked = json!({"kind": "support_bundle", "version": release.version});
    let bytes = match plane
        .send_for_bytes(
            key,
            "artifact",
            "",
            &asked,
            bundle.archive.size as usize,
            Duration::from_secs(60),
        )
        .await
    {
        Ok(bytes) => bytes,
        Err(error) => {
            warn!(%error, "=== Support bundle === the bundle on offer could not be fetched; tried again at the next check");
            return None;
        }
    };
    let files = match check_bundle(bundle, &bytes, trusted) {
        Ok(files) => files,
        Err(verdict) => {
            warn!(reason = ?verdict.reason, files = ?verdict.files, "=== Support bundle === refused");
            *refused = Some(bundle.archive.sha256.clone());
            return Some(verdict);
        }
    };
    if !land(config, &files) {
        return None;
    }
    let now_landed = Landed {
        sha256: bundle.archive.sha256.clone(),
    };
    if let Err(error) = state.write_json(LANDED, &now_landed, 0o600) {
        warn!(%error, "=== Support bundle === cannot record the landed bundle");
    }
    *refused = None;
    info!(version = %release.version, dir = %config.bundle_dir.display(), files = files.len(), "=== Support bundle === landed");
    Some(BundleVerdict {
        state: BundleState::Current,
        reason: None,
        files: Vec::new(),
    })
}

/// Lands the checked bundle's files as `bundle_dir`, whole or not at all; `false` (logged) when
/// it could not, to be tried again at the next check.
fn land(config: &Config, files: &[ArchivedFile]) -> bool {
    let (parent, name) = match (
        config.bundle_dir.parent(),
        config.bundle_dir.file_name().and_then(|name| name.to_str()),
    ) {
        (Some(parent), Some(name)) => (parent, name),
        _ => {
            warn!(dir = %config.bundle_dir.display(), "=== Support bundle === the bundle directory has no parent to land it in");
            return false;
        }
    };
    let landing = std::fs::create_dir_all(parent).and_then(|()| {
        tree::land(
            parent,
            name,
            files
                .iter()
                .map(|file| (file.path.as_str(), file.mode, file.bytes.as_slice())),
            owner(),
        )
    });
    if let Err(error) = landing {
        warn!(%error, dir = %config.bundle_dir.display(), "=== Support bundle === the checked bundle could not be landed; tried again at the next check");
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const SCRIPT: &[u8] = b"#!/bin/sh\necho report\n";
    const UPGRADE: &[u8] = b"<?php // upgrade\n";

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    /// A tree on disk with its signed manifest, landed as the bundle is.
    fn tree_with(dir: &Path, files: &[(&str, u32, &[u8])], signer: &NodeKey) -> PathBuf {
        let manifest = FileManifest::describe(files.iter().copied()).unwrap();
        let manifest_bytes = manifest.to_bytes();
        let signature = manifest.sign(signer);
        let mut all: Vec<(&str, u32, &[u8])> = files.to_vec();
        all.push((MANIFEST_FILE, 0o644, &manifest_bytes));
        all.push((SIGNATURE_FILE, 0o644, &signature));
        tree::land(dir, "tree", all, None).unwrap();
        dir.join("tree")
    }

    #[test]
    fn ag_35_a_verified_manifest_is_served_while_its_file_is_the_same_and_read_again_once_it_changes(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let signer = key(1);
        let trusted = [signer.public_key()];
        let root = tree_with(dir.path(), &[("bin/a.sh", 0o755, SCRIPT)], &signer);
        let cache = std::sync::Mutex::new(VerifierCache::default());
        let fd = tree::open_root(&root).unwrap();
        let first = verified_with(&cache, &root, &fd, &trusted).unwrap();
        assert!(first.files.contains_key("bin/a.sh"));
        // Served from the cache while the files keep their stamps: what was kept is what comes
        // back (here a stand-in, to see the cache answer rather than the disk).
        let key = VerifiedKey {
            manifest: stamp_at(&fd, MANIFEST_FILE).unwrap(),
            signature: stamp_at(&fd, SIGNATURE_FILE).unwrap(),
            trusted: trusted.to_vec(),
        };
        let stand_in = FileManifest::describe([("bin/kept.sh", 0o755, SCRIPT)]).unwrap();
        cache.lock().unwrap().put(&root, key, stand_in.clone());
        assert_eq!(
            verified_with(&cache, &root, &fd, &trusted).unwrap(),
            stand_in
        );
        // A new release's manifest (a new file: another inode, size, mtime) is read again.
        let root = tree_with(
            dir.path(),
            &[("bin/a.sh", 0o755, SCRIPT), ("bin/b.sh", 0o755, SCRIPT)],
            &signer,
        );
        let fd = tree::open_root(&root).unwrap();
        let again = verified_with(&cache, &root, &fd, &trusted).unwrap();
        assert!(again.files.contains_key("bin/b.sh"), "{again:?}");
        // A chmod alone is enough, and a manifest broken in place is seen at once.
        let manifest_path = root.join(MANIFEST_FILE);
        std::fs::set_permissions(&manifest_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(verified_with(&cache, &root, &fd, &trusted).unwrap(), again);
        std::fs::write(&manifest_path, b"{}").unwrap();
        assert!(verified_with(&cache, &root, &fd, &trusted).is_err());
    }

    #[test]
    fn ag_33_a_listed_script_verifies_and_its_checked_bytes_are_what_runs() {
        let dir = tempfile::tempdir().unwrap();
        let signer = key(1);
        let root = tree_with(
            dir.path(),
            &[("bin/host_report.sh", 0o755, SCRIPT)],
            &signer,
        );
        let verified = verify_in(&root, &[signer.public_key()], "bin/host_report.sh").unwrap();
        assert_eq!(verified.bytes, SCRIPT);
        assert_eq!(verified.mode, 0o755);
    }

    #[test]
    fn ag_33_a_modified_missing_linked_or_unlisted_script_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let signer = key(1);
        let trusted = [signer.public_key()];
        let root = tree_with(
            dir.path(),
            &[
                ("bin/host_report.sh", 0o755, SCRIPT),
                ("bin/converge.sh", 0o755, SCRIPT),
                ("bin/gone.sh", 0o755, SCRIPT),
            ],
            &signer,
        );
        std::fs::write(root.join("bin/host_report.sh"), b"#!/bin/sh\nrm -rf /\n").unwrap();
        std::fs::remove_file(root.join("bin/gone.sh")).unwrap();
        std::fs::remove_file(root.join("bin/converge.sh")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), root.join("bin/converge.sh"))
            .unwrap();
        std::fs::write(root.join("bin/planted.sh"), SCRIPT).unwrap();
        for (script, said) in [
            ("bin/host_report.sh", "bin/host_report.sh (modified)"),
            ("bin/gone.sh", "bin/gone.sh (missing)"),
            ("bin/converge.sh", "bin/converge.sh (not a regular file)"),
            ("bin/planted.sh", "bin/planted.sh (not listed)"),
        ] {
            let refusal = verify_in(&root, &trusted, script).unwrap_err();
            assert_eq!(refusal.trust().0, ScriptTrust::UntrustedFile, "{refusal}");
            assert!(refusal.to_string().contains(said), "{refusal}");
        }
        assert!(matches!(
            verify_in(&root, &trusted, "../etc/passwd"),
            Err(ScriptRefusal::BadPath { .. })
        ));
    }

    #[test]
    fn ag_33_without_a_usable_manifest_every_script_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let signer = key(1);
        let root = tree_with(
            dir.path(),
            &[("bin/host_report.sh", 0o755, SCRIPT)],
            &signer,
        );
        // signed by a key this agent does not hold
        let refusal = verify_in(&root, &[key(2).public_key()], "bin/host_report.sh").unwrap_err();
        assert_eq!(refusal.trust().0, ScriptTrust::UnusableManifest);
        assert!(
            refusal.to_string().contains("every script refuses"),
            "{refusal}"
        );
        // absent
        std::fs::remove_file(root.join(MANIFEST_FILE)).unwrap();
        let refusal = verify_in(&root, &[signer.public_key()], "bin/host_report.sh").unwrap_err();
        assert!(
            refusal.to_string().contains("there is no RELEASE_MANIFEST"),
            "{refusal}"
        );
    }

    #[test]
    fn ag_39_a_site_never_installed_from_a_release_reports_nothing_but_its_scripts_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("utils")).unwrap();
        std::fs::write(site.join("utils/upgrade.php"), UPGRADE).unwrap();
        let config = Config {
            site_root: Some(site.clone()),
            bundle_dir: dir.path().join("tree"),
            ..Config::default()
        };
        assert_eq!(look(&config, &state), None);
        assert!(matches!(
            verify_script(&config, &state, "utils/upgrade.php"),
            Err(ScriptRefusal::UnusableManifest { .. })
        ));
        // a signature file without its manifest is a fault, and reported
        std::fs::write(site.join(SIGNATURE_FILE), b"{}").unwrap();
        assert_eq!(
            look(&config, &state).unwrap().state,
            ScriptTrust::UnusableManifest
        );
        // a siteless machine whose bundle has not landed: nothing to report, nothing runs
        let siteless = Config {
            site_root: None,
            ..config
        };
        assert_eq!(look(&siteless, &state), None);
        assert!(matches!(
            verify_script(&siteless, &state, "bin/host_report.sh"),
            Err(ScriptRefusal::NoTree { .. })
        ));
    }

    #[test]
    fn ag_39_the_bundle_tree_is_judged_whole_and_a_site_only_on_its_deployment_files() {
        let dir = tempfile::tempdir().unwrap();
        let signer = key(1);
        let trusted = [signer.public_key()];
        let bundle = tree_with(
            dir.path(),
            &[("bin/host_report.sh", 0o755, SCRIPT)],
            &signer,
        );
        let report = look_in(&ScriptRoot::Bundle(bundle.clone()), &trusted);
        assert_eq!(report.state, ScriptTrust::Trusted);
        assert!(report.files.is_empty());
        std::fs::write(bundle.join("bin/planted.sh"), SCRIPT).unwrap();
        std::fs::set_permissions(
            bundle.join("bin/host_report.sh"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let report = look_in(&ScriptRoot::Bundle(bundle), &trusted);
        assert_eq!(report.state, ScriptTrust::UntrustedFile);
        assert_eq!(report.files, ["bin/host_report.sh", "bin/planted.sh"]);

        // A site: uploads and other files are the site's; the five deployment files are judged.
        let site_dir = tempfile::tempdir().unwrap();
        let site = tree_with(
            site_dir.path(),
            &[
                ("utils/upgrade.php", 0o644, UPGRADE),
                ("public_html/index.php", 0o644, UPGRADE),
            ],
            &signer,
        );
        std::fs::create_dir_all(site.join("uploads")).unwrap();
        std::fs::write(site.join("uploads/photo.jpg"), b"jpg").unwrap();
        std::fs::write(site.join("public_html/index.php"), b"<?php // local edit\n").unwrap();
        let report = look_in(&ScriptRoot::Site(site.clone()), &trusted);
        assert_eq!(report.state, ScriptTrust::Trusted, "{report:?}");
        std::fs::write(
            site.join("utils/upgrade.php"),
            b"<?php // half an upgrade\n",
        )
        .unwrap();
        let report = look_in(&ScriptRoot::Site(site.clone()), &trusted);
        assert_eq!(report.state, ScriptTrust::UntrustedFile);
        assert_eq!(report.files, ["utils/upgrade.php"]);
        std::fs::remove_file(site.join(SIGNATURE_FILE)).unwrap();
        let report = look_in(&ScriptRoot::Site(site), &trusted);
        assert_eq!(report.state, ScriptTrust::UnusableManifest);
    }
}
