//! One seal for the plane's secrets at rest (issue 29): the backups service's targets'
//! credentials and the provisioning service's cloud account tokens and root passwords.
//!
//! A sealed value is ChaCha20-Poly1305 (`ring`, the AEAD the workspace already builds for TLS)
//! under a 32-byte key: a fresh random 12-byte nonce, then the ciphertext and its 16-byte tag.
//! The associated data names what is sealed and where it belongs (`capstan.backups.target.3`),
//! so a sealed value moved to another row, or read as another kind of secret, does not open.
//! The services choose those names; this crate never changes the layout, so what either
//! service sealed before keeps opening (the fixtures in the tests below and in each service).
//!
//! [`key_file`] holds the keys' settings shared by both services: the 64 hex digits a key is
//! written in, and the file `capstan all` makes when no key is set ([`OwnSealKey`]).
#![forbid(unsafe_code)]

pub mod key_file;

pub use key_file::{parse_seal_key, OwnSealKey, DEFAULT_STATE_DIR};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretSlice, SecretString};

/// The length of a seal key.
pub const KEY_LEN: usize = 32;

/// Why sealing or opening failed (never says more than that; each service words it for its
/// operator, naming its own key setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no seal key is set")]
    NoKey,
    #[error("the sealed value does not open with this seal key (changed key, or damaged value)")]
    DoesNotOpen,
    #[error("the system's random source failed, so nothing was sealed")]
    NoRandomness,
}

/// A seal key, or none (a plane without one seals and opens nothing). Its `Debug` says only
/// whether a key is set.
#[derive(Clone)]
pub struct Sealer {
    key: Option<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Sealer(key set: {})", self.key.is_some())
    }
}

impl Sealer {
    pub fn new(key: Option<[u8; KEY_LEN]>) -> Sealer {
        Sealer { key }
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    fn key(&self) -> Result<LessSafeKey, SealError> {
        let bytes = self.key.as_ref().ok_or(SealError::NoKey)?;
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes).map_err(|_| SealError::NoKey)?;
        Ok(LessSafeKey::new(unbound))
    }

    /// Seals `plain` to `associated` (what it is and where it belongs): nonce, ciphertext, tag.
    pub fn seal(&self, associated: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let key = self.key()?;
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::NoRandomness)?;
        let mut body = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(associated.as_bytes()),
            &mut body,
        )
        .map_err(|_| SealError::DoesNotOpen)?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// Opens what [`Sealer::seal`] sealed to the same `associated` under the same key.
    pub fn open(&self, associated: &str, sealed: &[u8]) -> Result<SecretSlice<u8>, SealError> {
        let key = self.key()?;
        if sealed.len() < NONCE_LEN {
            return Err(SealError::DoesNotOpen);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::DoesNotOpen)?;
        let mut body = body.to_vec();
        let plain_len = key
            .open_in_place(nonce, Aad::from(associated.as_bytes()), &mut body)
            .map_err(|_| SealError::DoesNotOpen)?
            .len();
        body.truncate(plain_len);
        Ok(SecretSlice::from(body))
    }

    /// Seals a secret text (a token, a password) to `associated`.
    pub fn seal_secret(
        &self,
        associated: &str,
        secret: &SecretString,
    ) -> Result<Vec<u8>, SealError> {
        self.seal(associated, secret.expose_secret().as_bytes())
    }

    /// Opens a text [`Sealer::seal_secret`] sealed; bytes that are not UTF-8 do not open.
    pub fn open_secret(&self, associated: &str, sealed: &[u8]) -> Result<SecretString, SealError> {
        let plain = self.open(associated, sealed)?;
        let text =
            std::str::from_utf8(plain.expose_secret()).map_err(|_| SealError::DoesNotOpen)?;
        Ok(SecretString::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|index| u8::from_str_radix(&text[index..index + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_value_opens_only_with_its_associated_data_and_key() {
        let sealer = Sealer::new(Some([7u8; 32]));
        let sealed = sealer
            .seal("capstan.test.thing.3", b"secret-bytes")
            .unwrap();
        assert_eq!(sealed.len(), NONCE_LEN + b"secret-bytes".len() + 16);
        assert!(!String::from_utf8_lossy(&sealed).contains("secret-bytes"));
        assert_eq!(
            sealer
                .open("capstan.test.thing.3", &sealed)
                .unwrap()
                .expose_secret(),
            b"secret-bytes"
        );
        assert_eq!(
            sealer.open("capstan.test.thing.4", &sealed).unwrap_err(),
            SealError::DoesNotOpen
        );
        assert_eq!(
            Sealer::new(Some([8u8; 32]))
                .open("capstan.test.thing.3", &sealed)
                .unwrap_err(),
            SealError::DoesNotOpen
        );
        for damaged_at in [0, NONCE_LEN, sealed.len() - 1] {
            let mut damaged = sealed.clone();
            damaged[damaged_at] ^= 1;
            assert_eq!(
                sealer.open("capstan.test.thing.3", &damaged).unwrap_err(),
                SealError::DoesNotOpen,
                "byte {damaged_at} flipped"
            );
        }
        assert_eq!(
            sealer
                .open("capstan.test.thing.3", &sealed[..5])
                .unwrap_err(),
            SealError::DoesNotOpen,
            "shorter than a nonce"
        );
        assert_ne!(
            sealer
                .seal("capstan.test.thing.3", b"secret-bytes")
                .unwrap(),
            sealed,
            "a fresh nonce each time"
        );
    }

    #[test]
    fn without_a_key_nothing_is_sealed_or_opened_and_the_key_is_never_shown() {
        let none = Sealer::new(None);
        assert!(!none.has_key());
        assert_eq!(none.seal("a", b"x").unwrap_err(), SealError::NoKey);
        assert_eq!(none.open("a", &[0u8; 40]).unwrap_err(), SealError::NoKey);
        let sealer = Sealer::new(Some([0xab; 32]));
        assert_eq!(format!("{sealer:?}"), "Sealer(key set: true)");
        assert_eq!(format!("{none:?}"), "Sealer(key set: false)");
    }

    #[test]
    fn a_secret_text_round_trips_and_bytes_that_are_not_text_do_not_open_as_one() {
        let sealer = Sealer::new(Some([1u8; 32]));
        let sealed = sealer
            .seal_secret("capstan.test.token.1", &SecretString::from("tök-en"))
            .unwrap();
        assert_eq!(
            sealer
                .open_secret("capstan.test.token.1", &sealed)
                .unwrap()
                .expose_secret(),
            "tök-en"
        );
        let binary = sealer.seal("capstan.test.token.1", &[0xff, 0xfe]).unwrap();
        assert_eq!(
            sealer
                .open_secret("capstan.test.token.1", &binary)
                .unwrap_err(),
            SealError::DoesNotOpen
        );
    }

    /// Sealed by provisioning's own sealer before it moved here (account 3's token under the
    /// key 0x42 × 32): the layout and the associated data are unchanged, so it still opens.
    #[test]
    fn a_value_sealed_before_the_move_still_opens() {
        let sealed = hex("306ee02c263b8a0120e517ac692f66fc798d0fcf68847955078b4c854dbee484397af43ba3096d5abcdfab4d");
        let sealer = Sealer::new(Some([0x42; 32]));
        assert_eq!(
            sealer
                .open_secret("capstan.provisioning.account.3", &sealed)
                .unwrap()
                .expose_secret(),
            "old-linode-token"
        );
    }
}
