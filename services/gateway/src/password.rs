//! Operator passwords: argon2id with the crate's default parameters, kept as a PHC string.
//! Hashing and verifying take tens of milliseconds of CPU and 19 MiB of memory each, so both
//! run on the blocking pool, and at most [`MAX_CONCURRENT_HASHES`] at once: forty sign-ins
//! posted together queue for a turn (a sign-in that waits longer than [`HASH_QUEUE_WAIT`] is
//! answered `503` with `Retry-After`) instead of taking forty times the memory and every core.
//! A password never reaches a log line, an error message or a `Debug` output.

use argon2::{
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use rand::RngCore;
use std::{
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        OnceLock,
    },
    time::Duration,
};
use tokio::sync::Semaphore;

/// Argon2 computations (verifications and hashes) the gateway runs at once, at most.
pub const MAX_CONCURRENT_HASHES: usize = 2;
/// How long a sign-in waits for a turn to verify before it is told to come back.
pub const HASH_QUEUE_WAIT: Duration = Duration::from_secs(3);
/// The `Retry-After` of a sign-in that found no turn, in seconds.
pub const BUSY_RETRY_AFTER_SECS: u64 = 2;

static TURNS: Semaphore = Semaphore::const_new(MAX_CONCURRENT_HASHES);
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// No turn to verify came within [`HASH_QUEUE_WAIT`]: too many sign-ins at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// The most argon2 computations this process has run at once (a gauge for tests and
/// `/metrics`: `capstan_gateway_password_hashes_running`).
pub fn most_hashes_at_once() -> usize {
    MOST_RUNNING.load(Ordering::SeqCst)
}

/// Runs `work` (an argon2 computation) on the blocking pool, counted in the gauge.
async fn counted<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(move || {
        let running = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        MOST_RUNNING.fetch_max(running, Ordering::SeqCst);
        metrics::gauge!("capstan_gateway_password_hashes_running").set(running as f64);
        let answer = work();
        let running = RUNNING.fetch_sub(1, Ordering::SeqCst) - 1;
        metrics::gauge!("capstan_gateway_password_hashes_running").set(running as f64);
        answer
    })
    .await
    .ok()
}

/// A turn of `turns`, waiting at most `wait`.
async fn turn(turns: &Semaphore, wait: Duration) -> Result<tokio::sync::SemaphorePermit<'_>, Busy> {
    match tokio::time::timeout(wait, turns.acquire()).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => {
            metrics::counter!("capstan_gateway_password_busy_total").increment(1);
            Err(Busy)
        }
    }
}

/// The shortest password an operator may choose.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password accepted (hashing a huge input is a cost anyone could impose).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A password as typed or generated. Its `Debug` does not show it.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn new(password: String) -> Password {
        Password(password)
    }

    /// A one-time password: 18 random bytes, base64url (24 characters).
    pub fn generate() -> Password {
        let mut bytes = [0u8; 18];
        rand::rng().fill_bytes(&mut bytes);
        Password(URL_SAFE_NO_PAD.encode(bytes))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Password(…)")
    }
}

/// Why a new password is not taken, in words for the person choosing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WeakPassword {
    #[error("Choose a password of at least {MIN_PASSWORD_CHARS} characters.")]
    TooShort,
    #[error("Choose a password of at most {MAX_PASSWORD_BYTES} bytes.")]
    TooLong,
    #[error("A password cannot start or end with a space.")]
    Padded,
}

/// Why a password could not be hashed: no turn came (the blocking pool stopped), or argon2
/// refused the salt or the hashing.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("password hashing stopped")]
    Stopped,
    #[error("salt: {0}")]
    Salt(argon2::password_hash::Error),
    #[error("argon2: {0}")]
    Argon2(argon2::password_hash::Error),
}

/// Whether a new password is taken: long enough, not too long, not padded with spaces.
pub fn check_new_password(password: &str) -> Result<(), WeakPassword> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(WeakPassword::TooShort);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(WeakPassword::TooLong);
    }
    if password.trim() != password {
        return Err(WeakPassword::Padded);
    }
    Ok(())
}

/// The argon2id PHC string of `password`, computed on the blocking pool in its turn (waiting
/// as long as it takes: only an operator choosing a password, or the CLI, hashes).
pub async fn hash(password: Password) -> Result<String, HashError> {
    let _turn = TURNS.acquire().await.map_err(|_| HashError::Stopped)?;
    counted(move || hash_now(password.expose()))
        .await
        .ok_or(HashError::Stopped)?
}

fn hash_now(password: &str) -> Result<String, HashError> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(HashError::Salt)?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(HashError::Argon2)
}

/// Whether `password` matches `stored`, once a turn comes ([`Busy`] when none comes within
/// [`HASH_QUEUE_WAIT`]). With no stored hash (an unknown operator, or one without a password)
/// a dummy hash is verified instead, so the answer takes as long either way and says nothing
/// about which names exist.
pub async fn verify(password: Password, stored: Option<String>) -> Result<bool, Busy> {
    verify_in_turn(&TURNS, HASH_QUEUE_WAIT, password, stored).await
}

async fn verify_in_turn(
    turns: &Semaphore,
    wait: Duration,
    password: Password,
    stored: Option<String>,
) -> Result<bool, Busy> {
    let _turn = turn(turns, wait).await?;
    let matches = counted(move || {
        let (phc, real) = match stored {
            Some(phc) => (phc, true),
            None => (dummy_hash().to_string(), false),
        };
        let matches = PasswordHash::new(&phc)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.expose().as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false);
        real && matches
    })
    .await
    .unwrap_or(false);
    Ok(matches)
}

/// Makes the dummy hash now (at start-up), so the first unknown name tried does not take
/// longer than the others.
pub fn warm_up() {
    let _ = dummy_hash();
}

/// A hash of a random password nobody knows, made once per process.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_now(Password::generate().expose()).unwrap_or_else(|_| {
            // Never expected; a malformed hash still costs a parse, which is the best left.
            "$argon2id$v=19$m=19456,t=2,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_is_an_argon2id_phc_string_that_verifies_only_its_password() {
        let hashed = hash(Password::new("correct horse battery".into()))
            .await
            .unwrap();
        assert!(hashed.starts_with("$argon2id$v=19$"), "{hashed}");
        assert!(!hashed.contains("correct horse"));
        assert_eq!(
            verify(
                Password::new("correct horse battery".into()),
                Some(hashed.clone())
            )
            .await,
            Ok(true)
        );
        assert_eq!(
            verify(Password::new("correct horse batterz".into()), Some(hashed)).await,
            Ok(false)
        );
        assert_eq!(
            verify(Password::new("anything".into()), None).await,
            Ok(false)
        );
        assert_eq!(
            verify(Password::new("x".into()), Some("not a hash".into())).await,
            Ok(false)
        );
    }

    #[tokio::test]
    async fn a_verification_that_finds_no_turn_in_time_is_busy_and_checks_nothing() {
        let turns = Semaphore::new(1);
        let held = turns.acquire().await.unwrap();
        let started = std::time::Instant::now();
        let answer = verify_in_turn(
            &turns,
            Duration::from_millis(100),
            Password::new("anything".into()),
            None,
        )
        .await;
        assert_eq!(answer, Err(Busy));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "it waited only briefly"
        );
        drop(held);
        assert_eq!(
            verify_in_turn(
                &turns,
                Duration::from_millis(100),
                Password::new("x".into()),
                None
            )
            .await,
            Ok(false)
        );
    }

    #[test]
    fn generated_passwords_differ_and_never_show_in_debug() {
        let one = Password::generate();
        assert_eq!(one.expose().len(), 24);
        assert_ne!(one.expose(), Password::generate().expose());
        assert_eq!(format!("{one:?}"), "Password(…)");
        assert!(check_new_password(one.expose()).is_ok());
    }

    #[test]
    fn new_passwords_are_long_enough_bounded_and_untrimmed() {
        assert!(check_new_password("short").is_err());
        assert!(check_new_password(&"a".repeat(12)).is_ok());
        assert!(check_new_password(&"a".repeat(2000)).is_err());
        assert!(check_new_password(" aaaaaaaaaaaaa").is_err());
    }
}
