//! What the broker allows a node's running job (BK-14, BACKUPS-CONTRACT.md "The broker"): the
//! word decides the operation, a `backup_run` writes only under its own seq, and every key is a
//! plain `<seq>/<name>`. What needs the plane's records (the seq is this node's, the key is not
//! written yet) is the store's and the storage's to answer after this.

use capstan_events::backups::UrlOp;
use capstan_events::rpc::InvalidInput;
use serde_json::Value;

use super::keys::{parse_node_key, NodeKey, MAX_SEQ};
use capstan_events::Word as _;

/// The most keys one request may name.
pub const MAX_KEYS: usize = 64;

pub const BACKUP_RUN: &str = "backup_run";
pub const VERIFY_BACKUP: &str = "verify_backup";
pub const RESTORE_DATABASE: &str = "restore_database";
pub const RESTORE_PROJECT: &str = "restore_project";

/// Why the broker says no, before anything is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `400 invalid_request`: a key or the op is malformed.
    Invalid(InvalidInput),
    /// `403 forbidden`: the op is not the job word's, or a PUT outside the job's own seq.
    Forbidden(String),
}

/// What the request may have, once the records agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub op: UrlOp,
    pub keys: Vec<NodeKey>,
    /// For a `backup_run`: the job's own seq (the run PUTs are for).
    pub run_seq: Option<i64>,
}

/// The job's `seq` param, if it is one.
pub fn job_seq(params: &Value) -> Option<i64> {
    params
        .get("seq")
        .and_then(Value::as_i64)
        .filter(|seq| (1..=MAX_SEQ).contains(seq))
}

/// Checks a request against the job's word and params.
pub fn plan(op: &str, primitive: &str, params: &Value, keys: &[String]) -> Result<Plan, Refusal> {
    let op = UrlOp::parse(op).ok_or_else(|| {
        Refusal::Invalid(InvalidInput::new("op", format!("{op:?} is not put or get")))
    })?;
    if keys.is_empty() || keys.len() > MAX_KEYS {
        return Err(Refusal::Invalid(InvalidInput::new(
            "keys",
            format!("name 1 to {MAX_KEYS} keys, not {}", keys.len()),
        )));
    }
    let mut parsed = keys
        .iter()
        .map(|key| parse_node_key(key))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Refusal::Invalid)?;
    parsed.sort();
    parsed.dedup();
    let run_seq = match (op, primitive) {
        (UrlOp::Put, BACKUP_RUN) => {
            let seq = job_seq(params).ok_or_else(|| {
                Refusal::Forbidden("this backup_run job carries no seq".to_string())
            })?;
            if let Some(other) = parsed.iter().find(|key| key.seq != seq) {
                return Err(Refusal::Forbidden(format!(
                    "{}: a backup_run writes only under its own seq {seq}",
                    other.as_string()
                )));
            }
            Some(seq)
        }
        (UrlOp::Put, word) => {
            return Err(Refusal::Forbidden(format!(
                "a {word} job may not write to backup storage"
            )))
        }
        (UrlOp::Get, BACKUP_RUN) => {
            // Its previous manifest: a run before its own.
            let seq = job_seq(params).ok_or_else(|| {
                Refusal::Forbidden("this backup_run job carries no seq".to_string())
            })?;
            if let Some(later) = parsed.iter().find(|key| key.seq >= seq) {
                return Err(Refusal::Forbidden(format!(
                    "{}: a backup_run reads only runs before its own seq {seq}",
                    later.as_string()
                )));
            }
            None
        }
        (UrlOp::Get, VERIFY_BACKUP | RESTORE_DATABASE | RESTORE_PROJECT) => None,
        (UrlOp::Get, word) => {
            return Err(Refusal::Forbidden(format!(
                "a {word} job may not read backup storage"
            )))
        }
    };
    Ok(Plan {
        op,
        keys: parsed,
        run_seq,
    })
}

/// Issue 27: the broker serves only a job the backups service asked for itself: `issued` is
/// the row its own table holds under the job's correlation id for this node (word and params as
/// it asked), if any. A job made any other way (an operator's hand-made `backup_run`, another
/// service's) gets no storage URL, whatever its word and params say.
pub fn issued_here(
    job_id: i64,
    issued: Option<(&str, &Value)>,
    primitive: &str,
    params: &Value,
) -> Result<(), Refusal> {
    match issued {
        Some((word, asked)) if word == primitive && asked == params => Ok(()),
        Some(_) => Err(Refusal::Forbidden(format!(
            "job {job_id} is not the job the backups service asked for: its word or params differ"
        ))),
        None => Err(Refusal::Forbidden(format!(
            "job {job_id} was not asked for by the backups service, so it gets no storage URLs; \
             backups, verifies and restores are made with POST /api/v1/nodes/{{id}}/backups/..."
        ))),
    }
}

/// The run a `backup_run` job extends: `None` for a full, the previous run's seq for an
/// incremental (`kind: "incremental"` with `previous_seq` before its own seq). An incremental
/// that names no run before its own extends nothing the broker can place, and is refused.
pub fn extends(params: &Value) -> Result<Option<i64>, Refusal> {
    if params.get("kind").and_then(Value::as_str) != Some("incremental") {
        return Ok(None);
    }
    let seq = job_seq(params)
        .ok_or_else(|| Refusal::Forbidden("this backup_run job carries no seq".to_string()))?;
    match params.get("previous_seq").and_then(Value::as_i64) {
        Some(previous) if (1..seq).contains(&previous) => Ok(Some(previous)),
        _ => Err(Refusal::Forbidden(format!(
            "incremental run {seq} names no previous run before its own seq"
        ))),
    }
}

/// BK-02: a chain may not span spaces. An incremental writes only into the space that holds
/// the run it extends; one whose previous run is in another space (the node was moved since:
/// that space is draining, and the next run is a full) or is no run of this node is refused.
pub fn chain_in_space(
    seq: i64,
    previous: i64,
    previous_space: Option<i64>,
    writing: i64,
) -> Result<(), Refusal> {
    match previous_space {
        Some(space) if space == writing => Ok(()),
        Some(space) => Err(Refusal::Forbidden(format!(
            "run {seq} extends run {previous}, which is in storage space {space}, not in space \
             {writing} where it would be written: a chain may not span spaces (the next run \
             after a move is a full)"
        ))),
        None => Err(Refusal::Forbidden(format!(
            "run {seq} extends run {previous}, which is no run of this node"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|key| key.to_string()).collect()
    }

    #[test]
    fn issue_27_only_a_job_the_backups_service_asked_for_is_served() {
        let params = json!({"seq": 4, "kind": "full"});
        assert_eq!(
            issued_here(7, Some((BACKUP_RUN, &params)), BACKUP_RUN, &params),
            Ok(())
        );
        let refused = issued_here(7, None, BACKUP_RUN, &params);
        assert!(
            matches!(&refused, Err(Refusal::Forbidden(why)) if why.contains("job 7 was not asked for by the backups service")),
            "{refused:?}"
        );
        // The same correlation with another seq or word is not the job it asked for.
        let hand_made = json!({"seq": 9007199254740992_i64, "kind": "full"});
        assert!(matches!(
            issued_here(7, Some((BACKUP_RUN, &params)), BACKUP_RUN, &hand_made),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            issued_here(7, Some((VERIFY_BACKUP, &params)), BACKUP_RUN, &params),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn bk_14_a_backup_run_puts_only_under_its_own_seq() {
        let params = json!({"seq": 12, "kind": "full"});
        let plan = plan(
            "put",
            BACKUP_RUN,
            &params,
            &keys(&["12/manifest-12.json", "12/db.dump.zst.age.000001"]),
        )
        .unwrap();
        assert_eq!(plan.op, UrlOp::Put);
        assert_eq!(plan.run_seq, Some(12));
        assert_eq!(plan.keys.len(), 2);
        let refused = super::plan("put", BACKUP_RUN, &params, &keys(&["12/a", "11/a"]));
        assert!(
            matches!(&refused, Err(Refusal::Forbidden(why)) if why.contains("11/a")),
            "{refused:?}"
        );
        assert!(matches!(
            super::plan("put", BACKUP_RUN, &json!({}), &keys(&["12/a"])),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn bk_14_only_a_backup_run_writes_and_other_words_read_or_nothing() {
        let params = json!({"seq": 12, "level": 2});
        for word in [
            VERIFY_BACKUP,
            RESTORE_DATABASE,
            RESTORE_PROJECT,
            "run_command",
        ] {
            assert!(
                matches!(
                    plan("put", word, &params, &keys(&["12/a"])),
                    Err(Refusal::Forbidden(_))
                ),
                "{word} put"
            );
        }
        for word in [VERIFY_BACKUP, RESTORE_DATABASE, RESTORE_PROJECT] {
            let plan = plan("get", word, &params, &keys(&["3/a", "12/b"])).unwrap();
            assert_eq!(plan.op, UrlOp::Get);
            assert_eq!(plan.run_seq, None);
        }
        assert!(matches!(
            plan("get", "check_status", &params, &keys(&["12/a"])),
            Err(Refusal::Forbidden(_))
        ));
        // A backup run reads its previous manifest, never its own or later runs.
        let run = json!({"seq": 12, "kind": "incremental", "previous_seq": 11});
        assert!(plan("get", BACKUP_RUN, &run, &keys(&["11/manifest-11.json"])).is_ok());
        assert!(matches!(
            plan("get", BACKUP_RUN, &run, &keys(&["12/manifest-12.json"])),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn bk_02_an_incremental_writes_only_into_the_space_that_holds_the_run_it_extends() {
        let incremental = json!({"seq": 5, "kind": "incremental", "previous_seq": 4});
        assert_eq!(extends(&incremental), Ok(Some(4)));
        assert_eq!(extends(&json!({"seq": 5, "kind": "full"})), Ok(None));
        // An incremental must name a run before its own.
        for params in [
            json!({"seq": 5, "kind": "incremental"}),
            json!({"seq": 5, "kind": "incremental", "previous_seq": 5}),
            json!({"seq": 5, "kind": "incremental", "previous_seq": 0}),
        ] {
            assert!(
                matches!(extends(&params), Err(Refusal::Forbidden(_))),
                "{params}"
            );
        }
        // The previous run is in the space being written: the chain grows there.
        assert_eq!(chain_in_space(5, 4, Some(7), 7), Ok(()));
        // The node was moved: its previous run is in the old (draining) space.
        let refused = chain_in_space(5, 4, Some(7), 8);
        assert!(
            matches!(&refused, Err(Refusal::Forbidden(why))
                if why.contains("a chain may not span spaces") && why.contains("space 7")),
            "{refused:?}"
        );
        // A previous run the node never had.
        assert!(matches!(
            chain_in_space(5, 4, None, 8),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn bad_requests_are_named() {
        let params = json!({"seq": 1});
        let Err(Refusal::Invalid(error)) = plan("delete", BACKUP_RUN, &params, &keys(&["1/a"]))
        else {
            panic!("delete is no op")
        };
        assert_eq!(error.field, "op");
        let Err(Refusal::Invalid(error)) = plan("put", BACKUP_RUN, &params, &[]) else {
            panic!("no keys")
        };
        assert_eq!(error.field, "keys");
        let many: Vec<String> = (0..65).map(|index| format!("1/a{index}")).collect();
        assert!(matches!(
            plan("put", BACKUP_RUN, &params, &many),
            Err(Refusal::Invalid(_))
        ));
        let Err(Refusal::Invalid(error)) = plan("put", BACKUP_RUN, &params, &keys(&["1/../x"]))
        else {
            panic!("a path is no name")
        };
        assert!(error.reason.contains("1/../x"));
    }
}
