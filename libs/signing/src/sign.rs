//! Signing a request the way the agent does: the three headers PROTOCOL.md shows.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use rand::{rngs::OsRng, RngCore as _, TryRngCore as _};

use crate::signature::{build_signature_base, path_value, Component, ALGORITHM, MIN_NONCE_BYTES};
use crate::{content_digest, NodeKey};

/// The label our agents give their signature.
pub const LABEL: &str = "sig1";

/// The three header values that sign one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `Content-Digest`: `sha-256=:<base64>:`.
    pub content_digest: String,
    /// `Signature-Input`: `sig1=("@method" "@path" "content-digest");created=…;nonce="…";keyid="…";alg="ed25519"`.
    pub signature_input: String,
    /// `Signature`: `sig1=:<base64 of the 64-byte signature>:`.
    pub signature: String,
}

/// Signs a request: `method` as sent (`POST`), `path` the target path (a query, if given, is
/// not covered: RFC 9421's `@path` leaves it out), `body` the exact body bytes, and `created`
/// the signer's clock in Unix seconds. The nonce is 16 fresh random bytes.
pub fn sign_request(
    key: &NodeKey,
    method: &str,
    path: &str,
    body: &[u8],
    created: i64,
) -> SignedHeaders {
    let mut nonce = [0u8; MIN_NONCE_BYTES];
    OsRng.unwrap_err().fill_bytes(&mut nonce);
    sign_request_with_nonce(
        key,
        method,
        path,
        body,
        created,
        &URL_SAFE_NO_PAD.encode(nonce),
    )
}

/// [`sign_request`] with a chosen nonce, so that tests can fix every input.
pub(crate) fn sign_request_with_nonce(
    key: &NodeKey,
    method: &str,
    path: &str,
    body: &[u8],
    created: i64,
    nonce: &str,
) -> SignedHeaders {
    let content_digest = content_digest(body);
    let keyid = key.public_key().fingerprint();
    // The nonce is base64url and the fingerprint base64 with `SHA256:`: neither holds a quote
    // or a backslash, so both serialize as sf-strings verbatim and this text is exactly what
    // an RFC 8941 serializer would write, which is what the plane rebuilds.
    let signature_params = format!(
        "({});created={created};nonce=\"{nonce}\";keyid=\"{keyid}\";alg=\"{ALGORITHM}\"",
        Component::ALL
            .map(|component| format!("\"{}\"", component.identifier()))
            .join(" "),
    );
    let base = build_signature_base(
        [
            (Component::Method.identifier(), method),
            (Component::Path.identifier(), path_value(path)),
            (
                Component::ContentDigest.identifier(),
                content_digest.as_str(),
            ),
        ],
        &signature_params,
    );
    let signature = key.sign(base.as_bytes());
    SignedHeaders {
        signature_input: format!("{LABEL}={signature_params}"),
        signature: format!("{LABEL}=:{}:", STANDARD.encode(signature)),
        content_digest,
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE;

    use super::*;
    use crate::{parse_signature, verify_content_digest, SignatureError, MAX_CLOCK_SKEW_SECONDS};

    const CREATED: i64 = 1_700_000_000;
    const PATH: &str = "/api/v1/agent/claim";
    const BODY: &[u8] = br#"{"agent_version":"1.2.3","idle":true}"#;

    #[test]
    fn a_signed_request_parses_and_verifies() {
        let key = NodeKey::generate();
        let headers = sign_request(&key, "POST", PATH, BODY, CREATED);

        let parsed = parse_signature(&headers.signature_input, &headers.signature).unwrap();
        verify_content_digest(&headers.content_digest, BODY).unwrap();
        parsed
            .check_clock(CREATED + 10, MAX_CLOCK_SKEW_SECONDS)
            .unwrap();
        assert_eq!(parsed.keyid(), &key.public_key().fingerprint());
        parsed
            .verify(&key.public_key(), "POST", PATH, &headers.content_digest)
            .unwrap();
    }

    #[test]
    fn the_headers_have_the_shape_protocol_md_shows() {
        let key = NodeKey::from_secret_bytes(&[3; 32]).unwrap();
        let keyid = key.public_key().fingerprint();
        let headers =
            sign_request_with_nonce(&key, "POST", PATH, BODY, CREATED, "AAECAwQFBgcICQoLDA0ODw");
        assert_eq!(headers.content_digest, content_digest(BODY));
        assert_eq!(
            headers.signature_input,
            format!(
                r#"sig1=("@method" "@path" "content-digest");created={CREATED};nonce="AAECAwQFBgcICQoLDA0ODw";keyid="{keyid}";alg="ed25519""#
            )
        );
        assert!(headers.signature.starts_with("sig1=:"));
        assert!(headers.signature.ends_with(":"));
        assert_eq!(headers.signature.len(), "sig1=::".len() + 88);
    }

    #[test]
    fn the_base_the_plane_rebuilds_is_the_one_the_agent_signed() {
        let key = NodeKey::from_secret_bytes(&[3; 32]).unwrap();
        let nonce = "AAECAwQFBgcICQoLDA0ODw";
        let headers = sign_request_with_nonce(&key, "POST", PATH, BODY, CREATED, nonce);
        let expected_base = format!(
            "\"@method\": POST\n\"@path\": {PATH}\n\"content-digest\": {}\n\"@signature-params\": {}",
            headers.content_digest,
            headers.signature_input.strip_prefix("sig1=").unwrap()
        );
        let parsed = parse_signature(&headers.signature_input, &headers.signature).unwrap();
        assert_eq!(
            parsed.signature_base("POST", PATH, &headers.content_digest),
            expected_base
        );
        key.public_key()
            .verify(expected_base.as_bytes(), parsed.signature())
            .unwrap();
    }

    #[test]
    fn each_request_gets_a_fresh_nonce_of_16_bytes() {
        let key = NodeKey::generate();
        let first = sign_request(&key, "POST", PATH, BODY, CREATED);
        let second = sign_request(&key, "POST", PATH, BODY, CREATED);
        let first = parse_signature(&first.signature_input, &first.signature).unwrap();
        let second = parse_signature(&second.signature_input, &second.signature).unwrap();
        assert_ne!(first.nonce(), second.nonce());
        assert_eq!(first.nonce().len(), 22);
        assert!(!first.nonce().contains('='));
        assert_eq!(
            URL_SAFE
                .decode(format!("{}==", first.nonce()))
                .unwrap()
                .len(),
            16
        );
    }

    #[test]
    fn a_query_in_the_signed_path_is_not_covered() {
        let key = NodeKey::generate();
        let headers = sign_request(&key, "POST", "/api/v1/agent/claim?wait=30", BODY, CREATED);
        let parsed = parse_signature(&headers.signature_input, &headers.signature).unwrap();
        for path in [PATH, "/api/v1/agent/claim?wait=0"] {
            parsed
                .verify(&key.public_key(), "POST", path, &headers.content_digest)
                .unwrap();
        }
    }

    #[test]
    fn a_tampered_body_fails_the_digest_and_a_tampered_path_the_signature() {
        let key = NodeKey::generate();
        let headers = sign_request(&key, "POST", PATH, BODY, CREATED);
        let digest_error =
            verify_content_digest(&headers.content_digest, br#"{"agent_version":"6.6.6"}"#)
                .unwrap_err();
        assert_eq!(digest_error.code(), "bad_digest");
        let parsed = parse_signature(&headers.signature_input, &headers.signature).unwrap();
        let signature_error = parsed
            .verify(
                &key.public_key(),
                "POST",
                "/api/v1/agent/result",
                &headers.content_digest,
            )
            .unwrap_err();
        assert_eq!(signature_error, SignatureError::Invalid);
        assert_eq!(signature_error.code(), "bad_signature");
    }

    #[test]
    fn many_signed_requests_verify_and_none_verifies_for_another_path() {
        let key = NodeKey::generate();
        let public_key = key.public_key();
        for index in 0..64_i64 {
            let path = format!(
                "/api/v1/agent/{}",
                "x".repeat(usize::try_from(index).unwrap())
            );
            let body = vec![u8::try_from(index).unwrap(); usize::try_from(index * 37).unwrap()];
            let created = CREATED + index * 1_000_003 - 32_000_000;
            let headers = sign_request(&key, "POST", &path, &body, created);
            verify_content_digest(&headers.content_digest, &body).unwrap();
            let parsed = parse_signature(&headers.signature_input, &headers.signature).unwrap();
            assert_eq!(parsed.created(), created);
            parsed
                .verify(&public_key, "POST", &path, &headers.content_digest)
                .unwrap();
            assert_eq!(
                parsed.verify(
                    &public_key,
                    "POST",
                    &format!("{path}/"),
                    &headers.content_digest
                ),
                Err(SignatureError::Invalid)
            );
        }
    }
}
