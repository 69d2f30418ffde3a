//! Targets' storage credentials sealed at rest (BK-04) with ChaCha20-Poly1305 (`ring`, the
//! AEAD the workspace already builds for TLS) under the key `CAPSTAN__BACKUPS__SEAL_KEY_FILE`
//! names. A sealed value is a fresh random 12-byte nonce, then the ciphertext and its tag; the
//! target's id is the associated data, so a sealed value moved to another row does not open.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// A target's keys. Never logged: its `Debug` shows the access key's length only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Credentials(<sealed>)")
    }
}

/// Why sealing or opening failed (never says more than that).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no seal key is set (CAPSTAN__BACKUPS__SEAL_KEY_FILE), so target credentials cannot be sealed or opened")]
    NoKey,
    #[error("the sealed credentials do not open with this seal key (changed key, or damaged row)")]
    DoesNotOpen,
}

/// The seal key.
#[derive(Clone)]
pub struct Sealer {
    key: Option<[u8; 32]>,
    /// The file it was read from, for the Targets page (never the key).
    file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Sealer(key set: {})", self.key.is_some())
    }
}

fn aad(target_id: i64) -> String {
    format!("capstan.backups.target.{target_id}")
}

impl Sealer {
    pub fn new(key: Option<[u8; 32]>) -> Sealer {
        Sealer { key, file: None }
    }

    /// The sealer, saying which file its key was read from.
    pub fn read_from(self, file: Option<std::path::PathBuf>) -> Sealer {
        Sealer { file, ..self }
    }

    /// Where the key is, for the operator who must keep a copy of it.
    pub fn view(&self) -> capstan_events::backups::rpc::SealKeyView {
        capstan_events::backups::rpc::SealKeyView {
            set: self.key.is_some(),
            file: self
                .file
                .as_ref()
                .filter(|_| self.key.is_some())
                .map(|file| file.display().to_string()),
        }
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    fn key(&self) -> Result<LessSafeKey, SealError> {
        let bytes = self.key.as_ref().ok_or(SealError::NoKey)?;
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes).map_err(|_| SealError::NoKey)?;
        Ok(LessSafeKey::new(unbound))
    }

    /// Seals `credentials` for target `target_id`.
    pub fn seal(&self, target_id: i64, credentials: &Credentials) -> Result<Vec<u8>, SealError> {
        let key = self.key()?;
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::NoKey)?;
        let mut sealed = serde_json::to_vec(credentials).map_err(|_| SealError::DoesNotOpen)?;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(target_id).as_bytes()),
            &mut sealed,
        )
        .map_err(|_| SealError::DoesNotOpen)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Opens what [`Sealer::seal`] sealed for the same target.
    pub fn open(&self, target_id: i64, sealed: &[u8]) -> Result<Credentials, SealError> {
        let key = self.key()?;
        if sealed.len() < NONCE_LEN {
            return Err(SealError::DoesNotOpen);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::DoesNotOpen)?;
        let mut body = body.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(aad(target_id).as_bytes()), &mut body)
            .map_err(|_| SealError::DoesNotOpen)?;
        serde_json::from_slice(plain).map_err(|_| SealError::DoesNotOpen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            access_key: "AKIAEXAMPLE".into(),
            secret_key: "very-secret-value".into(),
        }
    }

    #[test]
    fn bk_04_credentials_are_sealed_and_open_only_for_their_target_and_key() {
        let sealer = Sealer::new(Some([7u8; 32]));
        let sealed = sealer.seal(3, &credentials()).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("very-secret-value"));
        assert_eq!(sealer.open(3, &sealed).unwrap(), credentials());
        // Another row, another key, a flipped byte: none opens.
        assert_eq!(sealer.open(4, &sealed), Err(SealError::DoesNotOpen));
        assert_eq!(
            Sealer::new(Some([8u8; 32])).open(3, &sealed),
            Err(SealError::DoesNotOpen)
        );
        let mut damaged = sealed.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(sealer.open(3, &damaged), Err(SealError::DoesNotOpen));
        // Two seals of the same value differ (fresh nonce).
        assert_ne!(sealer.seal(3, &credentials()).unwrap(), sealed);
        assert_eq!(
            Sealer::new(None).seal(3, &credentials()),
            Err(SealError::NoKey)
        );
        assert_eq!(format!("{:?}", credentials()), "Credentials(<sealed>)");
    }
}
