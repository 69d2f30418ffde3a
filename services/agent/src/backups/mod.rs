//! The backup words on the node (issue 14; the contract in docs/backups.md): `backup_run`,
//! `verify_backup`, `list_backups`, `restore_database` and `restore_project`. The node never
//! holds a storage credential: every object is read or written at a URL the plane's broker
//! presigned for the running job. Artifacts are sealed with age to the owner's proven
//! recovery key and the node's site key; the manifest is signed with the node's own key.

mod backup_run;
pub mod beneath;
pub mod database;
pub mod files;
pub mod keys;
mod restore;
pub mod transfer;
mod verify;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_signing::NodeKey;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::{
    domain::{
        backup::{
            decide_kind, key, manifest_name, public_key_pem, recovery_key_report, replay_order,
            BadBackup, Kind, Manifest, Recipient, DATABASE_ARTIFACT, FILES_ARTIFACT,
            MANIFEST_FORMAT, NODE_KEY_OBJECT,
        },
        site::Site,
    },
    plane::{ObjectError, Objects, UrlOp},
    state::StateDir,
    words::{describe, Failed, Finished, Redaction},
};
use database::DatabaseError;
use files::FilesError;
use keys::KeyError;
use transfer::{
    fetch_and_open, seal_and_upload, url_for, Broker, BrokerError, Problem, SealError,
    TransferError,
};

/// Why a backup word failed: the part that failed, or a refusal of what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Keys(#[from] KeyError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error(transparent)]
    BadBackup(#[from] BadBackup),
    #[error("{0}")]
    Stopped(#[from] tokio::task::JoinError),
    /// A parameter, a site or a backup this node will not use, the fault named (the job's
    /// reason as it is).
    #[error("{0}")]
    Refused(String),
}

impl From<String> for BackupError {
    fn from(refusal: String) -> BackupError {
        BackupError::Refused(refusal)
    }
}

impl From<&str> for BackupError {
    fn from(refusal: &str) -> BackupError {
        BackupError::Refused(refusal.to_string())
    }
}

impl<E: std::error::Error + Into<BackupError>> From<SealError<E>> for BackupError {
    fn from(error: SealError<E>) -> BackupError {
        match error {
            SealError::Transfer(error) => error.into(),
            SealError::Produce(error) => error.into(),
        }
    }
}

/// The words this module runs.
pub const WORDS: &[&str] = &[
    "backup_run",
    "verify_backup",
    "list_backups",
    "restore_database",
    "restore_project",
];

/// The node's record of its own runs (what `list_backups` shows; the node cannot list storage).
pub const CHAIN: &str = "backup_chain.json";
/// How many runs the record keeps.
const CHAIN_KEPT: usize = 200;
/// How many local indexes are kept (the newest extends the chain; older ones let a run the
/// plane did not record be skipped over).
const INDEXES_KEPT: usize = 3;
/// The most runs one chain may have (a guard while following `previous_seq`).
const MAX_CHAIN: usize = 10_000;
/// How long a safety snapshot is kept.
const SAFETY_DAYS: i64 = 7;

fn index_name(seq: u64) -> String {
    format!("backup-index-{seq}")
}

/// One run in the node's record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChainRun {
    pub seq: u64,
    pub kind: Kind,
    pub full_seq: u64,
    pub previous_seq: Option<u64>,
    pub finished_at: DateTime<Utc>,
}

/// What the backup words need: the state directory, the node's key (it signs manifests and is
/// the fingerprint a restore checks), a broker and the object client.
pub struct Backups<'a, B: Broker> {
    pub state: &'a StateDir,
    pub node_key: &'a NodeKey,
    pub broker: B,
    pub objects: Objects,
}

/// Runs backup word `name`.
pub async fn run<B: Broker>(
    backups: &Backups<'_, B>,
    name: &str,
    params: &Value,
) -> Result<Finished, Failed> {
    let result = match name {
        "backup_run" => backups.backup_run(params).await,
        "verify_backup" => backups.verify_backup(params).await,
        "list_backups" => Ok(backups.list_backups()),
        "restore_database" => backups.restore(params, false).await,
        "restore_project" => backups.restore(params, true).await,
        other => Err(format!("{other} is not a backup word").into()),
    };
    match result {
        // Issue 27: a verify that found the backup wanting is a failed job wherever the job is
        // shown; its verdict still travels as the result, which the backups service records.
        Ok(verdict) if name == "verify_backup" && verdict["ok"] != Value::Bool(true) => {
            Err(Failed {
                reason: verify_failure(&verdict),
                output: verdict.as_object().map(describe).unwrap_or_default(),
                result: verdict,
                refused: false,
            })
        }
        Ok(result) => Ok(Finished {
            output: result
                .as_object()
                .map(|object| {
                    let mut shown = object.clone();
                    shown.remove("manifest");
                    shown.remove("manifest_sig");
                    shown.remove("manifest_text");
                    shown.remove("node_key");
                    describe(&shown)
                })
                .unwrap_or_default(),
            result,
            // The manifest's bytes, their signature and the node's public key go as they are:
            // the plane checks the signature (everything else is redacted as text).
            redaction: Redaction::TextExcept(&["manifest_text", "manifest_sig", "node_key"]),
        }),
        Err(reason) => Err(Failed::new(reason)),
    }
}

/// The reason of a failed verify: what it found, in the node's words.
fn verify_failure(verdict: &Value) -> String {
    let problems: Vec<&str> = verdict["problems"]
        .as_array()
        .map(|problems| problems.iter().filter_map(Value::as_str).take(5).collect())
        .unwrap_or_default();
    format!(
        "run {} did not pass its level-{} verify: {}",
        verdict["seq"],
        verdict["level"],
        if problems.is_empty() {
            "no problem was named".to_string()
        } else {
            problems.join("; ")
        }
    )
}

fn seq_param(params: &Value, name: &str) -> Result<u64, BackupError> {
    params
        .get(name)
        .and_then(Value::as_u64)
        .filter(|seq| *seq >= 1)
        .ok_or_else(|| BackupError::Refused(format!("{name} must be a whole number from 1")))
}

impl<B: Broker> Backups<'_, B> {
    fn site(&self) -> Result<Site, BackupError> {
        match self.state.site() {
            Ok(Some(site)) => Ok(site),
            Ok(None) => Err("this node has no site.json: it is siteless and has no backups".into()),
            Err(error) => Err(format!("site.json cannot be used: {error}").into()),
        }
    }

    fn fingerprint(&self) -> String {
        self.node_key.public_key().fingerprint().to_string()
    }

    fn chain(&self) -> Vec<ChainRun> {
        self.state
            .read_json::<Vec<ChainRun>>(CHAIN)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    pub fn list_backups(&self) -> Value {
        let site = matches!(self.state.site(), Ok(Some(_)));
        let mut chain = self.chain();
        chain.reverse();
        let chain: Vec<Value> = chain
            .iter()
            .map(|run| json!({"seq": run.seq, "kind": run.kind, "finished_at": run.finished_at}))
            .collect();
        json!({
            "site": site,
            "chain": chain,
            "recovery_key": recovery_key_report(&keys::recovery_key(self.state), keys::recipient_parses),
        })
    }
}

/// `<parent>/.<root name>.<suffix>`: beside the site root, on its filesystem.
fn sibling(root: &Path, suffix: &str) -> Result<PathBuf, BackupError> {
    let parent = root
        .parent()
        .ok_or("the site root has no parent directory")?;
    let name = root
        .file_name()
        .ok_or("the site root has no name")?
        .to_string_lossy();
    Ok(parent.join(format!(".{name}.{suffix}")))
}

fn scratch_directory(root: &Path, seq: u64) -> Result<PathBuf, BackupError> {
    let directory = sibling(root, &format!("capstan-rehearse-{seq}"))?;
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir(&directory)
        .map_err(|error| format!("the scratch directory {}: {error}", directory.display()))?;
    Ok(directory)
}

/// Whether `name` is one of the backup words.
pub fn is_backup_word(name: &str) -> bool {
    WORDS.contains(&name)
}
