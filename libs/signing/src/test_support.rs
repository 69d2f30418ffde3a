//! Fixtures shared by the unit tests: one fixed key, and a signature written out by hand the
//! way another RFC 9421 library would write it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::{content_digest, parse_signature, NodeKey, ParsedSignature, SignatureError};

pub(crate) const NONCE: &str = "AAECAwQFBgcICQoLDA0ODw";
pub(crate) const CREATED: i64 = 1_700_000_000;
pub(crate) const PATH: &str = "/api/v1/agent/claim";
pub(crate) const BODY: &[u8] = br#"{"agent_version":"1.2.3"}"#;

pub(crate) fn node_key() -> NodeKey {
    NodeKey::from_secret_bytes(&[7; 32]).unwrap()
}

pub(crate) fn keyid() -> String {
    node_key().public_key().fingerprint().to_string()
}

/// What a `Signature-Input` member's inner list looks like with our usual parameters.
pub(crate) fn usual_params() -> String {
    format!(
        r#"("@method" "@path" "content-digest");created={CREATED};nonce="{NONCE}";keyid="{}";alg="ed25519""#,
        keyid()
    )
}

/// Signs the base written out by hand, as another RFC 9421 library would, and returns the
/// `Signature` header value under `label`.
pub(crate) fn signature_header(label: &str, base: &str) -> String {
    format!(
        "{label}=:{}:",
        STANDARD.encode(node_key().sign(base.as_bytes()))
    )
}

pub(crate) fn usual_base(params: &str) -> String {
    format!(
        "\"@method\": POST\n\"@path\": {PATH}\n\"content-digest\": {}\n\"@signature-params\": {params}",
        content_digest(BODY)
    )
}

pub(crate) fn parse_with_params(params: &str) -> Result<ParsedSignature, SignatureError> {
    parse_signature(
        &format!("sig1={params}"),
        &signature_header("sig1", &usual_base(params)),
    )
}

pub(crate) fn valid_signature() -> ParsedSignature {
    parse_with_params(&usual_params()).unwrap()
}

pub(crate) fn assert_refused(
    signature_input: &str,
    signature: &str,
    expected: SignatureError,
) -> SignatureError {
    let error = parse_signature(signature_input, signature).unwrap_err();
    assert_eq!(error, expected, "{signature_input} / {signature}");
    assert_eq!(error.code(), "missing_signature");
    error
}

pub(crate) fn any_signature() -> String {
    signature_header("sig1", "anything")
}
