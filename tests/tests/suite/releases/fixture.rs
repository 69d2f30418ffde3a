//! Builds of the agent with a version and the test release key compiled in, releases signed
//! with that key, and an agent run under a supervisor that restarts it as systemd would.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_e2e::{agent::Agent, plane::Plane};
use capstan_signing::{
    release::{Artifact, Release, SignedRelease},
    NodeKey,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The builds the tests use.
pub const A: &str = "90.0.1";
pub const B: &str = "90.0.2";
pub const C: &str = "90.0.3";
pub const D: &str = "90.0.4";
/// A trial long enough to kill a process inside it.
pub const TRIAL_LONG: Duration = Duration::from_secs(3600);

/// The test release key: its secret never leaves the tests.
const KEY_SEED: [u8; 32] = [7; 32];

pub fn release_key() -> NodeKey {
    NodeKey::from_secret_bytes(&KEY_SEED).unwrap()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A build released at a sequence of its own (the rollback floor's case).
pub const E: &str = "90.0.5";

/// Builds the agent answering `version`, trusting the test key, into a target directory of its
/// own; returns the binary (kept per version, so each is built once). It is built as no
/// release (sequence 0).
pub fn agent_build(version: &str) -> PathBuf {
    agent_build_as(version, 0)
}

/// As [`agent_build`], built as the release of `sequence` (`CAPSTAN_AGENT_RELEASE_SEQUENCE`).
pub fn agent_build_as(version: &str, sequence: u64) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("release-test-agents");
    std::fs::create_dir_all(&target).unwrap();
    let kept = match sequence {
        0 => target.join(format!("capstan-agent-{version}")),
        _ => target.join(format!("capstan-agent-{version}-at-{sequence}")),
    };
    // One build at a time: each sets its own version on the same crate.
    let lock = std::fs::File::create(target.join(".build.lock")).unwrap();
    lock.lock().unwrap();
    // A kept build is reused only when it is newer than the agent's source.
    let source_changed = std::fs::metadata(&kept)
        .and_then(|kept| kept.modified())
        .map(|built| newest_source() > built)
        .unwrap_or(true);
    if source_changed {
        let key = release_key().public_key().to_base64();
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "capstan-agent", "--bin", "capstan-agent"])
            .current_dir(workspace())
            .env("CARGO_TARGET_DIR", &target)
            .env("CAPSTAN_AGENT_VERSION", version)
            // Set whatever the environment says: the rollback check's floor.
            .env("CAPSTAN_AGENT_RELEASE_SEQUENCE", sequence.to_string())
            .env("CAPSTAN_RELEASE_KEY", key)
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the agent {version} failed");
        std::fs::copy(target.join("debug/capstan-agent"), &kept).unwrap();
    }
    kept
}

/// The newest modification time of the agent's and signing library's sources.
fn newest_source() -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    let mut stack = vec![
        workspace().join("services/agent/src"),
        workspace().join("libs/signing/src"),
    ];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(modified) = entry.metadata().and_then(|meta| meta.modified()) {
                newest = newest.max(modified);
            }
        }
    }
    newest
}

/// A release and the one binary it carries (linux-amd64), signed by the test key.
pub struct Offer {
    pub version: String,
    pub sequence: u64,
    pub expires_at: i64,
    pub binary: Vec<u8>,
    pub document: SignedRelease,
    signer: NodeKey,
    next_key: Option<String>,
}

impl Offer {
    /// Signs it again after its expiry was changed.
    pub fn signed(self) -> Offer {
        make(
            &self.version,
            self.sequence,
            self.expires_at,
            self.binary,
            self.signer,
            self.next_key,
        )
    }

    pub fn with_expiry_in(mut self, seconds: i64) -> Offer {
        self.expires_at = chrono::Utc::now().timestamp() + seconds;
        self.signed()
    }
}

fn make(
    version: &str,
    sequence: u64,
    expires_at: i64,
    binary: Vec<u8>,
    signer: NodeKey,
    next_key: Option<String>,
) -> Offer {
    let mut binaries = BTreeMap::new();
    binaries.insert(
        "linux-amd64".to_string(),
        Artifact::describe(
            &format!("capstan-agent-{version}-linux-amd64"),
            &binary,
            &signer,
        ),
    );
    let document = Release {
        version: version.to_string(),
        sequence,
        expires_at,
        binaries,
        support_bundle: None,
        next_key: next_key.clone(),
    }
    .sign(&signer)
    .unwrap();
    Offer {
        version: version.to_string(),
        sequence,
        expires_at,
        binary,
        document,
        signer,
        next_key,
    }
}

/// 2100-01-01T00:00:00Z.
const FAR: i64 = 4_102_444_800;

/// `version` at `sequence` carrying `binary`, signed by the test key.
pub fn release(version: &str, sequence: u64, binary: &Path) -> Offer {
    signed_by(version, sequence, binary, release_key())
}

/// The same, signed by a key no agent holds.
pub fn forged(version: &str, sequence: u64, binary: &Path) -> Offer {
    signed_by(
        version,
        sequence,
        binary,
        NodeKey::from_secret_bytes(&[9; 32]).unwrap(),
    )
}

/// `version` at `sequence` carrying `binary`, signed by `signer`.
pub fn signed_by(version: &str, sequence: u64, binary: &Path, signer: NodeKey) -> Offer {
    make(
        version,
        sequence,
        FAR,
        std::fs::read(binary).unwrap(),
        signer,
        None,
    )
}

/// The key a rotation hands signing to: no agent is built with it.
pub fn next_release_key() -> NodeKey {
    NodeKey::from_secret_bytes(&[8; 32]).unwrap()
}

/// `version` at `sequence`, signed by the test key and naming `next` as the key that signs the
/// releases after it (a key rotation, vouched for by the current key's signature).
pub fn rotating_to(version: &str, sequence: u64, binary: &Path, next: &NodeKey) -> Offer {
    make(
        version,
        sequence,
        FAR,
        std::fs::read(binary).unwrap(),
        release_key(),
        Some(next.public_key().to_base64()),
    )
}

/// `POST /api/v1/releases` as ada (level 10).
pub async fn publish(plane: &Plane, offer: &Offer) -> (StatusCode, Value) {
    let mut binaries = BTreeMap::new();
    binaries.insert("linux-amd64", STANDARD.encode(&offer.binary));
    plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/releases",
            Some(json!({
                "metadata": String::from_utf8(offer.document.to_bytes()).unwrap(),
                "binaries": binaries,
            })),
        )
        .await
}

/// `POST /api/v1/releases` as ada with the release's `RELEASE_STATEMENT` (AG-27): the same
/// metadata again with a statement stores the statement (RO-07).
pub async fn publish_with_statement(
    plane: &Plane,
    offer: &Offer,
    statement: &[u8],
) -> (StatusCode, Value) {
    let mut binaries = BTreeMap::new();
    binaries.insert("linux-amd64", STANDARD.encode(&offer.binary));
    plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/releases",
            Some(json!({
                "metadata": String::from_utf8(offer.document.to_bytes()).unwrap(),
                "binaries": binaries,
                "statement": String::from_utf8(statement.to_vec()).unwrap(),
            })),
        )
        .await
}

/// The test public log's statement key and checkpoint key.
pub fn statement_key() -> NodeKey {
    NodeKey::from_secret_bytes(&[11; 32]).unwrap()
}

pub fn log_key() -> NodeKey {
    NodeKey::from_secret_bytes(&[12; 32]).unwrap()
}

/// The `RELEASE_STATEMENT` of `offer`'s linux-amd64 binary, signed by `statement_key` and
/// logged (among a few other entries) in a log whose checkpoint is signed by [`log_key`].
pub fn statement_of(offer: &Offer, statement_key: &NodeKey) -> Vec<u8> {
    use capstan_signing::statement::{agent_artifact, MemoryLog, Statement};
    let mut log = MemoryLog::new("log.test/releases");
    for n in 0..3u8 {
        log.append(vec![n; 8]);
    }
    let mut artifacts = BTreeMap::new();
    artifacts.insert(
        agent_artifact("linux-amd64"),
        capstan_signing::release::sha256_hex(&offer.binary),
    );
    log.publish(
        &Statement {
            version: offer.version.clone(),
            artifacts,
        },
        statement_key,
        &log_key(),
    )
}

/// A hostile plane: every release is replaced by `offer`, whose binary is served as `bytes`.
/// Written to rollouts' tables directly (the real plane refuses such an upload).
pub async fn hostile_offer(plane: &Plane, offer: &Offer, bytes: &[u8]) {
    let store = capstan_store::Store::connect(plane.database.url(), "rollouts", 1)
        .await
        .unwrap();
    let mut transaction = store.begin().await.unwrap();
    sqlx::query("DELETE FROM releases")
        .execute(&mut *transaction)
        .await
        .unwrap();
    let metadata = offer.document.to_bytes();
    sqlx::query(
        "INSERT INTO releases (version, sequence, expires_at, metadata, metadata_sha256, published_at, published_by)
         VALUES ($1, $2, to_timestamp($3), $4, $5, now(), 'mallory')",
    )
    .bind(&offer.version)
    .bind(offer.sequence as i64)
    .bind(offer.expires_at as f64)
    .bind(&metadata)
    .bind(capstan_signing::release::sha256_hex(&metadata))
    .execute(&mut *transaction)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO release_artifacts (version, kind, arch, sha256, bytes) VALUES ($1, 'binary', 'linux-amd64', $2, $3)",
    )
    .bind(&offer.version)
    .bind(capstan_signing::release::sha256_hex(bytes))
    .bind(bytes)
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
    store.close().await;
}

/// A hostile plane: every release is replaced by `document` (signed elsewhere), whose binary
/// is served as `binary` and whose support bundle as `bundle`. Written to rollouts' tables
/// directly.
pub async fn hostile_bundle_offer(
    plane: &Plane,
    document: &SignedRelease,
    binary: &[u8],
    bundle: &[u8],
) {
    let offer = Offer {
        version: document.signed.version.clone(),
        sequence: document.signed.sequence,
        expires_at: document.signed.expires_at,
        binary: binary.to_vec(),
        document: document.clone(),
        signer: release_key(),
        next_key: None,
    };
    hostile_offer(plane, &offer, binary).await;
    let store = capstan_store::Store::connect(plane.database.url(), "rollouts", 1)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO release_artifacts (version, kind, arch, sha256, bytes) VALUES ($1, 'support_bundle', '', $2, $3)",
    )
    .bind(&offer.version)
    .bind(capstan_signing::release::sha256_hex(bundle))
    .bind(bundle)
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;
}

/// The workspace's `capstan` binary beside the test binary (built with the workspace).
fn capstan_binary() -> PathBuf {
    let agent = capstan_e2e::agent::binary();
    let capstan = agent.with_file_name("capstan");
    assert!(
        capstan.is_file(),
        "{} is missing: build it with `cargo build -p capstan`",
        capstan.display()
    );
    capstan
}

fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("release.key");
    std::fs::write(&path, format!("{}\n", STANDARD.encode(KEY_SEED))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// `capstan release sign` into `dir` (the key from a file).
pub fn cli_sign(binary: &Path, version: &str, sequence: u64, dir: &Path) {
    cli_sign_with(binary, version, sequence, dir, None)
}

/// `capstan release sign` into `dir`, with the support bundle of `bundle` when given.
pub fn cli_sign_with(
    binary: &Path,
    version: &str,
    sequence: u64,
    dir: &Path,
    bundle: Option<&Path>,
) {
    std::fs::create_dir_all(dir).unwrap();
    let key = key_file(dir.parent().unwrap());
    let mut command = std::process::Command::new(capstan_binary());
    command
        .args(["release", "sign"])
        .arg(format!("--key={}", key.display()))
        .arg(format!("--version={version}"))
        .arg(format!("--sequence={sequence}"))
        .arg("--expires-at=2100-01-01T00:00:00Z")
        .arg(format!("--binary=linux-amd64={}", binary.display()))
        .arg(format!("--out={}", dir.display()));
    if let Some(bundle) = bundle {
        command.arg(format!("--support-bundle-dir={}", bundle.display()));
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "capstan release sign: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `capstan release sign`, then `capstan release upload` to `plane` with ada's token.
pub async fn cli_publish(plane: &Plane, binary: &Path, version: &str, sequence: u64, dir: &Path) {
    cli_publish_with(plane, binary, version, sequence, dir, None).await
}

/// [`cli_publish`] with the support bundle of `bundle` when given.
pub async fn cli_publish_with(
    plane: &Plane,
    binary: &Path,
    version: &str,
    sequence: u64,
    dir: &Path,
    bundle: Option<&Path>,
) {
    cli_sign_with(binary, version, sequence, dir, bundle);
    let output = tokio::process::Command::new(capstan_binary())
        .args(["release", "upload"])
        .arg(format!("--dir={}", dir.display()))
        .arg(format!("--plane={}", plane.base))
        .env("CAPSTAN_TOKEN", &plane.admin)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "capstan release upload: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An agent under a supervisor: a copy of its binary in a directory of its own (which the
/// agent replaces when it updates), the start guard before each start, a restart whenever it
/// exits.
pub struct Supervised {
    pub id: i64,
    agent: Agent,
    binary: PathBuf,
    trial_secs: Arc<AtomicU64>,
    pid: Arc<AtomicU32>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Supervised {
    /// Joins `plane` as `name` from a copy of `build`, approved, switched on, supervised.
    pub async fn paired(plane: &Plane, build: &Path, name: &str) -> Supervised {
        Supervised::paired_as(plane, build, name, false).await
    }

    /// As [`Supervised::paired`], a machine with no site: its support bundle lands in
    /// [`Supervised::bundle_tree`].
    pub async fn paired_siteless(plane: &Plane, build: &Path, name: &str) -> Supervised {
        Supervised::paired_as(plane, build, name, true).await
    }

    /// As [`Supervised::paired`], an agent holding the test public log's statement and log
    /// keys (the held key files, root-owned, writable by nobody else: AG-28), so every release
    /// must be logged (AG-27); `unlogged` is reported after a second (AG-31 grace, the least allowed).
    pub async fn paired_logged(plane: &Plane, build: &Path, name: &str) -> Supervised {
        Supervised::paired_with(plane, build, name, false, |agent| {
            use std::os::unix::fs::PermissionsExt;
            agent.set_env("CAPSTAN_AGENT_UNLOGGED_GRACE_SECS", "1");
            for (file, key) in [
                ("release_statement_keys", statement_key()),
                ("transparency_log_keys", log_key()),
            ] {
                let path = agent.file(file);
                std::fs::write(&path, format!("{}\n", key.public_key().to_base64())).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        })
        .await
    }

    async fn paired_as(plane: &Plane, build: &Path, name: &str, siteless: bool) -> Supervised {
        Supervised::paired_with(plane, build, name, siteless, |_| {}).await
    }

    async fn paired_with(
        plane: &Plane,
        build: &Path,
        name: &str,
        siteless: bool,
        set_up: impl FnOnce(&mut Agent),
    ) -> Supervised {
        let mut agent = Agent::new(build);
        if siteless {
            agent.set_siteless();
        }
        let tree = agent.dir.path().join("opt/tree");
        agent.set_env("CAPSTAN_AGENT_BUNDLE_DIR", tree.to_str().unwrap());
        let bin = agent.dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let binary = bin.join("capstan-agent");
        std::fs::copy(build, &binary).unwrap();
        agent
            .ok(&[
                "join",
                &format!("--management-node={}", plane.base),
                &format!("--name={name}"),
                "--no-wait",
            ])
            .await;
        agent.ok(&["enable"]).await;
        set_up(&mut agent);
        let id = plane.approve(&agent.fingerprint()).await;
        let mut supervised = Supervised {
            id,
            agent,
            binary,
            trial_secs: Arc::new(AtomicU64::new(3)),
            pid: Arc::default(),
            stop: CancellationToken::new(),
            task: None,
        };
        supervised.supervise();
        plane.wait_online(id).await;
        supervised
    }

    fn supervise(&mut self) {
        let log = self.agent.dir.path().join("agent.log");
        let guard = self.agent.command_of(&self.binary, &["start-guard"]);
        let run = self.agent.command_of(&self.binary, &["run"]);
        let (trial, pid, stop) = (self.trial_secs.clone(), self.pid.clone(), self.stop.clone());
        let (mut guard, mut run) = (guard, run);
        self.task = Some(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let _ = guard.status().await;
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                let mut child = run
                    .env(
                        "CAPSTAN_AGENT_TRIAL_SECS",
                        trial.load(Ordering::SeqCst).to_string(),
                    )
                    .env("CAPSTAN_AGENT_UPDATE_EVERY_SECS", "1")
                    .stdout(std::process::Stdio::null())
                    .stderr(file)
                    .spawn()
                    .unwrap();
                pid.store(child.id().unwrap_or(0), Ordering::SeqCst);
                tokio::select! {
                    _ = child.wait() => {}
                    () = stop.cancelled() => {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                }
            }
        }));
    }

    /// The trial length the next start is given.
    pub fn set_trial(&self, trial: Duration) {
        self.trial_secs.store(trial.as_secs(), Ordering::SeqCst);
    }

    pub fn dir(&self) -> &Path {
        self.agent.dir.path()
    }

    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Where a siteless node's support bundle lands.
    pub fn bundle_tree(&self) -> PathBuf {
        self.agent.dir.path().join("opt/tree")
    }

    fn beside(&self, suffix: &str) -> PathBuf {
        let mut name = self.binary.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    pub fn bak(&self) -> PathBuf {
        self.beside(".bak")
    }

    pub fn pending(&self) -> PathBuf {
        self.beside(".pending")
    }

    pub fn rejected(&self) -> PathBuf {
        self.beside(".rejected")
    }

    /// The release keys the agent holds beyond the compiled one (AG-28), as written.
    pub fn held_release_keys(&self) -> String {
        std::fs::read_to_string(self.agent.state_dir().join("release_keys")).unwrap_or_default()
    }

    /// What the binary in place answers to `--version`.
    pub async fn version(&self) -> String {
        let output = tokio::process::Command::new(&self.binary)
            .arg("--version")
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .trim_start_matches("capstan-agent ")
            .to_string()
    }

    /// SIGKILL to the running agent (the supervisor starts it again).
    pub async fn kill9(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        assert_ne!(pid, 0);
        let status = tokio::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
