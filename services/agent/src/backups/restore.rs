//! `restore_database` and `restore_project`: a checked run loaded over the site, the files
//! built beside the root and swapped in, a safety snapshot kept and old ones pruned.

use super::*;
use crate::domain::{
    backup::{Artifact, DatabaseCounts},
    site::ConnectionFacts,
};

impl<B: Broker> Backups<'_, B> {
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
            let (building, count) = self
                .build_files(seq, &site, &manifests, &order, &identity)
                .await?;
            restored.insert("files".into(), json!(count));
            swap = Some(building);
        }
        if let (Some(source), Some(artifact)) = (&site.database, chosen.artifact("database")) {
            let facts = database::connection(source)?;
            if let Some(snapshot) = safety_dump(self.state, &facts, &stamp).await {
                snapshots.push(snapshot);
            }
            let counts = self
                .load_database(&facts, artifact, &identity, snapshots.first())
                .await?;
            restored.insert("tables".into(), json!(counts.tables));
            restored.insert("rows".into(), json!(counts.rows));
        }
        if let Some(building) = swap {
            snapshots.push(swap_in(&site.root, &building, &stamp)?);
        }
        Ok(json!({
            "seq": seq,
            "restored": restored,
            "safety_snapshot": snapshots.first().map(|path| path.display().to_string()),
            "safety_snapshots": snapshots.iter().map(|path| path.display().to_string()).collect::<Vec<_>>(),
        }))
    }

    /// The chain's files unpacked, run by run in `order`, into a directory beside the site
    /// root; that directory and how many files it holds.
    async fn build_files(
        &self,
        seq: u64,
        site: &Site,
        manifests: &[Manifest],
        order: &[u64],
        identity: &age::x25519::Identity,
    ) -> Result<(PathBuf, u64), BackupError> {
        let building = sibling(&site.root, &format!("capstan-restore-{seq}"))?;
        let _ = std::fs::remove_dir_all(&building);
        std::fs::create_dir(&building)
            .map_err(|error| format!("{}: {error}", building.display()))?;
        let mut count = 0;
        for run in order {
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
        Ok((building, count))
    }

    /// The database artifact loaded over a recreated public schema; the tables and rows it
    /// holds afterwards. `snapshot` is named if the load stops.
    async fn load_database(
        &self,
        facts: &ConnectionFacts,
        artifact: &Artifact,
        identity: &age::x25519::Identity,
        snapshot: Option<&PathBuf>,
    ) -> Result<DatabaseCounts, BackupError> {
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
                snapshot.map_or("none".to_string(), |path: &PathBuf| path.display().to_string()),
                fetched.problems.join("; ")
            ).into());
        }
        let counted = facts.clone();
        Ok(tokio::task::spawn_blocking(move || database::counts(&counted, None)).await??)
    }
}

/// The restored files swapped in for the site's: the site's own moved aside as a safety
/// snapshot (put back if the swap fails); the snapshot's path.
fn swap_in(root: &Path, building: &Path, stamp: &str) -> Result<PathBuf, BackupError> {
    let kept = sibling(root, &format!("capstan-safety-{stamp}"))?;
    std::fs::rename(root, &kept)
        .map_err(|error| format!("the site's files cannot be moved aside: {error}"))?;
    if let Err(error) = std::fs::rename(building, root) {
        let _ = std::fs::rename(&kept, root);
        return Err(format!("the restored files cannot be moved into place: {error}").into());
    }
    // Its age is counted from the restore, not from the files' last change.
    if let Ok(directory) = std::fs::File::open(&kept) {
        let _ = directory.set_modified(std::time::SystemTime::now());
    }
    Ok(kept)
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
