//! Self-update rules (AG-24..AG-31; ARCHITECTURE.md "Agent updates"), without I/O: which keys
//! the agent trusts, what it checks in which order before it installs anything, the trial a
//! new binary is on, and the `update_state` it reports. `update.rs` does the fetching, the
//! probing and the renames these rules decide.

mod trial;

use std::time::Duration;

use capstan_signing::{
    release::{Artifact, ReleaseError, SignedRelease},
    PublicKey,
};
use serde::{Deserialize, Serialize};

pub use self::trial::{
    guard, on_deliberate_stop, on_start, parse_rejected, trial_passed, GuardRollBack, Guarded,
    Pending, Start, STARTS_WITHOUT_RECORD_ALLOWED,
};
use super::trust::{Distrust, FileFacts};

/// The release signing key compiled into this binary (standard base64), set at build time
/// with `CAPSTAN_RELEASE_KEY`. A build without one trusts only held keys, and with neither it
/// installs nothing (`unsigned_build`).
pub const COMPILED_RELEASE_KEY: Option<&str> = option_env!("CAPSTAN_RELEASE_KEY");
/// The release sequence this binary was built as, set at build time with
/// `CAPSTAN_AGENT_RELEASE_SEQUENCE` (a whole number: the `--sequence` its release is signed
/// with); 0, the default, for a build that is no release. It is the floor of the rollback
/// check: an agent with no `release.json` (a fresh install, or one whose state file was lost)
/// still never accepts metadata older than the release it runs. A value that is not a whole
/// number fails the build.
pub const BUILT_RELEASE_SEQUENCE: u64 = match option_env!("CAPSTAN_AGENT_RELEASE_SEQUENCE") {
    Some(text) => parse_sequence(text),
    None => 0,
};

/// A release sequence as the build gives it: decimal digits only, fitting in a `u64`.
const fn parse_sequence(text: &str) -> u64 {
    let digits = text.as_bytes();
    assert!(
        !digits.is_empty(),
        "CAPSTAN_AGENT_RELEASE_SEQUENCE must be a whole number, not empty"
    );
    let mut value: u64 = 0;
    let mut index = 0;
    while index < digits.len() {
        let digit = digits[index];
        assert!(
            digit.is_ascii_digit(),
            "CAPSTAN_AGENT_RELEASE_SEQUENCE must be a whole number (digits only)"
        );
        value = match value.checked_mul(10) {
            Some(value) => value,
            None => panic!("CAPSTAN_AGENT_RELEASE_SEQUENCE is too large"),
        };
        value = match value.checked_add((digit - b'0') as u64) {
            Some(value) => value,
            None => panic!("CAPSTAN_AGENT_RELEASE_SEQUENCE is too large"),
        };
        index += 1;
    }
    value
}

/// AG-29's `trialUptime`: a new version is trusted once a process running it has kept running
/// this long.
pub const TRIAL_UPTIME: Duration = Duration::from_secs(3 * 60);
/// How often the agent asks the plane what release is on offer, between jobs.
pub const CHECK_EVERY: Duration = Duration::from_secs(5 * 60);
/// How long the new binary has to answer `--version` (AG-26).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a binary on offer may be.
pub const MAX_BINARY_BYTES: u64 = 256 * 1024 * 1024;

/// AC-43's closed set, as the agent reports it in `update_state`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum UpdateState {
    /// Nothing is on offer.
    None,
    /// The release on offer is the version running.
    Current,
    /// A release will be installed: swapping now, or waiting for the running one's trial.
    UpdatePending,
    /// The release or its binary could not be fetched.
    FetchFailed,
    /// The metadata or the binary failed a check (signature, rollback, freeze, size, hash,
    /// `--version`).
    VerifyFailed,
    /// Not in the public log (AG-27; this plane keeps no log, so never reported).
    Unlogged,
    /// The release on offer is a version this machine rolled back (AG-29).
    VersionRejected,
    /// The agent holds no release key: it can verify nothing, so installs nothing.
    UnsignedBuild,
    /// The release has no binary for this machine's architecture.
    NoBinary,
}

impl UpdateState {
    /// Whether this state is a refusal (the plane opens `plane:agent_update_refused`).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            UpdateState::VerifyFailed | UpdateState::Unlogged | UpdateState::VersionRejected
        )
    }
}

/// A check's conclusion: the state, the version on offer, and in words why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub state: UpdateState,
    pub offered: Option<String>,
    pub reason: Option<String>,
}

impl Verdict {
    pub fn new(state: UpdateState, offered: Option<&str>, reason: Option<String>) -> Verdict {
        Verdict {
            state,
            offered: offered.map(str::to_string),
            reason,
        }
    }
}

/// The architecture this binary was built for, as releases name it.
pub fn this_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Some("linux-amd64"),
        "aarch64" => Some("linux-arm64"),
        _ => None,
    }
}

/// AG-28's rule for the held keys file: honoured only when it is a regular file (never a link)
/// owned by root and writable by nobody but its owner. Unlike the state directory's other
/// files, the agent's own user is not enough: a key added is trust added.
pub fn held_keys_file(facts: &FileFacts, path: &str) -> Result<(), Distrust> {
    if facts.is_symlink {
        return Err(Distrust::Link { path: path.into() });
    }
    if !facts.is_file {
        return Err(Distrust::NotAFile { path: path.into() });
    }
    if facts.uid != 0 {
        return Err(Distrust::ForeignOwner {
            path: path.into(),
            uid: facts.uid,
            agent_uid: 0,
        });
    }
    if facts.mode & 0o022 != 0 {
        return Err(Distrust::WritableByOthers {
            path: path.into(),
            mode: facts.mode,
        });
    }
    Ok(())
}

/// The held keys file's lines: one standard-base64 public key each; blank lines and `#`
/// comments are skipped, and a line that is not a key is named and skipped.
pub fn parse_held_keys(text: &str) -> (Vec<PublicKey>, Vec<String>) {
    let mut keys = Vec::new();
    let mut bad = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match PublicKey::from_base64(line) {
            Ok(key) if !keys.contains(&key) => keys.push(key),
            Ok(_) => {}
            Err(_) => bad.push(line.chars().take(60).collect()),
        }
    }
    (keys, bad)
}

/// What the agent remembers between checks and starts (the state directory's `release.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The highest sequence of any metadata it accepted.
    pub highest_sequence: u64,
}

/// What the checks need besides the metadata.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub trusted: &'a [PublicKey],
    pub accepted: &'a Accepted,
    /// The sequence this binary was built as ([`BUILT_RELEASE_SEQUENCE`]): the rollback
    /// check's floor whatever `release.json` says.
    pub built_sequence: u64,
    /// Unix seconds now.
    pub now: i64,
    pub running: &'a str,
    /// Versions this machine rolled back (`.rejected`).
    pub rejected: &'a [String],
    /// Whether the running version is still on trial.
    pub on_trial: bool,
    pub arch: Option<&'a str>,
}

/// What to do about metadata that passed the checks that need no download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Accept the metadata (its sequence becomes the highest accepted, its next key is held)
    /// and conclude with this verdict.
    Settle(Verdict),
    /// Accept the metadata and fetch this binary.
    Install(Artifact),
}

/// The checks on metadata, in order (AG-24; ARCHITECTURE.md): a key to check with at all,
/// the signature against the trusted keys (arbitrary software), a sequence not lower than the
/// highest accepted (rollback), not expired (freeze); then whether anything is to be done: the
/// version running (current), a version rolled back here (never reinstalled), a version still
/// on trial (nothing newer over it), a binary for this architecture. `Err` is a verdict that
/// refuses the metadata: its sequence is not recorded and its next key not held.
pub fn judge(document: &SignedRelease, context: &Context<'_>) -> Result<Plan, Verdict> {
    let release = &document.signed;
    let offered = Some(release.version.as_str());
    refused(document, context)?;
    if release.version == context.running {
        return Ok(Plan::Settle(Verdict::new(
            UpdateState::Current,
            offered,
            None,
        )));
    }
    if context.rejected.contains(&release.version) {
        return Ok(Plan::Settle(Verdict::new(
            UpdateState::VersionRejected,
            offered,
            Some(format!(
                "version {} was rolled back on this machine during its trial and is never installed again",
                release.version
            )),
        )));
    }
    if context.on_trial {
        return Ok(Plan::Settle(Verdict::new(
            UpdateState::UpdatePending,
            offered,
            Some(format!(
                "{} is still on trial; nothing is installed over it until it has run for its trial",
                context.running
            )),
        )));
    }
    match context.arch.and_then(|arch| release.binary(arch)) {
        Some(artifact) if artifact.size <= MAX_BINARY_BYTES => Ok(Plan::Install(artifact.clone())),
        Some(artifact) => Err(Verdict::new(
            UpdateState::VerifyFailed,
            offered,
            Some(format!(
                "the binary is {} bytes, more than the {MAX_BINARY_BYTES} an agent takes",
                artifact.size
            )),
        )),
        None => Ok(Plan::Settle(Verdict::new(
            UpdateState::NoBinary,
            offered,
            Some(format!(
                "the release has no binary for {}",
                context.arch.unwrap_or("this architecture")
            )),
        ))),
    }
}

/// The metadata's trust, in order: a key to check with at all, the signature against the
/// trusted keys (arbitrary software), a sequence not lower than the highest accepted
/// (rollback), not expired (freeze). `Err` refuses the metadata.
fn refused(document: &SignedRelease, context: &Context<'_>) -> Result<(), Verdict> {
    let release = &document.signed;
    let offered = Some(release.version.as_str());
    if context.trusted.is_empty() {
        return Err(Verdict::new(
            UpdateState::UnsignedBuild,
            offered,
            Some(
                "this agent was built without a release key and holds none, so it installs nothing"
                    .into(),
            ),
        ));
    }
    if let Err(error) = document.signed_by(context.trusted) {
        return Err(Verdict::new(
            UpdateState::VerifyFailed,
            offered,
            Some(format!("bad signature: {error}")),
        ));
    }
    let accepted = context.accepted.highest_sequence;
    if release.sequence < accepted.max(context.built_sequence) {
        let floor = if context.built_sequence > accepted {
            format!(
                "{}, the release this agent was built as",
                context.built_sequence
            )
        } else {
            format!("{accepted}, the highest this agent has accepted")
        };
        return Err(Verdict::new(
            UpdateState::VerifyFailed,
            offered,
            Some(format!(
                "rollback: the release's sequence {} is lower than {floor}",
                release.sequence
            )),
        ));
    }
    if release.expires_at <= context.now {
        return Err(Verdict::new(
            UpdateState::VerifyFailed,
            offered,
            Some(format!(
                "expired: the release metadata expired at {} (Unix seconds), so it may be a frozen copy",
                release.expires_at
            )),
        ));
    }
    Ok(())
}

/// The checks on the fetched binary (size, sha256, the signature over its raw bytes).
pub fn check_binary(
    artifact: &Artifact,
    bytes: &[u8],
    trusted: &[PublicKey],
    version: &str,
) -> Result<(), Verdict> {
    artifact
        .check("the binary", bytes, trusted)
        .map_err(|error| refusal(version, &error))
}

fn refusal(version: &str, error: &ReleaseError) -> Verdict {
    let what = match error {
        ReleaseError::WrongSize { .. } => "wrong size",
        ReleaseError::WrongHash { .. } => "wrong hash",
        ReleaseError::BadArtifactSignature { .. } => "bad signature",
        _ => "bad metadata",
    };
    Verdict::new(
        UpdateState::VerifyFailed,
        Some(version),
        Some(format!("{what}: {error}")),
    )
}

/// What `--version` must print: clap's `<name> <version>`.
pub fn version_line(version: &str) -> String {
    format!("capstan-agent {version}")
}

/// AG-26: the new binary's answer to `--version` (its exit status and what it printed)
/// against the metadata's version.
/// Why `binary --version` gave no answer at all.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("it did not answer within {} seconds", .0.as_secs())]
    Timeout(Duration),
    #[error(transparent)]
    NotRun(#[from] std::io::Error),
}

pub fn check_probe(
    answer: Result<(bool, String), ProbeError>,
    version: &str,
) -> Result<(), Verdict> {
    let refused = |reason: String| {
        Err(Verdict::new(
            UpdateState::VerifyFailed,
            Some(version),
            Some(format!("wrong --version: {reason}")),
        ))
    };
    match answer {
        Err(error) => refused(format!("the new binary could not be run: {error}")),
        Ok((false, _)) => refused("the new binary failed when asked --version".into()),
        Ok((true, printed)) if printed.trim() == version_line(version) => Ok(()),
        Ok((true, printed)) => refused(format!(
            "the new binary answered {:?}, the release says {version}",
            printed.trim().chars().take(80).collect::<String>()
        )),
    }
}
#[cfg(test)]
mod tests {
    use capstan_events::Word as _;

    use super::*;
    use capstan_signing::{
        release::{Release, SupportBundle},
        NodeKey,
    };
    use std::collections::BTreeMap;

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    fn document(signer: &NodeKey, version: &str, sequence: u64, expires_at: i64) -> SignedRelease {
        let mut binaries = BTreeMap::new();
        binaries.insert(
            "linux-amd64".to_string(),
            Artifact::describe("capstan-agent-linux-amd64", b"new binary", signer),
        );
        let _: Option<SupportBundle> = None;
        Release {
            version: version.into(),
            sequence,
            expires_at,
            binaries,
            support_bundle: None,
            next_key: None,
        }
        .sign(signer)
        .unwrap()
    }

    const NOW: i64 = 1_800_000_000;

    fn context<'a>(trusted: &'a [PublicKey], accepted: &'a Accepted) -> Context<'a> {
        Context {
            trusted,
            accepted,
            built_sequence: 0,
            now: NOW,
            running: "1.0.0",
            rejected: &[],
            on_trial: false,
            arch: Some("linux-amd64"),
        }
    }

    fn refused(result: Result<Plan, Verdict>) -> (UpdateState, String) {
        let verdict = result.unwrap_err();
        (verdict.state, verdict.reason.unwrap_or_default())
    }

    #[test]
    fn ag_24_a_signed_fresh_release_of_another_version_is_installed() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted {
            highest_sequence: 4,
        };
        let plan = judge(
            &document(&signer, "1.1.0", 5, NOW + 60),
            &context(&trusted, &accepted),
        );
        assert!(
            matches!(plan, Ok(Plan::Install(artifact)) if artifact.filename == "capstan-agent-linux-amd64")
        );
    }

    #[test]
    fn ag_24_metadata_not_signed_by_the_compiled_or_a_held_key_is_refused_first() {
        let trusted = [key(1).public_key()];
        let accepted = Accepted::default();
        // signed by a stranger, and also expired and lower: the signature is named first
        let stranger = document(&key(2), "1.1.0", 1, NOW - 1);
        let (state, reason) = refused(judge(&stranger, &context(&trusted, &accepted)));
        assert_eq!(state, UpdateState::VerifyFailed);
        assert!(reason.starts_with("bad signature"), "{reason}");
    }

    #[test]
    fn ag_24_with_no_key_at_all_the_build_is_unsigned_and_installs_nothing() {
        let accepted = Accepted::default();
        let (state, _) = refused(judge(
            &document(&key(1), "1.1.0", 1, NOW + 60),
            &context(&[], &accepted),
        ));
        assert_eq!(state, UpdateState::UnsignedBuild);
    }

    // AG-24/AG-25 with ARCHITECTURE.md's decision on agent updates (sequence): TUF's rollback
    // attack.
    #[test]
    fn ag_24_rollback_a_lower_sequence_than_the_highest_accepted_is_refused_and_an_equal_one_is_not(
    ) {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted {
            highest_sequence: 5,
        };
        let (state, reason) = refused(judge(
            &document(&signer, "0.9.0", 4, NOW + 60),
            &context(&trusted, &accepted),
        ));
        assert_eq!(state, UpdateState::VerifyFailed);
        assert!(reason.starts_with("rollback"), "{reason}");
        // the same release again (sequence equal) is not a rollback
        assert!(judge(
            &document(&signer, "1.1.0", 5, NOW + 60),
            &context(&trusted, &accepted)
        )
        .is_ok());
        // a deliberate downgrade is a higher sequence naming an older version
        assert!(matches!(
            judge(
                &document(&signer, "0.9.0", 6, NOW + 60),
                &context(&trusted, &accepted)
            ),
            Ok(Plan::Install(_))
        ));
    }

    // The same rollback check on a fresh install (no `release.json`): the release the binary
    // was built as is the floor.
    #[test]
    fn ag_24_rollback_a_fresh_install_refuses_a_release_older_than_the_one_it_was_built_as() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let fresh = Accepted::default();
        let mut built_as_7 = context(&trusted, &fresh);
        built_as_7.built_sequence = 7;
        let (state, reason) = refused(judge(&document(&signer, "0.9.0", 6, NOW + 60), &built_as_7));
        assert_eq!(state, UpdateState::VerifyFailed);
        assert_eq!(
            reason,
            "rollback: the release's sequence 6 is lower than 7, the release this agent was built as"
        );
        // its own release is current, a later one installs
        assert!(matches!(
            judge(&document(&signer, "1.0.0", 7, NOW + 60), &built_as_7),
            Ok(Plan::Settle(Verdict {
                state: UpdateState::Current,
                ..
            }))
        ));
        assert!(matches!(
            judge(&document(&signer, "1.1.0", 8, NOW + 60), &built_as_7),
            Ok(Plan::Install(_))
        ));
        // a higher sequence accepted since is the floor then, named as such
        let accepted = Accepted {
            highest_sequence: 9,
        };
        let mut later = context(&trusted, &accepted);
        later.built_sequence = 7;
        let (_, reason) = refused(judge(&document(&signer, "1.1.0", 8, NOW + 60), &later));
        assert!(
            reason.ends_with("9, the highest this agent has accepted"),
            "{reason}"
        );
    }

    #[test]
    fn the_built_release_sequence_is_read_as_a_whole_number() {
        assert_eq!(parse_sequence("0"), 0);
        assert_eq!(parse_sequence("42"), 42);
        assert_eq!(parse_sequence("18446744073709551615"), u64::MAX);
        for bad in ["", "4 2", "-1", "7a", "18446744073709551616"] {
            assert!(
                std::panic::catch_unwind(|| parse_sequence(bad)).is_err(),
                "{bad:?} is refused"
            );
        }
    }

    // AG-24/AG-25 with ARCHITECTURE.md's decision on agent updates (expiry): TUF's freeze attack.
    #[test]
    fn ag_24_freeze_metadata_at_or_past_its_expiry_is_refused() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted::default();
        for expires_at in [NOW, NOW - 3600] {
            let (state, reason) = refused(judge(
                &document(&signer, "1.1.0", 1, expires_at),
                &context(&trusted, &accepted),
            ));
            assert_eq!(state, UpdateState::VerifyFailed);
            assert!(reason.starts_with("expired"), "{reason}");
        }
        assert!(judge(
            &document(&signer, "1.1.0", 1, NOW + 1),
            &context(&trusted, &accepted)
        )
        .is_ok());
    }

    #[test]
    fn ag_24_the_running_version_on_offer_is_current_and_a_missing_architecture_is_no_binary() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted::default();
        let plan = judge(
            &document(&signer, "1.0.0", 1, NOW + 60),
            &context(&trusted, &accepted),
        );
        assert!(matches!(
            plan,
            Ok(Plan::Settle(Verdict {
                state: UpdateState::Current,
                ..
            }))
        ));
        let mut on_arm = context(&trusted, &accepted);
        on_arm.arch = Some("linux-arm64");
        let plan = judge(&document(&signer, "1.1.0", 1, NOW + 60), &on_arm);
        assert!(matches!(
            plan,
            Ok(Plan::Settle(Verdict {
                state: UpdateState::NoBinary,
                ..
            }))
        ));
    }

    #[test]
    fn ag_29_a_rejected_version_is_never_reinstalled_but_a_newer_release_is() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted::default();
        let rejected = vec!["1.1.0".to_string()];
        let mut context = context(&trusted, &accepted);
        context.rejected = &rejected;
        let plan = judge(&document(&signer, "1.1.0", 9, NOW + 60), &context);
        assert!(matches!(
            plan,
            Ok(Plan::Settle(Verdict {
                state: UpdateState::VersionRejected,
                ..
            }))
        ));
        assert!(matches!(
            judge(&document(&signer, "1.2.0", 10, NOW + 60), &context),
            Ok(Plan::Install(_))
        ));
    }

    #[test]
    fn ag_29_nothing_newer_is_installed_over_a_version_on_trial() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let accepted = Accepted::default();
        let mut context = context(&trusted, &accepted);
        context.on_trial = true;
        let plan = judge(&document(&signer, "1.2.0", 2, NOW + 60), &context);
        assert!(matches!(
            plan,
            Ok(Plan::Settle(Verdict {
                state: UpdateState::UpdatePending,
                ..
            }))
        ));
    }

    #[test]
    fn ag_24_the_binary_is_checked_for_size_hash_and_signature_each_named() {
        let signer = key(1);
        let trusted = [signer.public_key()];
        let artifact = Artifact::describe("b", b"new binary", &signer);
        assert!(check_binary(&artifact, b"new binary", &trusted, "1.1.0").is_ok());
        let reason = |bytes: &[u8], artifact: &Artifact| {
            check_binary(artifact, bytes, &trusted, "1.1.0")
                .unwrap_err()
                .reason
                .unwrap()
        };
        assert!(reason(b"new binar", &artifact).starts_with("wrong size"));
        assert!(reason(b"new binarY", &artifact).starts_with("wrong hash"));
        let forged = Artifact::describe("b", b"new binary", &key(2));
        assert!(reason(b"new binary", &forged).starts_with("bad signature"));
    }

    #[test]
    fn ag_26_the_new_binary_must_answer_version_with_the_releases_version() {
        assert!(check_probe(Ok((true, "capstan-agent 1.1.0\n".into())), "1.1.0").is_ok());
        for answer in [
            Ok((true, "capstan-agent 1.0.9\n".to_string())),
            Ok((false, "capstan-agent 1.1.0".to_string())),
            Err(ProbeError::NotRun(std::io::Error::other(
                "exec format error",
            ))),
        ] {
            let verdict = check_probe(answer, "1.1.0").unwrap_err();
            assert_eq!(verdict.state, UpdateState::VerifyFailed);
            assert!(verdict.reason.unwrap().starts_with("wrong --version"));
        }
    }

    #[test]
    fn ag_28_held_keys_are_honoured_only_from_a_root_owned_file_nobody_else_can_write() {
        let file = |uid, mode| FileFacts {
            is_symlink: false,
            is_dir: false,
            is_file: true,
            uid,
            mode,
        };
        assert!(held_keys_file(&file(0, 0o644), "k").is_ok());
        assert!(held_keys_file(&file(0, 0o600), "k").is_ok());
        assert!(matches!(
            held_keys_file(&file(1000, 0o600), "k"),
            Err(Distrust::ForeignOwner { .. })
        ));
        for mode in [0o664, 0o646, 0o666] {
            assert!(matches!(
                held_keys_file(&file(0, mode), "k"),
                Err(Distrust::WritableByOthers { .. })
            ));
        }
        let mut link = file(0, 0o644);
        link.is_symlink = true;
        assert!(matches!(
            held_keys_file(&link, "k"),
            Err(Distrust::Link { .. })
        ));
        let mut dir = file(0, 0o755);
        dir.is_file = false;
        dir.is_dir = true;
        assert!(matches!(
            held_keys_file(&dir, "k"),
            Err(Distrust::NotAFile { .. })
        ));
    }

    #[test]
    fn ag_28_held_keys_are_read_one_a_line_and_a_bad_line_is_named() {
        let a = key(1).public_key().to_base64();
        let b = key(2).public_key().to_base64();
        let (keys, bad) = parse_held_keys(&format!("# rotated 2026\n{a}\n\nnot-a-key\n{b}\n{a}\n"));
        assert_eq!(keys, vec![key(1).public_key(), key(2).public_key()]);
        assert_eq!(bad, vec!["not-a-key".to_string()]);
    }

    #[test]
    fn ac_43_update_states_are_the_closed_set_and_refusals_are_named() {
        let all = [
            UpdateState::None,
            UpdateState::Current,
            UpdateState::UpdatePending,
            UpdateState::FetchFailed,
            UpdateState::VerifyFailed,
            UpdateState::Unlogged,
            UpdateState::VersionRejected,
            UpdateState::UnsignedBuild,
            UpdateState::NoBinary,
        ];
        let words: Vec<&str> = all.iter().map(|state| state.as_str()).collect();
        assert_eq!(
            words,
            [
                "none",
                "current",
                "update_pending",
                "fetch_failed",
                "verify_failed",
                "unlogged",
                "version_rejected",
                "unsigned_build",
                "no_binary"
            ]
        );
        for state in all {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        let refusals: Vec<_> = all.into_iter().filter(|state| state.is_refusal()).collect();
        assert_eq!(
            refusals,
            [
                UpdateState::VerifyFailed,
                UpdateState::Unlogged,
                UpdateState::VersionRejected
            ]
        );
    }
}
