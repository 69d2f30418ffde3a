//! What a claim needs of the plane, and the lane it waits in (AC-17, heartbeats, intake).

use super::*;

/// What the plane knows of a node at a glance, when a claim arrives.
#[derive(Debug, Clone)]
pub struct Glimpse {
    pub paired: bool,
    pub facts: NodeFacts,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub has_pending: bool,
    pub has_running: bool,
    /// A running job has outlived its claim budget (AC-29).
    pub has_stale: bool,
}

/// What a claim (or, with `None`, a long poll looking again) needs beyond its first read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: it is answered "no job" and nothing is written.
    Nothing,
    /// Only its heartbeat stamped (`last_seen_at`, at most every [`LAST_SEEN_RESOLUTION`]):
    /// one statement, no transaction and no lock. A fleet long-polling every 20 to 25 seconds
    /// needs this on about every other claim.
    Heartbeat,
    /// The transaction on the locked node: facts that changed, jobs lost, a job handed out.
    Work,
}

/// Whether a node last heard from at `last_seen_at` is due its heartbeat stamp: never heard
/// from, or not for [`LAST_SEEN_RESOLUTION`].
pub fn heartbeat_due(last_seen_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    last_seen_at.is_none_or(|seen| {
        now.signed_duration_since(seen).to_std().unwrap_or_default() >= LAST_SEEN_RESOLUTION
    })
}

/// What a claim needs: nothing when its facts change nothing, its heartbeat is fresh, no job
/// waits, and nothing running is lost, neither by an idle claim (AC-28) nor by its budget
/// (AC-29); only its heartbeat when that alone is due; otherwise the locked work.
pub fn needs(node: &Glimpse, claim: Option<&Claim>, now: DateTime<Utc>) -> Needs {
    let unchanged = claim.is_none_or(|claim| apply(&node.facts, claim, now).is_none());
    let heard_lately = !heartbeat_due(node.last_seen_at, now);
    let idle_with_running = claim.is_some_and(|claim| claim.idle) && node.has_running;
    let quiet =
        node.paired && unchanged && !node.has_pending && !node.has_stale && !idle_with_running;
    match (quiet, heard_lately || claim.is_none()) {
        (false, _) => Needs::Work,
        (true, true) => Needs::Nothing,
        (true, false) => Needs::Heartbeat,
    }
}

/// Which way an agent request waits for a slot to do its database work. In a restart storm a
/// whole fleet renews its long polls in the same few seconds; a request that moves a job along
/// must not wait behind all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Ahead of plain requests: it reaches a slot kept for work ([`plain_slots`]) and never
    /// waits behind the plain requests queued for theirs.
    Work,
    /// Behind the plain requests before it: at most [`plain_slots`] of them do their database
    /// work at once.
    Plain,
}

/// What an agent request is, as far as its place in line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    /// A claim; `work_waiting` when a job waits for its node (queued, or rung for since the
    /// node's last claim looked).
    Claim { work_waiting: bool },
    /// A long poll its node's bell woke: a job was queued for it.
    Woken,
    /// A job's result: it ends a job someone waits for, and frees the node for its next one.
    Result,
    /// Anything else (job_status, leave, artifact; a long poll whose wait ran out).
    Other,
}

/// The priority rule: a request goes in the work lane when it moves a job along (a claim for a
/// node with a job waiting, a long poll woken for one, a result) and its signature has proved
/// its node before it waits; everything else (a quiet node renewing its poll, a request whose
/// key is not yet known) is plain. So a stranger never jumps the line, and the work lane holds
/// at most a request or two per job.
pub fn lane(proven: bool, asking: Asking) -> Lane {
    let moves_a_job = matches!(
        asking,
        Asking::Claim { work_waiting: true } | Asking::Woken | Asking::Result
    );
    if proven && moves_a_job {
        Lane::Work
    } else {
        Lane::Plain
    }
}

/// How a node-signed request is taken in, before its signature is checked: at once, or in
/// turn with the rest of a burst (`rpc::INTAKE_PERMITS` at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// Past the turn: it moves a job along.
    AtOnce,
    /// In turn; `unless_rung` when a job queued for its node while it waits lets it go at
    /// once (a claim: it will hand that job out).
    InTurn { unless_rung: bool },
}

/// The intake's rule, [`lane`]'s with the node only named, not yet proven: a request whose key
/// names a node this replica knows and that moves a job along (a result, a claim with work
/// waiting) goes at once; a claim of a known node waits its turn unless its node is rung for;
/// anything else (a stranger's key, a renewal of a node nobody rings for, a status) waits its
/// turn. The key is checked after, and the slots are chosen again then, so a forger naming a
/// busy node gains only an earlier refusal.
pub fn intake(named: bool, asking: Asking) -> Intake {
    match lane(named, asking) {
        Lane::Work => Intake::AtOnce,
        Lane::Plain => Intake::InTurn {
            unless_rung: named && matches!(asking, Asking::Claim { .. }),
        },
    }
}

/// Of `slots` agent slots, how many plain requests may hold at once: a quarter (at least one)
/// is kept for the work lane whenever there are two or more, so a storm of renewals never holds
/// every slot.
pub fn plain_slots(slots: usize) -> usize {
    if slots < 2 {
        return slots.max(1);
    }
    slots - (slots / 4).max(1)
}
