//! The backups service's pure rules, time passed in, each with unit tests named after the
//! spec's IDs: the keys a node may name and where they live in a bucket (`keys`), what the
//! broker allows a job (`broker`), what a target must say (`targets`), and which runs retention
//! may delete (`retention`), what the storage check finds wrong with a run (`shelf`), the
//! fleet policy and each node's position (`policy`), what is due and whose turn it is
//! (`schedule`), whether a run's manifest is the node's own (`manifest`), what a listing of a
//! node's folder holds (`survey`), and a node's backup health, the three judgements behind its
//! incidents (`health`, BK-21) and the conditions published from them (`conditions`), which run objects no run claims (`orphans`), and the Targets
//! page's fleet coverage (`coverage`).

pub mod broker;
pub mod conditions;
pub mod coverage;
pub mod health;
pub mod keys;
pub mod manifest;
pub mod orphans;
pub mod policy;
pub mod retention;
pub mod schedule;
pub mod shelf;
pub mod survey;
pub mod targets;
