//! Jobs: who may ask for a word, when a node can be given it, what the claim answer holds, and
//! the words the plane uses when it gives up on one (spec AC-19..AC-30).

use capstan_events::agent_channel::primitives::{self, Primitive};
use capstan_events::Domain;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::time::Duration;

use super::version::{below_floor, FLOOR};

/// What the plane knows of a node when it decides whether a word can go to it.
#[derive(Debug, Clone)]
pub struct Routing<'a> {
    pub paired: bool,
    pub agent_version: Option<&'a str>,
    pub vocabulary: &'a [String],
}

/// Why a job cannot be created for a node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoutingRefusal {
    #[error("this node has no paired agent; pair the node first")]
    NotPaired,
    /// AC-21's one standard state, naming the missing words and the floor when below it.
    #[error("Needs a newer agent; update this node: it does not offer {missing}{floor}")]
    NeedsNewerAgent { missing: String, floor: String },
}

/// AC-19, AC-20, AC-21: a word runs only on the node's own paired agent, only if that agent
/// reported it; a node below the floor (or reporting no version or no vocabulary) is offered
/// `apply_update` alone, whatever it reported, since that is how it gets back above.
pub fn route(node: &Routing<'_>, primitive: &str) -> Result<(), RoutingRefusal> {
    if !node.paired {
        return Err(RoutingRefusal::NotPaired);
    }
    let below = below_floor(node.agent_version, node.vocabulary);
    let routable = if below {
        primitive == primitives::UPDATE
    } else {
        node.vocabulary.iter().any(|word| word == primitive)
    };
    if routable {
        return Ok(());
    }
    let floor = if below {
        format!(
            " (its agent {} is below the minimum {FLOOR})",
            node.agent_version.unwrap_or("of unknown version")
        )
    } else {
        String::new()
    };
    Err(RoutingRefusal::NeedsNewerAgent {
        missing: primitive.to_string(),
        floor,
    })
}

/// The door a job is asked for through (issue 27): an operator (the generic jobs route or its
/// form), or another service's `request_job`, known by the subject it came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Operator,
    Service(Domain),
}

/// Why a word may not be asked for through a door.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DoorRefusal {
    /// An operator asked for a service's word on the generic route: the words name its route.
    #[error("{0}")]
    OwnedByService(String),
    /// A service asked for a word that is not its to ask.
    #[error("{primitive} is not a word the {sender} service may ask for; nothing was queued")]
    NotTheSendersWord { primitive: String, sender: String },
}

/// Issue 27: a word one service owns (backups' runs, verifies and restores; rollouts' applies,
/// checks and patch runs) is made by that service alone, under its own rules (one job per
/// machine, its run numbers, its stages); every other word is an operator's, and a service
/// may ask only for the operator words the catalog names it beside (the monitor's status
/// words). The catalog's `issuer` is the one declaration; this holds every job to it.
pub fn may_ask(word: &Primitive, door: Door) -> Result<(), DoorRefusal> {
    match door {
        Door::Operator => match word.operator_refusal() {
            Some(refusal) => Err(DoorRefusal::OwnedByService(refusal)),
            None => Ok(()),
        },
        Door::Service(sender) if word.requestable_by(sender) => Ok(()),
        Door::Service(sender) => Err(DoorRefusal::NotTheSendersWord {
            primitive: word.name.to_string(),
            sender: sender.service_name(),
        }),
    }
}

/// The job as the claim answer carries it (PROTOCOL.md "claim"); `budget_s` is the budget
/// fixed when the job was made.
pub fn claim_payload(id: i64, primitive: &Primitive, params: &Value, budget_s: i32) -> Value {
    json!({
        "id": id,
        "primitive": primitive.name,
        "class": primitive.class,
        "params": params,
        "budget_s": budget_s,
    })
}

/// AC-16: a job larger than the node's `claim_bytes` is not handed out.
pub fn fits(payload: &Value, claim_limit: u64) -> bool {
    // the answer also carries `{"job": ..., "ignored_fields": [...]}` around it
    (payload.to_string().len() as u64).saturating_add(64) <= claim_limit
}

/// The reason a job too large for the node ends with.
pub fn too_large_reason(size: usize, limit: u64) -> String {
    format!("the job is {size} bytes, larger than the {limit} bytes this node takes in a claim")
}

/// AC-29: a running job older than its budget is lost.
pub fn past_budget(claimed_at: DateTime<Utc>, budget: Duration, now: DateTime<Utc>) -> bool {
    now.signed_duration_since(claimed_at)
        .to_std()
        .unwrap_or_default()
        > budget
}

/// The words a lost job ends with: what it did on the node is unknown.
pub mod lost {
    pub const IDLE: &str =
        "the node checked in idle while the plane had this job running; what it did on the node is unknown";
    pub const BUDGET: &str =
        "no result came back within the claim budget; what it did on the node is unknown";
    pub const LEFT: &str =
        "the node's pairing ended while the job was running; what it did on the node is unknown";

    pub fn marked(by: &str) -> String {
        format!("marked as failed by {by}; what it did on the node is unknown")
    }
}

/// AC-26: a refusal reads "Refused by the node: <the node's reason>".
pub fn refused_by_node(reason: Option<&str>) -> String {
    format!(
        "Refused by the node: {}",
        reason.unwrap_or("no reason given")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::agent_channel::primitives::find;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| word.to_string()).collect()
    }

    #[test]
    fn issue_27_an_operator_asking_for_a_services_word_is_sent_to_that_services_route() {
        for (word, route) in [
            ("verify_backup", "POST /api/v1/nodes/{id}/backups/verify"),
            ("backup_run", "POST /api/v1/nodes/{id}/backups/run"),
            ("restore_project", "POST /api/v1/nodes/{id}/backups/restore"),
            ("apply_update", "POST /api/v1/rollouts"),
            ("install_security_updates", "POST /api/v1/rollouts"),
        ] {
            let refusal = may_ask(find(word).unwrap(), Door::Operator).unwrap_err();
            assert!(
                matches!(&refusal, DoorRefusal::OwnedByService(words) if words.contains(route)),
                "{word}: {refusal}"
            );
        }
        for word in [
            "check_status",
            "restart_unit",
            "list_backups",
            "agent_converge",
        ] {
            assert_eq!(
                may_ask(find(word).unwrap(), Door::Operator),
                Ok(()),
                "{word}"
            );
        }
    }

    #[test]
    fn issue_27_a_service_may_ask_only_for_its_own_words() {
        let ask = |word: &str, sender: Domain| may_ask(find(word).unwrap(), Door::Service(sender));
        assert_eq!(ask("check_status", Domain::Monitor), Ok(()));
        assert_eq!(ask("host_report", Domain::Monitor), Ok(()));
        assert_eq!(ask("restore_project", Domain::Backups), Ok(()));
        assert_eq!(ask("backup_run", Domain::Backups), Ok(()));
        assert_eq!(ask("apply_update", Domain::Rollouts), Ok(()));
        assert_eq!(
            ask("restore_project", Domain::Monitor),
            Err(DoorRefusal::NotTheSendersWord {
                primitive: "restore_project".into(),
                sender: "monitor".into(),
            })
        );
        assert!(ask("restart_unit", Domain::Monitor).is_err());
        assert!(ask("apply_update", Domain::Backups).is_err());
        assert!(ask("backup_run", Domain::Rollouts).is_err());
        assert!(ask("check_status", Domain::Backups).is_err());
        assert!(ask("check_status", Domain::Billing).is_err());
    }

    #[test]
    fn ac_19_an_unpaired_node_is_refused_and_told_to_pair() {
        let vocabulary = words(&["check_status"]);
        let node = Routing {
            paired: false,
            agent_version: Some("1.0.0"),
            vocabulary: &vocabulary,
        };
        assert_eq!(route(&node, "check_status"), Err(RoutingRefusal::NotPaired));
    }

    #[test]
    fn ac_21_a_missing_word_gets_the_standard_sentence_naming_it() {
        let vocabulary = words(&["check_status"]);
        let node = Routing {
            paired: true,
            agent_version: Some("1.0.0"),
            vocabulary: &vocabulary,
        };
        assert!(route(&node, "check_status").is_ok());
        let refusal = route(&node, "restart_unit").unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "Needs a newer agent; update this node: it does not offer restart_unit"
        );
    }

    #[test]
    fn ac_20_below_the_floor_only_apply_update_is_offered() {
        let vocabulary = words(&["check_status", "apply_update"]);
        let node = Routing {
            paired: true,
            agent_version: Some("0.0.1"),
            vocabulary: &vocabulary,
        };
        assert!(route(&node, "apply_update").is_ok());
        let refusal = route(&node, "check_status").unwrap_err().to_string();
        assert!(refusal.contains("below the minimum 0.1.0"), "{refusal}");

        // An agent that reports no version or no words is below the floor too, and is still
        // offered the update: nothing else would bring it back.
        let nothing = Vec::new();
        let silent = Routing {
            paired: true,
            agent_version: None,
            vocabulary: &nothing,
        };
        assert!(route(&silent, "apply_update").is_ok());
        assert!(route(&silent, "check_status").is_err());
    }

    #[test]
    fn ac_16_a_job_over_the_claim_limit_does_not_fit() {
        let primitive = find("apply_update").unwrap();
        let budget = primitive.claim_budget.as_secs() as i32;
        let small = claim_payload(
            1,
            primitive,
            &serde_json::json!({"version": "1.2.3"}),
            budget,
        );
        assert!(fits(&small, 64 * 1024));
        assert!(!fits(&small, 100));
        assert_eq!(small["budget_s"], 1800);
        assert_eq!(small["class"], "change");
    }

    #[test]
    fn ac_29_a_claim_older_than_its_budget_is_lost() {
        let now = Utc::now();
        let budget = Duration::from_secs(15 * 60);
        assert!(!past_budget(
            now - chrono::Duration::minutes(14),
            budget,
            now
        ));
        assert!(past_budget(
            now - chrono::Duration::minutes(16),
            budget,
            now
        ));
    }

    #[test]
    fn ac_26_a_refusal_reads_as_the_nodes_own_reason() {
        assert_eq!(
            refused_by_node(Some("class destructive is refused by policy")),
            "Refused by the node: class destructive is refused by policy"
        );
    }
}
