//! Reading the `Signature-Input` and `Signature` headers (RFC 9421 §4, RFC 8941 dictionaries)
//! and holding them to PROTOCOL.md's rules for our one signature.

use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use sfv::{
    BareItem, Dictionary, FieldType as _, InnerList, Item, ListEntry, ListSerializer, Parser,
    Version,
};

use crate::keys::SIGNATURE_LENGTH;
use crate::signature::{Component, ParsedSignature, ALGORITHM, MAX_NONCE_CHARS, MIN_NONCE_BYTES};
use crate::{Fingerprint, SignatureError};

const SIGNATURE_INPUT_HEADER: &str = "signature-input";
const SIGNATURE_HEADER: &str = "signature";

/// `nonce` is base64url; padding is neither required nor forbidden.
const NONCE_ENGINE: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Reads a request's `Signature-Input` and `Signature` header values (an absent header may be
/// passed as `""`) and checks them against PROTOCOL.md: exactly one signature, the same label
/// in both; covering `"@method"`, `"@path"` and `"content-digest"` in any order, nothing
/// else and nothing twice; parameters in any order with `created` (integer), `nonce`
/// (base64url of at least 16 bytes, at most 128 characters), `keyid` (a fingerprint) and `alg="ed25519"`, other
/// parameters kept; a signature of 64 bytes. Every failure here is `missing_signature`.
pub fn parse_signature(
    signature_input: &str,
    signature: &str,
) -> Result<ParsedSignature, SignatureError> {
    let (label, input) = only_member(SIGNATURE_INPUT_HEADER, signature_input)?;
    let (signature_label, signature_entry) = only_member(SIGNATURE_HEADER, signature)?;
    if signature_label != label {
        return Err(SignatureError::LabelMismatch {
            input_label: label,
            signature_label,
        });
    }
    let ListEntry::InnerList(input) = input else {
        return Err(SignatureError::NotInnerList);
    };
    let components = covered_components(&input.items)?;
    let params = SignatureParams::read(&input)?;
    let signature = signature_bytes(&signature_entry)?;
    Ok(ParsedSignature {
        label,
        components,
        signature_params: serialize_inner_list(&input),
        created: params.created,
        expires: params.expires,
        nonce: params.nonce,
        keyid: params.keyid,
        signature,
    })
}

/// Serializes an inner list with its parameters, in order, per RFC 8941 §4.1.1.1.
pub(crate) fn serialize_inner_list(inner_list: &InnerList) -> String {
    let mut serialized = String::new();
    let mut list = ListSerializer::with_buffer(&mut serialized);
    {
        let mut items = list.inner_list();
        items.items(&inner_list.items);
        let _ = items.finish().parameters(&inner_list.params);
    }
    let _ = list.finish();
    serialized
}

/// Parses a header as an RFC 8941 dictionary and takes its only member.
pub(crate) fn only_member(
    header: &'static str,
    value: &str,
) -> Result<(String, ListEntry), SignatureError> {
    let dictionary: Dictionary = Parser::new(value)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|error: sfv::Error| SignatureError::Unparseable {
            header,
            reason: error.to_string(),
        })?;
    let found = dictionary.len();
    let mut members = dictionary.into_iter();
    match (members.next(), members.next()) {
        (Some((label, entry)), None) => Ok((label.into(), entry)),
        _ => Err(SignatureError::SignatureCount { header, found }),
    }
}

fn covered_components(items: &[Item]) -> Result<Vec<Component>, SignatureError> {
    let mut components = Vec::with_capacity(Component::ALL.len());
    for item in items {
        // A component with parameters (`;sf`, `;key=`, `;req`…) is a different component.
        let component = item
            .bare_item
            .as_string()
            .filter(|_| item.params.is_empty())
            .and_then(|identifier| Component::from_identifier(identifier.as_str()))
            .ok_or_else(|| SignatureError::UnexpectedComponent {
                component: item.serialize(),
            })?;
        if components.contains(&component) {
            return Err(SignatureError::DuplicateComponent {
                component: component.identifier(),
            });
        }
        components.push(component);
    }
    if let Some(missing) = Component::ALL
        .into_iter()
        .find(|component| !components.contains(component))
    {
        return Err(SignatureError::MissingComponent {
            component: missing.identifier(),
        });
    }
    Ok(components)
}

/// The parameters the protocol gives meaning to; any others stay only in the serialization.
struct SignatureParams {
    created: i64,
    expires: Option<i64>,
    nonce: String,
    keyid: Fingerprint,
}

impl SignatureParams {
    fn read(inner_list: &InnerList) -> Result<Self, SignatureError> {
        let params = &inner_list.params;
        let created = integer_param(params.get("created"), "created")?
            .ok_or(SignatureError::MissingParameter { name: "created" })?;
        let expires = integer_param(params.get("expires"), "expires")?;

        let nonce = string_param(params.get("nonce"), "nonce")?;
        let nonce_is_bounded = nonce.len() <= MAX_NONCE_CHARS
            && NONCE_ENGINE
                .decode(nonce)
                .is_ok_and(|bytes| bytes.len() >= MIN_NONCE_BYTES);
        if !nonce_is_bounded {
            return Err(SignatureError::InvalidParameter {
                name: "nonce",
                expected: "base64url of at least 16 bytes and at most 128 characters",
            });
        }

        let keyid =
            Fingerprint::parse(string_param(params.get("keyid"), "keyid")?).map_err(|_| {
                SignatureError::InvalidParameter {
                    name: "keyid",
                    expected: "a key fingerprint, `SHA256:` and 43 characters of base64",
                }
            })?;

        let alg = string_param(params.get("alg"), "alg")?;
        if alg != ALGORITHM {
            return Err(SignatureError::UnsupportedAlgorithm {
                alg: alg.to_owned(),
            });
        }

        Ok(Self {
            created,
            expires,
            nonce: nonce.to_owned(),
            keyid,
        })
    }
}

fn integer_param(
    value: Option<&BareItem>,
    name: &'static str,
) -> Result<Option<i64>, SignatureError> {
    value
        .map(|value| {
            value
                .as_integer()
                .map(i64::from)
                .ok_or(SignatureError::InvalidParameter {
                    name,
                    expected: "an integer",
                })
        })
        .transpose()
}

fn string_param<'a>(
    value: Option<&'a BareItem>,
    name: &'static str,
) -> Result<&'a str, SignatureError> {
    let value = value.ok_or(SignatureError::MissingParameter { name })?;
    value
        .as_string()
        .map(|string| string.as_str())
        .ok_or(SignatureError::InvalidParameter {
            name,
            expected: "a string",
        })
}

pub(crate) fn signature_bytes(entry: &ListEntry) -> Result<[u8; SIGNATURE_LENGTH], SignatureError> {
    let ListEntry::Item(item) = entry else {
        return Err(SignatureError::NotByteSequence);
    };
    let bytes = item
        .bare_item
        .as_byte_sequence()
        .ok_or(SignatureError::NotByteSequence)?;
    bytes
        .try_into()
        .map_err(|_| SignatureError::SignatureLength { found: bytes.len() })
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    use super::*;
    use crate::content_digest;
    use crate::test_support::*;

    #[test]
    fn two_signatures_are_refused() {
        let two_inputs = format!("sig1={0}, sig2={0}", usual_params());
        assert_refused(
            &two_inputs,
            &any_signature(),
            SignatureError::SignatureCount {
                header: "signature-input",
                found: 2,
            },
        );
        let two_signatures = format!("{}, sig2=:{}:", any_signature(), STANDARD.encode([0; 64]));
        assert_refused(
            &format!("sig1={}", usual_params()),
            &two_signatures,
            SignatureError::SignatureCount {
                header: "signature",
                found: 2,
            },
        );
    }

    #[test]
    fn absent_headers_are_refused_as_holding_no_signature() {
        assert_refused(
            "",
            &any_signature(),
            SignatureError::SignatureCount {
                header: "signature-input",
                found: 0,
            },
        );
        assert_refused(
            &format!("sig1={}", usual_params()),
            "",
            SignatureError::SignatureCount {
                header: "signature",
                found: 0,
            },
        );
    }

    #[test]
    fn different_labels_in_the_two_headers_are_refused() {
        assert_refused(
            &format!("sig1={}", usual_params()),
            &signature_header("sig2", "anything"),
            SignatureError::LabelMismatch {
                input_label: "sig1".into(),
                signature_label: "sig2".into(),
            },
        );
    }

    #[test]
    fn each_missing_parameter_is_named() {
        for name in ["created", "nonce", "keyid", "alg"] {
            let params = usual_params()
                .split(';')
                .filter(|part| !part.starts_with(&format!("{name}=")))
                .collect::<Vec<_>>()
                .join(";");
            assert_refused(
                &format!("sig1={params}"),
                &any_signature(),
                SignatureError::MissingParameter { name },
            );
        }
    }

    #[test]
    fn another_algorithm_is_refused() {
        let params = usual_params().replace(r#"alg="ed25519""#, r#"alg="hmac-sha256""#);
        assert_refused(
            &format!("sig1={params}"),
            &any_signature(),
            SignatureError::UnsupportedAlgorithm {
                alg: "hmac-sha256".into(),
            },
        );
        let params = usual_params().replace(r#"alg="ed25519""#, "alg=ed25519");
        assert_refused(
            &format!("sig1={params}"),
            &any_signature(),
            SignatureError::InvalidParameter {
                name: "alg",
                expected: "a string",
            },
        );
    }

    #[test]
    fn a_nonce_shorter_than_16_bytes_longer_than_128_characters_or_not_base64url_is_refused() {
        let nonce_error = SignatureError::InvalidParameter {
            name: "nonce",
            expected: "base64url of at least 16 bytes and at most 128 characters",
        };
        let fifteen_bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([1; 15]);
        // 132 characters decode to 99 bytes: only the length is wrong.
        let too_long = "A".repeat(132);
        for nonce in [
            fifteen_bytes.as_str(),
            too_long.as_str(),
            "",
            "AAECAwQFBgcICQoLDA0OD+",
            "not base64url at all!!",
        ] {
            let params = usual_params().replace(NONCE, nonce);
            assert_refused(
                &format!("sig1={params}"),
                &any_signature(),
                nonce_error.clone(),
            );
        }
    }

    #[test]
    fn a_nonce_of_16_bytes_with_padding_32_bytes_or_128_characters_is_taken() {
        let padded = base64::engine::general_purpose::URL_SAFE.encode([0xfb; 16]);
        let long = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xff; 32]);
        let longest = "A".repeat(MAX_NONCE_CHARS);
        for nonce in [padded, long, longest] {
            let parsed = parse_with_params(&usual_params().replace(NONCE, &nonce)).unwrap();
            assert_eq!(parsed.nonce(), nonce);
        }
    }

    #[test]
    fn parameters_of_the_wrong_type_are_refused() {
        let created = usual_params().replace(&format!("created={CREATED}"), "created=\"1\"");
        assert_refused(
            &format!("sig1={created}"),
            &any_signature(),
            SignatureError::InvalidParameter {
                name: "created",
                expected: "an integer",
            },
        );
        let decimal = usual_params().replace(&format!("created={CREATED}"), "created=1.5");
        assert_refused(
            &format!("sig1={decimal}"),
            &any_signature(),
            SignatureError::InvalidParameter {
                name: "created",
                expected: "an integer",
            },
        );
        let expires = format!("{};expires=?1", usual_params());
        assert_refused(
            &format!("sig1={expires}"),
            &any_signature(),
            SignatureError::InvalidParameter {
                name: "expires",
                expected: "an integer",
            },
        );
        let keyid = usual_params().replace(&keyid(), "test-key-ed25519");
        assert_refused(
            &format!("sig1={keyid}"),
            &any_signature(),
            SignatureError::InvalidParameter {
                name: "keyid",
                expected: "a key fingerprint, `SHA256:` and 43 characters of base64",
            },
        );
    }

    #[test]
    fn a_signature_that_is_not_64_bytes_is_refused() {
        let input = format!("sig1={}", usual_params());
        for length in [0, 63, 65] {
            assert_refused(
                &input,
                &format!("sig1=:{}:", STANDARD.encode(vec![9; length])),
                SignatureError::SignatureLength { found: length },
            );
        }
    }

    #[test]
    fn a_signature_member_that_is_not_a_byte_sequence_is_refused() {
        let input = format!("sig1={}", usual_params());
        for signature in [
            format!("sig1=\"{}\"", STANDARD.encode([9; 64])),
            format!("sig1=(:{}:)", STANDARD.encode([9; 64])),
            "sig1".to_owned(),
        ] {
            assert_refused(&input, &signature, SignatureError::NotByteSequence);
        }
    }

    #[test]
    fn an_extra_component_is_refused() {
        for extra in [
            r#""@authority""#,
            r#""content-digest";sf"#,
            "method",
            r#""@METHOD""#,
        ] {
            let params = usual_params().replacen('(', &format!("({extra} "), 1);
            assert_refused(
                &format!("sig1={params}"),
                &any_signature(),
                SignatureError::UnexpectedComponent {
                    component: extra.to_owned(),
                },
            );
        }
    }

    #[test]
    fn a_missing_or_repeated_component_is_refused() {
        let missing = usual_params().replace(r#" "content-digest""#, "");
        assert_refused(
            &format!("sig1={missing}"),
            &any_signature(),
            SignatureError::MissingComponent {
                component: "content-digest",
            },
        );
        let repeated = usual_params().replace(r#""@path""#, r#""@path" "@method""#);
        assert_refused(
            &format!("sig1={repeated}"),
            &any_signature(),
            SignatureError::DuplicateComponent {
                component: "@method",
            },
        );
        assert_refused(
            &format!("sig1=();created={CREATED}"),
            &any_signature(),
            SignatureError::MissingComponent {
                component: "@method",
            },
        );
    }

    #[test]
    fn a_signature_input_member_that_is_not_an_inner_list_is_refused() {
        assert_refused(
            "sig1=\"@method\";created=1",
            &any_signature(),
            SignatureError::NotInnerList,
        );
    }

    #[test]
    fn garbage_headers_are_unparseable() {
        let good_input = format!("sig1={}", usual_params());
        for (input, signature, header) in [
            ("sig1=(", any_signature(), "signature-input"),
            ("Sig1=()", any_signature(), "signature-input"),
            ("sig1=(\"@method\"", any_signature(), "signature-input"),
            ("sig1=()@", any_signature(), "signature-input"),
            ("é", any_signature(), "signature-input"),
            ("sig1=(\"\n\")", any_signature(), "signature-input"),
            // Dates are RFC 9651; RFC 9421 fields follow RFC 8941.
            ("sig1=();created=@1", any_signature(), "signature-input"),
            (
                good_input.as_str(),
                "sig1=:not base64:".to_owned(),
                "signature",
            ),
            (good_input.as_str(), "sig1=:AAAA".to_owned(), "signature"),
            (good_input.as_str(), "\u{7f}".to_owned(), "signature"),
        ] {
            let error = parse_signature(input, &signature).unwrap_err();
            assert!(
                matches!(error, SignatureError::Unparseable { header: found, .. } if found == header),
                "{input} / {signature}: {error}"
            );
            assert_eq!(error.code(), "missing_signature");
        }
    }

    /// A small xorshift generator, so the mutation test below is repeatable without a
    /// property-testing dependency.
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, bound: usize) -> usize {
            usize::try_from(self.next() % bound as u64).unwrap()
        }
    }

    fn mutate(random: &mut Xorshift, text: &str) -> String {
        const ALPHABET: &[u8] = b"\"();=:,*@ -_+/abcsig1AZ09?\\\t\n\x00\x7f";
        let mut bytes = text.as_bytes().to_vec();
        for _ in 0..=random.below(3) {
            let at = random.below(bytes.len() + 1);
            match random.below(4) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 if at < bytes.len() => bytes[at] = ALPHABET[random.below(ALPHABET.len())],
                2 => bytes.insert(at, ALPHABET[random.below(ALPHABET.len())]),
                _ => bytes.truncate(at),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn mutated_headers_never_panic_and_never_verify_a_changed_base() {
        let input = format!("sig1={}", usual_params());
        let signature = signature_header("sig1", &usual_base(&usual_params()));
        let digest = content_digest(BODY);
        let key = node_key().public_key();
        let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
        for round in 0..3000 {
            let (input, signature) = if round % 2 == 0 {
                (mutate(&mut random, &input), signature.clone())
            } else {
                (input.clone(), mutate(&mut random, &signature))
            };
            let Ok(parsed) = parse_signature(&input, &signature) else {
                continue;
            };
            // Whatever still parses verifies only if it means the very same base.
            if parsed.verify(&key, "POST", PATH, &digest).is_ok() {
                assert_eq!(parsed.signature_params(), usual_params(), "{input}");
            }
        }
    }

    #[test]
    fn mutated_digests_never_panic() {
        let digest = content_digest(BODY);
        let mut random = Xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..3000 {
            let mutated = mutate(&mut random, &digest);
            if crate::verify_content_digest(&mutated, BODY).is_ok() {
                assert!(mutated.contains("sha-256="), "{mutated}");
            }
        }
    }
}
