//! A rollout as a durable workflow (RO-10..RO-16, and beyond the spec: error budgets, soak,
//! pause, resume, retry). [`advance`] is the whole engine: it takes the rollout and its steps
//! as stored, what the jobs have answered since, and the clock, changes them in memory and
//! returns the effects to store with them. The service writes the changed rows and the effects
//! (job requests and events, through the outbox) in one transaction, so every step's result is
//! stored before the next step starts, and a restarted service resumes from the rows: a job is
//! requested only in the transaction that moves its step into the phase that needs it, under an
//! idempotency key that names the rollout, the step, the try and the phase, so it is never sent
//! twice; an apply the service lost track of is judged from the job's outcome (a lost job is a
//! miss), never sent again.
//!
//! A step goes `waiting → preflight → probes before → apply → probes after → done`, skipping
//! the preflight when its node does not report `upgrade_preflight` and the probes when the
//! rollout names no pages. A patch run's step is `waiting → apply → done` with
//! `install_security_updates` as its apply.

use capstan_events::NodeId;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::verdict::{Finished, Probe, ProbePage};

mod act;
mod advance;
mod patch;
mod phases;

pub use act::{act, Refused};
pub use advance::advance;
pub use patch::patch_verdict;

#[cfg(test)]
mod tests;

/// RO-19: a readiness check that has not answered in this long halts at its node.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::minutes(15);
/// RO-21: a round of page checks that has not finished in this long halts at its node.
pub const PROBE_ROUND_TIMEOUT: Duration = Duration::minutes(15);

/// The words a rollout asks for.
pub const PREFLIGHT_WORD: &str = "upgrade_preflight";
pub const PROBE_WORD: &str = "page_probe";
pub const APPLY_WORD: &str = capstan_events::agent_channel::primitives::UPDATE;
pub const PATCH_WORD: &str = "install_security_updates";

/// What a rollout rolls out, and where it is: the contract's words (`RolloutKind`,
/// `RolloutState`), which the API and the pages show as they are.
pub use capstan_events::rollouts::staged::{RolloutKind as Kind, RolloutState as State};

/// Where a step is, and its verdict (RO-10): the contract's words, shown as they are.
pub use capstan_events::rollouts::staged::{StepPhase as Phase, StepVerdict as Verdict};

/// Beyond the spec (hawkBit's error threshold): how many of a stage's nodes may miss before
/// the rollout halts. The spec's rule — the first miss halts — is a budget of none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Nodes(u32),
    Percent(u8),
}

impl Budget {
    pub const NONE: Budget = Budget::Nodes(0);

    /// Whether `failed` misses out of `total` nodes are still within the budget.
    pub fn allows(self, failed: usize, total: usize) -> bool {
        match self {
            Budget::Nodes(nodes) => failed <= nodes as usize,
            Budget::Percent(percent) => failed * 100 <= usize::from(percent) * total,
        }
    }
}

/// A stage's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagePolicy {
    pub budget: Budget,
    /// Beyond the spec: how long the stage's nodes are watched after its last step passed;
    /// an incident opened on one of them meanwhile halts the rollout.
    pub soak: Duration,
}

impl Default for StagePolicy {
    fn default() -> StagePolicy {
        StagePolicy {
            budget: Budget::NONE,
            soak: Duration::zero(),
        }
    }
}

/// The node and reason a rollout halted at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub node_id: NodeId,
    pub reason: String,
}

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub id: i64,
    pub kind: Kind,
    /// The release a `Release` rollout applies (empty for a patch run).
    pub version: String,
    pub state: State,
    /// The stage under way (0-based).
    pub stage: usize,
    pub stages: Vec<StagePolicy>,
    pub pages: Vec<ProbePage>,
    /// Set when the current stage's last step is done and its soak began.
    pub soak_until: Option<DateTime<Utc>>,
    pub halt: Option<Halt>,
}

/// One job a step is waiting for, by its idempotency key, with the answer once it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub key: String,
    pub answer: Option<Finished>,
}

/// A node's step as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: i64,
    pub node_id: NodeId,
    /// RO-12: the machine the node runs on (container sites on one host are one machine).
    pub machine: String,
    pub stage: usize,
    pub phase: Phase,
    pub verdict: Verdict,
    pub reason: Option<String>,
    pub phase_since: Option<DateTime<Utc>>,
    /// Each retry is a new try, so its jobs have new keys.
    pub attempt: u32,
    /// The node reports `upgrade_preflight` (RO-19: no word, applied directly).
    pub has_preflight: bool,
    /// The jobs of the current phase.
    pub slots: Vec<Slot>,
    /// What each page answered before the apply (None: no check before).
    pub before: Vec<Option<Probe>>,
    /// What each page answered after it.
    pub after: Vec<Option<Probe>>,
    /// RO-17: why the step waits (a site copy under way), when it does.
    pub waiting_on: Option<String>,
}

impl Step {
    pub fn new(id: i64, node_id: NodeId, machine: &str, stage: usize, has_preflight: bool) -> Step {
        Step {
            id,
            node_id,
            machine: machine.to_string(),
            stage,
            phase: Phase::Waiting,
            verdict: Verdict::Pending,
            reason: None,
            phase_since: None,
            attempt: 0,
            has_preflight,
            slots: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
            waiting_on: None,
        }
    }
}

/// What the engine learns from outside on a tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// RO-17: nodes whose site copy holds them, with why.
    pub holds: Vec<(NodeId, String)>,
    /// Incidents opened on nodes since the current stage's soak began: (node, what).
    pub incidents: Vec<(NodeId, String)>,
}

/// What the service does with an [`advance`]: ask for a job, withdraw one, or tell the world.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    RequestJob {
        step_id: i64,
        node_id: NodeId,
        key: String,
        word: &'static str,
        params: Value,
    },
    CancelJob {
        key: String,
    },
    StepFinished {
        step_id: i64,
        node_id: NodeId,
        verdict: Verdict,
        reason: Option<String>,
    },
    StageStarted {
        stage: usize,
    },
    Halted(Halt),
    Finished,
}

/// An operator's act on a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Stop,
    Pause,
    Resume,
    Retry,
}

impl Act {
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Stop => "stop",
            Act::Pause => "pause",
            Act::Resume => "resume",
            Act::Retry => "retry",
        }
    }

    pub fn parse(word: &str) -> Option<Act> {
        Some(match word {
            "stop" => Act::Stop,
            "pause" => Act::Pause,
            "resume" => Act::Resume,
            "retry" => Act::Retry,
            _ => return None,
        })
    }
}

/// The idempotency key of a step's job: the rollout, the step, the try, the phase and the
/// page. The agent channel takes a key once, so a decision repeated after a crash asks again
/// under the same key and nothing is sent twice.
pub fn job_key(rollout: i64, step: &Step, phase: Phase, index: usize) -> String {
    format!(
        "rollout-{rollout}-step-{}-try-{}-{}-{index}",
        step.id, step.attempt, phase
    )
}
