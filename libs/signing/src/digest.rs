//! The `Content-Digest` header (RFC 9530): `sha-256=:<base64 SHA-256 of the exact body bytes>:`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sfv::{Dictionary, ListEntry, Parser, Version};
use sha2::{Digest as _, Sha256};

/// What was wrong with a `Content-Digest` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// The header is not a structured-field dictionary (RFC 8941).
    #[error("the content-digest header is not a structured field dictionary: {reason}")]
    Unparseable {
        /// What the parser stumbled on.
        reason: String,
    },
    /// The header names no `sha-256` digest, the only algorithm taken.
    #[error("the content-digest header has no sha-256 member")]
    MissingSha256,
    /// The `sha-256` member is not a byte sequence of 32 bytes.
    #[error("the sha-256 member of content-digest is not a 32-byte byte sequence")]
    MalformedSha256,
    /// The digest is well formed but is not the SHA-256 of the body received.
    #[error("the sha-256 content digest does not match the body")]
    Mismatch,
}

impl DigestError {
    /// The refusal code of PROTOCOL.md: a header that does not parse counts as a missing
    /// signature; every other failure is `bad_digest`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unparseable { .. } => "missing_signature",
            Self::MissingSha256 | Self::MalformedSha256 | Self::Mismatch => "bad_digest",
        }
    }
}

/// The `Content-Digest` header value for a body: `sha-256=:<base64 with padding>:`.
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)))
}

/// Checks a received `Content-Digest` header against the body. The header must carry a
/// `sha-256` member; members for other algorithms are ignored.
pub fn verify_content_digest(header_value: &str, body: &[u8]) -> Result<(), DigestError> {
    let dictionary: Dictionary = Parser::new(header_value)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|error: sfv::Error| DigestError::Unparseable {
            reason: error.to_string(),
        })?;
    let member = dictionary
        .get("sha-256")
        .ok_or(DigestError::MissingSha256)?;
    let ListEntry::Item(item) = member else {
        return Err(DigestError::MalformedSha256);
    };
    let claimed = item
        .bare_item
        .as_byte_sequence()
        .filter(|bytes| bytes.len() == 32)
        .ok_or(DigestError::MalformedSha256)?;
    if claimed != Sha256::digest(body).as_slice() {
        return Err(DigestError::Mismatch);
    }
    Ok(())
}

/// Lowercase hex SHA-256 of `bytes` (a release's and a manifest's file digests).
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut text = String::with_capacity(64);
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_an_empty_body_is_the_well_known_sha256() {
        assert_eq!(
            content_digest(b""),
            "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
        );
    }

    #[test]
    fn the_digest_of_rfc_9530s_example_body_matches_the_rfc() {
        // RFC 9530 §2 gives this value for the body `{"hello": "world"}`.
        assert_eq!(
            content_digest(br#"{"hello": "world"}"#),
            "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"
        );
    }

    #[test]
    fn a_digest_made_here_verifies_against_its_body() {
        let body = br#"{"agent_version":"1.2.3"}"#;
        verify_content_digest(&content_digest(body), body).unwrap();
    }

    #[test]
    fn a_tampered_body_fails_the_digest() {
        let header = content_digest(br#"{"job_id":42}"#);
        let error = verify_content_digest(&header, br#"{"job_id":43}"#).unwrap_err();
        assert_eq!(error, DigestError::Mismatch);
        assert_eq!(error.code(), "bad_digest");
    }

    #[test]
    fn other_algorithms_are_ignored_when_sha256_is_present() {
        let body = b"abc";
        let header = format!("sha-512=:AAAA:, {}, unixsum=12", content_digest(body));
        verify_content_digest(&header, body).unwrap();
    }

    #[test]
    fn a_header_with_only_another_algorithm_is_refused() {
        let error = verify_content_digest("sha-512=:AAAA:", b"").unwrap_err();
        assert_eq!(error, DigestError::MissingSha256);
        assert_eq!(error.code(), "bad_digest");
    }

    #[test]
    fn a_sha256_member_that_is_not_32_bytes_of_byte_sequence_is_refused() {
        for header in [
            "sha-256=\"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\"",
            "sha-256=:AAAA:",
            "sha-256=(:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:)",
            "sha-256",
        ] {
            assert_eq!(
                verify_content_digest(header, b"").unwrap_err(),
                DigestError::MalformedSha256,
                "{header}"
            );
        }
    }

    #[test]
    fn garbage_is_unparseable_and_counts_as_a_missing_signature() {
        for header in [
            "sha-256=:not base64:",
            "SHA-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:",
            "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
            "=",
            "sha-256=:x:\n",
            "\u{0}",
        ] {
            let error = verify_content_digest(header, b"").unwrap_err();
            assert!(
                matches!(error, DigestError::Unparseable { .. }),
                "{header}: {error}"
            );
            assert_eq!(error.code(), "missing_signature");
        }
    }

    #[test]
    fn an_empty_header_has_no_sha256_member() {
        assert_eq!(
            verify_content_digest("", b"").unwrap_err(),
            DigestError::MissingSha256
        );
    }
}
