//! The keys of the node's backups (BK-22, BK-23): the site key, an age X25519 identity the
//! node generates and keeps in its state directory (0600; disposable: the owner's recovery key
//! still opens everything), and the owner's recovery key, a recipient set on the node with
//! `capstan-agent recovery-key set age1...` and proven by decrypting a challenge with stock
//! `age`. Neither secret ever leaves the node; the plane's own key is never a recipient.

use age::secrecy::ExposeSecret;
use chrono::Utc;
use rand::RngCore;
use std::{io::Write, str::FromStr};

use crate::{
    domain::backup::{sha256_hex, RecoveryKey},
    state::{StateDir, StateError},
};

/// What went wrong with the site key or the owner's recovery key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the site key cannot be written: {0}")]
    SiteKeyUnwritable(#[source] StateError),
    #[error("the site key: {0}")]
    SiteKeyUnreadable(#[source] StateError),
    #[error("{SITE_KEY} holds no AGE-SECRET-KEY-1 line")]
    NoIdentityLine,
    #[error("{SITE_KEY} does not hold a valid age identity")]
    BadIdentity,
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{RECOVERY_KEY} cannot be read: {0}")]
    BadRecoveryKey(#[source] serde_json::Error),
    #[error("that is not an age X25519 public key (age1..., as age-keygen prints it)")]
    NotARecipient,
    #[error(
        "no recovery key is set on this node; run capstan-agent recovery-key set age1... first"
    )]
    NoRecoveryKey,
    #[error("the recovery key is already proven")]
    AlreadyProven,
    #[error("that is not the answer to the challenge; decrypt it with: age -d -i <your key file> recovery_challenge.age")]
    WrongAnswer,
    #[error(transparent)]
    Encrypt(#[from] age::EncryptError),
    #[error(transparent)]
    Write(#[from] std::io::Error),
    #[error(transparent)]
    NotText(#[from] std::string::FromUtf8Error),
}

/// The site key file (the `AGE-SECRET-KEY-1...` line, as `age-keygen` writes it).
pub const SITE_KEY: &str = "backup_site_key";
/// The owner's recovery key and where its proof stands.
pub const RECOVERY_KEY: &str = "recovery_key.json";
/// The challenge `recovery-key set` writes (ASCII-armored age, for the owner to decrypt).
pub const RECOVERY_CHALLENGE: &str = "recovery_challenge.age";

/// The site key, generated (0600) when the node has none.
pub fn site_key(state: &StateDir) -> Result<age::x25519::Identity, KeyError> {
    if let Some(identity) = read_site_key(state)? {
        return Ok(identity);
    }
    let identity = age::x25519::Identity::generate();
    let text = format!(
        "# created: {}\n# public key: {}\n{}\n",
        Utc::now().to_rfc3339(),
        identity.to_public(),
        identity.to_string().expose_secret()
    );
    state
        .write(SITE_KEY, text.as_bytes(), 0o600)
        .map_err(KeyError::SiteKeyUnwritable)?;
    Ok(identity)
}

/// The site key if the node has one; a file another user could read is refused.
pub fn read_site_key(state: &StateDir) -> Result<Option<age::x25519::Identity>, KeyError> {
    let Some(bytes) = state
        .read_secret(SITE_KEY)
        .map_err(KeyError::SiteKeyUnreadable)?
    else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("AGE-SECRET-KEY-1"))
        .ok_or(KeyError::NoIdentityLine)?;
    age::x25519::Identity::from_str(line)
        .map(Some)
        .map_err(|_| KeyError::BadIdentity)
}

/// Whether `text` is an age X25519 recipient.
pub fn recipient_parses(text: &str) -> bool {
    age::x25519::Recipient::from_str(text).is_ok()
}

/// The owner's recovery key as the node holds it; an untrusted or unreadable file is an error.
pub fn recovery_key(state: &StateDir) -> Result<Option<RecoveryKey>, KeyError> {
    let bytes = match state.read_deciding(RECOVERY_KEY) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(KeyError::BadRecoveryKey)
}

/// The proven recovery recipient, if any (what a backup is sealed to besides the site key).
pub fn proven_recovery_recipient(state: &StateDir) -> Option<age::x25519::Recipient> {
    match recovery_key(state) {
        Ok(Some(key)) if key.state == "proven" => {
            age::x25519::Recipient::from_str(&key.recipient).ok()
        }
        _ => None,
    }
}

/// `capstan-agent recovery-key set age1...`: writes a challenge encrypted to the key and
/// records the key as pending. Returns the armored challenge for the owner to decrypt.
pub fn set_recovery_key(state: &StateDir, recipient_text: &str) -> Result<String, KeyError> {
    let recipient_text = recipient_text.trim();
    let recipient =
        age::x25519::Recipient::from_str(recipient_text).map_err(|_| KeyError::NotARecipient)?;
    let mut secret = [0u8; 16];
    rand::rng().fill_bytes(&mut secret);
    let answer: String = secret.iter().map(|byte| format!("{byte:02x}")).collect();
    let challenge = encrypt_armored(&recipient, format!("{answer}\n").as_bytes())?;
    let key = RecoveryKey {
        recipient: recipient.to_string(),
        state: "pending".into(),
        answer_sha256: sha256_hex(answer.as_bytes()),
        set_at: Utc::now(),
        proven_at: None,
    };
    state.write(RECOVERY_CHALLENGE, challenge.as_bytes(), 0o600)?;
    state.write_json(RECOVERY_KEY, &key, 0o600)?;
    Ok(challenge)
}

/// `capstan-agent recovery-key prove <answer>`: completes the challenge. A wrong answer
/// changes nothing.
pub fn prove_recovery_key(state: &StateDir, answer: &str) -> Result<RecoveryKey, KeyError> {
    let mut key = recovery_key(state)?.ok_or(KeyError::NoRecoveryKey)?;
    if key.state == "proven" {
        return Err(KeyError::AlreadyProven);
    }
    if sha256_hex(answer.trim().as_bytes()) != key.answer_sha256 {
        return Err(KeyError::WrongAnswer);
    }
    key.state = "proven".into();
    key.proven_at = Some(Utc::now());
    state.write_json(RECOVERY_KEY, &key, 0o600)?;
    let _ = state.remove(RECOVERY_CHALLENGE);
    Ok(key)
}

fn encrypt_armored(
    recipient: &age::x25519::Recipient,
    plaintext: &[u8],
) -> Result<String, KeyError> {
    let encryptor =
        age::Encryptor::with_recipients(std::iter::once(recipient as &dyn age::Recipient))?;
    let mut armored = Vec::new();
    let armor =
        age::armor::ArmoredWriter::wrap_output(&mut armored, age::armor::Format::AsciiArmor)?;
    let mut writer = encryptor.wrap_output(armor)?;
    writer.write_all(plaintext)?;
    writer.finish().and_then(|armor| armor.finish())?;
    Ok(String::from_utf8(armored)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> (tempfile::TempDir, StateDir) {
        let parent = tempfile::tempdir().unwrap();
        let state = StateDir::open(&parent.path().join("state")).unwrap();
        (parent, state)
    }

    fn decrypt(identity: &age::x25519::Identity, armored: &str) -> String {
        let reader = age::armor::ArmoredReader::new(armored.as_bytes());
        let decryptor = age::Decryptor::new(reader).unwrap();
        let mut plain = String::new();
        std::io::Read::read_to_string(
            &mut decryptor
                .decrypt(std::iter::once(identity as &dyn age::Identity))
                .unwrap(),
            &mut plain,
        )
        .unwrap();
        plain
    }

    #[test]
    fn bk_22_a_recovery_key_is_proven_only_by_the_answer_its_owner_decrypts() {
        let (_parent, state) = scratch();
        let owner = age::x25519::Identity::generate();
        let challenge = set_recovery_key(&state, &owner.to_public().to_string()).unwrap();
        assert!(challenge.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"));
        assert_eq!(recovery_key(&state).unwrap().unwrap().state, "pending");
        assert!(proven_recovery_recipient(&state).is_none());
        let wrong = prove_recovery_key(&state, "0123").unwrap_err();
        assert!(wrong.to_string().contains("not the answer"), "{wrong}");
        assert_eq!(recovery_key(&state).unwrap().unwrap().state, "pending");
        let answer = decrypt(&owner, &challenge);
        let proven = prove_recovery_key(&state, &answer).unwrap();
        assert_eq!(proven.state, "proven");
        assert_eq!(
            proven_recovery_recipient(&state).unwrap().to_string(),
            owner.to_public().to_string()
        );
        assert!(!state.file(RECOVERY_CHALLENGE).exists());
    }

    #[test]
    fn bk_22_what_is_not_an_age_recipient_is_refused_and_changes_nothing() {
        let (_parent, state) = scratch();
        for bad in ["ssh-ed25519 AAAA", "age1notakey", ""] {
            let error = set_recovery_key(&state, bad).unwrap_err();
            assert!(
                error.to_string().contains("not an age X25519 public key"),
                "{error}"
            );
        }
        assert_eq!(recovery_key(&state).unwrap(), None);
        assert!(prove_recovery_key(&state, "x")
            .unwrap_err()
            .to_string()
            .contains("no recovery key"));
    }

    #[test]
    fn bk_23_the_site_key_is_made_once_0600_and_a_readable_one_is_refused() {
        let (_parent, state) = scratch();
        let first = site_key(&state).unwrap();
        let again = site_key(&state).unwrap();
        assert_eq!(first.to_public().to_string(), again.to_public().to_string());
        let mode = std::fs::metadata(state.file(SITE_KEY))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(state.file(SITE_KEY), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(read_site_key(&state)
            .err()
            .unwrap()
            .to_string()
            .contains("0600"));
    }
}
