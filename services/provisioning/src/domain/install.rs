//! A node's install state (PV-01) and a provision's steps (PV-02, PV-03, PV-05).
//!
//! PV-01: "`mgn_install_state` ∈ {installing, install_failed, copy, switching, retired} or NULL
//! (operational) ... `is_operational()` is false for any of these and for any unknown state."
//! PV-02: "install_failed shows a Retry Install button."

use capstan_events::provisioning::{InstallState, ProvisionStep};
use capstan_events::Word as _;
use chrono::{DateTime, Utc};

/// A node's install state as read from a row or an event: NULL, one of the five, or a word this
/// service does not know (kept, so it is shown as it was written, and never operational).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeInstall {
    Operational,
    State(InstallState),
    Unknown(String),
}

impl NodeInstall {
    /// Reads a stored or reported state: `None` is operational.
    pub fn read(state: Option<&str>) -> NodeInstall {
        match state {
            None => NodeInstall::Operational,
            Some(word) => match InstallState::parse(word) {
                Some(state) => NodeInstall::State(state),
                None => NodeInstall::Unknown(word.to_string()),
            },
        }
    }

    /// PV-01: only NULL is operational; every named state and any unknown one is not.
    pub fn is_operational(&self) -> bool {
        matches!(self, NodeInstall::Operational)
    }
}

/// Why a step may not follow the one a provision is at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("a provision at {from} cannot go to {to}")]
    NotNext {
        from: ProvisionStep,
        to: ProvisionStep,
    },
    #[error("only a failed install can be retried; this provision is at {0}")]
    NotFailed(ProvisionStep),
    #[error("a failed install needs its reason")]
    NoReason,
}

/// Where a provision stands, with when it got there and, once failed, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: ProvisionStep,
    pub since: DateTime<Utc>,
    /// The reason of a failure (secrets already masked by the caller).
    pub failure: Option<String>,
    /// How many times Retry was pressed.
    pub retries: u32,
}

/// The step after `step` on the way to `done` (none after `done` or a failure).
pub fn next(step: ProvisionStep) -> Option<ProvisionStep> {
    match step {
        ProvisionStep::Requested => Some(ProvisionStep::Creating),
        ProvisionStep::Creating => Some(ProvisionStep::Booting),
        ProvisionStep::Booting => Some(ProvisionStep::Installing),
        ProvisionStep::Installing => Some(ProvisionStep::Done),
        ProvisionStep::Done | ProvisionStep::InstallFailed => None,
    }
}

/// Whether a provision at `step` is in flight (the dashboard banner shows it, PV-03).
pub fn in_flight(step: ProvisionStep) -> bool {
    !matches!(step, ProvisionStep::Done | ProvisionStep::InstallFailed)
}

/// The install state the provision's node carries at `step` (PV-01: installing until the
/// install finishes, NULL on success, install_failed on failure); `None` before a node exists.
pub fn node_state(step: ProvisionStep) -> Option<NodeInstall> {
    match step {
        ProvisionStep::Requested | ProvisionStep::Creating | ProvisionStep::Booting => None,
        ProvisionStep::Installing => Some(NodeInstall::State(InstallState::Installing)),
        ProvisionStep::Done => Some(NodeInstall::Operational),
        ProvisionStep::InstallFailed => Some(NodeInstall::State(InstallState::InstallFailed)),
    }
}

impl Progress {
    pub fn requested(at: DateTime<Utc>) -> Progress {
        Progress {
            step: ProvisionStep::Requested,
            since: at,
            failure: None,
            retries: 0,
        }
    }

    /// Moves to the next step; refuses any other.
    pub fn advance(&self, to: ProvisionStep, at: DateTime<Utc>) -> Result<Progress, StepError> {
        if next(self.step) != Some(to) {
            return Err(StepError::NotNext {
                from: self.step,
                to,
            });
        }
        Ok(Progress {
            step: to,
            since: at,
            failure: None,
            retries: self.retries,
        })
    }

    /// Any step in flight may fail, with its reason (PV-02).
    pub fn fail(&self, reason: &str, at: DateTime<Utc>) -> Result<Progress, StepError> {
        if !in_flight(self.step) {
            return Err(StepError::NotNext {
                from: self.step,
                to: ProvisionStep::InstallFailed,
            });
        }
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(StepError::NoReason);
        }
        Ok(Progress {
            step: ProvisionStep::InstallFailed,
            since: at,
            failure: Some(reason.to_string()),
            retries: self.retries,
        })
    }

    /// Retry (PV-02): only from `install_failed`, back to `requested`; each step already
    /// finished is stored with its result, so the run resumes without repeating it.
    pub fn retry(&self, at: DateTime<Utc>) -> Result<Progress, StepError> {
        if self.step != ProvisionStep::InstallFailed {
            return Err(StepError::NotFailed(self.step));
        }
        Ok(Progress {
            step: ProvisionStep::Requested,
            since: at,
            failure: None,
            retries: self.retries + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, 12, minute, 0).unwrap()
    }

    #[test]
    fn pv_01_only_null_is_operational_and_an_unknown_state_is_not() {
        assert!(NodeInstall::read(None).is_operational());
        for word in [
            "installing",
            "install_failed",
            "copy",
            "switching",
            "retired",
        ] {
            let read = NodeInstall::read(Some(word));
            assert!(matches!(read, NodeInstall::State(_)), "{word}");
            assert!(!read.is_operational(), "{word}");
        }
        let unknown = NodeInstall::read(Some("hibernating"));
        assert_eq!(unknown, NodeInstall::Unknown("hibernating".into()));
        assert!(!unknown.is_operational());
        // An empty word is not NULL.
        assert!(!NodeInstall::read(Some("")).is_operational());
    }

    #[test]
    fn pv_01_the_node_is_installing_until_done_then_operational_or_install_failed() {
        assert_eq!(node_state(ProvisionStep::Booting), None);
        assert_eq!(
            node_state(ProvisionStep::Installing),
            Some(NodeInstall::State(InstallState::Installing))
        );
        assert_eq!(
            node_state(ProvisionStep::Done),
            Some(NodeInstall::Operational)
        );
        assert_eq!(
            node_state(ProvisionStep::InstallFailed),
            Some(NodeInstall::State(InstallState::InstallFailed))
        );
    }

    #[test]
    fn pv_03_steps_go_requested_creating_booting_installing_done_and_no_step_is_skipped() {
        let mut progress = Progress::requested(at(0));
        for (minute, step) in [
            ProvisionStep::Creating,
            ProvisionStep::Booting,
            ProvisionStep::Installing,
            ProvisionStep::Done,
        ]
        .into_iter()
        .enumerate()
        {
            assert!(in_flight(progress.step));
            progress = progress.advance(step, at(minute as u32 + 1)).unwrap();
        }
        assert_eq!(progress.step, ProvisionStep::Done);
        assert!(!in_flight(progress.step));
        assert_eq!(progress.since, at(4));
        let skipped = Progress::requested(at(0)).advance(ProvisionStep::Booting, at(1));
        assert_eq!(
            skipped,
            Err(StepError::NotNext {
                from: ProvisionStep::Requested,
                to: ProvisionStep::Booting
            })
        );
        assert!(progress.advance(ProvisionStep::Done, at(9)).is_err());
    }

    #[test]
    fn pv_02_a_failed_install_keeps_its_reason_and_retry_starts_again_from_requested() {
        let booting = Progress::requested(at(0))
            .advance(ProvisionStep::Creating, at(1))
            .unwrap()
            .advance(ProvisionStep::Booting, at(2))
            .unwrap();
        assert_eq!(booting.fail("  ", at(3)), Err(StepError::NoReason));
        let failed = booting
            .fail("the instance never reported running", at(3))
            .unwrap();
        assert_eq!(failed.step, ProvisionStep::InstallFailed);
        assert_eq!(
            failed.failure.as_deref(),
            Some("the instance never reported running")
        );
        // A failure cannot fail again, and only a failure can be retried.
        assert!(failed.fail("again", at(4)).is_err());
        assert_eq!(
            booting.retry(at(4)),
            Err(StepError::NotFailed(ProvisionStep::Booting))
        );
        let retried = failed.retry(at(5)).unwrap();
        assert_eq!(
            (retried.step, retried.failure.clone(), retried.retries),
            (ProvisionStep::Requested, None, 1)
        );
        assert_eq!(retried.since, at(5));
    }
}
