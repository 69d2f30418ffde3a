//! The storage pass over one node (a task's work; BK-11..BK-13, BK-15, BK-17), with the plane's
//! own credential: list the node's folder in every live space (every page), read each
//! manifest the listing holds (one GET each) and compare it with the listing at the recorded
//! sizes, stamp what was seen (when listed, the newest write, the one-line problem), then let
//! retention delete exactly what the rules allow, each chain whole from its own space, and say
//! so (`pruned`) in the transaction that forgets it; then sweep the orphans (`domain/orphans.rs`:
//! run objects no recorded run claims, deleted a day after a pass first saw them).
//!
//! What the pass could not do is a fact about the pass, never about the storage: a listing that
//! failed leaves the stamps as they were and is retried next pass; a manifest that could not
//! be fetched leaves the problem line as it was. Nothing is deleted from a picture that is not
//! whole: a pass that could not list every space, or read every manifest, deletes nothing.

use capstan_events::NodeId;
use std::collections::{BTreeMap, BTreeSet};

use capstan_events::backups::Pruned;
use capstan_store::StoreError;
use chrono::{DateTime, Utc};

use crate::domain::keys::{manifest_name, object_key, space_prefix, NodeKey};
use crate::domain::orphans;
use crate::domain::retention::{self, Chain, Tiers, Verdict};
use crate::domain::shelf::{self, Manifest};
use crate::domain::survey::{self, ListedChain, ListedObject, Survey};
use crate::drivers::s3::Storage;
use crate::rpc::{self, State};
use crate::store::{self, Space};

/// What the pass is told about the node (from its policy and its verify records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassPolicy {
    /// BK-10: the days kept (`retention::keep_days`).
    pub keep_days: u32,
    pub tiers: Tiers,
    /// The seqs a verify passed for (BK-12's "verified chain").
    pub verified_seqs: BTreeSet<i64>,
}

/// What one pass saw and did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PassReport {
    /// Every live space listed.
    pub listed: bool,
    /// BK-15's line as stamped (`None`: whole, or left as it was when `errors` says why).
    pub problem: Option<String>,
    pub newest_write: Option<DateTime<Utc>>,
    /// Per space, the seqs deleted.
    pub deleted: BTreeMap<i64, Vec<i64>>,
    /// The orphan sweep: per space, the keys it deleted (`<seq>/<name>`)...
    pub orphans_deleted: BTreeMap<i64, Vec<String>>,
    /// ...and how many orphans it saw that wait out their day.
    pub orphans_waiting: usize,
    /// What the pass could not do.
    pub errors: Vec<String>,
}

struct SpaceLook {
    space: Space,
    prefix: String,
    survey: Survey,
    manifests: Vec<Manifest>,
}

/// What the pass read from storage: each live space's listing and manifests.
struct Picture {
    looks: Vec<SpaceLook>,
    /// Every live space listed.
    every_listed: bool,
    /// Every manifest the listings hold read.
    every_read: bool,
    /// BK-15: what the storage holds wrong, one line per run.
    problems: Vec<String>,
}

impl Picture {
    /// Nothing is deleted from a picture that is not whole.
    fn whole(&self) -> bool {
        self.every_listed && self.every_read
    }
}

/// What retention decided to mark in the database.
#[derive(Default)]
struct Marks {
    surplus: Vec<(i64, i64, DateTime<Utc>)>,
    kept: Vec<(i64, i64)>,
}

/// What the orphan sweep saw and deleted.
#[derive(Default)]
struct Orphans {
    seen: Vec<(i64, NodeKey, u64)>,
    forgotten: Vec<(i64, NodeKey)>,
    bytes_deleted: u64,
}

/// Runs the pass over `node` at `now`: read the storage, then retention and the orphan sweep
/// from a whole picture, then write what was seen and done in one transaction.
pub async fn pass_node(
    state: &State,
    node: NodeId,
    policy: &PassPolicy,
    now: DateTime<Utc>,
) -> Result<PassReport, StoreError> {
    let spaces = {
        let mut connection = state.store.pool().acquire().await?;
        store::shelf::live_spaces(&mut connection, node).await?
    };
    let mut report = PassReport::default();
    let picture = look(state, node, spaces, &mut report).await;
    report.listed = picture.every_listed;
    if picture.whole() {
        report.problem = problem_line(&picture.problems);
    }
    let mut marks = Marks::default();
    let mut orphans = Orphans::default();
    if picture.whole() {
        marks = prune(state, policy, &picture.looks, now, &mut report).await?;
        orphans = sweep_orphans(state, node, &picture.looks, now, &mut report).await?;
    }
    record(state, node, now, &picture, &report, marks, orphans).await?;
    Ok(report)
}

/// BK-15's one line: the first problem, and how many more there are.
fn problem_line(problems: &[String]) -> Option<String> {
    problems.first().map(|first| match problems.len() {
        1 => first.clone(),
        more => format!("{first} (and {} more)", more - 1),
    })
}

/// Lists the node's folder in every live space and reads each manifest the listing holds.
async fn look(state: &State, node: NodeId, spaces: Vec<Space>, report: &mut PassReport) -> Picture {
    let mut picture = Picture {
        looks: Vec::new(),
        every_listed: true,
        every_read: true,
        problems: Vec::new(),
    };
    for space in spaces {
        let storage = match rpc::storage(state, &space.target) {
            Ok(storage) => storage,
            Err(error) => {
                picture.every_listed = false;
                report
                    .errors
                    .push(format!("space {}: {}", space.id, error.message));
                continue;
            }
        };
        let prefix = space_prefix(&space.target.folder, space.id, node);
        let listed = match storage.list(&prefix).await {
            Ok(listed) => listed,
            Err(error) => {
                picture.every_listed = false;
                report.errors.push(format!("space {}: {error}", space.id));
                continue;
            }
        };
        let objects: Vec<ListedObject> = listed
            .into_iter()
            .map(|object| ListedObject {
                key: object.key,
                size: object.size,
                last_modified: object.last_modified,
            })
            .collect();
        let survey = survey::survey(&prefix, &objects);
        let manifests = read_manifests(&storage, &space, node, &survey, &mut picture, report).await;
        report.newest_write = report.newest_write.max(survey.newest_write);
        picture.looks.push(SpaceLook {
            space,
            prefix,
            survey,
            manifests,
        });
    }
    picture
}

/// Reads each manifest of one space's listing and checks it against the listing (BK-15).
async fn read_manifests(
    storage: &Storage,
    space: &Space,
    node: NodeId,
    survey: &Survey,
    picture: &mut Picture,
    report: &mut PassReport,
) -> Vec<Manifest> {
    let mut manifests = Vec::new();
    for &seq in &survey.manifests {
        let key = object_key(
            &space.target.folder,
            space.id,
            node,
            &NodeKey {
                seq,
                name: manifest_name(seq),
            },
        );
        match storage.get(&key).await {
            Ok(Some(bytes)) => match shelf::parse_manifest(&bytes, seq) {
                Ok(manifest) => {
                    if let Some(problem) = shelf::check(&manifest, &survey.objects) {
                        picture.problems.push(problem);
                    }
                    manifests.push(manifest);
                }
                // A manifest that is there but does not read is the storage's problem.
                Err(problem) => picture.problems.push(format!("run {seq}: {problem}")),
            },
            // Gone between the listing and the read: the next pass sees it.
            Ok(None) => picture.every_read = false,
            Err(error) => {
                picture.every_read = false;
                report.errors.push(format!(
                    "space {}: {}: {error}",
                    space.id,
                    manifest_name(seq)
                ));
            }
        }
    }
    manifests
}

/// Retention (BK-10, BK-12) over every space's chains: deletes exactly what the rules allow,
/// each chain whole from its own space, and returns the surplus marks to write.
async fn prune(
    state: &State,
    policy: &PassPolicy,
    looks: &[SpaceLook],
    now: DateTime<Utc>,
    report: &mut PassReport,
) -> Result<Marks, StoreError> {
    let mut marks = Marks::default();
    let mut chains = Vec::new();
    let mut owner: BTreeMap<i64, (usize, ListedChain)> = BTreeMap::new();
    for (index, look) in looks.iter().enumerate() {
        let surplus: BTreeMap<i64, DateTime<Utc>> = {
            let mut connection = state.store.pool().acquire().await?;
            store::shelf::surplus(&mut connection, look.space.id)
                .await?
                .into_iter()
                .collect()
        };
        for chain in survey::chains(&look.manifests) {
            chains.push(Chain {
                full_seq: chain.full_seq,
                started_at: chain.started_at,
                verified: chain
                    .seqs
                    .iter()
                    .any(|seq| policy.verified_seqs.contains(seq)),
                draining: look.space.state == "draining",
                surplus_since: surplus.get(&chain.full_seq).copied(),
            });
            owner.insert(chain.full_seq, (index, chain));
        }
    }
    let active_verified = chains.iter().any(|chain| chain.verified && !chain.draining);
    let verdicts = retention::judge(
        &chains,
        policy.keep_days,
        policy.tiers,
        active_verified,
        now,
    );
    for (full_seq, verdict) in verdicts {
        let Some((index, chain)) = owner.get(&full_seq) else {
            continue;
        };
        let look = &looks[*index];
        match verdict {
            Verdict::Keep(_) => marks.kept.push((look.space.id, full_seq)),
            Verdict::Surplus { since } => marks.surplus.push((look.space.id, full_seq, since)),
            Verdict::Delete => delete_chain(state, look, chain, report).await,
        }
    }
    Ok(marks)
}

/// Deletes one chain's objects from its space; the chain counts as deleted only when every
/// object went.
async fn delete_chain(
    state: &State,
    look: &SpaceLook,
    chain: &ListedChain,
    report: &mut PassReport,
) {
    let storage = match rpc::storage(state, &look.space.target) {
        Ok(storage) => storage,
        Err(error) => {
            report.errors.push(error.message);
            return;
        }
    };
    for key in survey::chain_keys(chain, &look.survey) {
        let stored = format!("{}{:010}/{}", look.prefix, key.seq, key.name);
        if let Err(error) = storage.delete(&stored).await {
            report.errors.push(format!("deleting {stored}: {error}"));
            return;
        }
    }
    report
        .deleted
        .entry(look.space.id)
        .or_default()
        .extend(chain.seqs.iter().copied());
}

/// The orphan sweep (`domain/orphans.rs`) over every space.
async fn sweep_orphans(
    state: &State,
    node: NodeId,
    looks: &[SpaceLook],
    now: DateTime<Utc>,
    report: &mut PassReport,
) -> Result<Orphans, StoreError> {
    let mut orphans = Orphans::default();
    let claimed: BTreeSet<i64> = {
        let mut connection = state.store.pool().acquire().await?;
        store::shelf::claimed_seqs(&mut connection, node)
            .await?
            .into_iter()
            .collect()
    };
    for look in looks {
        let seen: BTreeMap<NodeKey, DateTime<Utc>> = {
            let mut connection = state.store.pool().acquire().await?;
            store::shelf::orphans(&mut connection, look.space.id)
                .await?
                .into_iter()
                .collect()
        };
        let sweep = orphans::sweep(
            &look.survey.objects,
            &look.survey.manifests,
            &claimed,
            &seen,
            now,
        );
        report.orphans_waiting += sweep.waiting;
        for key in sweep.record {
            let bytes = look.survey.objects.get(&key).copied().unwrap_or(0);
            orphans.seen.push((look.space.id, key, bytes));
        }
        for key in sweep.forget {
            orphans.forgotten.push((look.space.id, key));
        }
        if !sweep.delete.is_empty() {
            delete_orphans(state, look, sweep.delete, &mut orphans, report).await;
        }
    }
    Ok(orphans)
}

/// Deletes the orphans of one space whose day has passed.
async fn delete_orphans(
    state: &State,
    look: &SpaceLook,
    keys: Vec<NodeKey>,
    orphans: &mut Orphans,
    report: &mut PassReport,
) {
    let storage = match rpc::storage(state, &look.space.target) {
        Ok(storage) => storage,
        Err(error) => {
            report.errors.push(error.message);
            return;
        }
    };
    for key in keys {
        let stored = format!("{}{:010}/{}", look.prefix, key.seq, key.name);
        match storage.delete(&stored).await {
            Ok(()) => {
                orphans.bytes_deleted += look.survey.objects.get(&key).copied().unwrap_or(0);
                report
                    .orphans_deleted
                    .entry(look.space.id)
                    .or_default()
                    .push(key.as_string());
                orphans.forgotten.push((look.space.id, key));
            }
            Err(error) => {
                report
                    .errors
                    .push(format!("deleting orphan {stored}: {error}"));
            }
        }
    }
}

/// Writes what the pass saw and did in one transaction: the stamps, the surplus marks, the
/// prunes (with their `pruned` events), the orphans.
async fn record(
    state: &State,
    node: NodeId,
    now: DateTime<Utc>,
    picture: &Picture,
    report: &PassReport,
    marks: Marks,
    orphans: Orphans,
) -> Result<(), StoreError> {
    let mut transaction = state.store.begin().await?;
    if picture.every_listed {
        store::shelf::stamp_listed(&mut transaction, node, now, report.newest_write).await?;
    }
    if picture.whole() {
        store::shelf::stamp_problem(&mut transaction, node, report.problem.as_deref()).await?;
    }
    if !report.errors.is_empty() {
        store::shelf::pass_failed(&mut transaction, node, &report.errors.join("; "), now).await?;
    }
    for (space, full_seq, since) in marks.surplus {
        store::shelf::mark_surplus(&mut transaction, space, full_seq, since).await?;
    }
    for (space, full_seq) in marks.kept {
        store::shelf::clear_surplus(&mut transaction, space, full_seq).await?;
    }
    for (space, seqs) in &report.deleted {
        let full_seqs: Vec<i64> = picture
            .looks
            .iter()
            .filter(|look| look.space.id == *space)
            .flat_map(|look| survey::chains(&look.manifests))
            .filter(|chain| chain.seqs.iter().all(|seq| seqs.contains(seq)))
            .map(|chain| chain.full_seq)
            .collect();
        store::shelf::pruned(
            &mut transaction,
            Pruned {
                node_id: node,
                space_id: *space,
                seqs: seqs.clone(),
                pruned_at: now,
            },
            &full_seqs,
        )
        .await?;
    }
    for (space, key, bytes) in &orphans.seen {
        store::shelf::orphan_seen(&mut transaction, *space, key, *bytes, now).await?;
    }
    for (space, key) in &orphans.forgotten {
        store::shelf::forget_orphan(&mut transaction, *space, key).await?;
    }
    if picture.whole() {
        let deleted = report.orphans_deleted.values().map(Vec::len).sum();
        store::shelf::count_orphans(
            &mut transaction,
            node,
            report.orphans_waiting,
            deleted,
            orphans.bytes_deleted,
        )
        .await?;
    }
    transaction.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bk_15_one_problem_is_the_line_and_more_are_counted_after_the_first() {
        assert_eq!(problem_line(&[]), None);
        assert_eq!(
            problem_line(&["run 3: a.tar is 10 bytes, not 12".into()]),
            Some("run 3: a.tar is 10 bytes, not 12".into())
        );
        assert_eq!(
            problem_line(&[
                "run 3: short".into(),
                "run 4: gone".into(),
                "run 5: gone".into()
            ]),
            Some("run 3: short (and 2 more)".into())
        );
    }
}
