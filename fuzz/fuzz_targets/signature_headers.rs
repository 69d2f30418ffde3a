//! The signature header parser and the digest check on arbitrary input: they must refuse, never
//! panic, and whatever parses must also survive building a signature base and verifying.
#![no_main]

use capstan_signing::{parse_signature, verify_content_digest, NodeKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Three header values and a body, split on the first three newlines.
    let mut parts = text.splitn(4, '\n');
    let input = parts.next().unwrap_or_default();
    let signature = parts.next().unwrap_or_default();
    let digest = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    let _ = verify_content_digest(digest, body.as_bytes());
    if let Ok(parsed) = parse_signature(input, signature) {
        let _ = parsed.signature_base("POST", "/api/v1/agent/claim", digest);
        let _ = parsed.check_clock(parsed.created(), 300);
        let key = NodeKey::from_secret_bytes(&[7; 32]).expect("32 bytes make a key");
        let _ = parsed.verify(&key.public_key(), "POST", "/api/v1/agent/claim", digest);
    }
});
