//! Cloud accounts' API tokens and provisions' root passwords sealed at rest (issue 29, PV-05)
//! with the plane's one sealer (`capstan-seal`: ChaCha20-Poly1305, a fresh nonce each time)
//! under the key `CAPSTAN__PROVISIONING__SEAL_KEY_FILE` names. The associated data names what
//! is sealed and whose it is (`capstan.provisioning.account.<id>`,
//! `capstan.provisioning.provision.<id>.root`), so a sealed value moved to another row, or read
//! as the other kind, does not open.

use secrecy::SecretString;

/// Why sealing or opening failed (never says more than that).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no seal key is set (CAPSTAN__PROVISIONING__SEAL_KEY_FILE), so account tokens cannot be sealed or opened")]
    NoKey,
    #[error("the sealed token does not open with this seal key (changed key, or damaged row)")]
    DoesNotOpen,
    #[error("the system's random source failed, so nothing was sealed")]
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

/// The seal key (its `Debug` says only whether one is set).
#[derive(Clone, Debug)]
pub struct Sealer {
    sealer: capstan_seal::Sealer,
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
        Sealer {
            sealer: capstan_seal::Sealer::new(key),
        }
    }

    pub fn has_key(&self) -> bool {
        self.sealer.has_key()
    }

    /// Seals `token` for account `account_id`.
    pub fn seal(&self, account_id: i64, token: &SecretString) -> Result<Vec<u8>, SealError> {
        Ok(self.sealer.seal_secret(&aad(account_id), token)?)
    }

    /// Opens what [`Sealer::seal`] sealed for the same account.
    pub fn open(&self, account_id: i64, sealed: &[u8]) -> Result<SecretString, SealError> {
        Ok(self.sealer.open_secret(&aad(account_id), sealed)?)
    }

    /// Seals provision `provision_id`'s root password (held only while the bootstrap needs it).
    pub fn seal_root_password(
        &self,
        provision_id: i64,
        password: &SecretString,
    ) -> Result<Vec<u8>, SealError> {
        Ok(self.sealer.seal_secret(&root_aad(provision_id), password)?)
    }

    pub fn open_root_password(
        &self,
        provision_id: i64,
        sealed: &[u8],
    ) -> Result<SecretString, SealError> {
        Ok(self.sealer.open_secret(&root_aad(provision_id), sealed)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

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

    fn bytes(hex: &str) -> Vec<u8> {
        hex.as_bytes()
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    /// Sealed by this service's own sealer before the plane's secrets moved to one
    /// (`capstan-seal`), under the key 0x42 × 32: account 3's token and provision 5's root
    /// password still open, each only as what it is and whose it is (PV-05).
    #[test]
    fn pv_05_values_sealed_before_the_one_sealer_still_open() {
        let sealer = Sealer::new(Some([0x42; 32]));
        let token = bytes(OLD_TOKEN_OF_ACCOUNT_3);
        assert_eq!(
            sealer.open(3, &token).unwrap().expose_secret(),
            "old-linode-token"
        );
        assert_eq!(sealer.open(4, &token).unwrap_err(), SealError::DoesNotOpen);
        let root = bytes(OLD_ROOT_PASSWORD_OF_PROVISION_5);
        assert_eq!(
            sealer.open_root_password(5, &root).unwrap().expose_secret(),
            "Old-Root-Pass-5"
        );
        assert_eq!(sealer.open(5, &root).unwrap_err(), SealError::DoesNotOpen);
        assert!(sealer.open_root_password(3, &token).is_err());
    }

    const OLD_TOKEN_OF_ACCOUNT_3: &str =
        "306ee02c263b8a0120e517ac692f66fc798d0fcf68847955078b4c854dbee484397af43ba3096d5abcdfab4d";
    const OLD_ROOT_PASSWORD_OF_PROVISION_5: &str =
        "a55854195893bdd7eda74c2dc330804aa3af67561a8cb090152db8fd328d5ac9204cfda27400dcb5f9f2a9";
}
