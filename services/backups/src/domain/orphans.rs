//! The orphan sweep (beyond the spec; BK-13's "only object sets that actually exist count as
//! restore points" leaves the rest lying): run objects in a space's listing that belong to no
//! recorded run — the parts of a run that died before its manifest, say — are recorded when a
//! pass first sees them, and deleted with the plane's own credential only once a day has passed
//! since, and only if nothing claims them by then.
//!
//! An object is claimed while its run is a restore point (its manifest is in the same listing),
//! the plane recorded its run as landed (a missing manifest is then the storage check's problem
//! to report, never the sweep's to tidy away), or its run is still open (its job has not
//! ended: a run uploads its parts before its manifest). Pure: the listing, the claims and what
//! earlier passes recorded are passed in.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::keys::NodeKey;

/// An orphan goes only once a day has passed since a pass first saw it (as BK-12's surplus).
pub const ORPHAN_GRACE: Duration = Duration::days(1);

/// What the sweep decides for one space's listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sweep {
    /// Orphans seen for the first time: record them as seen now.
    pub record: Vec<NodeKey>,
    /// Orphans seen a day ago or more and still unclaimed: delete them.
    pub delete: Vec<NodeKey>,
    /// Orphans recorded and still inside their grace (the newly recorded among them).
    pub waiting: usize,
    /// Recorded orphans that are claimed now or gone from the listing: forget them.
    pub forget: Vec<NodeKey>,
}

/// Judges every run object of one space's listing (`objects`, by the node's key) against the
/// runs with a manifest in that listing (`manifests`), the runs the plane claims (`claimed`:
/// landed or still open) and what earlier passes recorded (`seen`: first seen at).
pub fn sweep(
    objects: &BTreeMap<NodeKey, u64>,
    manifests: &[i64],
    claimed: &BTreeSet<i64>,
    seen: &BTreeMap<NodeKey, DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Sweep {
    let is_claimed = |seq: i64| manifests.contains(&seq) || claimed.contains(&seq);
    let mut result = Sweep::default();
    for key in objects.keys() {
        if is_claimed(key.seq) {
            continue;
        }
        match seen.get(key) {
            None => {
                result.record.push(key.clone());
                result.waiting += 1;
            }
            Some(first) if now - *first >= ORPHAN_GRACE => result.delete.push(key.clone()),
            Some(_) => result.waiting += 1,
        }
    }
    result.forget = seen
        .keys()
        .filter(|key| !objects.contains_key(key) || is_claimed(key.seq))
        .cloned()
        .collect();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 30, 12, 0, 0).unwrap()
    }

    fn key(seq: i64, name: &str) -> NodeKey {
        NodeKey {
            seq,
            name: name.to_string(),
        }
    }

    /// Run 1 is a restore point (manifest and part), run 2 died before its manifest (a part).
    fn listing() -> BTreeMap<NodeKey, u64> {
        BTreeMap::from([
            (key(1, "files.tar.zst.age.000001"), 100),
            (key(1, "manifest-1.json"), 10),
            (key(2, "db.dump.zst.age.000001"), 50),
        ])
    }

    #[test]
    fn the_part_of_a_run_that_died_before_its_manifest_is_recorded_when_first_seen() {
        let sweep = sweep(&listing(), &[1], &BTreeSet::new(), &BTreeMap::new(), now());
        assert_eq!(sweep.record, vec![key(2, "db.dump.zst.age.000001")]);
        assert_eq!(sweep.waiting, 1);
        assert!(sweep.delete.is_empty(), "nothing goes the first time");
        assert!(sweep.forget.is_empty());
    }

    #[test]
    fn an_orphan_goes_a_day_after_it_was_first_seen_and_not_before() {
        let orphan = key(2, "db.dump.zst.age.000001");
        let seen = |hours| BTreeMap::from([(orphan.clone(), now() - Duration::hours(hours))]);
        let early = sweep(&listing(), &[1], &BTreeSet::new(), &seen(23), now());
        assert!(early.delete.is_empty());
        assert!(early.record.is_empty(), "it is recorded once");
        assert_eq!(early.waiting, 1);
        let due = sweep(&listing(), &[1], &BTreeSet::new(), &seen(24), now());
        assert_eq!(due.delete, vec![orphan]);
        assert_eq!(due.waiting, 0);
    }

    #[test]
    fn a_restore_point_a_landed_run_and_an_open_run_are_never_orphans() {
        let long_ago = now() - Duration::days(30);
        let seen: BTreeMap<NodeKey, DateTime<Utc>> = listing()
            .keys()
            .map(|key| (key.clone(), long_ago))
            .collect();
        // Run 2 is claimed by the plane (landed, or its job still running): nothing goes, and
        // what was recorded of it is forgotten.
        let claimed = sweep(&listing(), &[1], &BTreeSet::from([2]), &seen, now());
        assert!(claimed.delete.is_empty(), "{claimed:?}");
        assert!(claimed.record.is_empty());
        assert_eq!(claimed.forget.len(), 3);
        // Its manifest arrived since it was first seen: it is a restore point now.
        let mut landed = listing();
        landed.insert(key(2, "manifest-2.json"), 10);
        let late = sweep(&landed, &[1, 2], &BTreeSet::new(), &seen, now());
        assert!(late.delete.is_empty(), "{late:?}");
        assert!(late.forget.contains(&key(2, "db.dump.zst.age.000001")));
        // Run 1's objects are never judged, however old.
        let plain = sweep(&listing(), &[1], &BTreeSet::new(), &seen, now());
        assert_eq!(plain.delete, vec![key(2, "db.dump.zst.age.000001")]);
    }

    #[test]
    fn a_recorded_orphan_that_is_gone_from_the_listing_is_forgotten() {
        let gone = key(3, "files.tar.zst.age.000001");
        let seen = BTreeMap::from([(gone.clone(), now() - Duration::days(3))]);
        let sweep = sweep(&listing(), &[1], &BTreeSet::new(), &seen, now());
        assert_eq!(sweep.forget, vec![gone]);
        assert_eq!(sweep.record, vec![key(2, "db.dump.zst.age.000001")]);
    }
}
