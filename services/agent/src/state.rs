//! The agent's state directory and its files (AG-05, AG-13, AG-18): the directory is 0700 and
//! the agent's own, every file is written whole (a temporary file in the same directory,
//! fsynced, renamed over the old one, the directory fsynced), and no file is opened through a
//! link: a link where a state file should be is refused, never followed.

use capstan_signing::NodeKey;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::{
    fs::{self, File, OpenOptions},
    io::{ErrorKind, Read, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use base64::{engine::general_purpose::STANDARD, Engine as _};

use crate::domain::{
    join::Pairing,
    policy::{Policy, PolicyState},
    trust::{self, Distrust, FileFacts},
};

/// The node's key and its pairing (mode 0600; the secret never leaves this file).
pub const IDENTITY: &str = "node_identity.json";
/// The acceptance policy (PROTOCOL.md).
pub const POLICY: &str = "policy.json";
/// The run switch: present means the agent takes work (AG-13).
pub const ENABLED: &str = "enabled";
/// The owner's log access switch: `on` allows the log words and `file_head` (AG-63).
pub const LOG_ACCESS: &str = "log_access";
/// Present while a job runs: the pid, then the job (AG-18).
pub const JOB_MARKER: &str = "job-running";
/// Held while a job is claimed and run, and by `leave` (AG-18's job lock).
pub const JOB_LOCK: &str = "job.lock";
/// Held by the one `run` process of this state directory.
pub const RUN_LOCK: &str = "run.lock";
/// What the running agent last saw, for `status`.
pub const STATUS: &str = "status.json";
/// Written by `leave` so a running agent lets go of its claim at once.
pub const LEAVE_REQUEST: &str = "leave-requested";

/// The site this node holds (issue 14): its root, database and exclusions; 0600, as it may
/// hold the database's connection string.
pub const SITE: &str = "site.json";

/// A job held for the node's approval: `awaiting-<id>.json`.
pub fn awaiting(job_id: i64) -> String {
    format!("awaiting-{job_id}.json")
}

/// A person's answer to a held job: `decision-<id>`, holding `approve` or `deny`.
pub fn decision(job_id: i64) -> String {
    format!("decision-{job_id}")
}

/// What went wrong with the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Distrusted(#[from] Distrust),
    #[error("{path} cannot be read: {reason}")]
    Corrupt { path: String, reason: String },
}

/// `site.json` could not be used: unreadable or untrusted, or refused.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Refused(#[from] crate::domain::site::BadSite),
}

crate::domain::refusal!(
    /// The identity file's key refused, the fault named.
    BadIdentity
);

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn facts(metadata: &fs::Metadata) -> FileFacts {
    FileFacts {
        is_symlink: metadata.file_type().is_symlink(),
        is_dir: metadata.is_dir(),
        is_file: metadata.is_file(),
        uid: metadata.uid(),
        mode: metadata.permissions().mode() & 0o7777,
    }
}

/// The effective uid of this process.
pub fn agent_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// The state directory, checked.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    agent_uid: u32,
}

impl StateDir {
    /// Opens the directory, creating it 0700 when absent. A link, a directory another user
    /// owns, or one open to others is refused.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        let agent_uid = agent_uid();
        match fs::symlink_metadata(path) {
            Ok(metadata) => {
                trust::state_directory(&facts(&metadata), &path.display().to_string(), agent_uid)?
            }
            Err(error) if error.kind() == ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .recursive(false)
                    .create(path)
                    .map_err(io(path))?;
                // The umask may have narrowed it further; never wider than 0700.
                fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(io(path))?;
            }
            Err(error) => return Err(io(path)(error)),
        }
        Ok(StateDir {
            path: path.to_path_buf(),
            agent_uid,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn agent_uid(&self) -> u32 {
        self.agent_uid
    }

    /// Reads a file without following a link: `None` when absent. Returns what `fstat` said
    /// of the file that was actually opened, for the caller's trust rule.
    pub fn read(&self, name: &str) -> Result<Option<(Vec<u8>, FileFacts)>, StateError> {
        let path = self.file(name);
        let mut file = match OpenOptions::new()
            .read(true)
            .custom_flags(NOFOLLOW)
            .open(&path)
        {
            Ok(file) => file,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
            // ELOOP: the last component is a link.
            Err(error) if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(Distrust::Link {
                    path: path.display().to_string(),
                }
                .into())
            }
            Err(error) => return Err(io(&path)(error)),
        };
        let metadata = file.metadata().map_err(io(&path))?;
        let found = facts(&metadata);
        if !found.is_file {
            return Err(Distrust::NotAFile {
                path: path.display().to_string(),
            }
            .into());
        }
        let mut bytes = Vec::new();
        Read::take(&mut file, 16 * 1024 * 1024)
            .read_to_end(&mut bytes)
            .map_err(io(&path))?;
        Ok(Some((bytes, found)))
    }

    /// Reads and checks a file that decides what the node does.
    pub fn read_deciding(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        let Some((bytes, found)) = self.read(name)? else {
            return Ok(None);
        };
        trust::deciding_file(
            &found,
            &self.file(name).display().to_string(),
            self.agent_uid,
        )?;
        Ok(Some(bytes))
    }

    /// Reads a file that holds a secret: trusted as a deciding file, and readable by nobody
    /// else (0600, like the identity).
    pub fn read_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        let Some((bytes, found)) = self.read(name)? else {
            return Ok(None);
        };
        trust::identity_file(
            &found,
            &self.file(name).display().to_string(),
            self.agent_uid,
        )?;
        Ok(Some(bytes))
    }

    /// The site `site.json` describes: `Ok(None)` on a siteless node; a file the node cannot
    /// trust or read is an error naming why.
    pub fn site(&self) -> Result<Option<crate::domain::site::Site>, SiteError> {
        match self.read_secret(SITE) {
            Ok(None) => Ok(None),
            Ok(Some(bytes)) => Ok(Some(crate::domain::site::Site::parse(&bytes)?)),
            Err(error) => Err(error.into()),
        }
    }

    /// Writes a file whole with `mode`: a new temporary file beside it (never an existing
    /// one, never through a link), fsynced, renamed over the target, the directory fsynced.
    pub fn write(&self, name: &str, bytes: &[u8], mode: u32) -> Result<(), StateError> {
        let target = self.file(name);
        let temporary = self.file(&format!(
            ".{name}.{}.{:016x}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(NOFOLLOW)
                .open(&temporary)?;
            file.set_permissions(fs::Permissions::from_mode(mode))?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&temporary, &target)?;
            File::open(&self.path)?.sync_all()
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temporary);
        }
        written.map_err(io(&target))
    }

    pub fn write_json<T: Serialize>(
        &self,
        name: &str,
        value: &T,
        mode: u32,
    ) -> Result<(), StateError> {
        let mut bytes = serde_json::to_vec_pretty(value).expect("state serializes");
        bytes.push(b'\n');
        self.write(name, &bytes, mode)
    }

    pub fn read_json<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StateError> {
        let Some((bytes, _)) = self.read(name)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| StateError::Corrupt {
                path: self.file(name).display().to_string(),
                reason: error.to_string(),
            })
    }

    /// Removes a file (a link is removed as a link, never followed); whether it was there.
    pub fn remove(&self, name: &str) -> Result<bool, StateError> {
        let path = self.file(name);
        match fs::remove_file(&path) {
            Ok(()) => {
                File::open(&self.path)
                    .and_then(|dir| dir.sync_all())
                    .map_err(io(&self.path))?;
                Ok(true)
            }
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(false),
            Err(error) => Err(io(&path)(error)),
        }
    }

    /// Whether a marker is present (a link does not count as one).
    pub fn has_marker(&self, name: &str) -> bool {
        fs::symlink_metadata(self.file(name)).is_ok_and(|metadata| metadata.is_file())
    }

    /// Names in the directory starting with `prefix`.
    pub fn names_with_prefix(&self, prefix: &str) -> Result<Vec<String>, StateError> {
        let mut names: Vec<String> = fs::read_dir(&self.path)
            .map_err(io(&self.path))?
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Takes the exclusive lock `name` if nobody holds it; released when the guard drops.
    pub fn try_lock(&self, name: &str) -> Result<Option<LockGuard>, StateError> {
        let file = self.lock_file(name)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(LockGuard { _file: file })),
            Err(error) if error == rustix::io::Errno::WOULDBLOCK => Ok(None),
            Err(error) => Err(io(&self.file(name))(error.into())),
        }
    }

    /// Waits for the exclusive lock `name` (blocking: call from a blocking thread).
    pub fn lock(&self, name: &str) -> Result<LockGuard, StateError> {
        let file = self.lock_file(name)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|error| io(&self.file(name))(error.into()))?;
        Ok(LockGuard { _file: file })
    }

    fn lock_file(&self, name: &str) -> Result<File, StateError> {
        let path = self.file(name);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(NOFOLLOW)
            .open(&path)
            .map_err(|error| {
                if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                    Distrust::Link {
                        path: path.display().to_string(),
                    }
                    .into()
                } else {
                    io(&path)(error)
                }
            })
    }

    /// The identity, if the node has one; its file must be the agent's and 0600.
    pub fn identity(&self) -> Result<Option<Identity>, StateError> {
        let Some((bytes, found)) = self.read(IDENTITY)? else {
            return Ok(None);
        };
        let path = self.file(IDENTITY).display().to_string();
        trust::identity_file(&found, &path, self.agent_uid)?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| StateError::Corrupt {
                path,
                reason: error.to_string(),
            })
    }

    pub fn save_identity(&self, identity: &Identity) -> Result<(), StateError> {
        self.write_json(IDENTITY, identity, 0o600)
    }

    /// The policy as the node will apply it: a missing file is the shipped policy; a file
    /// another user could have written, a link, or one that does not parse accepts nothing.
    pub fn policy(&self) -> PolicyState {
        match self.read_deciding(POLICY) {
            Ok(None) => PolicyState::Shipped,
            Ok(Some(bytes)) => match Policy::parse(&bytes) {
                Ok(policy) => PolicyState::File(policy),
                Err(reason) => PolicyState::Untrusted(reason.0),
            },
            Err(error) => PolicyState::Untrusted(error.to_string()),
        }
    }

    /// The owner's log access switch: on only when a trusted `log_access` file says `on`.
    pub fn log_access(&self) -> (bool, Option<String>) {
        match self.read_deciding(LOG_ACCESS) {
            Ok(Some(bytes)) => (String::from_utf8_lossy(&bytes).trim() == "on", None),
            Ok(None) => (false, None),
            Err(error) => (false, Some(format!("log access is off: {error}"))),
        }
    }

    pub fn enabled(&self) -> bool {
        self.has_marker(ENABLED)
    }
}

/// An exclusive lock, released when dropped.
#[derive(Debug)]
pub struct LockGuard {
    _file: File,
}

/// The identity file: the node's key, the plane it belongs to, and where its pairing stands.
#[derive(Clone, Serialize, Deserialize)]
pub struct Identity {
    pub management_node: String,
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    /// Standard base64 of the 32 secret bytes. Never sent, never logged.
    secret_key: String,
    pub pairing: Pairing,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Identity")
            .field("management_node", &self.management_node)
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint)
            .field("pairing", &self.pairing)
            .finish_non_exhaustive()
    }
}

impl Identity {
    pub fn new(management_node: String, name: String, key: &NodeKey, pairing: Pairing) -> Identity {
        let public_key = key.public_key();
        Identity {
            management_node,
            name,
            public_key: public_key.to_base64(),
            fingerprint: public_key.fingerprint().to_string(),
            secret_key: STANDARD.encode(key.secret_bytes()),
            pairing,
        }
    }

    /// The signing key, checked against the public half and fingerprint on file.
    pub fn key(&self) -> Result<NodeKey, BadIdentity> {
        let secret = STANDARD
            .decode(&self.secret_key)
            .map_err(|_| BadIdentity::from("the identity's secret key is not base64"))?;
        let key = NodeKey::from_secret_bytes(&secret).map_err(|error| error.to_string())?;
        let public_key = key.public_key();
        if public_key.to_base64() != self.public_key
            || public_key.fingerprint().as_str() != self.fingerprint
        {
            return Err("the identity's secret key does not match its public key".into());
        }
        Ok(key)
    }
}

/// What the running agent last saw, written for `status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunStatus {
    pub pid: u32,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
    /// connected, unreachable, rate limited, disabled, not paired, disconnected, joining.
    pub connection: String,
    pub last_claim_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The last claim's answer in words: no job, or the job it brought.
    pub last_claim: Option<String>,
    pub last_error: Option<String>,
    /// A job the previous run was in the middle of when it stopped.
    pub crashed_job: Option<String>,
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch() -> (tempfile::TempDir, StateDir) {
        let parent = tempfile::tempdir().unwrap();
        let state = StateDir::open(&parent.path().join("state")).unwrap();
        (parent, state)
    }

    #[test]
    fn a_new_state_directory_is_made_0700() {
        let (_parent, state) = scratch();
        let mode = fs::metadata(state.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_state_directory_that_is_a_link_or_open_to_others_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let real = parent.path().join("real");
        fs::DirBuilder::new().mode(0o700).create(&real).unwrap();
        let link = parent.path().join("link");
        symlink(&real, &link).unwrap();
        assert!(matches!(
            StateDir::open(&link),
            Err(StateError::Distrusted(Distrust::Link { .. }))
        ));
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            StateDir::open(&real),
            Err(StateError::Distrusted(Distrust::OpenDirectory { .. }))
        ));
    }

    #[test]
    fn a_file_is_written_whole_with_its_mode_and_no_temporary_is_left() {
        let (_parent, state) = scratch();
        state.write("x.json", b"one", 0o600).unwrap();
        state.write("x.json", b"two", 0o600).unwrap();
        assert_eq!(fs::read(state.file("x.json")).unwrap(), b"two");
        let mode = fs::metadata(state.file("x.json"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(state.names_with_prefix(".").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_link_planted_where_a_state_file_should_be_is_refused_and_not_followed() {
        let (parent, state) = scratch();
        let elsewhere = parent.path().join("elsewhere");
        fs::write(&elsewhere, br#"{"read":"accept"}"#).unwrap();
        symlink(&elsewhere, state.file(POLICY)).unwrap();
        assert!(matches!(
            state.read(POLICY),
            Err(StateError::Distrusted(Distrust::Link { .. }))
        ));
        assert!(
            matches!(state.policy(), PolicyState::Untrusted(reason) if reason.contains("symbolic link"))
        );
        // Writing replaces the link itself; the file it pointed at is untouched.
        state.write(POLICY, b"{}", 0o600).unwrap();
        assert_eq!(fs::read(&elsewhere).unwrap(), br#"{"read":"accept"}"#);
    }

    #[test]
    fn ag_02_a_policy_writable_by_others_makes_the_node_accept_nothing() {
        let (_parent, state) = scratch();
        state
            .write(POLICY, br#"{"destructive":"refuse"}"#, 0o644)
            .unwrap();
        assert!(matches!(state.policy(), PolicyState::File(_)));
        fs::set_permissions(state.file(POLICY), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            matches!(state.policy(), PolicyState::Untrusted(reason) if reason.contains("mode 666"))
        );
    }

    #[test]
    fn ag_05_the_identity_is_0600_keeps_the_key_and_debug_never_shows_the_secret() {
        let (_parent, state) = scratch();
        let key = NodeKey::generate();
        let identity = Identity::new(
            "https://plane.example".into(),
            "web-1".into(),
            &key,
            Pairing::Disconnected {
                since: chrono::Utc::now(),
                reason: "test".into(),
            },
        );
        state.save_identity(&identity).unwrap();
        let mode = fs::metadata(state.file(IDENTITY))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let again = state.identity().unwrap().unwrap();
        assert_eq!(again.key().unwrap().public_key(), key.public_key());
        let shown = format!("{again:?}");
        assert!(
            !shown.contains(&STANDARD.encode(key.secret_bytes())),
            "{shown}"
        );
        fs::set_permissions(state.file(IDENTITY), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            state.identity(),
            Err(StateError::Distrusted(Distrust::ReadableSecret { .. }))
        ));
    }

    #[test]
    fn the_job_lock_is_held_by_one_holder_at_a_time() {
        let (_parent, state) = scratch();
        let held = state.try_lock(JOB_LOCK).unwrap();
        assert!(held.is_some());
        assert!(state.try_lock(JOB_LOCK).unwrap().is_none());
        drop(held);
        assert!(state.try_lock(JOB_LOCK).unwrap().is_some());
    }

    #[test]
    fn log_access_is_on_only_when_a_trusted_switch_says_on() {
        let (_parent, state) = scratch();
        assert!(!state.log_access().0);
        state.write(LOG_ACCESS, b"on\n", 0o600).unwrap();
        assert!(state.log_access().0);
        state.write(LOG_ACCESS, b"off\n", 0o600).unwrap();
        assert!(!state.log_access().0);
        state.write(LOG_ACCESS, b"on\n", 0o666).unwrap();
        let (on, note) = state.log_access();
        assert!(!on);
        assert!(note.unwrap().contains("mode 666"));
    }
}
