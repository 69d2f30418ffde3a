//! The rules of the node's backups (issue 14; the contract in docs/backups.md): the manifest a
//! run writes, the names of its objects, which kind of run a request becomes, the chain a
//! restore replays (BK-25), the local index an incremental is cut against, and the owner's
//! recovery key as check_status reports it (BK-22).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;

/// Artifacts are byte-split into parts of at most this many bytes (each PUT has a known
/// Content-Length).
pub const PART_BYTES: usize = 16 * 1024 * 1024;
/// The most keys one broker request names.
pub const MAX_KEYS_PER_REQUEST: usize = 64;
/// The manifest format this agent writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// The database artifact's name.
pub const DATABASE_ARTIFACT: &str = "db.dump.zst.age";
/// The files artifact's name.
pub const FILES_ARTIFACT: &str = "files.tar.zst.age";
/// The tar member of an incremental that lists removed paths, one per line (issue 27): an
/// absolute name, which the walk's relative paths never are, so no file of the site can pass
/// for it. Stock `tar` strips the leading `/` when it extracts (docs/backups.md).
pub const REMOVED_MEMBER: &str = "/.capstan/removed";
/// The name the list had in incrementals written before issue 27, which a site file can also
/// have: honoured only in an incremental whose manifest names no list, and only as the
/// archive's last member (where the walk always put the list).
pub const OLD_REMOVED_MEMBER: &str = ".capstan/removed";
refusal!(
    /// What is wrong with a backup's own records (its removal list, its chain, an index
    /// line): a problem of the backup, named.
    BadBackup
);

/// The highest sequence number the plane may ask for (2^53, what JSON carries exactly).
pub const MAX_SEQ: u64 = 1 << 53;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Kind {
    Full,
    Incremental,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipient {
    /// `owner` (the recovery key) or `site` (the node's site key).
    pub role: String,
    pub recipient: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub name: String,
    /// `database` or `files`.
    pub what: String,
    pub bytes: u64,
    pub sha256: String,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCounts {
    /// Files (and links) in this run's tar.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Paths this run lists as removed since the previous run.
    pub removed: u64,
    /// Files the site held at this run: what a restore of it brings back (an addition to the
    /// contract, see BACKUPS-CHANGES.md; absent from older manifests).
    #[serde(default)]
    pub total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseCounts {
    pub tables: u64,
    pub rows: u64,
}

/// `manifest-<seq>.json`, written last, after every part landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub node_fingerprint: String,
    pub seq: u64,
    pub kind: Kind,
    pub full_seq: u64,
    pub previous_seq: Option<u64>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub recipients: Vec<Recipient>,
    pub artifacts: Vec<Artifact>,
    pub files: FileCounts,
    pub database: Option<DatabaseCounts>,
    /// An incremental's list of removed paths (issue 27; absent from older manifests, and from
    /// a full's): only the list the signed manifest names is ever honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_list: Option<RemovedList>,
}

/// The removal list an incremental's manifest names: the tar member, its bytes' sha256 and
/// how many paths it lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedList {
    pub member: String,
    pub sha256: String,
    pub paths: u64,
}

impl Manifest {
    pub fn artifact(&self, what: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|artifact| artifact.what == what)
    }

    /// Which removal list of this run's files archive is honoured (issue 27).
    pub fn removal(&self) -> Removal {
        match (self.kind, &self.removed_list) {
            (Kind::Full, _) => Removal::None,
            (Kind::Incremental, Some(list)) => Removal::Named(list.clone()),
            (Kind::Incremental, None) => Removal::OldLastMember,
        }
    }
}

/// Which member of a files archive lists paths to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// A full: none. Every member is the site's.
    None,
    /// The member the signed manifest names, checked against its sha256 and count.
    Named(RemovedList),
    /// An incremental from before issue 27: the last member, if it is `.capstan/removed`.
    OldLastMember,
}

/// What one member of a files archive is, by its raw name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberRole {
    /// A file, link or directory of the site, unpacked as such.
    Site,
    /// The removal list the manifest names.
    RemovedList,
    /// Perhaps the removal list of an old incremental: it is, if no member follows it.
    RemovedListIfLast,
    /// A member no walk writes (an absolute name the manifest does not name): the archive is
    /// refused.
    Foreign,
}

/// The role of the member named `name` under `removal` (issue 27: a site file named
/// `.capstan/removed` is restored as an ordinary file; only a list the manifest vouches for
/// removes anything).
pub fn member_role(removal: &Removal, name: &[u8]) -> MemberRole {
    match removal {
        Removal::Named(list) if name == list.member.as_bytes() => MemberRole::RemovedList,
        Removal::OldLastMember if name == OLD_REMOVED_MEMBER.as_bytes() => {
            MemberRole::RemovedListIfLast
        }
        _ if name.starts_with(b"/") => MemberRole::Foreign,
        _ => MemberRole::Site,
    }
}

/// Checks a removal list against what its manifest says of it.
pub fn check_removed_list(list: &RemovedList, bytes: &[u8]) -> Result<(), BadBackup> {
    let paths = bytes
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .count() as u64;
    if sha256_hex(bytes) != list.sha256 || paths != list.paths {
        return Err(format!(
            "the removal list does not match its manifest ({paths} paths; the manifest says {})",
            list.paths
        )
        .into());
    }
    Ok(())
}

/// The object beside each manifest that holds the node's public key (issue 27), so an owner
/// with only the bucket can check a manifest's signature with stock tools (docs/backups.md).
pub const NODE_KEY_OBJECT: &str = "node-key.pem";

/// The DER of an Ed25519 SubjectPublicKeyInfo (RFC 8410) up to the key's 32 bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// An Ed25519 public key as a PEM `PUBLIC KEY` (what `openssl pkeyutl -pubin` reads).
pub fn public_key_pem(key: &[u8; 32]) -> String {
    use base64::{engine::general_purpose::STANDARD, Engine as _};
    let mut der = ED25519_SPKI_PREFIX.to_vec();
    der.extend_from_slice(key);
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        STANDARD.encode(der)
    )
}

/// The manifest's object name.
pub fn manifest_name(seq: u64) -> String {
    format!("manifest-{seq}.json")
}

/// The key (as the broker takes it) of `name` in run `seq`.
pub fn key(seq: u64, name: &str) -> String {
    format!("{seq}/{name}")
}

/// The name of part `index` (from 1) of an artifact.
pub fn part_name(artifact: &str, index: usize) -> String {
    format!("{artifact}.{index:06}")
}

/// Whether `name` is an object name the broker takes: `^[a-z0-9][a-z0-9._-]{0,127}$`.
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'.' | b'_' | b'-')
        })
}

/// What a `backup_run` request becomes on this node: an incremental only when the node holds
/// the index of the run it is to extend; otherwise a full, and the note says why.
pub fn decide_kind(
    asked: Kind,
    previous_seq: Option<u64>,
    has_index_of: impl Fn(u64) -> bool,
) -> (Kind, Option<String>) {
    match (asked, previous_seq) {
        (Kind::Full, _) => (Kind::Full, None),
        (Kind::Incremental, Some(previous)) if has_index_of(previous) => {
            (Kind::Incremental, None)
        }
        (Kind::Incremental, Some(previous)) => (
            Kind::Full,
            Some(format!(
                "asked for an incremental on run {previous}, but this node holds no index of run {previous}: took a full"
            )),
        ),
        (Kind::Incremental, None) => (
            Kind::Full,
            Some("asked for an incremental without a previous run: took a full".into()),
        ),
    }
}

/// Checks the manifests of a chain, newest first (as they are fetched, following
/// `previous_seq` back): each incremental extends the next one in the list, all share one
/// `full_seq`, and the last is that full. Returns the seqs in replay order, oldest first
/// (BK-25: the last full, then every incremental up to the chosen run).
pub fn replay_order(newest_first: &[Manifest]) -> Result<Vec<u64>, BadBackup> {
    let Some(chosen) = newest_first.first() else {
        return Err("no manifest to restore from".into());
    };
    let full_seq = chosen.full_seq;
    for (index, manifest) in newest_first.iter().enumerate() {
        if manifest.full_seq != full_seq {
            return Err(format!(
                "run {} belongs to the chain of run {}, not {full_seq}",
                manifest.seq, manifest.full_seq
            )
            .into());
        }
        match (manifest.kind, newest_first.get(index + 1)) {
            (Kind::Full, None) if manifest.seq == full_seq => {}
            (Kind::Full, _) => {
                return Err(format!(
                    "run {} is a full in the middle of the chain of run {full_seq}",
                    manifest.seq
                )
                .into())
            }
            (Kind::Incremental, None) => {
                return Err(format!(
                    "the chain ends at incremental run {} without its full run {full_seq}",
                    manifest.seq
                )
                .into())
            }
            (Kind::Incremental, Some(older)) => {
                if manifest.previous_seq != Some(older.seq) {
                    return Err(format!(
                        "run {} extends run {}, but the next run in the chain is {}",
                        manifest.seq,
                        manifest
                            .previous_seq
                            .map_or("nothing".to_string(), |seq| seq.to_string()),
                        older.seq
                    )
                    .into());
                }
            }
        }
    }
    Ok(newest_first
        .iter()
        .rev()
        .map(|manifest| manifest.seq)
        .collect())
}

/// Sha256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The owner's recovery key as the node holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryKey {
    /// The `age1...` recipient.
    pub recipient: String,
    /// `pending` (challenge written) or `proven` (the owner decrypted it).
    pub state: String,
    /// Sha256 hex of the challenge's answer.
    pub answer_sha256: String,
    pub set_at: DateTime<Utc>,
    pub proven_at: Option<DateTime<Utc>>,
}

/// The check_status field `recovery_key`: `already` (a proven key), `none` (no key, or one
/// not yet proven), `invalid` (a key file the node cannot use), with the fingerprint (sha256
/// hex of the recipient string) when there is a recipient to name.
pub fn recovery_key_report<E>(
    held: &Result<Option<RecoveryKey>, E>,
    recipient_parses: impl Fn(&str) -> bool,
) -> serde_json::Value {
    use serde_json::json;
    match held {
        Ok(None) => json!({"state": "none", "fingerprint": null}),
        Ok(Some(key)) if !recipient_parses(&key.recipient) => {
            json!({"state": "invalid", "fingerprint": sha256_hex(key.recipient.as_bytes())})
        }
        Ok(Some(key)) if key.state == "proven" => {
            json!({"state": "already", "fingerprint": sha256_hex(key.recipient.as_bytes())})
        }
        Ok(Some(key)) if key.state == "pending" => {
            json!({"state": "none", "fingerprint": null, "pending": sha256_hex(key.recipient.as_bytes())})
        }
        Ok(Some(_)) | Err(_) => json!({"state": "invalid", "fingerprint": null}),
    }
}

/// One file of the local index: what a later incremental compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The path under the root, as bytes.
    pub path: Vec<u8>,
    pub size: u64,
    pub mtime_ns: i128,
    pub inode: u64,
}

impl IndexEntry {
    /// One line: the path in hex (any bytes survive), size, mtime in ns, inode.
    pub fn line(&self) -> String {
        let mut line = String::with_capacity(self.path.len() * 2 + 48);
        for byte in &self.path {
            line.push_str(&format!("{byte:02x}"));
        }
        line.push_str(&format!(
            "\t{}\t{}\t{}\n",
            self.size, self.mtime_ns, self.inode
        ));
        line
    }

    pub fn parse(line: &str) -> Result<IndexEntry, BadBackup> {
        let mut fields = line.trim_end_matches('\n').split('\t');
        let bad = || {
            format!(
                "an index line does not read: {:?}",
                line.chars().take(80).collect::<String>()
            )
        };
        let hex = fields.next().ok_or_else(bad)?;
        if hex.len() % 2 != 0 {
            return Err(bad().into());
        }
        let path = (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad())?;
        let size = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
        let mtime_ns = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
        let inode = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
        Ok(IndexEntry {
            path,
            size,
            mtime_ns,
            inode,
        })
    }

    /// Whether the file changed since `older` was indexed (size, mtime or inode differ).
    pub fn changed_since(&self, older: &IndexEntry) -> bool {
        self.size != older.size || self.mtime_ns != older.mtime_ns || self.inode != older.inode
    }
}

/// The order of the walk and of the index: path components compared one by one, so a
/// directory's contents come right after it (`a`, `a/b`, `a-b`), which is the order a
/// depth-first walk with sorted directories produces.
pub fn path_order(a: &[u8], b: &[u8]) -> Ordering {
    a.split(|byte| *byte == b'/')
        .cmp(b.split(|byte| *byte == b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(seq: u64, kind: Kind, full_seq: u64, previous_seq: Option<u64>) -> Manifest {
        Manifest {
            format: 1,
            node_fingerprint: "SHA256:x".into(),
            seq,
            kind,
            full_seq,
            previous_seq,
            started_at: Utc::now(),
            finished_at: Utc::now(),
            recipients: vec![],
            artifacts: vec![],
            files: FileCounts::default(),
            database: None,
            removed_list: None,
        }
    }

    fn named_list(bytes: &[u8], paths: u64) -> RemovedList {
        RemovedList {
            member: REMOVED_MEMBER.into(),
            sha256: sha256_hex(bytes),
            paths,
        }
    }

    #[test]
    fn the_node_key_object_is_the_rfc_8410_public_key_in_pem() {
        // RFC 8410, section 10.1's example key.
        let key: [u8; 32] = [
            0x19, 0xbf, 0x44, 0x09, 0x69, 0x84, 0xcd, 0xfe, 0x85, 0x41, 0xba, 0xc1, 0x67, 0xdc,
            0x3b, 0x96, 0xc8, 0x50, 0x86, 0xaa, 0x30, 0xb6, 0xb6, 0xcb, 0x0c, 0x5c, 0x38, 0xad,
            0x70, 0x31, 0x66, 0xe1,
        ];
        assert_eq!(
            public_key_pem(&key),
            "-----BEGIN PUBLIC KEY-----\n\
             MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n\
             -----END PUBLIC KEY-----\n"
        );
        assert!(valid_name(NODE_KEY_OBJECT));
    }

    #[test]
    fn a_full_honours_no_removal_list_and_a_site_file_of_the_old_name_is_the_sites() {
        let full = manifest(1, Kind::Full, 1, None);
        assert_eq!(full.removal(), Removal::None);
        assert_eq!(
            member_role(&full.removal(), b".capstan/removed"),
            MemberRole::Site
        );
        // Even a full whose manifest named a list: a full removes nothing.
        let mut named = full.clone();
        named.removed_list = Some(named_list(b"", 0));
        assert_eq!(named.removal(), Removal::None);
        assert_eq!(
            member_role(&named.removal(), REMOVED_MEMBER.as_bytes()),
            MemberRole::Foreign
        );
    }

    #[test]
    fn an_incremental_honours_only_the_list_its_signed_manifest_names() {
        let mut incremental = manifest(2, Kind::Incremental, 1, Some(1));
        incremental.removed_list = Some(named_list(b"a\nb/c\n", 2));
        let removal = incremental.removal();
        assert_eq!(
            member_role(&removal, REMOVED_MEMBER.as_bytes()),
            MemberRole::RemovedList
        );
        assert_eq!(
            member_role(&removal, OLD_REMOVED_MEMBER.as_bytes()),
            MemberRole::Site
        );
        assert_eq!(member_role(&removal, b"/etc/passwd"), MemberRole::Foreign);
        let Removal::Named(list) = removal else {
            panic!("named")
        };
        assert_eq!(check_removed_list(&list, b"a\nb/c\n"), Ok(()));
        assert!(check_removed_list(&list, b"a\nb/c\nvictim\n")
            .unwrap_err()
            .contains("3 paths; the manifest says 2"));
        assert!(check_removed_list(&list, b"a\nb/d\n").is_err());
    }

    #[test]
    fn an_incremental_from_before_the_named_list_honours_only_a_last_member_of_the_old_name() {
        let old = manifest(2, Kind::Incremental, 1, Some(1));
        assert_eq!(old.removal(), Removal::OldLastMember);
        assert_eq!(
            member_role(&old.removal(), OLD_REMOVED_MEMBER.as_bytes()),
            MemberRole::RemovedListIfLast
        );
        assert_eq!(
            member_role(&old.removal(), REMOVED_MEMBER.as_bytes()),
            MemberRole::Foreign
        );
        // A manifest written before the field still reads.
        let mut text = serde_json::to_value(&old).unwrap();
        text.as_object_mut().unwrap().remove("removed_list");
        let read: Manifest = serde_json::from_value(text).unwrap();
        assert_eq!(read.removed_list, None);
        assert!(!serde_json::to_string(&manifest(1, Kind::Full, 1, None))
            .unwrap()
            .contains("removed_list"));
    }

    #[test]
    fn bk_25_a_restore_replays_the_last_full_and_every_incremental_in_order() {
        let chain = [
            manifest(13, Kind::Incremental, 10, Some(12)),
            manifest(12, Kind::Incremental, 10, Some(10)),
            manifest(10, Kind::Full, 10, None),
        ];
        assert_eq!(replay_order(&chain).unwrap(), vec![10, 12, 13]);
        assert_eq!(replay_order(&chain[2..]).unwrap(), vec![10]);
    }

    #[test]
    fn bk_25_a_chain_with_a_gap_or_without_its_full_is_refused() {
        let gap = [
            manifest(13, Kind::Incremental, 10, Some(11)),
            manifest(10, Kind::Full, 10, None),
        ];
        assert!(replay_order(&gap).unwrap_err().contains("extends run 11"));
        let headless = [manifest(13, Kind::Incremental, 10, Some(12))];
        assert!(replay_order(&headless)
            .unwrap_err()
            .contains("without its full run 10"));
        let mixed = [
            manifest(13, Kind::Incremental, 10, Some(12)),
            manifest(12, Kind::Full, 12, None),
        ];
        assert!(replay_order(&mixed)
            .unwrap_err()
            .contains("chain of run 12"));
        assert!(replay_order(&[]).is_err());
    }

    #[test]
    fn an_incremental_without_the_local_index_becomes_a_full_and_says_so() {
        let held = |seq: u64| seq == 11;
        assert_eq!(
            decide_kind(Kind::Incremental, Some(11), held),
            (Kind::Incremental, None)
        );
        let (kind, note) = decide_kind(Kind::Incremental, Some(9), held);
        assert_eq!(kind, Kind::Full);
        assert!(note.unwrap().contains("no index of run 9"));
        assert_eq!(decide_kind(Kind::Full, Some(11), held), (Kind::Full, None));
    }

    #[test]
    fn bk_14_object_names_are_the_brokers_and_parts_are_numbered() {
        assert_eq!(part_name(FILES_ARTIFACT, 1), "files.tar.zst.age.000001");
        assert_eq!(
            key(12, &part_name(DATABASE_ARTIFACT, 2)),
            "12/db.dump.zst.age.000002"
        );
        assert_eq!(key(12, &manifest_name(12)), "12/manifest-12.json");
        for name in [
            "files.tar.zst.age.000001",
            "manifest-12.json",
            "manifest-12.json.sig",
        ] {
            assert!(valid_name(name), "{name}");
        }
        for name in ["", ".hidden", "Upper", "a/b", &"a".repeat(129)] {
            assert!(!valid_name(name), "{name}");
        }
    }

    #[test]
    fn bk_22_the_recovery_key_is_reported_already_none_or_invalid() {
        let parses = |text: &str| text.starts_with("age1");
        let key = |state: &str| RecoveryKey {
            recipient: "age1abc".into(),
            state: state.into(),
            answer_sha256: "00".into(),
            set_at: Utc::now(),
            proven_at: None,
        };
        let fingerprint = sha256_hex(b"age1abc");
        assert_eq!(
            recovery_key_report(&Ok::<_, String>(Some(key("proven"))), parses),
            serde_json::json!({"state": "already", "fingerprint": fingerprint})
        );
        assert_eq!(
            recovery_key_report(&Ok::<_, String>(None), parses)["state"],
            "none"
        );
        let pending = recovery_key_report(&Ok::<_, String>(Some(key("pending"))), parses);
        assert_eq!(pending["state"], "none");
        assert_eq!(pending["fingerprint"], serde_json::Value::Null);
        assert_eq!(
            recovery_key_report(&Err::<Option<RecoveryKey>, _>("mode 644"), parses)["state"],
            "invalid"
        );
        let mut bad = key("proven");
        bad.recipient = "ssh-ed25519 AAAA".into();
        assert_eq!(
            recovery_key_report(&Ok::<_, String>(Some(bad)), parses)["state"],
            "invalid"
        );
    }

    #[test]
    fn index_lines_survive_any_path_and_the_walk_order_keeps_a_directory_together() {
        let entry = IndexEntry {
            path: b"dir/na\tme\n\xff".to_vec(),
            size: 12,
            mtime_ns: -5,
            inode: 99,
        };
        assert_eq!(IndexEntry::parse(&entry.line()).unwrap(), entry);
        assert!(IndexEntry::parse("zz\t1\t2\t3").is_err());
        assert!(IndexEntry::parse("61\t1\t2").is_err());
        let mut paths: Vec<&[u8]> = vec![b"a-b", b"a/b", b"a", b"a/b/c", b"b"];
        paths.sort_by(|x, y| path_order(x, y));
        assert_eq!(paths, vec![&b"a"[..], b"a/b", b"a/b/c", b"a-b", b"b"]);
        let newer = IndexEntry {
            size: 13,
            ..entry.clone()
        };
        assert!(newer.changed_since(&entry));
        assert!(!entry.changed_since(&entry.clone()));
    }
}
