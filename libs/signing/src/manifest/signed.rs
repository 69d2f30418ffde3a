//! A manifest's signature file: signing a manifest's bytes with a release key, and checking a
//! manifest file and its signatures against the trusted keys before reading it.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{Deserialize, Serialize};

use super::files::{
    FileManifest, ManifestError, MANIFEST_FILE, MAX_MANIFEST_BYTES, MAX_SIGNATURE_BYTES,
    SIGNATURE_FILE, SIGNED_CONTEXT,
};
use crate::{keys::KeySignature, NodeKey, PublicKey, SIGNATURE_LENGTH};

impl FileManifest {
    /// The signature file for this manifest's [`FileManifest::to_bytes`], signed by `key`.
    pub fn sign(&self, key: &NodeKey) -> Vec<u8> {
        signature_file(&self.to_bytes(), key)
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
