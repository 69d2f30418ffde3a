//! What one listing of a node's folder in one space says (BK-13, BK-15, BK-17), before and
//! after its manifests are read: the run objects it holds at their sizes, the newest write it
//! saw (the witness's stamp), which runs have a manifest (only those are restore points), and,
//! once the manifests are read, the chains retention judges and the keys a chain's deletion
//! removes. Pure: the listing and the manifests are passed in.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::keys::{listed_key, manifest_name, NodeKey};
use super::shelf::Manifest;

/// One listed object as the storage driver gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
    pub last_modified: Option<DateTime<Utc>>,
}

/// A listing of one space's folder, read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Survey {
    /// Every run object under the prefix, by the node's key, at its listed size.
    pub objects: BTreeMap<NodeKey, u64>,
    /// BK-17: the newest write the listing saw (any object under the prefix).
    pub newest_write: Option<DateTime<Utc>>,
    /// The runs that have a manifest (BK-13: only they are restore points), oldest first.
    pub manifests: Vec<i64>,
}

/// Reads a listing under `prefix` (a space prefix); objects that are no run's are ignored.
pub fn survey(prefix: &str, listed: &[ListedObject]) -> Survey {
    let mut result = Survey::default();
    for object in listed {
        if let Some(modified) = object.last_modified {
            result.newest_write = Some(result.newest_write.map_or(modified, |n| n.max(modified)));
        }
        let Some(key) = listed_key(prefix, &object.key) else {
            continue;
        };
        if key.name == manifest_name(key.seq) {
            result.manifests.push(key.seq);
        }
        result.objects.insert(key, object.size);
    }
    result.manifests.sort_unstable();
    result.manifests.dedup();
    result
}

/// A chain as the listing and its manifests show it: the full's seq and every run of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedChain {
    pub full_seq: i64,
    /// When its first run started (the full's, when the full is still there).
    pub started_at: DateTime<Utc>,
    pub seqs: BTreeSet<i64>,
}

/// BK-13: chains grouped by the full each run names, from the manifests that read.
pub fn chains(manifests: &[Manifest]) -> Vec<ListedChain> {
    let mut by_full: BTreeMap<i64, ListedChain> = BTreeMap::new();
    for manifest in manifests {
        let chain = by_full
            .entry(manifest.full_seq)
            .or_insert_with(|| ListedChain {
                full_seq: manifest.full_seq,
                started_at: manifest.started_at,
                seqs: BTreeSet::new(),
            });
        chain.started_at = chain.started_at.min(manifest.started_at);
        chain.seqs.insert(manifest.seq);
    }
    by_full.into_values().collect()
}

/// Every listed object of the chain's runs: what deleting it removes, the manifests last (so a
/// deletion cut short leaves no manifest naming parts that are gone before the parts).
pub fn chain_keys(chain: &ListedChain, survey: &Survey) -> Vec<NodeKey> {
    let (manifests, parts): (Vec<NodeKey>, Vec<NodeKey>) = survey
        .objects
        .keys()
        .filter(|key| chain.seqs.contains(&key.seq))
        .cloned()
        .partition(|key| key.name == manifest_name(key.seq) || key.name.starts_with("manifest-"));
    parts.into_iter().chain(manifests).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::shelf::parse_manifest;
    use chrono::TimeZone;
    use serde_json::json;

    const PREFIX: &str = "fleet/4/node-9/";

    fn at(hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, hour, 0, 0).unwrap()
    }

    fn object(key: &str, size: u64, hour: u32) -> ListedObject {
        ListedObject {
            key: format!("{PREFIX}{key}"),
            size,
            last_modified: Some(at(hour)),
        }
    }

    fn manifest(seq: i64, full_seq: i64, hour: u32) -> Manifest {
        let bytes = serde_json::to_vec(&json!({
            "format": 1, "seq": seq, "kind": if seq == full_seq { "full" } else { "incremental" },
            "full_seq": full_seq, "previous_seq": if seq == full_seq { None } else { Some(seq - 1) },
            "started_at": at(hour), "finished_at": at(hour),
            "recipients": [{"role": "site", "recipient": "age1x"}], "artifacts": []
        }))
        .unwrap();
        parse_manifest(&bytes, seq).unwrap()
    }

    #[test]
    fn bk_13_bk_17_a_listing_reads_run_objects_their_sizes_the_newest_write_and_the_restore_points()
    {
        let listed = [
            object("0000000001/files.tar.zst.age.000001", 10, 1),
            object("0000000001/manifest-1.json", 700, 2),
            object("0000000002/files.tar.zst.age.000001", 4, 5),
            object("stray.txt", 1, 3),
            ListedObject {
                key: "fleet/4/node-10/0000000001/manifest-1.json".into(),
                size: 1,
                last_modified: Some(at(9)),
            },
        ];
        let survey = survey(PREFIX, &listed[..4]);
        assert_eq!(survey.objects.len(), 3);
        assert_eq!(survey.newest_write, Some(at(5)));
        // Run 2 has no manifest: a run that failed part-way is no restore point.
        assert_eq!(survey.manifests, vec![1]);
    }

    #[test]
    fn bk_13_chains_are_grouped_by_their_full_and_deleted_whole_manifests_last() {
        let chains = chains(&[manifest(1, 1, 1), manifest(2, 1, 2), manifest(3, 3, 3)]);
        assert_eq!(chains.len(), 2);
        assert_eq!(chains[0].seqs, BTreeSet::from([1, 2]));
        assert_eq!(chains[0].started_at, at(1));
        let listed = vec![
            object("0000000001/manifest-1.json", 700, 1),
            object("0000000001/files.tar.zst.age.000001", 10, 1),
            object("0000000002/files.tar.zst.age.000001", 10, 2),
            object("0000000002/manifest-2.json", 700, 2),
            object("0000000003/manifest-3.json", 700, 3),
        ];
        let survey = survey(PREFIX, &listed);
        let keys: Vec<String> = chain_keys(&chains[0], &survey)
            .iter()
            .map(NodeKey::as_string)
            .collect();
        assert_eq!(
            keys,
            vec![
                "1/files.tar.zst.age.000001",
                "2/files.tar.zst.age.000001",
                "1/manifest-1.json",
                "2/manifest-2.json"
            ]
        );
    }
}
