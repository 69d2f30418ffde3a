//! The node page's Backups tab and its acts. The tab is drawn from `node_backups` (and, for
//! level 10, the targets a node may be moved to); a refusal is the tab's problem, never the
//! page's. Every act answers with the agent channel's job, or the refusal in words (a machine
//! whose turn is held: the job that holds it), back on the tab.

use axum::{extract::State, response::Response};
use capstan_events::NodeId;
use capstan_events::{
    backups::rpc::{
        ChainView, Dispatched, GetNodePolicy, ListTargets, MoveRequest, NodeBackups,
        NodeBackupsRequest, NodePolicyBody, NodePolicyView, OrphansView, Position, RestoreRequest,
        RestoreWhat, RunNow, RunView, SetNodePolicy, VerifyRequest, VerifyView,
    },
    rpc::Level,
};

use super::ask;
use crate::{
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, bytes, clip, Ago},
        guard::{FormFields, NodePath},
        refusal_sentence, UiSession,
    },
};
use capstan_events::Word as _;

pub struct RunRow {
    pub seq: i64,
    pub kind: &'static str,
    pub started: Ago,
    pub finished: Ago,
    pub size: String,
    pub by: String,
    pub verified: Option<Ago>,
}

pub struct ChainRow {
    pub space_id: i64,
    pub full_seq: i64,
    /// `active`, `draining` or `retired`.
    pub space_state: String,
    pub target_name: String,
    pub runs: Vec<RunRow>,
}

/// The newest verify, in the spec's three facts (BK-19): the level, when, the node's counts
/// or its reason.
pub struct LastVerify {
    pub level: &'static str,
    pub seq: i64,
    pub ok: bool,
    pub when: Ago,
    pub counts: String,
    pub problems: String,
}

pub struct TargetChoice {
    pub id: i64,
    pub name: String,
}

/// What the Backups tab shows.
pub struct BackupsTab {
    /// The backups service's refusal, when it could not say.
    pub problem: Option<String>,
    pub chains: Vec<ChainRow>,
    pub last_backup: Option<Ago>,
    pub last_full: Option<Ago>,
    pub oldest: Option<Ago>,
    pub verify_state: String,
    pub verify_problem: bool,
    pub verify_words: String,
    pub last_verify: Option<LastVerify>,
    pub shelf_problem: Option<String>,
    /// The orphan sweep's counts in words, when it found any.
    pub orphans: Option<String>,
    pub last_failure: Option<String>,
    pub recovery_key: String,
    pub busy: Option<String>,
    /// Level 8: run now and verify.
    pub can_act: bool,
    /// Level 10: restore and move.
    pub can_admin: bool,
    /// Where the node may be moved (not the target of its active space).
    pub targets: Vec<TargetChoice>,
    pub targets_problem: Option<String>,
    /// The node's position (`fleet`, `own`, `off`) and the schedule in force, in words.
    pub position: String,
    pub schedule: String,
}

/// The orphan sweep's counts for a person; `None` when it never found any.
fn orphan_words(orphans: &OrphansView) -> Option<String> {
    if orphans.waiting == 0 && orphans.deleted == 0 {
        return None;
    }
    let mut words = Vec::new();
    if orphans.waiting > 0 {
        words.push(format!(
            "{} waiting out their day before deletion",
            orphans.waiting
        ));
    }
    if orphans.deleted > 0 {
        words.push(format!(
            "{} deleted ({})",
            orphans.deleted,
            bytes(orphans.bytes_deleted)
        ));
    }
    Some(format!("Objects of unfinished runs: {}", words.join("; ")))
}

/// A node's position and the schedule in force, for a person.
fn schedule_words(view: &NodePolicyView) -> String {
    let fields = &view.fields;
    let whose = match view.position {
        Position::Fleet => "Follows the fleet policy",
        Position::Own => "A schedule of its own",
        Position::Off => "Switched off for this node (a decision)",
    };
    if !view.scheduled {
        let why = match view.position {
            Position::Off => "",
            _ => " — fleet backups are switched off",
        };
        return format!("{whose}{why}: not backed up on a schedule.");
    }
    format!(
        "{whose}: every {} min from {:02}:00 UTC for {} h, {}, kept at least {} days, a full \
         every {} days, verified every {} days{}.",
        fields.every_minutes,
        fields.window_start_hour,
        fields.window_hours,
        fields.mode.as_str(),
        fields.keep_days,
        fields.full_every_days,
        fields.verify_every_days,
        if fields.verify_every_days == 0 {
            " (never)"
        } else {
            ""
        },
    )
}

fn run_row(run: &RunView) -> RunRow {
    RunRow {
        seq: run.seq,
        kind: run.kind.as_str(),
        started: ago(run.started_at),
        finished: ago(run.finished_at),
        size: bytes(u64::try_from(run.bytes).unwrap_or(0)),
        by: clip(&run.requested_by, 100),
        verified: run.verified_at.map(ago),
    }
}

fn chain_row(chain: &ChainView) -> ChainRow {
    ChainRow {
        space_id: chain.space_id,
        full_seq: chain.full_seq,
        space_state: chain.space_state.clone(),
        target_name: clip(&chain.target_name, 100),
        runs: chain.runs.iter().map(run_row).collect(),
    }
}

/// A level's name, as the Verify buttons say it.
fn level_name(level: u8) -> &'static str {
    match level {
        3 => "Rehearse a restore",
        _ => "Open and read",
    }
}

fn last_verify(view: &VerifyView) -> LastVerify {
    let counts = view
        .checked
        .as_ref()
        .and_then(|checked| checked.as_object())
        .map(|counts| {
            ["artifacts", "bytes", "files", "tables"]
                .iter()
                .filter_map(|name| {
                    counts
                        .get(*name)
                        .and_then(serde_json::Value::as_u64)
                        .map(|count| match *name {
                            "bytes" => bytes(count),
                            _ => format!("{count} {name}"),
                        })
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    LastVerify {
        level: level_name(view.level),
        seq: view.seq,
        ok: view.ok,
        when: ago(view.finished_at),
        counts,
        problems: clip(&view.problems.join("; "), 1000),
    }
}

fn recovery_words(answer: &NodeBackups) -> String {
    match &answer.recovery_key {
        None => "not reported yet".into(),
        Some(key) => match (key.state.as_str(), &key.fingerprint) {
            ("already", Some(fingerprint)) => {
                format!("set and proven ({})", clip(fingerprint, 100))
            }
            ("none", _) => "none: it cannot be backed up until its owner sets one".into(),
            _ => "not valid: it cannot be backed up until its owner sets one again".into(),
        },
    }
}

/// The tab for `node_id`, as `session` may see it.
pub async fn node_tab(state: &AppState, session: &UiSession, node_id: NodeId) -> BackupsTab {
    let can_act = session.level >= Level::Change;
    let can_admin = session.level >= Level::Admin;
    let request = NodeBackupsRequest {
        actor: session.actor(),
        node_id,
    };
    let answer: Result<NodeBackups, ApiError> = ask(state, &request).await;
    let mut tab = BackupsTab::empty(can_act, can_admin);
    let answer = match answer {
        Ok(answer) => answer,
        Err(refusal) => {
            tab.problem = Some(refusal_sentence(&refusal));
            return tab;
        }
    };
    tab.show(&answer);
    let request = GetNodePolicy {
        actor: session.actor(),
        node_id,
    };
    match ask(state, &request).await {
        Ok(view) => {
            tab.position = view.position.as_str().to_string();
            tab.schedule = schedule_words(&view);
        }
        Err(refusal) => tab.schedule = refusal_sentence(&refusal),
    }
    if can_admin {
        let active = answer
            .chains
            .iter()
            .find(|chain| chain.space_state == "active")
            .map(|chain| chain.target_id);
        (tab.targets, tab.targets_problem) = move_choices(state, session, active).await;
    }
    tab
}

/// The targets the node's backups may move to: every one but the active chain's.
async fn move_choices(
    state: &AppState,
    session: &UiSession,
    active: Option<i64>,
) -> (Vec<TargetChoice>, Option<String>) {
    let request = ListTargets {
        actor: session.actor(),
    };
    match ask(state, &request).await {
        Ok(listed) => (
            listed
                .targets
                .into_iter()
                .filter(|target| Some(target.id) != active)
                .map(|target| TargetChoice {
                    id: target.id,
                    name: clip(&target.name, 100),
                })
                .collect(),
            None,
        ),
        Err(refusal) => (Vec::new(), Some(refusal_sentence(&refusal))),
    }
}

impl BackupsTab {
    /// The tab before the backups service has answered.
    fn empty(can_act: bool, can_admin: bool) -> BackupsTab {
        BackupsTab {
            problem: None,
            chains: Vec::new(),
            last_backup: None,
            last_full: None,
            oldest: None,
            verify_state: String::new(),
            verify_problem: false,
            verify_words: String::new(),
            last_verify: None,
            shelf_problem: None,
            orphans: None,
            last_failure: None,
            recovery_key: String::new(),
            busy: None,
            can_act,
            can_admin,
            targets: Vec::new(),
            targets_problem: None,
            position: String::new(),
            schedule: String::new(),
        }
    }

    /// Shows the backups service's answer about the node: chains, ages, verification, the
    /// shelf, the recovery key, the job in hand.
    fn show(&mut self, answer: &NodeBackups) {
        self.chains = answer.chains.iter().map(chain_row).collect();
        self.last_backup = answer.last_backup.map(ago);
        self.last_full = answer.last_full.map(ago);
        self.oldest = answer.oldest.map(ago);
        self.verify_state = serde_json::to_value(answer.verify_state.state)
            .ok()
            .and_then(|value| value.as_str().map(str::to_string))
            .unwrap_or_default();
        self.verify_problem = answer.verify_state.problem;
        self.verify_words = clip(&answer.verify_state.words, 1000);
        self.last_verify = answer.verify_state.last.as_ref().map(last_verify);
        self.shelf_problem = answer.shelf_problem.as_deref().map(|text| clip(text, 1000));
        self.orphans = orphan_words(&answer.orphans);
        self.last_failure = answer.last_failure.as_deref().map(|text| clip(text, 1000));
        self.recovery_key = recovery_words(answer);
        self.busy = answer.busy.as_ref().map(|turn| {
            let job = turn
                .job_id
                .map(|id| format!("job {id}"))
                .unwrap_or_else(|| "a job not yet queued".into());
            format!(
                "{} ({job}) asked by {}, {}",
                clip(&turn.primitive, 64),
                clip(&turn.requested_by, 100),
                ago(turn.dispatched_at).text
            )
        });
    }
}

fn back(node_id: NodeId) -> String {
    format!("/ui/nodes/{node_id}?tab=backups")
}

/// The answer to an act: back on the tab with the job, audited with its details.
fn dispatched(
    node_id: NodeId,
    answer: Result<Dispatched, ApiError>,
    done: &str,
    detail: serde_json::Value,
) -> Response {
    let job_id = answer.as_ref().ok().map(|dispatched| dispatched.job_id);
    let mut response = acted(
        &back(node_id),
        answer.map(|dispatched| format!("{done} as job {}.", dispatched.job_id)),
    );
    let mut detail = detail;
    if let (Some(job_id), Some(object)) = (job_id, detail.as_object_mut()) {
        object.insert("job_id".into(), job_id.into());
    }
    response.extensions_mut().insert(AuditDetail(detail));
    response
}

/// A whole number above zero from the form, or a refusal naming the field.
fn positive(fields: &FormFields, name: &'static str) -> Result<i64, ApiError> {
    fields
        .get(name)
        .map(str::trim)
        .and_then(|text| text.parse::<i64>().ok())
        .filter(|value| *value > 0)
        .ok_or_else(|| ApiError::invalid(name, "must be a whole number above zero"))
}

pub async fn run_now(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
) -> Response {
    let request = RunNow {
        actor: session.actor(),
        node_id,
    };
    let answer = ask(&state, &request).await;
    dispatched(node_id, answer, "Backup asked for", serde_json::json!({}))
}

/// The level and run a Verify form asks for.
fn read_verify(fields: &FormFields) -> Result<(u8, i64), ApiError> {
    let level = match fields.get("level").map(str::trim) {
        Some("2") => 2,
        Some("3") => 3,
        _ => {
            return Err(ApiError::invalid(
                "level",
                "must be 2 (open and read) or 3 (rehearse a restore)",
            ))
        }
    };
    Ok((level, positive(fields, "seq")?))
}

pub async fn verify(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
    fields: FormFields,
) -> Response {
    let (level, seq) = match read_verify(&fields) {
        Ok(read) => read,
        Err(refusal) => return acted(&back(node_id), Err(refusal)),
    };
    let request = VerifyRequest {
        actor: session.actor(),
        node_id,
        level,
        seq,
    };
    let answer = ask(&state, &request).await;
    dispatched(
        node_id,
        answer,
        &format!("{} of run {seq} asked for", level_name(level)),
        serde_json::json!({"level": level, "seq": seq}),
    )
}

/// The run and what a Restore form asks for; the box must be ticked.
fn read_restore(fields: &FormFields) -> Result<(i64, RestoreWhat), ApiError> {
    let seq = positive(fields, "seq")?;
    let what = match fields.get("what").map(str::trim) {
        Some("database") => RestoreWhat::Database,
        Some("project") => RestoreWhat::Project,
        _ => {
            return Err(ApiError::invalid(
                "what",
                "must be database or project (database and files)",
            ))
        }
    };
    if fields.get("confirm") != Some("yes") {
        return Err(ApiError::invalid(
            "confirm",
            "tick the box: a restore replaces what the site holds now",
        ));
    }
    Ok((seq, what))
}

pub async fn restore(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
    fields: FormFields,
) -> Response {
    let (seq, what) = match read_restore(&fields) {
        Ok(read) => read,
        Err(refusal) => return acted(&back(node_id), Err(refusal)),
    };
    let request = RestoreRequest {
        actor: session.actor(),
        node_id,
        seq,
        what,
    };
    let answer = ask(&state, &request).await;
    let words = match what {
        RestoreWhat::Database => "database",
        RestoreWhat::Project => "project",
    };
    dispatched(
        node_id,
        answer,
        &format!("Restore of the {words} from run {seq} asked for"),
        serde_json::json!({"seq": seq, "what": words}),
    )
}

pub async fn move_node(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
    fields: FormFields,
) -> Response {
    let target_id = match positive(&fields, "target_id") {
        Ok(id) => id,
        Err(refusal) => return acted(&back(node_id), Err(refusal)),
    };
    let request = MoveRequest {
        actor: session.actor(),
        node_id,
        target_id,
    };
    let answer = ask(&state, &request).await;
    dispatched(
        node_id,
        answer,
        &format!("Moved to target {target_id}; its first full backup there was asked for"),
        serde_json::json!({"target_id": target_id}),
    )
}

/// The node's position from the tab: `fleet`, `own` (the fleet's fields frozen as they are
/// now) or `off`.
pub async fn set_position(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
    fields: FormFields,
) -> Response {
    let Some(position) = fields
        .get("position")
        .map(str::trim)
        .and_then(Position::parse)
    else {
        return acted(
            &back(node_id),
            Err(ApiError::invalid("position", "must be fleet, own or off")),
        );
    };
    let request = SetNodePolicy {
        actor: session.actor(),
        node_id,
        body: NodePolicyBody {
            position: position.as_str().to_string(),
            ..NodePolicyBody::default()
        },
    };
    let answer: Result<NodePolicyView, ApiError> = ask(&state, &request).await;
    let mut response = acted(
        &back(node_id),
        answer.map(|view| format!("Saved. {}", schedule_words(&view))),
    );
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"position": position.as_str()}),
    ));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> FormFields {
        FormFields::of(pairs)
    }

    #[test]
    fn the_orphan_counts_are_said_only_when_the_sweep_found_any() {
        assert_eq!(orphan_words(&OrphansView::default()), None);
        let words = orphan_words(&OrphansView {
            waiting: 3,
            deleted: 2,
            bytes_deleted: 2 * 1024 * 1024,
        })
        .unwrap();
        assert!(words.contains("3 waiting"), "{words}");
        assert!(words.contains("2 deleted (2.0 MiB)"), "{words}");
    }

    #[test]
    fn a_verify_form_names_its_bad_field() {
        assert_eq!(
            read_verify(&form(&[("level", "3"), ("seq", "4")])).unwrap(),
            (3, 4)
        );
        let bad_level = read_verify(&form(&[("level", "1"), ("seq", "4")])).unwrap_err();
        assert!(
            bad_level.message.starts_with("level:"),
            "{}",
            bad_level.message
        );
        let bad_seq = read_verify(&form(&[("level", "2"), ("seq", "x")])).unwrap_err();
        assert!(bad_seq.message.starts_with("seq:"), "{}", bad_seq.message);
    }

    #[test]
    fn a_restore_needs_its_box_ticked_and_a_known_what() {
        let read = read_restore(&form(&[
            ("seq", "2"),
            ("what", "project"),
            ("confirm", "yes"),
        ]));
        assert_eq!(read.unwrap(), (2, RestoreWhat::Project));
        let unticked = read_restore(&form(&[("seq", "2"), ("what", "database")])).unwrap_err();
        assert!(
            unticked.message.starts_with("confirm:"),
            "{}",
            unticked.message
        );
        let what =
            read_restore(&form(&[("seq", "2"), ("what", "all"), ("confirm", "yes")])).unwrap_err();
        assert!(what.message.starts_with("what:"), "{}", what.message);
    }
}
