//! Why a request signature was refused, and which of PROTOCOL.md's refusal codes that is.

/// What was wrong with a request's signature headers, its clock, or the signature itself.
///
/// [`SignatureError::code`] maps each to PROTOCOL.md's refusal code. The plane checks in the
/// protocol's order: parse the headers ([`crate::parse_signature`]; any failure there is
/// `missing_signature`), then the digest, then [`crate::check_created`], then the key lookup,
/// then [`crate::ParsedSignature::verify`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header is not a structured-field dictionary (RFC 8941).
    #[error("the {header} header is not a structured field dictionary: {reason}")]
    Unparseable {
        /// `signature-input` or `signature`.
        header: &'static str,
        /// What the parser stumbled on.
        reason: String,
    },
    /// A header holds no signature, or more than one.
    #[error("the {header} header holds {found} signatures, expected exactly one")]
    SignatureCount {
        /// `signature-input` or `signature`.
        header: &'static str,
        /// How many members the header has.
        found: usize,
    },
    /// The two headers name their one signature differently.
    #[error(
        "signature-input labels its signature {input_label:?} but signature labels it {signature_label:?}"
    )]
    LabelMismatch {
        /// The label in `Signature-Input`.
        input_label: String,
        /// The label in `Signature`.
        signature_label: String,
    },
    /// The `Signature-Input` member is not an inner list of covered components.
    #[error("the signature-input member is not an inner list of covered components")]
    NotInnerList,
    /// A covered component other than the three the protocol names, or one with parameters.
    #[error(
        "the signature covers {component}, but only \"@method\", \"@path\" and \"content-digest\" may be covered"
    )]
    UnexpectedComponent {
        /// The component as it was serialized.
        component: String,
    },
    /// A component is listed twice.
    #[error("the signature covers \"{component}\" twice")]
    DuplicateComponent {
        /// The component's identifier.
        component: &'static str,
    },
    /// A component the protocol requires is not covered.
    #[error("the signature does not cover \"{component}\"")]
    MissingComponent {
        /// The component's identifier.
        component: &'static str,
    },
    /// A required signature parameter is absent.
    #[error("the signature parameters lack `{name}`")]
    MissingParameter {
        /// The parameter's name.
        name: &'static str,
    },
    /// A signature parameter has the wrong type or shape.
    #[error("the `{name}` signature parameter must be {expected}")]
    InvalidParameter {
        /// The parameter's name.
        name: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The `alg` parameter names another algorithm.
    #[error("the signature algorithm is {alg:?}, but only \"ed25519\" is accepted")]
    UnsupportedAlgorithm {
        /// The algorithm named.
        alg: String,
    },
    /// The `Signature` member is not a byte sequence.
    #[error("the signature member is not a byte sequence")]
    NotByteSequence,
    /// The signature is not the 64 bytes of an Ed25519 signature.
    #[error("the signature is {found} bytes long, expected 64")]
    SignatureLength {
        /// How many bytes the signature has.
        found: usize,
    },
    /// `created` is too far from the verifier's clock, in either direction.
    #[error(
        "the signature was created at {created}, more than {max_skew_seconds} seconds from the current time {now}"
    )]
    ClockSkew {
        /// The signature's `created`, in Unix seconds.
        created: i64,
        /// The verifier's clock, in Unix seconds.
        now: i64,
        /// The largest distance allowed.
        max_skew_seconds: i64,
    },
    /// The signature carries an `expires` that has passed.
    #[error("the signature expired at {expires}, before the current time {now}")]
    Expired {
        /// The signature's `expires`, in Unix seconds.
        expires: i64,
        /// The verifier's clock, in Unix seconds.
        now: i64,
    },
    /// The signature's `keyid` is not the fingerprint of the key it was checked with.
    #[error("the signature's keyid is not the fingerprint of the key it was checked with")]
    KeyMismatch,
    /// A covered component's value holds a line break, which would forge lines of the base.
    #[error("the {component} value holds a line break")]
    LineBreak {
        /// The component's identifier.
        component: &'static str,
    },
    /// The signature does not verify.
    #[error("the signature does not verify with the key")]
    Invalid,
}

impl SignatureError {
    /// The refusal code of PROTOCOL.md: `missing_signature` for any header that does not
    /// parse or breaks the protocol's rules for it, `clock_skew`, `unknown_key` (only when a
    /// key that is not `keyid`'s was passed to verify), or `bad_signature`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unparseable { .. }
            | Self::SignatureCount { .. }
            | Self::LabelMismatch { .. }
            | Self::NotInnerList
            | Self::UnexpectedComponent { .. }
            | Self::DuplicateComponent { .. }
            | Self::MissingComponent { .. }
            | Self::MissingParameter { .. }
            | Self::InvalidParameter { .. }
            | Self::UnsupportedAlgorithm { .. }
            | Self::NotByteSequence
            | Self::SignatureLength { .. } => "missing_signature",
            Self::ClockSkew { .. } | Self::Expired { .. } => "clock_skew",
            Self::KeyMismatch => "unknown_key",
            Self::LineBreak { .. } | Self::Invalid => "bad_signature",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase_and_end_without_a_period() {
        let errors = [
            SignatureError::NotInnerList,
            SignatureError::MissingParameter { name: "nonce" },
            SignatureError::ClockSkew {
                created: 1,
                now: 400,
                max_skew_seconds: 300,
            },
            SignatureError::Invalid,
        ];
        for error in errors {
            let message = error.to_string();
            assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
            assert!(!message.ends_with('.'), "{message}");
        }
    }

    #[test]
    fn each_failure_maps_to_its_protocol_code() {
        assert_eq!(
            SignatureError::SignatureLength { found: 63 }.code(),
            "missing_signature"
        );
        assert_eq!(
            SignatureError::Expired { expires: 1, now: 2 }.code(),
            "clock_skew"
        );
        assert_eq!(SignatureError::KeyMismatch.code(), "unknown_key");
        assert_eq!(SignatureError::Invalid.code(), "bad_signature");
    }
}
