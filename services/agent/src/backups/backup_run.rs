//! `backup_run`: the site's database and files sealed and uploaded as one run of the chain,
//! its manifest signed and put last, and the run recorded in the node's chain.

use super::*;
use crate::domain::{
    backup::{Artifact, DatabaseCounts},
    site::DatabaseSource,
};

impl<B: Broker> Backups<'_, B> {
    /// `backup_run {seq, kind, previous_seq}`.
    pub async fn backup_run(&self, params: &Value) -> Result<Value, BackupError> {
        let (seq, asked, previous_seq) = asked_run(params)?;
        let site = self.site()?;
        let (recipients, sealed_to) = self.recipients()?;
        let Placed {
            kind,
            note,
            full_seq,
            previous_seq,
        } = self.place(seq, asked, previous_seq);
        let started_at = Utc::now();
        let mut artifacts = Vec::new();
        let database = match &site.database {
            Some(source) => {
                let (artifact, counts) = self.seal_database(source, &recipients, seq).await?;
                artifacts.push(artifact);
                Some(counts)
            }
            None => None,
        };
        let index_tmp = self.state.file(&format!(".{}.tmp", index_name(seq)));
        let (artifact, walked) = self
            .seal_files(&site, recipients, seq, previous_seq, &index_tmp)
            .await?;
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
        if let Err(error) = self.put_manifest(seq, &bytes, &signature).await {
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
        Ok(self.run_result(&manifest, &bytes, signature, note, &walked.notes))
    }

    /// The site's files walked (all, or what changed since `previous_seq`'s index), sealed and
    /// uploaded; the new index is left at `index_tmp` (removed if the walk fails).
    async fn seal_files(
        &self,
        site: &Site,
        recipients: Vec<age::x25519::Recipient>,
        seq: u64,
        previous_seq: Option<u64>,
        index_tmp: &Path,
    ) -> Result<(Artifact, files::Walked), BackupError> {
        let removed_tmp = self.state.file(&format!(".backup-removed-{seq}.tmp"));
        let _ = std::fs::remove_file(index_tmp);
        let _ = std::fs::remove_file(&removed_tmp);
        let old_index = previous_seq.map(|previous| self.state.file(&index_name(previous)));
        let walked = {
            let site = site.clone();
            let index_tmp = index_tmp.to_path_buf();
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
        walked.map_err(|error| {
            let _ = std::fs::remove_file(index_tmp);
            error.into()
        })
    }

    /// The site's database dumped, sealed and uploaded; its artifact and counts.
    async fn seal_database(
        &self,
        source: &DatabaseSource,
        recipients: &[age::x25519::Recipient],
        seq: u64,
    ) -> Result<(Artifact, DatabaseCounts), BackupError> {
        let facts = database::connection(source)?;
        Ok(seal_and_upload(
            &self.broker,
            &self.objects,
            recipients.to_vec(),
            seq,
            DATABASE_ARTIFACT,
            "database",
            move |out| database::dump(&facts, out),
        )
        .await?)
    }

    /// The word's result: the manifest's exact bytes and the node's public key travel with
    /// it, so the plane checks the signature against the key the node was approved with.
    fn run_result(
        &self,
        manifest: &Manifest,
        bytes: &[u8],
        signature: String,
        note: Option<String>,
        notes: &[String],
    ) -> Value {
        let mut result = json!({
            "seq": manifest.seq,
            "kind": manifest.kind,
            "manifest": manifest,
            "manifest_sig": signature,
            "manifest_text": String::from_utf8_lossy(bytes),
            "node_key": self.node_key.public_key().to_base64(),
        });
        if let Some(note) = note {
            result["note"] = json!(note);
        }
        if !notes.is_empty() {
            result["notes"] = json!(notes.iter().take(20).collect::<Vec<_>>());
        }
        result
    }

    /// The age recipients a run is sealed to, and their record for the manifest: the owner's
    /// recovery key once proven, and the site key.
    fn recipients(&self) -> Result<(Vec<age::x25519::Recipient>, Vec<Recipient>), BackupError> {
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
        Ok((recipients, sealed_to))
    }

    /// Where the run sits in the chain: the kind it will be (an incremental whose previous run
    /// this node cannot extend becomes a full, with a note), and its full and previous runs.
    fn place(&self, seq: u64, asked: Kind, previous_seq: Option<u64>) -> Placed {
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
        Placed {
            kind,
            note,
            full_seq,
            previous_seq,
        }
    }

    /// The node's public key, the signature, then the manifest: written last, after every part
    /// landed.
    async fn put_manifest(
        &self,
        seq: u64,
        bytes: &[u8],
        signature: &str,
    ) -> Result<(), BackupError> {
        let name = manifest_name(seq);
        let put = |name: String, body: Vec<u8>| async move {
            let url = url_for(&self.broker, UrlOp::Put, &key(seq, &name)).await?;
            self.objects.put(&url, body.into()).await?;
            Ok::<(), BackupError>(())
        };
        let node_key = public_key_pem(self.node_key.public_key().as_bytes());
        // The node's public key beside the manifest, for a check by hand (issue 27).
        put(NODE_KEY_OBJECT.to_string(), node_key.into_bytes()).await?;
        put(format!("{name}.sig"), signature.as_bytes().to_vec()).await?;
        put(name, bytes.to_vec()).await
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
}

/// Where a run sits in the chain.
struct Placed {
    kind: Kind,
    /// Why an incremental asked for became a full.
    note: Option<String>,
    full_seq: u64,
    previous_seq: Option<u64>,
}

/// `backup_run`'s parameters: its seq, the kind asked for, and the run it extends.
fn asked_run(params: &Value) -> Result<(u64, Kind, Option<u64>), BackupError> {
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
    Ok((seq, asked, previous_seq))
}
