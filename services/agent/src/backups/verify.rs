//! `verify_backup` and the check a restore runs first: the chain's manifests read and
//! verified, each artifact fetched and opened, and at level 3 rehearsed into scratch.

use super::transfer::Fetched;
use super::*;
use crate::domain::{
    backup::{Artifact, Removal},
    site::ConnectionFacts,
};

impl<B: Broker> Backups<'_, B> {
    /// The manifests of the chain that ends at `seq`, newest first, each signature checked
    /// against this node's key. `Err` when the check could not run; a manifest missing,
    /// unsigned or not this node's is a problem.
    pub(super) async fn chain_manifests(
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
    pub(super) async fn check(
        &self,
        seq: u64,
        site: &Site,
        rehearse: bool,
    ) -> Result<Checked, BackupError> {
        let mut checked = Checked::default();
        let (manifests, order) = match self.chain_in_order(seq).await? {
            Ok(chain) => chain,
            Err(problem) => {
                checked.problems.push(problem.to_string());
                return Ok(checked);
            }
        };
        let chosen = manifests[0].clone();
        let identity = keys::read_site_key(self.state)?
            .ok_or("this node has no site key, so it cannot open its backups (the recovery key still can, by hand)")?;
        let (scratch_dir, facts) = rehearsal_targets(site, seq, rehearse)?;
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
                        self.open_files(identity, artifact, scratch_dir.clone(), manifest.removal())
                            .await?
                    }
                    "database" => {
                        let restore_into = match (&scratch_db, &facts) {
                            (Some(scratch), Some(facts)) if run == seq => {
                                Some((facts.clone(), scratch.name.clone()))
                            }
                            _ => None,
                        };
                        self.open_database(identity, artifact, restore_into).await?
                    }
                    other => {
                        checked.problems.push(format!(
                            "run {run} has an artifact of unknown kind {other:?}"
                        ));
                        continue;
                    }
                };
                // The chosen run's tables: counted in the rehearsal, else as its manifest says.
                let chosen_tables = (run == seq && artifact.what == "database").then(|| {
                    if rehearse {
                        None
                    } else {
                        Some(chosen.database.map_or(0, |d| d.tables))
                    }
                });
                checked.tally(run, outcome, chosen_tables);
            }
        }
        if rehearse && checked.problems.is_empty() {
            let scratch = scratch_db.as_ref().map(|scratch| scratch.name.as_str());
            judge_rehearsal(
                &chosen,
                scratch.zip(facts.as_ref()),
                scratch_dir.as_deref(),
                &mut checked.problems,
            )?;
        }
        if let Some(directory) = scratch_dir {
            let _ = std::fs::remove_dir_all(directory);
        }
        drop(scratch_db);
        Ok(checked)
    }

    /// The chain's manifests ending at `seq`, newest first, and the order to replay them in;
    /// `Ok(Err)` names why the chain cannot be checked.
    async fn chain_in_order(
        &self,
        seq: u64,
    ) -> Result<Result<(Vec<Manifest>, Vec<u64>), Problem>, BackupError> {
        let manifests = match self.chain_manifests(seq).await? {
            Ok(manifests) => manifests,
            Err(problem) => return Ok(Err(problem)),
        };
        Ok(replay_order(&manifests)
            .map(|order| (manifests, order))
            .map_err(|problem| Problem::from(problem.0)))
    }

    /// Fetches and opens a files artifact: applied into `target` (a rehearsal) or only read.
    async fn open_files(
        &self,
        identity: age::x25519::Identity,
        artifact: &Artifact,
        target: Option<PathBuf>,
        removal: Removal,
    ) -> Result<(Option<(u64, u64)>, Fetched), BackupError> {
        Ok(fetch_and_open(
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
        .await?)
    }

    /// Fetches and opens a database artifact: restored into the scratch database named in
    /// `restore_into` (a rehearsal of the chosen run), or only listed.
    async fn open_database(
        &self,
        identity: age::x25519::Identity,
        artifact: &Artifact,
        restore_into: Option<(ConnectionFacts, String)>,
    ) -> Result<(Option<(u64, u64)>, Fetched), BackupError> {
        Ok(fetch_and_open(
            &self.broker,
            &self.objects,
            identity,
            artifact,
            move |input| match restore_into {
                Some((facts, name)) => database::restore(&facts, Some(&name), input)
                    .and_then(|()| database::counts(&facts, Some(&name)))
                    .map(|counts| (0, counts.tables)),
                None => database::list(input).map(|_| (0, 0)),
            },
        )
        .await?)
    }
}

/// Where a rehearsal restores to: a scratch directory beside the site root and the site's
/// database connection; neither when it is not a rehearsal.
fn rehearsal_targets(
    site: &Site,
    seq: u64,
    rehearse: bool,
) -> Result<(Option<PathBuf>, Option<ConnectionFacts>), BackupError> {
    if !rehearse {
        return Ok((None, None));
    }
    let scratch_dir = scratch_directory(&site.root, seq)?;
    let facts = site
        .database
        .as_ref()
        .map(database::connection)
        .transpose()?;
    Ok((Some(scratch_dir), facts))
}

/// A rehearsal's restore against the chosen run's manifest: the scratch database's tables and
/// rows, and the scratch directory's files; each difference a problem.
fn judge_rehearsal(
    chosen: &Manifest,
    scratch_db: Option<(&str, &ConnectionFacts)>,
    scratch_dir: Option<&Path>,
    problems: &mut Vec<String>,
) -> Result<(), BackupError> {
    if let (Some((scratch, facts)), Some(expected)) = (scratch_db, chosen.database) {
        let restored = database::counts(facts, Some(scratch))?;
        if restored != expected {
            problems.push(format!(
                "the rehearsal restored {} tables and {} rows; the manifest says {} and {}",
                restored.tables, restored.rows, expected.tables, expected.rows
            ));
        }
    }
    if let Some(directory) = scratch_dir {
        let (restored, _) = files::count_files(directory)?;
        if chosen.files.total != restored {
            problems.push(format!(
                "the rehearsal restored {restored} files; the manifest says the site held {}",
                chosen.files.total
            ));
        }
    }
    Ok(())
}

impl Checked {
    /// Adds what opening one artifact of `run` found. `chosen_tables` is set for the chosen
    /// run's database: `Some(None)` takes the tables the rehearsal counted, `Some(Some(n))`
    /// the manifest's `n`.
    fn tally(
        &mut self,
        run: u64,
        (value, fetched): (Option<(u64, u64)>, Fetched),
        chosen_tables: Option<Option<u64>>,
    ) {
        self.bytes += fetched.bytes;
        self.problems.extend(
            fetched
                .problems
                .into_iter()
                .map(|problem| format!("run {run}: {problem}")),
        );
        if let Some((files, tables)) = value {
            self.files += files;
            if let Some(chosen) = chosen_tables {
                self.tables = chosen.unwrap_or(tables);
            }
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Checked {
    pub(super) artifacts: u64,
    pub(super) bytes: u64,
    pub(super) files: u64,
    pub(super) tables: u64,
    pub(super) problems: Vec<String>,
}
