//! The vocabulary compiled into this binary and the node's judgement of a job (AG-01,
//! PROTOCOL.md "The agent's side"). Each word's class and parameter shape come from the shared
//! catalog (`capstan_events::agent_channel::primitives`), the same shapes the plane checks
//! before it queues a job; the node checks again, whatever the plane asked, and refuses with
//! the reason: an unknown name, a class that is not the compiled one, an undeclared or
//! out-of-bounds parameter, a word the owner's switches do not allow, or a class its policy
//! does not accept.

use capstan_events::agent_channel::{
    primitives::{self, Primitive, REPORT_MARGIN},
    PrimitiveClass,
};
use serde_json::Value;
use std::{sync::LazyLock, time::Duration};

use super::policy::{Acceptance, PolicyState};
use capstan_events::Word as _;

/// The refusal the spec words for the log words and `file_head` while the owner's switch is
/// off (AG-63).
pub const LOG_ACCESS_OFF: &str =
    "this site's owner has not allowed log access (agent_log_access is off)";

/// The agent's own unit: restarting it from a job would end the job before it reports.
pub const OWN_UNIT: &str = "capstan-agent";

/// One compiled word.
#[derive(Debug)]
pub struct Word {
    pub primitive: &'static Primitive,
    /// It reads the site (refused as a posture on a machine with no site, AG-04).
    pub needs_site: bool,
    /// It reads logs or host configuration (refused while log access is off, AG-63).
    pub needs_log_access: bool,
}

/// Words are the same word when they have the same name (names are unique in the catalog).
impl PartialEq for Word {
    fn eq(&self, other: &Word) -> bool {
        self.name() == other.name()
    }
}

impl Word {
    pub fn name(&self) -> &'static str {
        self.primitive.name
    }

    pub fn class(&self) -> PrimitiveClass {
        self.primitive.class
    }
}

/// The words this binary runs, with what each needs. Adding one is a visible decision: the
/// test below pins the set, and each must be in the shared catalog.
const COMPILED: &[(&str, bool, bool)] = &[
    // (name, needs_site, needs_log_access)
    ("check_status", false, false),
    ("host_report", false, false),
    ("disk_usage", true, false),
    ("unit_journal", false, true),
    ("restart_unit", false, false),
    ("reset_failed_unit", false, false),
    ("site_log", true, true),
    ("file_head", false, true),
    ("restart_container", false, false),
    ("backup_run", true, false),
    ("verify_backup", true, false),
    ("list_backups", false, false),
    ("restore_database", true, false),
    ("restore_project", true, false),
    ("agent_converge", false, false),
    ("install_security_updates", false, false),
    ("apply_update", true, false),
    ("upgrade_preflight", true, false),
    ("page_probe", true, false),
];

static WORDS: LazyLock<Vec<Word>> = LazyLock::new(|| {
    COMPILED
        .iter()
        .map(|(name, needs_site, needs_log_access)| Word {
            primitive: primitives::find(name)
                .unwrap_or_else(|| panic!("the compiled word {name} is in the shared catalog")),
            needs_site: *needs_site,
            needs_log_access: *needs_log_access,
        })
        .collect()
});

/// Every compiled word.
pub fn words() -> &'static [Word] {
    &WORDS
}

/// The compiled word named `name`.
pub fn find(name: &str) -> Option<&'static Word> {
    words().iter().find(|word| word.name() == name)
}

/// The names a claim reports as `vocabulary`.
pub fn names() -> Vec<&'static str> {
    words().iter().map(Word::name).collect()
}

/// A job as the claim answer carried it, read without trusting any of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    pub id: i64,
    pub primitive: String,
    /// The class the plane says the word has; the node uses its own and refuses a mismatch.
    pub class: Option<String>,
    pub params: Value,
    /// The plane's claim budget for this job, after which it gives up on it.
    pub budget: Option<Duration>,
}

impl ClaimedJob {
    /// Reads the `job` of a claim answer. Without an `id` there is nothing to answer to;
    /// with one, any other fault is kept as a reason to refuse the job.
    pub fn read(job: &Value) -> Result<ClaimedJob, (Option<i64>, String)> {
        let id = job.get("id").and_then(Value::as_i64);
        let Some(id) = id else {
            return Err((None, "the job has no id".into()));
        };
        let primitive = match job.get("primitive").and_then(Value::as_str) {
            Some(name) => name.to_string(),
            None => return Err((Some(id), "the job names no primitive".into())),
        };
        let class = job.get("class").and_then(Value::as_str).map(str::to_string);
        let budget = job
            .get("budget_s")
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        Ok(ClaimedJob {
            id,
            primitive,
            class,
            params: job.get("params").cloned().unwrap_or(Value::Null),
            budget,
        })
    }
}

/// What the node knows of itself when it judges a job.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub policy: &'a PolicyState,
    pub log_access: bool,
    pub has_site: bool,
}

/// The node's answer to a job.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Run(&'static Word),
    /// Hold it until a person on the node approves or denies it.
    Ask(&'static Word),
    Refuse(String),
}

/// Judges a job against the compiled vocabulary, the owner's switches and the policy.
pub fn judge(job: &ClaimedJob, node: &NodeView<'_>) -> Verdict {
    // An untrusted policy refuses everything, before anything about the job is read.
    let Some(word) = find(&job.primitive) else {
        if let Err(reason) = node.policy.decide(PrimitiveClass::Read) {
            return Verdict::Refuse(reason.0);
        }
        return Verdict::Refuse(format!(
            "this agent has no primitive named {:?}",
            job.primitive.chars().take(64).collect::<String>()
        ));
    };
    let acceptance = match node.policy.decide(word.class()) {
        Ok(acceptance) => acceptance,
        Err(reason) => return Verdict::Refuse(reason.0),
    };
    let compiled_class = word.class().as_str();
    if let Some(claimed) = &job.class {
        if claimed != compiled_class {
            return Verdict::Refuse(format!(
                "the plane calls {} a {} word, but this agent compiled it as {compiled_class}",
                word.name(),
                claimed.chars().take(32).collect::<String>()
            ));
        }
    }
    if let Err(reason) = word.primitive.check_params(&job.params) {
        return Verdict::Refuse(reason);
    }
    if word.name() == "restart_unit"
        && job.params.get("unit").and_then(Value::as_str) == Some(OWN_UNIT)
    {
        return Verdict::Refuse(format!(
            "restart_unit will not restart {OWN_UNIT}: the agent would stop before it could report"
        ));
    }
    if word.needs_log_access && !node.log_access {
        return Verdict::Refuse(LOG_ACCESS_OFF.into());
    }
    if word.needs_site && !node.has_site {
        return Verdict::Refuse(format!(
            "this machine has no site, so {} has nothing to read",
            word.name()
        ));
    }
    match acceptance {
        Acceptance::Accept => Verdict::Run(word),
        Acceptance::Ask => Verdict::Ask(word),
        Acceptance::Refuse => {
            Verdict::Refuse(format!("this node's policy refuses {compiled_class} words"))
        }
    }
}

/// How long the word may run now: its own run budget from the catalog, and never past the
/// plane's claim budget for the job (less the time already spent waiting, and a margin to
/// report), so the node stops it and says so before the plane gives up and calls it lost.
pub fn run_budget(word: &Word, job_budget: Option<Duration>, waited: Duration) -> Duration {
    let plane_budget = job_budget.unwrap_or(word.primitive.claim_budget);
    let left = plane_budget
        .saturating_sub(waited)
        .saturating_sub(REPORT_MARGIN);
    word.primitive.run_budget().min(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::Policy;
    use serde_json::json;
    use PrimitiveClass::*;

    fn job(primitive: &str, params: Value) -> ClaimedJob {
        ClaimedJob {
            id: 7,
            primitive: primitive.into(),
            class: None,
            params,
            budget: None,
        }
    }

    fn node(policy: &PolicyState) -> NodeView<'_> {
        NodeView {
            policy,
            log_access: true,
            has_site: true,
        }
    }

    fn refused(verdict: Verdict) -> String {
        match verdict {
            Verdict::Refuse(reason) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Adding or reclassing a word is a decision: this list changes with it.
    #[test]
    fn ag_01_the_vocabulary_is_exactly_these_words_and_classes() {
        let compiled: Vec<(&str, PrimitiveClass)> = words()
            .iter()
            .map(|word| (word.name(), word.class()))
            .collect();
        assert_eq!(
            compiled,
            vec![
                ("check_status", Read),
                ("host_report", Read),
                ("disk_usage", Read),
                ("unit_journal", Read),
                ("restart_unit", Change),
                ("reset_failed_unit", Change),
                ("site_log", Read),
                ("file_head", Read),
                ("restart_container", Change),
                ("backup_run", Change),
                ("verify_backup", Read),
                ("list_backups", Read),
                ("restore_database", Destructive),
                ("restore_project", Destructive),
                ("agent_converge", Change),
                ("install_security_updates", Change),
                ("apply_update", Change),
                ("upgrade_preflight", Read),
                ("page_probe", Read),
            ]
        );
    }

    #[test]
    fn ag_01_an_unknown_name_is_refused_naming_it() {
        let reason = refused(judge(
            &job("run_command", json!({})),
            &node(&PolicyState::Shipped),
        ));
        assert_eq!(reason, "this agent has no primitive named \"run_command\"");
    }

    #[test]
    fn ag_01_undeclared_and_out_of_bounds_parameters_are_refused_whatever_the_plane_asked() {
        let shipped = PolicyState::Shipped;
        let cases = [
            (
                "unit_journal",
                json!({"unit": "sshd"}),
                "unit must be one of",
            ),
            (
                "unit_journal",
                json!({"unit": "nginx", "lines": 5000}),
                "lines is 5000, outside 1..=2000",
            ),
            (
                "check_status",
                json!({"shell": "id"}),
                "takes no parameter \"shell\"",
            ),
            ("restart_unit", json!({}), "needs the parameter \"unit\""),
            (
                "disk_usage",
                json!("everything"),
                "params must be a JSON object",
            ),
        ];
        for (word, params, expected) in cases {
            let reason = refused(judge(&job(word, params.clone()), &node(&shipped)));
            assert!(reason.contains(expected), "{word} {params}: {reason}");
        }
    }

    #[test]
    fn a_class_other_than_the_compiled_one_is_refused() {
        let mut asked = job("restart_unit", json!({"unit": "nginx"}));
        asked.class = Some("read".into());
        let reason = refused(judge(&asked, &node(&PolicyState::Shipped)));
        assert_eq!(
            reason,
            "the plane calls restart_unit a read word, but this agent compiled it as change"
        );
        asked.class = Some("change".into());
        assert!(matches!(
            judge(&asked, &node(&PolicyState::Shipped)),
            Verdict::Run(_)
        ));
    }

    #[test]
    fn ag_02_each_class_gets_the_policy_answer() {
        let policy =
            PolicyState::File(Policy::parse(br#"{"read":"ask","change":"refuse"}"#).unwrap());
        assert!(matches!(
            judge(&job("check_status", json!({})), &node(&policy)),
            Verdict::Ask(word) if word.name() == "check_status"
        ));
        let reason = refused(judge(
            &job("restart_unit", json!({"unit": "nginx"})),
            &node(&policy),
        ));
        assert_eq!(reason, "this node's policy refuses change words");
    }

    #[test]
    fn ag_02_an_untrusted_policy_refuses_even_a_read_word_and_an_unknown_one() {
        let policy = PolicyState::Untrusted("policy.json has mode 666".into());
        for name in ["check_status", "no_such_word"] {
            let reason = refused(judge(&job(name, json!({})), &node(&policy)));
            assert!(reason.contains("accepts nothing"), "{reason}");
        }
    }

    #[test]
    fn ag_63_log_words_are_refused_with_the_spec_reason_while_log_access_is_off() {
        let shipped = PolicyState::Shipped;
        let off = NodeView {
            log_access: false,
            ..node(&shipped)
        };
        for (word, params) in [
            ("site_log", json!({"log": "access"})),
            ("file_head", json!({"file": "/etc/hosts"})),
            ("unit_journal", json!({"unit": "nginx"})),
        ] {
            assert_eq!(
                judge(&job(word, params), &off),
                Verdict::Refuse(LOG_ACCESS_OFF.into())
            );
        }
        assert!(matches!(
            judge(&job("check_status", json!({})), &off),
            Verdict::Run(_)
        ));
    }

    #[test]
    fn ag_04_a_site_word_on_a_machine_with_no_site_is_refused_as_a_posture() {
        let shipped = PolicyState::Shipped;
        let siteless = NodeView {
            has_site: false,
            ..node(&shipped)
        };
        let reason = refused(judge(&job("disk_usage", json!({})), &siteless));
        assert_eq!(
            reason,
            "this machine has no site, so disk_usage has nothing to read"
        );
    }

    #[test]
    fn restart_unit_never_restarts_the_agent_itself() {
        let reason = refused(judge(
            &job("restart_unit", json!({"unit": "capstan-agent"})),
            &node(&PolicyState::Shipped),
        ));
        assert!(reason.contains("will not restart capstan-agent"));
    }

    #[test]
    fn a_job_without_an_id_cannot_be_answered_and_one_without_a_name_is_refused() {
        assert_eq!(
            ClaimedJob::read(&json!({"primitive": "check_status"})),
            Err((None, "the job has no id".into()))
        );
        assert_eq!(
            ClaimedJob::read(&json!({"id": 4})),
            Err((Some(4), "the job names no primitive".into()))
        );
        let read = ClaimedJob::read(&json!({"id": 4, "primitive": "check_status",
            "class": "read", "params": {}, "budget_s": 300}))
        .unwrap();
        assert_eq!(read.budget, Some(Duration::from_secs(300)));
    }

    #[test]
    fn ag_21_the_run_budget_ends_before_the_plane_gives_up_on_the_claim() {
        let status = find("check_status").unwrap();
        let budget = run_budget(status, Some(Duration::from_secs(300)), Duration::ZERO);
        assert_eq!(budget, Duration::from_secs(240));
        // Time spent waiting for approval comes off what is left.
        let later = run_budget(
            status,
            Some(Duration::from_secs(300)),
            Duration::from_secs(200),
        );
        assert_eq!(later, Duration::from_secs(40));
        let none_left = run_budget(
            status,
            Some(Duration::from_secs(300)),
            Duration::from_secs(400),
        );
        assert_eq!(none_left, Duration::ZERO);
        // Never more than the word's own budget, whatever the plane allows.
        let long = run_budget(status, Some(Duration::from_secs(86_400)), Duration::ZERO);
        assert_eq!(long, status.primitive.run_budget());
    }

    #[test]
    fn ag_21_a_backup_word_runs_to_its_own_budget_not_the_default_thirty_minutes() {
        let backup = find("backup_run").unwrap();
        let budget = run_budget(backup, Some(Duration::from_secs(240 * 60)), Duration::ZERO);
        assert_eq!(budget, Duration::from_secs(235 * 60));
        assert!(budget > primitives::DEFAULT_RUN_BUDGET);
    }
}
