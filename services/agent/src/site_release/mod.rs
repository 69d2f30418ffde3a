//! Site releases on a real machine (issue 16; RO-11, RO-19, RO-21, RO-22, AG-33): the words
//! `apply_update`, `upgrade_preflight` and `page_probe`. The rules are
//! `domain::site_release`'s; the layout and the hook are documented in
//! `docs/site-releases.md`.
//!
//! An apply takes the site lock, fetches the release's signed manifest and archive through the
//! plane's `artifact` endpoint, verifies the manifest against the compiled release key (and the
//! held ones, as the agent's own updates do) and every file of the archive against it, lands the
//! release as `releases/<version>/`, links `shared/` in, verifies the deploy hook against the
//! signed manifest (AG-33), and only then switches `current` by renaming a new link over it. The
//! hook runs on the verified bytes; a hook that fails puts `current` back. The last N releases
//! are kept.

use std::{
    fs,
    io::Write as _,
    os::{
        fd::OwnedFd,
        unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    },
    path::Path,
    process::Stdio,
    time::{Duration, UNIX_EPOCH},
};

use bytes::Bytes;
use capstan_signing::{
    manifest::{self, FileManifest, MANIFEST_FILE, SIGNATURE_FILE},
    tree, NodeKey, PublicKey,
};
use http_body_util::{BodyExt as _, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::{
    domain::{
        site::Site,
        site_release::{
            self as rules, check, check_probe_path, check_version, hook_passed, link_target,
            new_error_lines, page_assets, releases_to_remove, room_needed, version_of_link,
            CURRENT_LINK, HOOK, HOOK_TIMEOUT_SECS, LOCK_FILE, MAX_ASSET_BYTES, MAX_PAGE_BYTES,
            PROBE_TIMEOUT_SECS, RELEASES_DIR, SHARED_DIR,
        },
    },
    plane::Plane,
    script_trust::verify_in,
    state::StateDir,
    update::keys::trusted_keys,
    words::{Failed, Finished, Redaction},
};

/// The words this module runs.
const WORDS: &[&str] = &["apply_update", "upgrade_preflight", "page_probe"];
/// The most a release archive may be (the agent reads no more).
pub const MAX_ARCHIVE_BYTES: usize = 256 * 1024 * 1024;
/// The most of a hook's output kept for the job's output.
const MAX_HOOK_OUTPUT: usize = 16 * 1024;
/// The most of the error log read after a probe.
const MAX_ERROR_LOG_READ: u64 = 1024 * 1024;

mod error;
mod hook;
pub mod keep;
mod preflight;
mod probe;
pub mod recover;

pub use error::{Artifact, CredentialError, FetchError, ProbeError, SiteError};
use hook::run_hook;
pub use preflight::preflight;
pub use probe::probe;
pub use recover::ManifestClock;

pub fn is_site_release_word(name: &str) -> bool {
    WORDS.contains(&name)
}

/// What the site words reach on the running agent.
pub struct SiteWords<'a> {
    pub state: &'a StateDir,
    pub plane: &'a Plane,
    pub key: &'a NodeKey,
}

/// Where a release's manifest and archive come from: the plane, or a test's own.
pub trait ReleaseSource {
    /// The manifest file's bytes and its signature file's bytes, exactly as signed.
    fn manifest(
        &self,
        version: &str,
    ) -> impl std::future::Future<Output = Result<(Vec<u8>, Vec<u8>), FetchError>> + Send;
    /// The release's archive.
    fn archive(
        &self,
        version: &str,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, FetchError>> + Send;
}

/// The plane's `artifact` endpoint: `release_manifest` and `release_archive`.
pub struct PlaneSource<'a> {
    pub plane: &'a Plane,
    pub key: &'a NodeKey,
    /// Ask again while the plane cannot answer, for up to [`FETCH_PATIENCE`] (an apply);
    /// otherwise one question (the manifest clock, which asks again at its next tick).
    pub patient: bool,
}

/// How long an apply keeps asking for its release while the plane cannot answer (the
/// rollouts service restarting, a 5xx, a rate limit) before it fails. A refusal (a 4xx: the
/// release is not there) fails at once.
pub const FETCH_PATIENCE: Duration = Duration::from_secs(180);

/// Asks `fetch` again while the plane is unreachable or asks to wait, backing off from one
/// second to ten, for at most [`FETCH_PATIENCE`].
async fn patiently<T, F, Fut>(patient: bool, mut fetch: F) -> Result<T, crate::plane::PlaneError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::plane::PlaneError>>,
{
    use crate::plane::PlaneError;
    if !patient {
        return fetch().await;
    }
    let deadline = tokio::time::Instant::now() + FETCH_PATIENCE;
    let mut pauses =
        capstan_telemetry::backoff::Doubling::new(Duration::from_secs(1), Duration::from_secs(10));
    let mut pause = pauses.next().unwrap_or_default();
    loop {
        match fetch().await {
            Err(PlaneError::Unreachable(why)) if tokio::time::Instant::now() + pause < deadline => {
                warn!(%why, "the release cannot be fetched yet; asking again");
                tokio::time::sleep(pause).await;
                pause = pauses.next().unwrap_or(pause);
            }
            Err(PlaneError::RateLimited { wait, .. })
                if tokio::time::Instant::now() + wait < deadline =>
            {
                tokio::time::sleep(wait).await;
            }
            answer => return answer,
        }
    }
}

impl ReleaseSource for PlaneSource<'_> {
    async fn manifest(&self, version: &str) -> Result<(Vec<u8>, Vec<u8>), FetchError> {
        let asked = json!({"kind": "release_manifest", "version": version});
        let answer = patiently(self.patient, || {
            self.plane.send(
                self.key,
                "artifact",
                "",
                &asked,
                manifest::MAX_MANIFEST_BYTES * 2 + manifest::MAX_SIGNATURE_BYTES,
                Duration::ZERO,
            )
        })
        .await
        .map_err(|source| FetchError::Plane {
            artifact: Artifact::Manifest,
            version: version.to_string(),
            source,
        })?;
        let text = |field: &'static str| {
            answer
                .get(field)
                .and_then(Value::as_str)
                .map(|text| text.as_bytes().to_vec())
                .ok_or_else(|| FetchError::Incomplete {
                    version: version.to_string(),
                    field,
                })
        };
        Ok((text("manifest")?, text("signatures")?))
    }

    async fn archive(&self, version: &str) -> Result<Vec<u8>, FetchError> {
        let asked = json!({"kind": "release_archive", "version": version});
        patiently(self.patient, || {
            self.plane.send_for_bytes(
                self.key,
                "artifact",
                "",
                &asked,
                MAX_ARCHIVE_BYTES,
                Duration::ZERO,
            )
        })
        .await
        .map_err(|source| FetchError::Plane {
            artifact: Artifact::Archive,
            version: version.to_string(),
            source,
        })
    }
}

/// Runs one of the site words (parameters already checked against the catalogue's shapes).
pub async fn run(words: &SiteWords<'_>, name: &str, params: &Value) -> Result<Finished, Failed> {
    let site = words.state.site().map_err(Failed::new)?.ok_or_else(|| {
        Failed::new("this node has no site.json, so it holds no site to deploy or probe")
    })?;
    match name {
        "apply_update" => {
            let version = params
                .get("version")
                .and_then(Value::as_str)
                .ok_or_else(|| Failed::refused("apply_update needs a version", Value::Null))?;
            let source = PlaneSource {
                plane: words.plane,
                key: words.key,
                patient: true,
            };
            apply(
                &site,
                &trusted_keys(words.state),
                words.state.path(),
                &source,
                version,
            )
            .await
        }
        "upgrade_preflight" => Ok(preflight(&site, &trusted_keys(words.state)).await),
        "page_probe" => probe(&site, params).await,
        other => Err(Failed::new(format!("{other} is not a site release word"))),
    }
}

fn blocking_failed(error: tokio::task::JoinError) -> Failed {
    Failed::new(format!("the work stopped unexpectedly: {error}"))
}

/// The site lock, held (flock) for as long as this value lives.
struct SiteLock(#[allow(dead_code)] OwnedFd);

fn take_lock(root: &Path) -> Result<SiteLock, SiteError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(root.join(LOCK_FILE))
        .map_err(SiteError::disk(format!(
            "the site lock {LOCK_FILE} cannot be opened"
        )))?;
    let fd = OwnedFd::from(file);
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| SiteError::LockHeld)?;
    Ok(SiteLock(fd))
}

/// The version `current` points at, if any.
fn current_version(root: &Path) -> Result<Option<String>, SiteError> {
    match fs::read_link(root.join(CURRENT_LINK)) {
        Ok(target) => Ok(Some(version_of_link(&target)?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(SiteError::disk("current cannot be read")(error)),
    }
}

/// Points `current` at `version` by renaming a new link over it (atomic: a reader sees the old
/// release or the new one, never neither).
fn switch_current(root: &Path, version: Option<&str>) -> Result<(), SiteError> {
    let Some(version) = version else {
        return match fs::remove_file(root.join(CURRENT_LINK)) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(SiteError::disk("current cannot be removed")(error)),
        };
    };
    let fresh = root.join(format!(".current.new-{:016x}", rand::random::<u64>()));
    std::os::unix::fs::symlink(link_target(version), &fresh)
        .map_err(SiteError::disk("a new current link cannot be made"))?;
    if let Err(error) = fs::rename(&fresh, root.join(CURRENT_LINK)) {
        let _ = fs::remove_file(&fresh);
        return Err(SiteError::disk(format!(
            "current cannot be switched to {version}"
        ))(error));
    }
    if let Ok(dir) = fs::File::open(root) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// What staging a release left ready to switch to.
struct Staged {
    previous: Option<String>,
    /// The verified hook's bytes, when the release has one.
    hook: Option<Vec<u8>>,
    linked: Vec<String>,
}

/// Why an apply stopped before anything was switched.
enum NotStaged {
    Failed(String),
    /// The hook does not match the signed manifest (AG-33): refused, nothing changed.
    Untrusted {
        reason: String,
        files: Vec<String>,
    },
}

/// Verifies and lands the release beside the others and links `shared/` in; `current` is
/// untouched.
fn stage(
    root: &Path,
    trusted: &[PublicKey],
    version: &str,
    manifest_bytes: &[u8],
    signature_bytes: &[u8],
    archive: &[u8],
) -> Result<Staged, NotStaged> {
    let failed = |why: String| NotStaged::Failed(why);
    let (manifest, _signer) =
        manifest::verify(manifest_bytes, signature_bytes, trusted).map_err(|error| {
            failed(format!(
                "the release manifest of {version} cannot be used: {error}"
            ))
        })?;
    let files = manifest::read_archive(archive, &manifest, &[]).map_err(|error| {
        failed(format!(
            "the release archive of {version} is refused: {error}"
        ))
    })?;
    let previous = current_version(root).map_err(|error| failed(error.to_string()))?;
    let releases = root.join(RELEASES_DIR);
    let shared = root.join(SHARED_DIR);
    for dir in [&releases, &shared] {
        fs::create_dir_all(dir)
            .map_err(|error| failed(format!("{} cannot be made: {error}", dir.display())))?;
    }
    let shared_names = shared_entries(&shared).map_err(|error| failed(error.to_string()))?;
    refuse_shared_clash(&files, &shared_names)?;
    if previous.as_deref() == Some(version) {
        return Err(failed(format!(
            "{version} is already the current release; it is not laid out again over itself"
        )));
    }
    let mut landing: Vec<(&str, u32, &[u8])> = files
        .iter()
        .map(|file| (file.path.as_str(), file.mode, file.bytes.as_slice()))
        .collect();
    landing.push((MANIFEST_FILE, 0o644, manifest_bytes));
    landing.push((SIGNATURE_FILE, 0o644, signature_bytes));
    tree::land(&releases, version, landing, None)
        .map_err(|error| failed(format!("releases/{version} cannot be written: {error}")))?;
    let release_dir = releases.join(version);
    let mut linked = Vec::new();
    for name in &shared_names {
        let link = release_dir.join(name);
        std::os::unix::fs::symlink(Path::new("../..").join(SHARED_DIR).join(name), &link)
            .map_err(|error| failed(format!("shared/{name} cannot be linked in: {error}")))?;
        linked.push(name.clone());
    }
    let hook = if manifest.files.contains_key(HOOK) {
        Some(verified_hook(&releases, trusted, version)?)
    } else {
        None
    };
    Ok(Staged {
        previous,
        hook,
        linked,
    })
}

/// Refuses a release that ships a path `shared/` links in ("a release must not ship what
/// shared/ keeps").
fn refuse_shared_clash(
    files: &[manifest::ArchivedFile],
    shared_names: &[String],
) -> Result<(), NotStaged> {
    for name in shared_names {
        let prefix = format!("{name}/");
        if let Some(clash) = files
            .iter()
            .find(|file| file.path == *name || file.path.starts_with(&prefix))
        {
            return Err(NotStaged::Failed(format!(
                "the release holds {}, where shared/{name} is linked in; a release must not ship what shared/ keeps",
                clash.path
            )));
        }
    }
    Ok(())
}

/// The landed release's hook, verified against its signed manifest (AG-33); a hook that does
/// not verify removes the release again and refuses it.
fn verified_hook(
    releases: &Path,
    trusted: &[PublicKey],
    version: &str,
) -> Result<Vec<u8>, NotStaged> {
    match verify_in(&releases.join(version), trusted, HOOK) {
        Ok(verified) => Ok(verified.bytes),
        Err(refusal) => {
            let _ =
                tree::open_root(releases).and_then(|parent| tree::remove_tree(&parent, version));
            Err(NotStaged::Untrusted {
                reason: format!("script_trust: {refusal}"),
                files: vec![HOOK.to_string()],
            })
        }
    }
}

/// The top-level entries of `shared/` (each linked into every release), by name.
fn shared_entries(shared: &Path) -> Result<Vec<String>, SiteError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(shared).map_err(SiteError::disk("shared/ cannot be read"))? {
        let entry = entry.map_err(SiteError::disk("shared/ cannot be read"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !manifest::valid_path(&name) || name.contains('/') {
            continue;
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Keep-N: removes the oldest releases beyond `keep`, never the current one or the one before.
fn prune(root: &Path, current: Option<&str>, previous: Option<&str>, keep: usize) -> Vec<String> {
    let releases = root.join(RELEASES_DIR);
    let Ok(entries) = fs::read_dir(&releases) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if check_version(&name).is_err() {
            continue;
        }
        let Ok(metadata) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !metadata.is_dir() {
            continue;
        }
        let landed = metadata
            .modified()
            .ok()
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map(|at| at.as_nanos() as i64)
            .unwrap_or_default();
        found.push((name, landed));
    }
    let mut removed = Vec::new();
    let Ok(parent) = tree::open_root(&releases) else {
        return removed;
    };
    for name in releases_to_remove(&found, current, previous, keep) {
        match tree::remove_tree(&parent, &name) {
            Ok(()) => removed.push(name),
            Err(error) => warn!(release = %name, %error, "an old release could not be removed"),
        }
    }
    removed
}

/// `apply_update {version}`: lays the release out and switches to it, or says why not; the
/// structured result is what the plane's verdict reads (RO-11).
pub async fn apply(
    site: &Site,
    trusted: &[PublicKey],
    state_dir: &Path,
    source: &impl ReleaseSource,
    version: &str,
) -> Result<Finished, Failed> {
    check_version(version).map_err(|why| Failed::refused(why, Value::Null))?;
    let root = site.root.clone();
    if !root.is_dir() {
        return Err(Failed::new(format!(
            "the site root {} is not a directory",
            root.display()
        )));
    }
    let lock = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || take_lock(&root))
            .await
            .map_err(blocking_failed)?
            .map_err(Failed::new)?
    };
    // AG-37: the installed release's deployment files that match its manifest are kept first.
    let kept = {
        let root = root.clone();
        let trusted = trusted.to_vec();
        let state_dir = state_dir.to_path_buf();
        tokio::task::spawn_blocking(move || keep::keep(&root, &state_dir, &trusted))
            .await
            .map_err(blocking_failed)?
    };
    let outcome = apply_locked(site, trusted, state_dir, source, version, lock).await;
    // AG-37: settled afterwards, whatever happened, once the site lock is let go.
    let settled = {
        let root = root.clone();
        let trusted = trusted.to_vec();
        let state_dir = state_dir.to_path_buf();
        tokio::task::spawn_blocking(move || keep::settle(&root, &state_dir, &trusted))
            .await
            .map_err(blocking_failed)?
    };
    let mut notes = kept;
    notes.extend(settled.lines());
    if notes.is_empty() {
        return outcome;
    }
    let add = |output: &mut String| {
        for note in &notes {
            if !output.is_empty() {
                output.push('\n');
            }
            output.push_str(note);
        }
    };
    match outcome {
        Ok(mut finished) => {
            add(&mut finished.output);
            Ok(finished)
        }
        Err(mut failed) => {
            add(&mut failed.output);
            Err(failed)
        }
    }
}

/// Stages the release on the blocking pool; a release that cannot be staged fails with what
/// `current` still is, or is refused when its hook does not verify.
async fn stage_in_turn(
    root: &Path,
    trusted: &[PublicKey],
    version: &str,
    manifest_bytes: Vec<u8>,
    signature_bytes: Vec<u8>,
    archive: Vec<u8>,
) -> Result<Staged, Failed> {
    let staged = {
        let root = root.to_path_buf();
        let trusted = trusted.to_vec();
        let version = version.to_string();
        tokio::task::spawn_blocking(move || {
            stage(
                &root,
                &trusted,
                &version,
                &manifest_bytes,
                &signature_bytes,
                &archive,
            )
        })
        .await
        .map_err(blocking_failed)?
    };
    match staged {
        Ok(staged) => Ok(staged),
        Err(NotStaged::Failed(why)) => Err(Failed {
            reason: why,
            output: String::new(),
            result: json!({"completed": false, "deploy_tier_passed": false,
                "version": current_version(root).ok().flatten(), "rolled_back": false}),
            refused: false,
        }),
        Err(NotStaged::Untrusted { reason, files }) => {
            Err(Failed::refused(reason, json!({"files": files})))
        }
    }
}

/// The release `current` was just switched to, and the one before.
struct Switched<'a> {
    root: &'a Path,
    version: &'a str,
    previous: Option<&'a str>,
}

/// The deploy tier: runs the verified hook and adds what it printed to `output`; a hook that
/// fails puts `current` back on the previous release (RO-11) and fails the apply.
async fn deploy_tier(
    state_dir: &Path,
    bytes: &[u8],
    switched: &Switched<'_>,
    output: &mut Vec<String>,
) -> Result<Value, Failed> {
    let Switched {
        root,
        version,
        previous,
    } = *switched;
    let ran = run_hook(state_dir, bytes, root, version, previous).await;
    output.push(format!(
        "{HOOK} exited {}",
        ran.exit_code
            .map(|code| code.to_string())
            .unwrap_or_else(|| "without a code".into())
    ));
    if !ran.output.trim().is_empty() {
        output.push(ran.output.clone());
    }
    if hook_passed(ran.exit_code) {
        return Ok(json!({"ran": true, "exit_code": ran.exit_code}));
    }
    let back = switch_current(root, previous);
    let reported = current_version(root).ok().flatten();
    let reason =
        match &back {
            Ok(()) => format!(
            "the deploy hook of {version} failed (exit {}); current is back on {} (rolled back)",
            ran.exit_code.map(|code| code.to_string()).unwrap_or_else(|| "none".into()),
            previous.unwrap_or("no release")
        ),
            Err(why) => format!(
                "the deploy hook of {version} failed and current could not be put back: {why}"
            ),
        };
    Err(Failed {
        reason,
        output: output.join("\n"),
        result: json!({
            "completed": false,
            "deploy_tier_passed": false,
            "version": reported,
            "rolled_back": back.is_ok(),
            "previous_version": previous,
            "hook": {"ran": true, "exit_code": ran.exit_code},
        }),
        refused: false,
    })
}

/// The apply itself, under the site lock (let go when this returns).
async fn apply_locked(
    site: &Site,
    trusted: &[PublicKey],
    state_dir: &Path,
    source: &impl ReleaseSource,
    version: &str,
    lock: SiteLock,
) -> Result<Finished, Failed> {
    let root = site.root.clone();
    let (manifest_bytes, signature_bytes) = source.manifest(version).await.map_err(Failed::new)?;
    let archive = source.archive(version).await.map_err(Failed::new)?;
    let staged = stage_in_turn(
        &root,
        trusted,
        version,
        manifest_bytes,
        signature_bytes,
        archive,
    )
    .await?;
    let previous = staged.previous.clone();
    switch_current(&root, Some(version)).map_err(Failed::new)?;
    info!(version, previous = ?previous, "site release switched in");
    let mut output = vec![format!(
        "releases/{version} landed and verified; current switched from {} to {version}",
        previous.as_deref().unwrap_or("nothing")
    )];
    let hook = match &staged.hook {
        None => {
            output.push(format!(
                "the release has no {HOOK}; the deploy tier has nothing to run"
            ));
            json!({"ran": false})
        }
        Some(bytes) => {
            let switched = Switched {
                root: &root,
                version,
                previous: previous.as_deref(),
            };
            deploy_tier(state_dir, bytes, &switched, &mut output).await?
        }
    };
    let reported = current_version(&root).map_err(Failed::new)?;
    let removed = {
        let root = root.clone();
        let keep = site.release.keep;
        let current = reported.clone();
        let previous = previous.clone();
        tokio::task::spawn_blocking(move || {
            prune(&root, current.as_deref(), previous.as_deref(), keep)
        })
        .await
        .map_err(blocking_failed)?
    };
    drop(lock);
    if !removed.is_empty() {
        output.push(format!("removed old releases: {}", removed.join(", ")));
    }
    Ok(Finished {
        output: output.join("\n"),
        result: json!({
            "completed": true,
            "deploy_tier_passed": true,
            "version": reported,
            "rolled_back": false,
            "previous_version": previous,
            "hook": hook,
            "shared_linked": staged.linked,
            "removed_releases": removed,
        }),
        redaction: Redaction::Text,
    })
}

#[cfg(test)]
mod tests;
