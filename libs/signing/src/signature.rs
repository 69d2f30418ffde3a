//! A request's parsed signature and what is done with it: the RFC 9421 signature base both
//! sides sign over, verification, and the clock check (PROTOCOL.md, "Signing").

use crate::keys::SIGNATURE_LENGTH;
use crate::{Fingerprint, PublicKey, SignatureError};

/// The only signature algorithm taken, as named by `alg`.
pub const ALGORITHM: &str = "ed25519";
/// The fewest random bytes a `nonce` may carry.
pub const MIN_NONCE_BYTES: usize = 16;
/// The most characters a `nonce` may have (PROTOCOL.md "Limits": 16 to 128 characters); a
/// longer one is malformed, refused before it is decoded or remembered.
pub const MAX_NONCE_CHARS: usize = 128;
/// How far `created` may be from the plane's clock, either way ("more than 300 seconds from
/// the plane's clock, either way" is `clock_skew`).
pub const MAX_CLOCK_SKEW_SECONDS: i64 = 300;

/// A component of the request that a signature covers. The protocol takes exactly these three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// `"@method"`: the request method.
    Method,
    /// `"@path"`: the target path, without the query.
    Path,
    /// `"content-digest"`: the `Content-Digest` header.
    ContentDigest,
}

impl Component {
    /// Every component a signature must cover, in the order the agent lists them.
    pub const ALL: [Component; 3] = [Self::Method, Self::Path, Self::ContentDigest];

    /// The component identifier as RFC 9421 names it, without quotes.
    pub fn identifier(self) -> &'static str {
        match self {
            Self::Method => "@method",
            Self::Path => "@path",
            Self::ContentDigest => "content-digest",
        }
    }

    pub(crate) fn from_identifier(identifier: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|component| component.identifier() == identifier)
    }
}

/// A request's one signature, read from its `Signature-Input` and `Signature` headers and
/// checked against the protocol's rules. It keeps the covered components and the serialized
/// parameters in the order received, so the signature base is the one the signer built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedSignature {
    pub(crate) label: String,
    pub(crate) components: Vec<Component>,
    pub(crate) signature_params: String,
    pub(crate) created: i64,
    pub(crate) expires: Option<i64>,
    pub(crate) nonce: String,
    pub(crate) keyid: Fingerprint,
    pub(crate) signature: [u8; SIGNATURE_LENGTH],
}

impl ParsedSignature {
    /// The signature's label (`sig1` from our agents; any key is accepted).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The covered components, in the order `Signature-Input` lists them.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The value of `@signature-params`: the received inner list and its parameters,
    /// serialized per RFC 8941 in the order received.
    pub fn signature_params(&self) -> &str {
        &self.signature_params
    }

    /// `created`, in Unix seconds.
    pub fn created(&self) -> i64 {
        self.created
    }

    /// `expires`, in Unix seconds, when the signer set one.
    pub fn expires(&self) -> Option<i64> {
        self.expires
    }

    /// `nonce` as received (base64url of at least 16 bytes, at most 128 characters), for the
    /// plane's replay check.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// `keyid`: the fingerprint of the key that claims to have signed.
    pub fn keyid(&self) -> &Fingerprint {
        &self.keyid
    }

    /// The 64 bytes of the Ed25519 signature.
    pub fn signature(&self) -> &[u8; SIGNATURE_LENGTH] {
        &self.signature
    }

    /// Checks `created` against the verifier's clock (see [`check_created`]) and, when the
    /// signer set `expires`, that it has not passed.
    pub fn check_clock(&self, now: i64, max_skew_seconds: i64) -> Result<(), SignatureError> {
        check_created(self.created, now, max_skew_seconds)?;
        match self.expires {
            Some(expires) if expires < now => Err(SignatureError::Expired { expires, now }),
            _ => Ok(()),
        }
    }

    /// The RFC 9421 §2.5 signature base: one line per covered component in the order
    /// `Signature-Input` listed them, then `"@signature-params"`, joined by `\n` with no
    /// newline at the end.
    ///
    /// `method` is the request method as sent (`POST`); `path` is the target path (a query,
    /// if given, is cut off, an empty path counts as `/`); `content_digest` is the
    /// `Content-Digest` header value, the very one checked against the body.
    pub fn signature_base(&self, method: &str, path: &str, content_digest: &str) -> String {
        let lines = self.components.iter().map(|component| {
            let value = match component {
                Component::Method => method,
                Component::Path => path_value(path),
                Component::ContentDigest => content_digest.trim_matches([' ', '\t']),
            };
            (component.identifier(), value)
        });
        build_signature_base(lines, &self.signature_params)
    }

    /// Checks the signature over the request with `key`, which must be the key `keyid`
    /// names. Takes the same `method`, `path` and `content_digest` as
    /// [`ParsedSignature::signature_base`].
    pub fn verify(
        &self,
        key: &PublicKey,
        method: &str,
        path: &str,
        content_digest: &str,
    ) -> Result<(), SignatureError> {
        if key.fingerprint() != self.keyid {
            return Err(SignatureError::KeyMismatch);
        }
        for (component, value) in [
            (Component::Method, method),
            (Component::Path, path),
            (Component::ContentDigest, content_digest),
        ] {
            if value.contains(['\n', '\r']) {
                return Err(SignatureError::LineBreak {
                    component: component.identifier(),
                });
            }
        }
        let base = self.signature_base(method, path, content_digest);
        key.verify(base.as_bytes(), &self.signature)
    }
}

/// Checks that `created` lies within `max_skew_seconds` of `now`, either way; the plane uses
/// [`MAX_CLOCK_SKEW_SECONDS`]. Both bounds are inclusive.
pub fn check_created(created: i64, now: i64, max_skew_seconds: i64) -> Result<(), SignatureError> {
    let allowed = u64::try_from(max_skew_seconds).unwrap_or(0);
    if created.abs_diff(now) > allowed {
        return Err(SignatureError::ClockSkew {
            created,
            now,
            max_skew_seconds,
        });
    }
    Ok(())
}

/// The `@path` value: the path without any query, and `/` for an empty path (RFC 9421 §2.2.6).
pub(crate) fn path_value(path: &str) -> &str {
    let path = path.split_once('?').map_or(path, |(path, _query)| path);
    if path.is_empty() {
        "/"
    } else {
        path
    }
}

/// Lays out a signature base from component identifiers (unquoted) with their values, and the
/// serialized signature parameters. Both signing and verifying go through here.
pub(crate) fn build_signature_base<'a>(
    lines: impl IntoIterator<Item = (&'a str, &'a str)>,
    signature_params: &str,
) -> String {
    let mut base = String::new();
    for (identifier, value) in lines {
        base.push('"');
        base.push_str(identifier);
        base.push_str("\": ");
        base.push_str(value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(signature_params);
    base
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    use super::*;
    use crate::parse::{only_member, serialize_inner_list, signature_bytes};
    use crate::test_support::*;
    use crate::{content_digest, parse_signature, NodeKey};
    use sfv::ListEntry;

    #[test]
    fn a_signature_written_out_by_hand_parses_and_verifies() {
        let parsed = valid_signature();
        assert_eq!(parsed.label(), "sig1");
        assert_eq!(parsed.created(), CREATED);
        assert_eq!(parsed.nonce(), NONCE);
        assert_eq!(parsed.keyid().as_str(), keyid());
        assert_eq!(parsed.expires(), None);
        assert_eq!(parsed.components(), Component::ALL);
        assert_eq!(parsed.signature_params(), usual_params());
        assert_eq!(
            parsed.signature_base("POST", PATH, &content_digest(BODY)),
            usual_base(&usual_params())
        );
        parsed
            .verify(
                &node_key().public_key(),
                "POST",
                PATH,
                &content_digest(BODY),
            )
            .unwrap();
    }

    #[test]
    fn shuffled_parameters_components_and_another_label_still_verify() {
        let params = format!(
            r#"("content-digest" "@method" "@path");alg="ed25519";tag="capstan";keyid="{}";expires={};nonce="{NONCE}";created={CREATED}"#,
            keyid(),
            CREATED + 60
        );
        let base = format!(
            "\"content-digest\": {}\n\"@method\": POST\n\"@path\": {PATH}\n\"@signature-params\": {params}",
            content_digest(BODY)
        );
        let parsed = parse_signature(
            &format!("req-7.b*={params}"),
            &signature_header("req-7.b*", &base),
        )
        .unwrap();
        assert_eq!(parsed.label(), "req-7.b*");
        assert_eq!(
            parsed.components(),
            [Component::ContentDigest, Component::Method, Component::Path]
        );
        assert_eq!(parsed.expires(), Some(CREATED + 60));
        assert_eq!(
            parsed.signature_base("POST", PATH, &content_digest(BODY)),
            base
        );
        parsed
            .verify(
                &node_key().public_key(),
                "POST",
                PATH,
                &content_digest(BODY),
            )
            .unwrap();
    }

    #[test]
    fn optional_whitespace_in_the_header_is_left_out_of_the_signature_params() {
        let spaced = format!(
            r#"( "@method"  "@path" "content-digest" );created={CREATED};  nonce="{NONCE}"; keyid="{}";alg="ed25519""#,
            keyid()
        );
        let parsed = parse_signature(
            &format!("  sig1={spaced}  "),
            &signature_header("sig1", &usual_base(&usual_params())),
        )
        .unwrap();
        assert_eq!(parsed.signature_params(), usual_params());
        parsed
            .verify(
                &node_key().public_key(),
                "POST",
                PATH,
                &content_digest(BODY),
            )
            .unwrap();
    }

    #[test]
    fn a_tampered_path_fails_the_signature() {
        let error = valid_signature()
            .verify(
                &node_key().public_key(),
                "POST",
                "/api/v1/agent/leave",
                &content_digest(BODY),
            )
            .unwrap_err();
        assert_eq!(error, SignatureError::Invalid);
        assert_eq!(error.code(), "bad_signature");
    }

    #[test]
    fn a_tampered_method_or_digest_fails_the_signature() {
        let parsed = valid_signature();
        let key = node_key().public_key();
        assert_eq!(
            parsed.verify(&key, "PUT", PATH, &content_digest(BODY)),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            parsed.verify(&key, "POST", PATH, &content_digest(b"{}")),
            Err(SignatureError::Invalid)
        );
    }

    #[test]
    fn verifying_with_a_key_other_than_the_keyid_is_refused() {
        let error = valid_signature()
            .verify(
                &NodeKey::generate().public_key(),
                "POST",
                PATH,
                &content_digest(BODY),
            )
            .unwrap_err();
        assert_eq!(error, SignatureError::KeyMismatch);
        assert_eq!(error.code(), "unknown_key");
    }

    #[test]
    fn a_line_break_in_a_component_value_is_refused() {
        let parsed = valid_signature();
        let key = node_key().public_key();
        let forged_path = format!("{PATH}\n\"@path\": /x");
        assert_eq!(
            parsed.verify(&key, "POST", &forged_path, &content_digest(BODY)),
            Err(SignatureError::LineBreak { component: "@path" })
        );
        assert_eq!(
            parsed.verify(&key, "POST\r", PATH, &content_digest(BODY)),
            Err(SignatureError::LineBreak {
                component: "@method"
            })
        );
    }

    #[test]
    fn the_path_value_drops_the_query_and_an_empty_path_is_a_slash() {
        assert_eq!(path_value("/api/v1/agent/claim?wait=30"), PATH);
        assert_eq!(path_value(""), "/");
        assert_eq!(path_value("?x=1"), "/");
        assert_eq!(path_value(PATH), PATH);
    }

    #[test]
    fn the_content_digest_value_is_trimmed_of_surrounding_whitespace() {
        let parsed = valid_signature();
        let padded = format!(" \t{} ", content_digest(BODY));
        parsed
            .verify(&node_key().public_key(), "POST", PATH, &padded)
            .unwrap();
    }

    #[test]
    fn created_300_seconds_either_way_passes_and_301_fails() {
        let now = CREATED;
        for created in [now - 300, now, now + 300] {
            check_created(created, now, MAX_CLOCK_SKEW_SECONDS).unwrap();
        }
        for created in [now - 301, now + 301] {
            let error = check_created(created, now, MAX_CLOCK_SKEW_SECONDS).unwrap_err();
            assert_eq!(
                error,
                SignatureError::ClockSkew {
                    created,
                    now,
                    max_skew_seconds: 300
                }
            );
            assert_eq!(error.code(), "clock_skew");
        }
    }

    #[test]
    fn extreme_clock_values_neither_overflow_nor_pass() {
        assert!(check_created(i64::MIN, i64::MAX, 300).is_err());
        assert!(check_created(i64::MAX, i64::MIN, i64::MAX).is_err());
        assert!(check_created(i64::MAX, i64::MAX, 0).is_ok());
        assert!(check_created(5, 6, -1).is_err());
    }

    #[test]
    fn a_passed_expiry_fails_the_clock_check() {
        let params = format!("{};expires={}", usual_params(), CREATED + 10);
        let parsed = parse_with_params(&params).unwrap();
        parsed.check_clock(CREATED + 10, 300).unwrap();
        let error = parsed.check_clock(CREATED + 11, 300).unwrap_err();
        assert_eq!(
            error,
            SignatureError::Expired {
                expires: CREATED + 10,
                now: CREATED + 11
            }
        );
        assert_eq!(error.code(), "clock_skew");
        assert_eq!(
            valid_signature()
                .check_clock(CREATED + 301, 300)
                .unwrap_err()
                .code(),
            "clock_skew"
        );
    }

    // RFC 9421 Appendix B.2.6, "Signing a Request Using ed25519", with the key
    // `test-key-ed25519` of Appendix B.1.4. The RFC wraps long lines (RFC 8792); they are
    // joined here. Our protocol covers other components, so the pieces are checked one by one.
    const RFC_PRIVATE_KEY_PKCS8: &str =
        "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF";
    const RFC_PUBLIC_KEY: &str = "JrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=";
    const RFC_SIGNATURE_INPUT: &str = r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#;
    const RFC_SIGNATURE: &str = "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:";
    const RFC_SIGNATURE_PARAMS: &str = r#"("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#;
    const RFC_SIGNATURE_BASE: &str = "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\
        \"@method\": POST\n\
        \"@path\": /foo\n\
        \"@authority\": example.com\n\
        \"content-type\": application/json\n\
        \"content-length\": 18\n\
        \"@signature-params\": (\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"";

    fn rfc_key() -> NodeKey {
        let pkcs8 = STANDARD.decode(RFC_PRIVATE_KEY_PKCS8).unwrap();
        // A PKCS#8 Ed25519 key is a fixed 16-byte header followed by the 32-byte seed.
        assert_eq!(pkcs8.len(), 48);
        NodeKey::from_secret_bytes(&pkcs8[16..]).unwrap()
    }

    #[test]
    fn rfc_9421_b_2_6_signature_params_serialize_as_the_rfc_shows() {
        let (label, entry) = only_member("signature-input", RFC_SIGNATURE_INPUT).unwrap();
        assert_eq!(label, "sig-b26");
        let ListEntry::InnerList(inner_list) = entry else {
            panic!("not an inner list");
        };
        assert_eq!(serialize_inner_list(&inner_list), RFC_SIGNATURE_PARAMS);
    }

    #[test]
    fn rfc_9421_b_2_6_signature_base_is_laid_out_as_the_rfc_shows() {
        let base = build_signature_base(
            [
                ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
                ("@method", "POST"),
                ("@path", path_value("/foo?param=Value&Pet=dog")),
                ("@authority", "example.com"),
                ("content-type", "application/json"),
                ("content-length", "18"),
            ],
            RFC_SIGNATURE_PARAMS,
        );
        assert_eq!(base, RFC_SIGNATURE_BASE);
    }

    #[test]
    fn rfc_9421_b_2_6_signature_is_reproduced_and_verifies() {
        let key = rfc_key();
        assert_eq!(key.public_key().to_base64(), RFC_PUBLIC_KEY);
        let public_key = PublicKey::from_base64(RFC_PUBLIC_KEY).unwrap();
        let (_, entry) = only_member("signature", RFC_SIGNATURE).unwrap();
        let published = signature_bytes(&entry).unwrap();
        // Ed25519 is deterministic: the same key over the same base gives the same bytes.
        assert_eq!(key.sign(RFC_SIGNATURE_BASE.as_bytes()), published);
        public_key
            .verify(RFC_SIGNATURE_BASE.as_bytes(), &published)
            .unwrap();
        assert_eq!(
            public_key.verify(
                RFC_SIGNATURE_BASE.replace("/foo", "/bar").as_bytes(),
                &published
            ),
            Err(SignatureError::Invalid)
        );
    }

    #[test]
    fn rfc_9421_b_2_6_headers_are_refused_for_covering_other_components() {
        assert_refused(
            RFC_SIGNATURE_INPUT,
            RFC_SIGNATURE,
            SignatureError::UnexpectedComponent {
                component: "\"date\"".into(),
            },
        );
    }
}
