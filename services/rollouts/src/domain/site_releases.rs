//! Site releases as the plane takes them (issue 16): an upload is a version, a signed file
//! manifest (`RELEASE_MANIFEST` and `RELEASE_MANIFEST.sig`) and a tar archive of exactly the
//! files it lists. The plane holds no release key — the agent is the one that verifies a
//! signature against its own keys — but it refuses an upload that could never apply: a version
//! a node would refuse, a manifest that does not parse, a signature file naming no key, an
//! archive that does not match its manifest file for file. And it answers the agent's
//! `release_file {sha256}` with one file's bytes out of a stored archive.

use capstan_signing::{
    manifest::{self, FileManifest},
    release::sha256_hex,
};

/// The longest a site release's version may be (the agent's `version` parameter is at most 32
/// characters).
pub const MAX_VERSION_CHARS: usize = 32;
/// The most a site release's archive may be.
pub const MAX_ARCHIVE_BYTES: usize = 256 * 1024 * 1024;

/// A checked upload, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteUpload {
    pub version: String,
    pub manifest: Vec<u8>,
    pub signatures: Vec<u8>,
    pub archive: Vec<u8>,
    pub archive_sha256: String,
    /// Every listed file: (path, sha256).
    pub files: Vec<(String, String)>,
    /// Fingerprints named by the signature file.
    pub signed_by: Vec<String>,
}

/// A site release's version: a digit first, then letters, digits, `.`, `+`, `-`; at most
/// [`MAX_VERSION_CHARS`]. The same rule as a rollout's version, and a name every agent takes
/// as a directory.
pub fn version_ok(version: &str) -> bool {
    let mut chars = version.chars();
    chars.next().is_some_and(|c| c.is_ascii_digit())
        && version.len() <= MAX_VERSION_CHARS
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-'))
}

#[derive(serde::Deserialize)]
struct SignatureNames {
    signatures: Vec<KeyName>,
}

#[derive(serde::Deserialize)]
struct KeyName {
    keyid: String,
}

/// Reads an upload, refusing it with the field and the reason.
pub fn read_upload(
    version: &str,
    manifest_text: &str,
    signatures_text: &str,
    archive: Vec<u8>,
) -> Result<SiteUpload, (&'static str, String)> {
    if !version_ok(version) {
        return Err((
            "version",
            format!("a site release's version starts with a digit and holds at most {MAX_VERSION_CHARS} of letters, digits, . + -"),
        ));
    }
    let parsed: FileManifest = FileManifest::parse(manifest_text.as_bytes())
        .map_err(|error| ("manifest", error.to_string()))?;
    if signatures_text.len() > manifest::MAX_SIGNATURE_BYTES {
        return Err(("signatures", "the signature file is too large".into()));
    }
    let names: SignatureNames = serde_json::from_str(signatures_text)
        .map_err(|error| ("signatures", format!("not a signature file: {error}")))?;
    if names.signatures.is_empty() {
        return Err(("signatures", "the signature file holds no signature".into()));
    }
    if archive.len() > MAX_ARCHIVE_BYTES {
        return Err((
            "archive",
            format!("the archive is larger than {MAX_ARCHIVE_BYTES} bytes"),
        ));
    }
    manifest::read_archive(&archive, &parsed, &[])
        .map_err(|error| ("archive", error.to_string()))?;
    Ok(SiteUpload {
        version: version.to_string(),
        manifest: manifest_text.as_bytes().to_vec(),
        signatures: signatures_text.as_bytes().to_vec(),
        archive_sha256: sha256_hex(&archive),
        archive,
        files: parsed
            .files
            .iter()
            .map(|(path, entry)| (path.clone(), entry.sha256.clone()))
            .collect(),
        signed_by: names
            .signatures
            .into_iter()
            .map(|name| name.keyid)
            .collect(),
    })
}

/// One file's bytes out of an archive, by its hash (`release_file`): the first file whose
/// bytes hash to `sha256`.
pub fn file_by_hash(archive: &[u8], sha256: &str) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let mut bytes = Vec::new();
        (&mut entry)
            .take(manifest::MAX_FILE_BYTES)
            .read_to_end(&mut bytes)?;
        if sha256_hex(&bytes) == sha256 {
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::{manifest::write_archive, NodeKey};

    fn release() -> (String, String, Vec<u8>) {
        let key = NodeKey::from_secret_bytes(&[3; 32]).unwrap();
        let files: Vec<(&str, u32, &[u8])> = vec![
            ("public/index.html", 0o644, b"<p>hi</p>"),
            ("deploy/hook", 0o755, b"#!/bin/sh\nexit 0\n"),
        ];
        let manifest = FileManifest::describe(files.iter().copied()).unwrap();
        let text = String::from_utf8(manifest.to_bytes()).unwrap();
        let signatures = String::from_utf8(manifest.sign(&key)).unwrap();
        (text, signatures, write_archive(files))
    }

    #[test]
    fn a_site_release_upload_is_taken_when_its_archive_is_exactly_its_manifest() {
        let (manifest, signatures, archive) = release();
        let upload = read_upload("1.2.0", &manifest, &signatures, archive.clone()).unwrap();
        assert_eq!(upload.files.len(), 2);
        assert_eq!(upload.signed_by.len(), 1);
        assert!(upload.signed_by[0].starts_with("SHA256:"));
        assert_eq!(upload.archive_sha256, sha256_hex(&archive));
    }

    #[test]
    fn every_bad_part_of_an_upload_is_refused_naming_the_field() {
        let (manifest, signatures, archive) = release();
        let field = |result: Result<SiteUpload, (&'static str, String)>| result.unwrap_err().0;
        assert_eq!(
            field(read_upload("v1", &manifest, &signatures, archive.clone())),
            "version"
        );
        assert_eq!(
            field(read_upload("1/2", &manifest, &signatures, archive.clone())),
            "version"
        );
        assert_eq!(
            field(read_upload("1.0", "{}x", &signatures, archive.clone())),
            "manifest"
        );
        assert_eq!(
            field(read_upload("1.0", &manifest, "[]", archive.clone())),
            "signatures"
        );
        assert_eq!(
            field(read_upload(
                "1.0",
                &manifest,
                "{\"signatures\": []}",
                archive.clone()
            )),
            "signatures"
        );
        let other = write_archive([("public/index.html", 0o644, b"<p>changed</p>".as_slice())]);
        let (name, reason) = read_upload("1.0", &manifest, &signatures, other).unwrap_err();
        assert_eq!(name, "archive");
        assert!(reason.contains("public/index.html"), "{reason}");
    }

    #[test]
    fn one_file_is_served_out_of_the_archive_by_its_hash() {
        let (_, _, archive) = release();
        let hook = file_by_hash(&archive, &sha256_hex(b"#!/bin/sh\nexit 0\n")).unwrap();
        assert_eq!(hook.as_deref(), Some(b"#!/bin/sh\nexit 0\n".as_slice()));
        assert_eq!(file_by_hash(&archive, &"0".repeat(64)).unwrap(), None);
    }
}
