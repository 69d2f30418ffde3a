//! Targets' storage credentials sealed at rest (BK-04) with the plane's one sealer
//! (`capstan-seal`: ChaCha20-Poly1305, a fresh nonce each time) under the key
//! `CAPSTAN__BACKUPS__SEAL_KEY_FILE` names. The credentials are sealed as JSON; the target's id
//! is the associated data (`capstan.backups.target.<id>`), so a sealed value moved to another
//! row does not open.

use secrecy::ExposeSecret;
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
    #[error("the system's random source failed, so the credentials were not sealed")]
    NoRandomness,
}

impl From<capstan_seal::SealError> for SealError {
    fn from(error: capstan_seal::SealError) -> SealError {
        match error {
            capstan_seal::SealError::NoKey => SealError::NoKey,
            capstan_seal::SealError::DoesNotOpen => SealError::DoesNotOpen,
            capstan_seal::SealError::NoRandomness => SealError::NoRandomness,
        }
    }
}

/// The seal key.
#[derive(Clone)]
pub struct Sealer {
    sealer: capstan_seal::Sealer,
    /// The file it was read from, for the Targets page (never the key).
    file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sealer.fmt(formatter)
    }
}

fn aad(target_id: i64) -> String {
    format!("capstan.backups.target.{target_id}")
}

impl Sealer {
    pub fn new(key: Option<[u8; 32]>) -> Sealer {
        Sealer {
            sealer: capstan_seal::Sealer::new(key),
            file: None,
        }
    }

    /// The sealer, saying which file its key was read from.
    pub fn read_from(self, file: Option<std::path::PathBuf>) -> Sealer {
        Sealer { file, ..self }
    }

    /// Where the key is, for the operator who must keep a copy of it.
    pub fn view(&self) -> capstan_events::backups::rpc::SealKeyView {
        capstan_events::backups::rpc::SealKeyView {
            set: self.has_key(),
            file: self
                .file
                .as_ref()
                .filter(|_| self.has_key())
                .map(|file| file.display().to_string()),
        }
    }

    pub fn has_key(&self) -> bool {
        self.sealer.has_key()
    }

    /// Seals `credentials` for target `target_id`.
    pub fn seal(&self, target_id: i64, credentials: &Credentials) -> Result<Vec<u8>, SealError> {
        let plain = secrecy::SecretSlice::from(
            serde_json::to_vec(credentials).map_err(|_| SealError::DoesNotOpen)?,
        );
        Ok(self.sealer.seal(&aad(target_id), plain.expose_secret())?)
    }

    /// Opens what [`Sealer::seal`] sealed for the same target.
    pub fn open(&self, target_id: i64, sealed: &[u8]) -> Result<Credentials, SealError> {
        let plain = self.sealer.open(&aad(target_id), sealed)?;
        serde_json::from_slice(plain.expose_secret()).map_err(|_| SealError::DoesNotOpen)
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
        assert!(!format!("{sealer:?}").contains('7'));
    }

    /// Sealed by this service's own sealer before the plane's secrets moved to one
    /// (`capstan-seal`): target 3's credentials under the key 0x42 × 32 still open, and only
    /// for target 3.
    #[test]
    fn bk_04_credentials_sealed_before_the_one_sealer_still_open() {
        let sealed: Vec<u8> = FIXTURE
            .as_bytes()
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect();
        let sealer = Sealer::new(Some([0x42; 32]));
        assert_eq!(
            sealer.open(3, &sealed).unwrap(),
            Credentials {
                access_key: "AKIAOLDFIXTURE".into(),
                secret_key: "old-secret-value".into(),
            }
        );
        assert_eq!(sealer.open(4, &sealed), Err(SealError::DoesNotOpen));
    }

    const FIXTURE: &str = "5aa8123b3addfd249ece368864739281ed424c6e25656971f82cae60ec65de4815cc5a72f1e01489f4154decb7fddef4db1ad954d60c02dc91004b33f005252e21868097569bce0b9f596f359012d2372ccfbff9b63c015404fbc3";
}
