//! Node keys: the Ed25519 signing key an agent holds, the public key the plane stores, and the
//! fingerprint an operator compares (PROTOCOL.md, "Keys and fingerprints").

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::SignatureError;

/// Length of an Ed25519 secret key (the seed) and of a public key, in bytes.
pub const KEY_LENGTH: usize = 32;
/// Length of an Ed25519 signature, in bytes.
pub const SIGNATURE_LENGTH: usize = 64;

const FINGERPRINT_PREFIX: &str = "SHA256:";
/// `SHA256:` and 43 characters of unpadded base64 of a 32-byte digest.
const FINGERPRINT_LENGTH: usize = 50;

/// What was wrong with a key or a fingerprint taken from outside.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text is not standard base64 with padding.
    #[error("the public key is not standard base64 with padding")]
    NotBase64,
    /// The bytes are not the 32 an Ed25519 key has.
    #[error("the key is {found} bytes long, expected 32")]
    WrongLength {
        /// How many bytes were given.
        found: usize,
    },
    /// The 32 bytes do not encode a point of the Ed25519 curve.
    #[error("the public key is not a point of the ed25519 curve")]
    NotOnCurve,
    /// The point is encoded, but not in its one canonical form.
    #[error("the public key is not canonically encoded")]
    NotCanonical,
    /// The point has small order: no signature made by a real key verifies with it.
    #[error("the public key is a weak (small-order) point")]
    WeakKey,
    /// The text does not have the shape `SHA256:` followed by 43 characters of base64.
    #[error("the fingerprint is not `SHA256:` followed by 43 characters of unpadded base64")]
    BadFingerprint,
}

/// A node's Ed25519 signing key. The secret is wiped from memory when the key is dropped, and
/// `Debug` shows only the fingerprint.
pub struct NodeKey {
    signing_key: SigningKey,
}

impl NodeKey {
    /// Makes a new key from the operating system's randomness.
    pub fn generate() -> Self {
        use rand::{rngs::OsRng, RngCore as _, TryRngCore as _};
        let mut secret = [0u8; KEY_LENGTH];
        // As `SigningKey::generate` did: a machine that cannot give randomness cannot make keys.
        OsRng.unwrap_err().fill_bytes(&mut secret);
        Self {
            signing_key: SigningKey::from_bytes(&secret),
        }
    }

    /// Rebuilds a key from its 32 secret bytes, as kept in the agent's identity file.
    pub fn from_secret_bytes(secret: &[u8]) -> Result<Self, KeyError> {
        let secret: &[u8; KEY_LENGTH] = secret.try_into().map_err(|_| KeyError::WrongLength {
            found: secret.len(),
        })?;
        Ok(Self {
            signing_key: SigningKey::from_bytes(secret),
        })
    }

    /// The 32 secret bytes, for the agent's identity file. The copy returned is not wiped on
    /// drop: write it out and let it go.
    pub fn secret_bytes(&self) -> [u8; KEY_LENGTH] {
        self.signing_key.to_bytes()
    }

    /// The public half of the key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            verifying_key: self.signing_key.verifying_key(),
        }
    }

    /// Signs a message (for HTTP requests, the RFC 9421 signature base).
    pub fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LENGTH] {
        self.signing_key.sign(message).to_bytes()
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("NodeKey")
            .field("fingerprint", &self.public_key().fingerprint().as_str())
            .finish_non_exhaustive()
    }
}

/// A node's Ed25519 public key: always a canonical encoding of a curve point that is not of
/// small order.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey {
    verifying_key: VerifyingKey,
}

impl PublicKey {
    /// Parses the wire form: standard base64, with padding, of the raw 32 bytes
    /// ("`public_key` travels as standard base64 (with padding) of the raw 32 bytes").
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD.decode(text).map_err(|_| KeyError::NotBase64)?;
        Self::from_bytes(&bytes)
    }

    /// Checks raw key bytes: 32 of them, a canonically encoded curve point, not a weak one.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let raw: &[u8; KEY_LENGTH] = bytes
            .try_into()
            .map_err(|_| KeyError::WrongLength { found: bytes.len() })?;
        let verifying_key = VerifyingKey::from_bytes(raw).map_err(|_| KeyError::NotOnCurve)?;
        // Decompression accepts a few non-canonical encodings of the same point; each would
        // have its own fingerprint, so one key could pass for several nodes.
        if verifying_key.to_edwards().compress().as_bytes() != raw {
            return Err(KeyError::NotCanonical);
        }
        if verifying_key.is_weak() {
            return Err(KeyError::WeakKey);
        }
        Ok(Self { verifying_key })
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LENGTH] {
        self.verifying_key.as_bytes()
    }

    /// The wire form: standard base64 with padding of the raw 32 bytes.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.as_bytes())
    }

    /// The key's fingerprint, which is also the `keyid` of its signatures.
    pub fn fingerprint(&self) -> Fingerprint {
        let digest = Sha256::digest(self.as_bytes());
        Fingerprint(format!(
            "{FINGERPRINT_PREFIX}{}",
            STANDARD_NO_PAD.encode(digest)
        ))
    }

    /// Checks an Ed25519 signature over `message` (for HTTP requests, the RFC 9421 signature
    /// base) with strict verification: no small-order components, no non-canonical `R` or `S`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), SignatureError> {
        // A signature of the wrong length simply does not verify; the header parser reports
        // the length itself.
        let signature: &[u8; SIGNATURE_LENGTH] =
            signature.try_into().map_err(|_| SignatureError::Invalid)?;
        self.verifying_key
            .verify_strict(message, &Signature::from_bytes(signature))
            .map_err(|_| SignatureError::Invalid)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_tuple("PublicKey")
            .field(&self.to_base64())
            .finish()
    }
}

/// A key's fingerprint: `SHA256:` followed by unpadded standard base64 of the SHA-256 of the
/// raw 32 public-key bytes, 50 characters in all. Holds only well-formed, canonical text, so
/// two fingerprints are equal exactly when their digests are.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Checks the shape: the prefix, then base64 that decodes to exactly 32 bytes with no
    /// stray bits (so no two spellings of one digest pass).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        if text.len() != FINGERPRINT_LENGTH {
            return Err(KeyError::BadFingerprint);
        }
        let Some(encoded) = text.strip_prefix(FINGERPRINT_PREFIX) else {
            return Err(KeyError::BadFingerprint);
        };
        match STANDARD_NO_PAD.decode(encoded) {
            Ok(digest) if digest.len() == 32 => Ok(Self(text.to_owned())),
            _ => Err(KeyError::BadFingerprint),
        }
    }

    /// The fingerprint as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_tuple("Fingerprint").field(&self.0).finish()
    }
}

impl FromStr for Fingerprint {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        Self::parse(text)
    }
}

impl AsRef<str> for Fingerprint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// One signature by a key (over a release's signed part, or a file manifest): the signing
/// key's fingerprint and the signature.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySignature {
    pub keyid: String,
    pub sig: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The public half of RFC 9421's `test-key-ed25519` (Appendix B.1.4), raw bytes in base64.
    const RFC_PUBLIC_KEY: &str = "JrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=";

    #[test]
    fn a_generated_key_survives_a_round_trip_through_its_secret_bytes() {
        let key = NodeKey::generate();
        let again = NodeKey::from_secret_bytes(&key.secret_bytes()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        assert_eq!(again.sign(b"hello"), key.sign(b"hello"));
    }

    #[test]
    fn secret_bytes_of_the_wrong_length_are_refused() {
        assert_eq!(
            NodeKey::from_secret_bytes(&[7; 31]).unwrap_err(),
            KeyError::WrongLength { found: 31 }
        );
        assert_eq!(
            NodeKey::from_secret_bytes(&[7; 33]).unwrap_err(),
            KeyError::WrongLength { found: 33 }
        );
    }

    #[test]
    fn the_debug_form_of_a_node_key_shows_the_fingerprint_and_never_the_secret() {
        let key = NodeKey::from_secret_bytes(&[0x42; 32]).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains(key.public_key().fingerprint().as_str()));
        assert!(!shown.contains("66, 66"), "{shown}");
        assert!(!shown.contains("4242"), "{shown}");
        assert!(!shown.contains(&STANDARD.encode([0x42; 32])), "{shown}");
    }

    #[test]
    fn a_public_key_survives_a_round_trip_through_base64() {
        let key = NodeKey::generate().public_key();
        let text = key.to_base64();
        assert_eq!(text.len(), 44);
        assert!(text.ends_with('='));
        assert_eq!(PublicKey::from_base64(&text).unwrap(), key);
    }

    #[test]
    fn a_public_key_without_padding_or_in_url_safe_base64_is_refused() {
        assert_eq!(
            PublicKey::from_base64(RFC_PUBLIC_KEY.trim_end_matches('=')).unwrap_err(),
            KeyError::NotBase64
        );
        let url_safe = RFC_PUBLIC_KEY.replace('/', "_").replace('+', "-");
        assert_eq!(
            PublicKey::from_base64(&url_safe).unwrap_err(),
            KeyError::NotBase64
        );
        assert_eq!(
            PublicKey::from_base64(&format!(" {RFC_PUBLIC_KEY}")).unwrap_err(),
            KeyError::NotBase64
        );
        assert!(PublicKey::from_base64(RFC_PUBLIC_KEY).is_ok());
    }

    #[test]
    fn a_public_key_of_the_wrong_length_is_refused() {
        assert_eq!(
            PublicKey::from_base64(&STANDARD.encode([1u8; 31])).unwrap_err(),
            KeyError::WrongLength { found: 31 }
        );
        assert_eq!(
            PublicKey::from_base64("").unwrap_err(),
            KeyError::WrongLength { found: 0 }
        );
    }

    #[test]
    fn bytes_that_are_no_curve_point_are_refused() {
        // y = 2 has no x on the curve: (y² - 1) / (d y² + 1) is not a square mod p.
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        assert_eq!(
            PublicKey::from_bytes(&not_a_point).unwrap_err(),
            KeyError::NotOnCurve
        );
    }

    #[test]
    fn a_small_order_point_is_refused_as_weak() {
        // The identity point (y = 1) has order one.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            PublicKey::from_bytes(&identity).unwrap_err(),
            KeyError::WeakKey
        );
    }

    #[test]
    fn a_non_canonical_encoding_of_a_point_is_refused() {
        // y = p + 1 (p = 2^255 - 19) encodes the identity non-canonically.
        let mut non_canonical = [0xffu8; 32];
        non_canonical[0] = 0xee;
        non_canonical[31] = 0x7f;
        assert_eq!(
            PublicKey::from_bytes(&non_canonical).unwrap_err(),
            KeyError::NotCanonical
        );
    }

    #[test]
    fn the_fingerprint_is_the_unpadded_base64_of_the_sha256_of_the_raw_key() {
        let key = PublicKey::from_base64(RFC_PUBLIC_KEY).unwrap();
        let fingerprint = key.fingerprint();
        // Worked out apart from this crate (Python: hashlib.sha256 of the 32 raw bytes).
        assert_eq!(
            fingerprint.as_str(),
            "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGI"
        );
        assert_eq!(fingerprint.as_str().len(), 50);
        let digest = Sha256::digest(STANDARD.decode(RFC_PUBLIC_KEY).unwrap());
        let expected = format!("SHA256:{}", STANDARD.encode(digest).trim_end_matches('='));
        assert_eq!(fingerprint.to_string(), expected);
        assert_eq!(Fingerprint::parse(&expected).unwrap(), fingerprint);
    }

    #[test]
    fn every_generated_fingerprint_parses_and_is_fifty_characters() {
        for _ in 0..32 {
            let fingerprint = NodeKey::generate().public_key().fingerprint();
            assert_eq!(fingerprint.as_str().len(), 50);
            assert!(fingerprint.as_str().starts_with("SHA256:"));
            assert_eq!(
                fingerprint.as_str().parse::<Fingerprint>().unwrap(),
                fingerprint
            );
        }
    }

    #[test]
    fn malformed_fingerprints_are_refused() {
        let good = "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGI";
        let bad = [
            "",
            "SHA256:",
            "sha256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGI",
            "MD5:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGI1234",
            "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIG",
            "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGI=",
            "SHA256:sWwtG-rRJiY5dk_bDuTTd0WZM2vUk0BM2ksRNsWfIGI",
            // Same digest, but the last character carries stray low bits.
            "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGJ",
            "SHA256:sWwtG+rRJiY5dk/bDuTTd0WZM2vUk0BM2ksRNsWfIGé",
        ];
        assert!(Fingerprint::parse(good).is_ok());
        for text in bad {
            assert_eq!(
                Fingerprint::parse(text).unwrap_err(),
                KeyError::BadFingerprint,
                "{text}"
            );
        }
    }

    #[test]
    fn a_signature_verifies_with_its_key_and_not_with_another_or_another_message() {
        let key = NodeKey::generate();
        let signature = key.sign(b"message");
        key.public_key().verify(b"message", &signature).unwrap();
        assert_eq!(
            key.public_key().verify(b"massage", &signature),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            NodeKey::generate()
                .public_key()
                .verify(b"message", &signature),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            key.public_key().verify(b"message", &signature[..63]),
            Err(SignatureError::Invalid)
        );
    }
}
