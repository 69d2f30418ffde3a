//! The backup words on the node (issue 14; the contract in docs/backups.md): `backup_run`,
//! `verify_backup`, `list_backups`, `restore_database` and `restore_project`. The node never
//! holds a storage credential: every object is read or written at a URL the plane's broker
//! presigned for the running job. Artifacts are sealed with age to the owner's proven
//! recovery key and the node's site key; the manifest is signed with the node's own key.

pub mod beneath;
pub mod database;
pub mod files;
pub mod keys;
pub mod transfer;

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

    /// `backup_run {seq, kind, previous_seq}`.
    pub async fn backup_run(&self, params: &Value) -> Result<Value, BackupError> {
        let seq = seq_param(params, "seq")?;
        let asked = match params.get("kind").and_then(Value::as_str) {
            Some("full") => Kind::Full,
            Some("incremental") => Kind::Incremental,
            _ => return Err("kind must be full or incremental".into()),
        };
        let previous_seq = match (asked, params.get("previous_seq")) {
            (Kind::Incremental, Some(_)) => Some(seq_param(params, "previous_seq")?),
            (Kind::Incremental, None) => return Err("an incremental run needs previous_seq".into()),
            (Kind::Full, None | Some(Value::Null)) => None,
            (Kind::Full, Some(_)) => return Err("a full run takes no previous_seq".into()),
        };
        if previous_seq.is_some_and(|previous| previous >= seq) {
            return Err("previous_seq must be lower than seq".into());
        }
        let site = self.site()?;
        let site_key = keys::site_key(self.state)?;
        let mut recipients = Vec::new();
        let mut sealed_to = Vec::new();
        if let Some(owner) = keys::proven_recovery_recipient(self.state) {
            sealed_to.push(Recipient {
                role: "owner".into(),
                recipient: owner.to_string(),
            });
            recipients.push(owner);
        }
        sealed_to.push(Recipient {
            role: "site".into(),
            recipient: site_key.to_public().to_string(),
        });
        recipients.push(site_key.to_public());
        let chain = self.chain();
        let extended = |previous: u64| {
            self.state.file(&index_name(previous)).is_file()
                && chain.iter().any(|run| run.seq == previous)
        };
        let (kind, note) = decide_kind(asked, previous_seq, extended);
        let (full_seq, previous_seq) = match kind {
            Kind::Full => (seq, None),
            Kind::Incremental => {
                let previous = previous_seq.expect("an incremental has a previous run");
                let full_seq = chain
                    .iter()
                    .find(|run| run.seq == previous)
                    .map(|run| run.full_seq)
                    .expect("decide_kind checked the chain");
                (full_seq, Some(previous))
            }
        };
        let started_at = Utc::now();
        let mut artifacts = Vec::new();
        let database = match &site.database {
            Some(source) => {
                let facts = database::connection(source)?;
                let (artifact, counts) = seal_and_upload(
                    &self.broker,
                    &self.objects,
                    recipients.clone(),
                    seq,
                    DATABASE_ARTIFACT,
                    "database",
                    move |out| database::dump(&facts, out),
                )
                .await?;
                artifacts.push(artifact);
                Some(counts)
            }
            None => None,
        };
        let index_tmp = self.state.file(&format!(".{}.tmp", index_name(seq)));
        let removed_tmp = self.state.file(&format!(".backup-removed-{seq}.tmp"));
        let _ = std::fs::remove_file(&index_tmp);
        let _ = std::fs::remove_file(&removed_tmp);
        let old_index = previous_seq.map(|previous| self.state.file(&index_name(previous)));
        let walked = {
            let site = site.clone();
            let index_tmp = index_tmp.clone();
            let removed_tmp = removed_tmp.clone();
            seal_and_upload(
                &self.broker,
                &self.objects,
                recipients,
                seq,
                FILES_ARTIFACT,
                "files",
                move |out| {
                    let old = old_index
                        .map(|path| files::OldIndex::open(&path))
                        .transpose()?;
                    files::write_tar(&site, out, old, &index_tmp, &removed_tmp)
                },
            )
            .await
        };
        let _ = std::fs::remove_file(&removed_tmp);
        let (artifact, walked) = match walked {
            Ok(walked) => walked,
            Err(error) => {
                let _ = std::fs::remove_file(&index_tmp);
                return Err(error.into());
            }
        };
        artifacts.push(artifact);
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            node_fingerprint: self.fingerprint(),
            seq,
            kind,
            full_seq,
            previous_seq,
            started_at,
            finished_at: Utc::now(),
            recipients: sealed_to,
            artifacts,
            files: walked.counts,
            database,
            removed_list: walked.removed_list,
        };
        let bytes = serde_json::to_vec(&manifest).expect("a manifest serializes");
        let signature = STANDARD.encode(self.node_key.sign(&bytes));
        // The signature, then the manifest: written last, after every part landed.
        let name = manifest_name(seq);
        let put = |name: String, body: Vec<u8>| async move {
            let url = url_for(&self.broker, UrlOp::Put, &key(seq, &name)).await?;
            self.objects.put(&url, body.into()).await?;
            Ok::<(), BackupError>(())
        };
        let node_key = public_key_pem(self.node_key.public_key().as_bytes());
        let landed = async {
            // The node's public key beside the manifest, for a check by hand (issue 27).
            put(NODE_KEY_OBJECT.to_string(), node_key.into_bytes()).await?;
            put(format!("{name}.sig"), signature.clone().into_bytes()).await?;
            put(name.clone(), bytes.clone()).await
        }
        .await;
        if let Err(error) = landed {
            let _ = std::fs::remove_file(&index_tmp);
            return Err(error);
        }
        std::fs::rename(&index_tmp, self.state.file(&index_name(seq)))
            .map_err(|error| format!("the local index cannot be kept: {error}"))?;
        self.record(ChainRun {
            seq,
            kind,
            full_seq,
            previous_seq,
            finished_at: manifest.finished_at,
        })?;
        // The manifest's exact bytes and the node's public key travel with it, so the plane
        // checks the signature against the key the node was approved with.
        let mut result = json!({
            "seq": seq,
            "kind": kind,
            "manifest": manifest,
            "manifest_sig": signature,
            "manifest_text": String::from_utf8_lossy(&bytes),
            "node_key": self.node_key.public_key().to_base64(),
        });
        if let Some(note) = note {
            result["note"] = json!(note);
        }
        if !walked.notes.is_empty() {
            result["notes"] = json!(walked.notes.iter().take(20).collect::<Vec<_>>());
        }
        Ok(result)
    }

    /// Adds a run to the node's record and keeps the newest local indexes.
    fn record(&self, run: ChainRun) -> Result<(), BackupError> {
        let mut chain = self.chain();
        chain.retain(|held| held.seq != run.seq);
        chain.push(run);
        chain.sort_by_key(|held| held.seq);
        if chain.len() > CHAIN_KEPT {
            chain.drain(..chain.len() - CHAIN_KEPT);
        }
        self.state
            .write_json(CHAIN, &chain, 0o600)
            .map_err(|error| error.to_string())?;
        let mut indexes: Vec<u64> = self
            .state
            .names_with_prefix("backup-index-")
            .map_err(|error| error.to_string())?
            .iter()
            .filter_map(|name| name.strip_prefix("backup-index-")?.parse().ok())
            .collect();
        indexes.sort_unstable();
        if indexes.len() > INDEXES_KEPT {
            for seq in &indexes[..indexes.len() - INDEXES_KEPT] {
                let _ = self.state.remove(&index_name(*seq));
            }
        }
        Ok(())
    }

    /// The manifests of the chain that ends at `seq`, newest first, each signature checked
    /// against this node's key. `Err` when the check could not run; a manifest missing,
    /// unsigned or not this node's is a problem.
    async fn chain_manifests(
        &self,
        seq: u64,
    ) -> Result<Result<Vec<Manifest>, Problem>, BackupError> {
        let public = self.node_key.public_key();
        let mut manifests: Vec<Manifest> = Vec::new();
        let mut next = Some(seq);
        while let Some(seq) = next {
            if manifests.len() >= MAX_CHAIN {
                return Ok(Err(
                    format!("the chain is longer than {MAX_CHAIN} runs").into()
                ));
            }
            let name = manifest_name(seq);
            let urls = self
                .broker
                .urls(
                    UrlOp::Get,
                    &[key(seq, &name), key(seq, &format!("{name}.sig"))],
                )
                .await?;
            let (Some(manifest_url), Some(sig_url)) = (urls.first(), urls.get(1)) else {
                return Err("the broker gave fewer URLs than asked".into());
            };
            let bytes = match self.objects.get_small(manifest_url, 4 * 1024 * 1024).await {
                Ok(bytes) => bytes,
                Err(error) if error.is_not_found() => {
                    return Ok(Err(format!(
                        "the manifest of run {seq} is missing from storage"
                    )
                    .into()))
                }
                Err(error) => return Err(error.into()),
            };
            let signature = match self.objects.get_small(sig_url, 4096).await {
                Ok(signature) => signature,
                Err(error) if error.is_not_found() => {
                    return Ok(Err(format!(
                        "the signature of run {seq}'s manifest is missing"
                    )
                    .into()))
                }
                Err(error) => return Err(error.into()),
            };
            let signed = STANDARD
                .decode(String::from_utf8_lossy(&signature).trim())
                .ok()
                .is_some_and(|signature| public.verify(&bytes, &signature).is_ok());
            if !signed {
                return Ok(Err(format!(
                    "the manifest of run {seq} is not signed by this node's key"
                )
                .into()));
            }
            let manifest: Manifest = match serde_json::from_slice(&bytes) {
                Ok(manifest) => manifest,
                Err(error) => {
                    return Ok(Err(format!(
                        "the manifest of run {seq} does not read: {error}"
                    )
                    .into()))
                }
            };
            if manifest.seq != seq || manifest.node_fingerprint != self.fingerprint() {
                return Ok(Err(format!(
                    "the manifest of run {seq} is not this node's run {seq}"
                )
                .into()));
            }
            next = match manifest.kind {
                Kind::Full => None,
                Kind::Incremental => manifest.previous_seq,
            };
            manifests.push(manifest);
        }
        Ok(Ok(manifests))
    }

    /// `verify_backup {seq, level}`: level 2 opens and reads every artifact of the chain up to
    /// `seq`; level 3 rehearses the restore into a scratch database and directory and compares
    /// the counts with the manifest.
    pub async fn verify_backup(&self, params: &Value) -> Result<Value, BackupError> {
        let seq = seq_param(params, "seq")?;
        let level = params
            .get("level")
            .and_then(Value::as_u64)
            .filter(|level| (2..=3).contains(level))
            .ok_or("level must be 2 or 3")?;
        let site = self.site()?;
        let checked = self.check(seq, &site, level == 3).await?;
        Ok(json!({
            "seq": seq,
            "level": level,
            "ok": checked.problems.is_empty(),
            "checked": {"artifacts": checked.artifacts, "bytes": checked.bytes,
                        "files": checked.files, "tables": checked.tables},
            "problems": checked.problems,
        }))
    }

    /// Opens and reads (or, `rehearse`, restores into scratch) the chain up to `seq`.
    async fn check(&self, seq: u64, site: &Site, rehearse: bool) -> Result<Checked, BackupError> {
        let mut checked = Checked::default();
        let manifests = match self.chain_manifests(seq).await? {
            Ok(manifests) => manifests,
            Err(problem) => {
                checked.problems.push(problem.to_string());
                return Ok(checked);
            }
        };
        let order = match replay_order(&manifests) {
            Ok(order) => order,
            Err(problem) => {
                checked.problems.push(problem.to_string());
                return Ok(checked);
            }
        };
        let chosen = manifests[0].clone();
        let identity = keys::read_site_key(self.state)?
            .ok_or("this node has no site key, so it cannot open its backups (the recovery key still can, by hand)")?;
        let scratch_dir = if rehearse {
            Some(scratch_directory(&site.root, seq)?)
        } else {
            None
        };
        let facts = match (&site.database, rehearse) {
            (Some(source), true) => Some(database::connection(source)?),
            _ => None,
        };
        let scratch_db = match (&facts, &chosen.database) {
            (Some(facts), Some(_)) => Some(database::Scratch::create(facts, seq)?),
            _ => None,
        };
        for run in order {
            let manifest = manifests
                .iter()
                .find(|manifest| manifest.seq == run)
                .expect("the order is of these manifests");
            for artifact in &manifest.artifacts {
                checked.artifacts += 1;
                let identity = identity.clone();
                let outcome = match artifact.what.as_str() {
                    "files" => {
                        let target = scratch_dir.clone();
                        let removal = manifest.removal();
                        fetch_and_open(
                            &self.broker,
                            &self.objects,
                            identity,
                            artifact,
                            move |input| {
                                match &target {
                                    Some(target) => files::apply_tar(input, target, &removal),
                                    None => files::read_tar(input, &removal),
                                }
                                .map(|applied| (applied.files, 0))
                            },
                        )
                        .await?
                    }
                    "database" => {
                        let restore_into = match (&scratch_db, &facts) {
                            (Some(scratch), Some(facts)) if run == seq => {
                                Some((facts.clone(), scratch.name.clone()))
                            }
                            _ => None,
                        };
                        fetch_and_open(
                            &self.broker,
                            &self.objects,
                            identity,
                            artifact,
                            move |input| match restore_into {
                                Some((facts, name)) => {
                                    database::restore(&facts, Some(&name), input)
                                        .and_then(|()| database::counts(&facts, Some(&name)))
                                        .map(|counts| (0, counts.tables))
                                }
                                None => database::list(input).map(|_| (0, 0)),
                            },
                        )
                        .await?
                    }
                    other => {
                        checked.problems.push(format!(
                            "run {run} has an artifact of unknown kind {other:?}"
                        ));
                        continue;
                    }
                };
                let (value, fetched) = outcome;
                checked.bytes += fetched.bytes;
                checked.problems.extend(
                    fetched
                        .problems
                        .into_iter()
                        .map(|problem| format!("run {run}: {problem}")),
                );
                if let Some((files, tables)) = value {
                    checked.files += files;
                    if run == seq && artifact.what == "database" {
                        checked.tables = if rehearse {
                            tables
                        } else {
                            chosen.database.map_or(0, |d| d.tables)
                        };
                    }
                }
            }
        }
        if rehearse && checked.problems.is_empty() {
            if let (Some(scratch), Some(facts), Some(expected)) =
                (&scratch_db, &facts, chosen.database)
            {
                let restored = database::counts(facts, Some(&scratch.name))?;
                if restored != expected {
                    checked.problems.push(format!(
                        "the rehearsal restored {} tables and {} rows; the manifest says {} and {}",
                        restored.tables, restored.rows, expected.tables, expected.rows
                    ));
                }
            }
            if let Some(directory) = &scratch_dir {
                let (restored, _) = files::count_files(directory)?;
                if chosen.files.total != restored {
                    checked.problems.push(format!(
                        "the rehearsal restored {restored} files; the manifest says the site held {}",
                        chosen.files.total
                    ));
                }
            }
        }
        if let Some(directory) = scratch_dir {
            let _ = std::fs::remove_dir_all(directory);
        }
        drop(scratch_db);
        Ok(checked)
    }

    /// `restore_database {seq}` / `restore_project {seq}`: tests the archive first, then
    /// replaces the database (and, for a project, the site's files), keeping a safety snapshot
    /// of what it replaces when there is room.
    pub async fn restore(&self, params: &Value, project: bool) -> Result<Value, BackupError> {
        let seq = seq_param(params, "seq")?;
        let site = self.site()?;
        // Test the archive before anything is destroyed.
        let manifests = match self.chain_manifests(seq).await? {
            Ok(manifests) => manifests,
            Err(problem) => return Err(format!("nothing was restored: {problem}").into()),
        };
        let chosen = manifests[0].clone();
        if chosen.node_fingerprint != self.fingerprint() {
            return Err("nothing was restored: this backup was made by another node".into());
        }
        let order = replay_order(&manifests)
            .map_err(|problem| format!("nothing was restored: {problem}"))?;
        let tested = self.check(seq, &site, false).await?;
        if !tested.problems.is_empty() {
            return Err(format!(
                "nothing was restored: the archive did not pass its test: {}",
                tested.problems.join("; ")
            )
            .into());
        }
        let identity = keys::read_site_key(self.state)?.ok_or("this node has no site key")?;
        prune_safety(self.state, &site.root);
        let stamp = Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
        let mut snapshots = Vec::new();
        let mut restored = serde_json::Map::new();
        // The files first: built beside the site, swapped in whole only once complete.
        let mut swap = None;
        if project {
            let building = sibling(&site.root, &format!("capstan-restore-{seq}"))?;
            let _ = std::fs::remove_dir_all(&building);
            std::fs::create_dir(&building)
                .map_err(|error| format!("{}: {error}", building.display()))?;
            let mut count = 0;
            for run in &order {
                let manifest = manifests
                    .iter()
                    .find(|m| m.seq == *run)
                    .expect("in the chain");
                let Some(artifact) = manifest.artifact("files") else {
                    continue;
                };
                let target = building.clone();
                let removal = manifest.removal();
                let (applied, fetched) = fetch_and_open(
                    &self.broker,
                    &self.objects,
                    identity.clone(),
                    artifact,
                    move |input| files::apply_tar(input, &target, &removal),
                )
                .await?;
                if applied.is_none() {
                    let _ = std::fs::remove_dir_all(&building);
                    return Err(format!(
                        "nothing was restored: run {run}'s files could not be unpacked: {}",
                        fetched.problems.join("; ")
                    )
                    .into());
                }
            }
            if let Ok((files, _)) = files::count_files(&building) {
                count = files;
            }
            restored.insert("files".into(), json!(count));
            swap = Some(building);
        }
        if let (Some(source), Some(artifact)) = (&site.database, chosen.artifact("database")) {
            let facts = database::connection(source)?;
            if let Some(snapshot) = safety_dump(self.state, &facts, &stamp).await {
                snapshots.push(snapshot);
            }
            let reset = facts.clone();
            tokio::task::spawn_blocking(move || database::reset_public_schema(&reset)).await??;
            let loading = facts.clone();
            let (loaded, fetched) = fetch_and_open(
                &self.broker,
                &self.objects,
                identity.clone(),
                artifact,
                move |input| database::restore(&loading, None, input),
            )
            .await?;
            if loaded.is_none() {
                return Err(format!(
                    "the database load stopped at its first error (the public schema was recreated; the safety snapshot is {}): {}",
                    snapshots.first().map_or("none".to_string(), |path: &PathBuf| path.display().to_string()),
                    fetched.problems.join("; ")
                ).into());
            }
            let counted = facts.clone();
            let counts =
                tokio::task::spawn_blocking(move || database::counts(&counted, None)).await??;
            restored.insert("tables".into(), json!(counts.tables));
            restored.insert("rows".into(), json!(counts.rows));
        }
        if let Some(building) = swap {
            let kept = sibling(&site.root, &format!("capstan-safety-{stamp}"))?;
            std::fs::rename(&site.root, &kept)
                .map_err(|error| format!("the site's files cannot be moved aside: {error}"))?;
            if let Err(error) = std::fs::rename(&building, &site.root) {
                let _ = std::fs::rename(&kept, &site.root);
                return Err(
                    format!("the restored files cannot be moved into place: {error}").into(),
                );
            }
            // Its age is counted from the restore, not from the files' last change.
            if let Ok(directory) = std::fs::File::open(&kept) {
                let _ = directory.set_modified(std::time::SystemTime::now());
            }
            snapshots.push(kept);
        }
        Ok(json!({
            "seq": seq,
            "restored": restored,
            "safety_snapshot": snapshots.first().map(|path| path.display().to_string()),
            "safety_snapshots": snapshots.iter().map(|path| path.display().to_string()).collect::<Vec<_>>(),
        }))
    }
}

#[derive(Debug, Default)]
struct Checked {
    artifacts: u64,
    bytes: u64,
    files: u64,
    tables: u64,
    problems: Vec<String>,
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

/// A `pg_dump` of the database about to be replaced, in the state directory's `safety/`, when
/// the filesystem has room for twice the database's size.
async fn safety_dump(
    state: &StateDir,
    facts: &crate::domain::site::ConnectionFacts,
    stamp: &str,
) -> Option<PathBuf> {
    let directory = state.file("safety");
    let facts = facts.clone();
    let path = directory.join(format!("db-{stamp}.dump"));
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&directory).ok()?;
        let size: u64 = database::psql(&facts, None, "SELECT pg_database_size(current_database())")
            .ok()?
            .parse()
            .ok()?;
        let (_, available) = crate::words::filesystem_space(&directory).ok()?;
        if available < size.saturating_mul(2) {
            return None;
        }
        let mut file = std::fs::File::create(&path).ok()?;
        match database::dump(&facts, &mut file) {
            Ok(_) => Some(path),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Removes safety snapshots older than seven days (in the state directory and beside the
/// site root).
fn prune_safety(state: &StateDir, root: &Path) {
    let cutoff =
        std::time::SystemTime::now() - std::time::Duration::from_secs(SAFETY_DAYS as u64 * 86_400);
    let old = |path: &Path| {
        std::fs::symlink_metadata(path)
            .and_then(|meta| meta.modified())
            .is_ok_and(|modified| modified < cutoff)
    };
    if let Ok(entries) = std::fs::read_dir(state.file("safety")) {
        for entry in entries.flatten() {
            if old(&entry.path()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    if let (Some(parent), Some(name)) = (root.parent(), root.file_name()) {
        let prefix = format!(".{}.capstan-safety-", name.to_string_lossy());
        if let Ok(entries) = std::fs::read_dir(parent) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) && old(&entry.path()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }
}

/// Whether `name` is one of the backup words.
pub fn is_backup_word(name: &str) -> bool {
    WORDS.contains(&name)
}
