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

use std::collections::{BTreeMap, BTreeSet};

use capstan_events::backups::Pruned;
use capstan_store::StoreError;
use chrono::{DateTime, Utc};

use crate::domain::keys::{manifest_name, object_key, space_prefix, NodeKey};
use crate::domain::orphans;
use crate::domain::retention::{self, Chain, Tiers, Verdict};
use crate::domain::shelf::{self, Manifest};
use crate::domain::survey::{self, ListedChain, ListedObject, Survey};
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

/// Runs the pass over `node` at `now`.
pub async fn pass_node(
    state: &State,
    node: i64,
    policy: &PassPolicy,
    now: DateTime<Utc>,
) -> Result<PassReport, StoreError> {
    let spaces = {
        let mut connection = state.store.pool().acquire().await?;
        store::shelf::live_spaces(&mut connection, node).await?
    };
    let mut report = PassReport::default();
    let mut looks = Vec::new();
    let mut every_listed = true;
    let mut every_read = true;
    let mut problems = Vec::new();
    for space in spaces {
        let storage = match rpc::storage(state, &space.target) {
            Ok(storage) => storage,
            Err(error) => {
                every_listed = false;
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
                every_listed = false;
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
        let mut manifests = Vec::new();
        for &seq in &survey.manifests {
            let key = object_key(
                &space.target.folder,
                space.id,
                node,
                &crate::domain::keys::NodeKey {
                    seq,
                    name: manifest_name(seq),
                },
            );
            match storage.get(&key).await {
                Ok(Some(bytes)) => match shelf::parse_manifest(&bytes, seq) {
                    Ok(manifest) => {
                        if let Some(problem) = shelf::check(&manifest, &survey.objects) {
                            problems.push(problem);
                        }
                        manifests.push(manifest);
                    }
                    // A manifest that is there but does not read is the storage's problem.
                    Err(problem) => problems.push(format!("run {seq}: {problem}")),
                },
                // Gone between the listing and the read: the next pass sees it.
                Ok(None) => every_read = false,
                Err(error) => {
                    every_read = false;
                    report.errors.push(format!(
                        "space {}: {}: {error}",
                        space.id,
                        manifest_name(seq)
                    ));
                }
            }
        }
        report.newest_write = report.newest_write.max(survey.newest_write);
        looks.push(SpaceLook {
            space,
            prefix,
            survey,
            manifests,
        });
    }
    report.listed = every_listed;
    if every_listed && every_read {
        report.problem = problems.first().map(|first| match problems.len() {
            1 => first.clone(),
            more => format!("{first} (and {} more)", more - 1),
        });
    }

    // Retention, only from a whole picture.
    let mut surplus_marks = Vec::new();
    let mut kept = Vec::new();
    if every_listed && every_read {
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
                Verdict::Keep(_) => kept.push((look.space.id, full_seq)),
                Verdict::Surplus { since } => surplus_marks.push((look.space.id, full_seq, since)),
                Verdict::Delete => {
                    let storage = match rpc::storage(state, &look.space.target) {
                        Ok(storage) => storage,
                        Err(error) => {
                            report.errors.push(error.message);
                            continue;
                        }
                    };
                    let mut whole = true;
                    for key in survey::chain_keys(chain, &look.survey) {
                        let stored = format!("{}{:010}/{}", look.prefix, key.seq, key.name);
                        if let Err(error) = storage.delete(&stored).await {
                            whole = false;
                            report.errors.push(format!("deleting {stored}: {error}"));
                            break;
                        }
                    }
                    if whole {
                        report
                            .deleted
                            .entry(look.space.id)
                            .or_default()
                            .extend(chain.seqs.iter().copied());
                    }
                }
            }
        }
    }

    // The orphan sweep, only from a whole picture too.
    let mut orphans_seen: Vec<(i64, NodeKey, u64)> = Vec::new();
    let mut orphans_forgotten: Vec<(i64, NodeKey)> = Vec::new();
    let mut orphan_bytes = 0u64;
    if every_listed && every_read {
        let claimed: BTreeSet<i64> = {
            let mut connection = state.store.pool().acquire().await?;
            store::shelf::claimed_seqs(&mut connection, node)
                .await?
                .into_iter()
                .collect()
        };
        for look in &looks {
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
                orphans_seen.push((look.space.id, key, bytes));
            }
            for key in sweep.forget {
                orphans_forgotten.push((look.space.id, key));
            }
            if sweep.delete.is_empty() {
                continue;
            }
            let storage = match rpc::storage(state, &look.space.target) {
                Ok(storage) => storage,
                Err(error) => {
                    report.errors.push(error.message);
                    continue;
                }
            };
            for key in sweep.delete {
                let stored = format!("{}{:010}/{}", look.prefix, key.seq, key.name);
                match storage.delete(&stored).await {
                    Ok(()) => {
                        orphan_bytes += look.survey.objects.get(&key).copied().unwrap_or(0);
                        report
                            .orphans_deleted
                            .entry(look.space.id)
                            .or_default()
                            .push(key.as_string());
                        orphans_forgotten.push((look.space.id, key));
                    }
                    Err(error) => {
                        report
                            .errors
                            .push(format!("deleting orphan {stored}: {error}"));
                    }
                }
            }
        }
    }

    let mut transaction = state.store.begin().await?;
    if every_listed {
        store::shelf::stamp_listed(&mut transaction, node, now, report.newest_write).await?;
    }
    if every_listed && every_read {
        store::shelf::stamp_problem(&mut transaction, node, report.problem.as_deref()).await?;
    }
    if !report.errors.is_empty() {
        store::shelf::pass_failed(&mut transaction, node, &report.errors.join("; "), now).await?;
    }
    for (space, full_seq, since) in surplus_marks {
        store::shelf::mark_surplus(&mut transaction, space, full_seq, since).await?;
    }
    for (space, full_seq) in kept {
        store::shelf::clear_surplus(&mut transaction, space, full_seq).await?;
    }
    for (space, seqs) in &report.deleted {
        let full_seqs: Vec<i64> = looks
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
    for (space, key, bytes) in &orphans_seen {
        store::shelf::orphan_seen(&mut transaction, *space, key, *bytes, now).await?;
    }
    for (space, key) in &orphans_forgotten {
        store::shelf::forget_orphan(&mut transaction, *space, key).await?;
    }
    if every_listed && every_read {
        let deleted = report.orphans_deleted.values().map(Vec::len).sum();
        store::shelf::count_orphans(
            &mut transaction,
            node,
            report.orphans_waiting,
            deleted,
            orphan_bytes,
        )
        .await?;
    }
    transaction.commit().await?;
    Ok(report)
}
