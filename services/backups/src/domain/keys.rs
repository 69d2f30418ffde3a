//! The names of a run's objects (BACKUPS-CONTRACT.md): a node names `<seq>/<name>`, and the
//! plane alone knows where that lives, `{folder}/{space_id}/node-{node_id}/{seq:010}/{name}`
//! (BK-01: every object is reached through its space).

use capstan_events::rpc::InvalidInput;
use capstan_events::NodeId;

/// The largest seq (2^53, so it survives JSON numbers everywhere).
pub const MAX_SEQ: i64 = 1 << 53;

/// A key as a node names it: its run and the object's name within the run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeKey {
    pub seq: i64,
    pub name: String,
}

impl NodeKey {
    pub fn as_string(&self) -> String {
        format!("{}/{}", self.seq, self.name)
    }
}

/// `^[a-z0-9][a-z0-9._-]{0,127}$`
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'.' | b'_' | b'-')
        })
}

/// Reads `<seq>/<name>`: seq decimal 1..=2^53 without a sign or leading zero, name as
/// [`valid_name`]. The error names the key.
pub fn parse_node_key(key: &str) -> Result<NodeKey, InvalidInput> {
    let bad = |why: &str| InvalidInput::new("keys", format!("{key:?}: {why}"));
    let (seq, name) = key
        .split_once('/')
        .ok_or_else(|| bad("must be <seq>/<name>"))?;
    let seq = parse_seq(seq).ok_or_else(|| bad("the seq must be a decimal from 1 to 2^53"))?;
    if !valid_name(name) {
        return Err(bad(
            "the name must match ^[a-z0-9][a-z0-9._-]{0,127}$ (no slash, no upper case)",
        ));
    }
    Ok(NodeKey {
        seq,
        name: name.to_string(),
    })
}

fn parse_seq(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 16 || text.starts_with('0') {
        return None;
    }
    if !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>()
        .ok()
        .filter(|seq| (1..=MAX_SEQ).contains(seq))
}

/// The prefix of one node's folder in one space: `{folder}/{space_id}/node-{node_id}/`
/// (`folder` may be empty, then no leading slash).
pub fn space_prefix(folder: &str, space_id: i64, node_id: NodeId) -> String {
    let folder = folder.trim_matches('/');
    if folder.is_empty() {
        format!("{space_id}/node-{node_id}/")
    } else {
        format!("{folder}/{space_id}/node-{node_id}/")
    }
}

/// Where a node's key lives in the bucket.
pub fn object_key(folder: &str, space_id: i64, node_id: NodeId, key: &NodeKey) -> String {
    format!(
        "{}{:010}/{}",
        space_prefix(folder, space_id, node_id),
        key.seq,
        key.name
    )
}

/// The node's key of a listed object under `prefix` (a [`space_prefix`]), if it is one of a
/// run's objects.
pub fn listed_key(prefix: &str, object: &str) -> Option<NodeKey> {
    let rest = object.strip_prefix(prefix)?;
    let (seq, name) = rest.split_once('/')?;
    if seq.len() != 10 || !seq.bytes().all(|byte| byte.is_ascii_digit()) || !valid_name(name) {
        return None;
    }
    let seq: i64 = seq.parse().ok()?;
    (1..=MAX_SEQ).contains(&seq).then(|| NodeKey {
        seq,
        name: name.to_string(),
    })
}

/// `manifest-<seq>.json`
pub fn manifest_name(seq: i64) -> String {
    format!("manifest-{seq}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bk_14_a_node_key_is_a_seq_and_a_plain_name() {
        assert_eq!(
            parse_node_key("12/db.dump.zst.age.000001").unwrap(),
            NodeKey {
                seq: 12,
                name: "db.dump.zst.age.000001".into()
            }
        );
        assert_eq!(parse_node_key("9007199254740992/a").unwrap().seq, MAX_SEQ);
        for bad in [
            "",
            "12",
            "12/",
            "0/a",
            "012/a",
            "-1/a",
            "+1/a",
            "9007199254740993/a",
            "12/A",
            "12/.hidden",
            "12/a/b",
            "12/../x",
            "../12/a",
            "12/a b",
            "x/a",
        ] {
            let error = parse_node_key(bad).unwrap_err();
            assert_eq!(error.field, "keys", "{bad}");
            assert!(error.reason.contains(&format!("{bad:?}")), "{error}");
        }
        assert!(parse_node_key(&format!("1/{}", "a".repeat(128))).is_ok());
        assert!(parse_node_key(&format!("1/{}", "a".repeat(129))).is_err());
    }

    #[test]
    fn bk_01_an_object_lives_in_its_space_under_the_node() {
        let key = parse_node_key("12/manifest-12.json").unwrap();
        assert_eq!(
            object_key("capstan/", 3, NodeId(7), &key),
            "capstan/3/node-7/0000000012/manifest-12.json"
        );
        assert_eq!(
            object_key("", 3, NodeId(7), &key),
            "3/node-7/0000000012/manifest-12.json"
        );
        let prefix = space_prefix("capstan", 3, NodeId(7));
        assert_eq!(
            listed_key(&prefix, &object_key("capstan", 3, NodeId(7), &key)),
            Some(key)
        );
        assert_eq!(listed_key(&prefix, "capstan/3/node-70/0000000012/a"), None);
        assert_eq!(listed_key(&prefix, "capstan/3/node-7/12/a"), None);
        assert_eq!(listed_key(&prefix, "capstan/3/node-7/0000000012/x/y"), None);
    }
}
