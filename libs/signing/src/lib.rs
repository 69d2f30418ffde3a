//! Ed25519 keys, fingerprints, HTTP message signatures (RFC 9421) and content digests (RFC 9530).
//!
//! Agents sign every request to the plane and the plane verifies it, both through this crate,
//! as PROTOCOL.md ("Keys and fingerprints", "Signing") lays down. It knows no HTTP framework: it
//! takes header values, methods, paths and bodies as strings and bytes. Releases
//! ([`release`]) and signed file manifests ([`manifest`]) are checked the same way, without
//! I/O; only [`tree`] touches the file system, reading and landing trees against a manifest
//! descriptor by descriptor.
//!
//! The plane's order of checks, each failure carrying its refusal code:
//! 1. [`parse_signature`] on `Signature-Input` and `Signature` (`missing_signature`);
//! 2. [`verify_content_digest`] on `Content-Digest` and the body (`bad_digest`, or
//!    `missing_signature` when the header does not parse);
//! 3. [`ParsedSignature::check_clock`] with [`MAX_CLOCK_SKEW_SECONDS`] (`clock_skew`);
//! 4. its own lookup of [`ParsedSignature::keyid`] (`unknown_key`);
//! 5. [`ParsedSignature::verify`] with the same method, path and `Content-Digest` value
//!    (`bad_signature`);
//! 6. its own replay check of [`ParsedSignature::nonce`] (`replayed`).
#![forbid(unsafe_code)]

mod digest;
mod error;
mod keys;
pub mod manifest;
mod parse;
pub mod release;
mod sign;
mod signature;
pub mod statement;
#[cfg(test)]
mod test_support;
pub mod tree;

pub use digest::{content_digest, verify_content_digest, DigestError};
pub use error::SignatureError;
pub use keys::{Fingerprint, KeyError, NodeKey, PublicKey, KEY_LENGTH, SIGNATURE_LENGTH};
pub use parse::parse_signature;
pub use sign::{sign_request, SignedHeaders, LABEL};
pub use signature::{
    check_created, Component, ParsedSignature, ALGORITHM, MAX_CLOCK_SKEW_SECONDS, MAX_NONCE_CHARS,
    MIN_NONCE_BYTES,
};
