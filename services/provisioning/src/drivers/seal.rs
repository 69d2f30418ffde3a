//! Cloud accounts' API tokens sealed at rest (issue 29) with ChaCha20-Poly1305 (`ring`, the AEAD
//! the workspace already builds for TLS) under the key `CAPSTAN__PROVISIONING__SEAL_KEY_FILE`
//! names. A sealed token is a fresh random 12-byte nonce, then the ciphertext and its tag; the
//! account's id is the associated data, so a sealed token moved to another row does not open.
//! (The backups service seals its targets' credentials the same way; the two belong in one
//! place in `libs/` when a third needs it.)

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};

/// Why sealing or opening failed (never says more than that).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no seal key is set (CAPSTAN__PROVISIONING__SEAL_KEY_FILE), so account tokens cannot be sealed or opened")]
    NoKey,
    #[error("the sealed token does not open with this seal key (changed key, or damaged row)")]
    DoesNotOpen,
}

/// The seal key.
#[derive(Clone)]
pub struct Sealer {
    key: Option<[u8; 32]>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Sealer(key set: {})", self.key.is_some())
    }
}

fn aad(account_id: i64) -> String {
    format!("capstan.provisioning.account.{account_id}")
}

/// A provision's root password is sealed to the provision (PV-05), never opening as a token.
fn root_aad(provision_id: i64) -> String {
    format!("capstan.provisioning.provision.{provision_id}.root")
}

impl Sealer {
    pub fn new(key: Option<[u8; 32]>) -> Sealer {
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

    /// Seals `token` for account `account_id`.
    pub fn seal(&self, account_id: i64, token: &SecretString) -> Result<Vec<u8>, SealError> {
        self.seal_to(&aad(account_id), token)
    }

    /// Opens what [`Sealer::seal`] sealed for the same account.
    pub fn open(&self, account_id: i64, sealed: &[u8]) -> Result<SecretString, SealError> {
        self.open_from(&aad(account_id), sealed)
    }

    /// Seals provision `provision_id`'s root password (held only while the bootstrap needs it).
    pub fn seal_root_password(
        &self,
        provision_id: i64,
        password: &SecretString,
    ) -> Result<Vec<u8>, SealError> {
        self.seal_to(&root_aad(provision_id), password)
    }

    pub fn open_root_password(
        &self,
        provision_id: i64,
        sealed: &[u8],
    ) -> Result<SecretString, SealError> {
        self.open_from(&root_aad(provision_id), sealed)
    }

    fn seal_to(&self, aad: &str, token: &SecretString) -> Result<Vec<u8>, SealError> {
        let key = self.key()?;
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::NoKey)?;
        let mut sealed = token.expose_secret().as_bytes().to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut sealed,
        )
        .map_err(|_| SealError::DoesNotOpen)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn open_from(&self, aad: &str, sealed: &[u8]) -> Result<SecretString, SealError> {
        let key = self.key()?;
        if sealed.len() < NONCE_LEN {
            return Err(SealError::DoesNotOpen);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::DoesNotOpen)?;
        let mut body = body.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut body)
            .map_err(|_| SealError::DoesNotOpen)?;
        let text = std::str::from_utf8(plain).map_err(|_| SealError::DoesNotOpen)?;
        Ok(SecretString::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // PV-05: a provision's root password is sealed to the provision; it never opens as the
    // token of the account with the same number, nor for another provision.
    #[test]
    fn pv_05_a_root_password_opens_only_as_its_provisions_password() {
        let sealer = Sealer::new(Some([9u8; 32]));
        let password = SecretString::from("Root-Pass-123");
        let sealed = sealer.seal_root_password(3, &password).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("Root-Pass"));
        assert_eq!(
            sealer
                .open_root_password(3, &sealed)
                .unwrap()
                .expose_secret(),
            "Root-Pass-123"
        );
        assert!(sealer.open(3, &sealed).is_err());
        assert!(sealer.open_root_password(4, &sealed).is_err());
    }

    #[test]
    fn a_token_is_sealed_and_opens_only_for_its_account_and_key() {
        let sealer = Sealer::new(Some([7u8; 32]));
        let token = SecretString::from("linode-token-abcdef");
        let sealed = sealer.seal(3, &token).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("linode-token"));
        assert_eq!(
            sealer.open(3, &sealed).unwrap().expose_secret(),
            "linode-token-abcdef"
        );
        assert_eq!(sealer.open(4, &sealed).unwrap_err(), SealError::DoesNotOpen);
        assert_eq!(
            Sealer::new(Some([8u8; 32])).open(3, &sealed).unwrap_err(),
            SealError::DoesNotOpen
        );
        let mut damaged = sealed.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(
            sealer.open(3, &damaged).unwrap_err(),
            SealError::DoesNotOpen
        );
        assert_ne!(
            sealer.seal(3, &token).unwrap(),
            sealed,
            "a fresh nonce each time"
        );
        assert_eq!(Sealer::new(None).seal(3, &token), Err(SealError::NoKey));
        assert!(!format!("{sealer:?}").contains('7'));
    }
}
