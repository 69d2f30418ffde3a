//! Auto-approval's pass (AC-08..AC-11): every minute and on each join, each pending join is
//! judged over the provisions, the node facts and what the provider says now; a join all five
//! conditions hold for is approved by the agent channel (bound to the provision's node), one
//! that matches a provision but fails a condition keeps its reasons for its card (AC-09), and a
//! second join from a provision's address after its agent was admitted is refused (AC-11).
//! Joins from machines the plane did not provision are never approved here. One replica judges
//! at a time (a transaction-scoped lock).

use std::net::IpAddr;
use std::time::Duration;

use capstan_events::agent_channel::rpc::{ApproveProvisionedJoin, Approved, RefuseJoin};
use capstan_events::provisioning::JoinAutoApproved;
use capstan_events::Envelope;
use capstan_store::{nodes, outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::app::workflow::{actor, Workflow, ASK_TIMEOUT};
use crate::domain::approval::{self, Join, Node, ProviderReport, Verdict};
use crate::drivers::{ProviderError, Status};
use crate::store::{self, ProvisionRow};

/// The pass's lock: one replica judges at a time.
pub const LOCK: &str = "capstan-provisioning-auto-approval";
/// How often every pending join is judged again (AC-08: "every minute").
pub const EVERY: Duration = Duration::from_secs(60);
/// How soon a join is judged again when what kept it pending may pass at once (the provider
/// or the agent channel did not answer, the install's key is not recorded yet).
pub const SOON: Duration = Duration::from_secs(3);
/// How many provisions' instances one pass asks its providers about at once.
pub const REPORTS_AT_ONCE: usize = 16;
/// AC-08's switch off, in the card's words.
pub const OFF: &str = "auto-approval is off (CAPSTAN__PROVISIONING__AUTO_APPROVE)";

fn address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<std::net::SocketAddr>().ok().map(|at| at.ip()))
}

fn provision(row: &ProvisionRow) -> Result<approval::Provision, StoreError> {
    Ok(approval::Provision {
        id: row.id,
        name: row.name.clone(),
        kind: row.kind()?,
        step: row.step()?,
        flag: row.flag()?,
        addresses: row
            .ipv4
            .iter()
            .chain(&row.ipv6)
            .filter_map(|text| address(text))
            .collect(),
        expected_key: row.expected_key.clone(),
        node_id: row.node_id,
    })
}

fn node(node: nodes::Node) -> Node {
    Node {
        id: node.node_id,
        name: node.name,
        addresses: node
            .addresses
            .iter()
            .filter_map(|text| address(text))
            .collect(),
        fingerprint: node.fingerprint,
        paired: node.paired,
    }
}

/// What the provider says about a provision's instance now (AC-08 (4)).
async fn report(workflow: &Workflow, row: &ProvisionRow) -> ProviderReport {
    let Some(instance) = &row.instance_id else {
        return ProviderReport::Gone;
    };
    let provider = match workflow.driver_of(row).await {
        Ok(provider) => provider,
        Err(why) => return ProviderReport::Unanswered { why },
    };
    match provider.get(instance).await {
        Ok(found) => match found.status {
            Status::Running => ProviderReport::Running {
                addresses: found.addresses(),
            },
            Status::Starting(word) | Status::Other(word) => {
                ProviderReport::NotRunning { status: word }
            }
        },
        Err(ProviderError::NotFound(_)) => ProviderReport::Gone,
        Err(error) => ProviderReport::Unanswered {
            why: error.to_string(),
        },
    }
}

/// What one pass came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub approved: usize,
    /// A join is pending for a reason that may pass soon: judge again after [`SOON`].
    pub again_soon: bool,
}

/// One pass over the pending joins; `None` when another replica is judging now.
pub async fn judge(workflow: &Workflow) -> Result<Option<Pass>, StoreError> {
    let Some(mut lead) = workflow.store.lead_tick(LOCK).await? else {
        return Ok(None);
    };
    let now = Utc::now();
    let joins = store::pending_joins(&mut lead, now).await?;
    if joins.is_empty() {
        lead.commit().await?;
        return Ok(Some(Pass::default()));
    }
    let rows = store::joinable(&mut lead).await?;
    let provisions = rows.iter().map(provision).collect::<Result<Vec<_>, _>>()?;
    let known = nodes::paired(&mut lead)
        .await?
        .into_iter()
        .map(node)
        .collect::<Vec<_>>();
    let joins: Vec<Join> = joins
        .iter()
        .filter_map(|row| {
            Some(Join {
                id: row.id,
                name: row.name.clone(),
                address: address(&row.source_address)?,
                fingerprint: row.fingerprint.clone(),
            })
        })
        .collect();
    // The provider's word on every provision a pending join matches, asked side by side
    // (REPORTS_AT_ONCE at a time) before the joins are judged one by one.
    let matched: std::collections::BTreeSet<i64> = joins
        .iter()
        .filter_map(|join| approval::matching(join, &provisions).map(|matched| matched.id))
        .collect();
    let selected: Vec<&ProvisionRow> = rows
        .iter()
        .filter(|row| matched.contains(&row.id))
        .collect();
    let mut reports = std::collections::HashMap::new();
    for chunk in selected.chunks(REPORTS_AT_ONCE) {
        let answers =
            futures::future::join_all(chunk.iter().map(|row| report(workflow, row))).await;
        for (row, answer) in chunk.iter().zip(answers) {
            reports.insert(row.id, answer);
        }
    }
    let facts = Facts {
        rows: &rows,
        provisions: &provisions,
        known: &known,
        reports: &reports,
    };
    let mut pass = Pass::default();
    for join in &joins {
        match judge_one(workflow, &mut lead, join, &facts, now).await? {
            Judged::Approved => pass.approved += 1,
            Judged::PendingForNow => pass.again_soon = true,
            Judged::Pending => {}
        }
    }
    lead.commit().await?;
    Ok(Some(pass))
}

/// What became of one join.
enum Judged {
    Approved,
    /// Pending for a reason that may pass at once.
    PendingForNow,
    Pending,
}

/// What a pass judges every join over, read once per pass.
struct Facts<'a> {
    rows: &'a [ProvisionRow],
    provisions: &'a [approval::Provision],
    known: &'a [Node],
    reports: &'a std::collections::HashMap<i64, ProviderReport>,
}

/// AC-11: refuses a second join from a provisioned machine whose agent is admitted, raises the
/// alarm and keeps the reason for the join's card.
async fn refuse_second(
    workflow: &Workflow,
    connection: &mut PgConnection,
    join: &Join,
    second: &approval::SecondJoin,
    now: DateTime<Utc>,
) -> Result<Judged, StoreError> {
    let reason = format!(
        "a second join from {} after node {}'s agent was admitted",
        second.address, second.admitted
    );
    let asked = RefuseJoin {
        actor: actor(),
        join_id: join.id,
        reason: reason.clone(),
    };
    let refused = workflow.bus.ask(&asked, ASK_TIMEOUT).await;
    if let Err(error) = &refused {
        tracing::warn!(join_id = %join.id, error = %error.message, "the second join could not be refused; tried again soon");
    }
    let plane_node = workflow.settings.plane_node.as_deref();
    crate::app::alarms::second_join(connection, plane_node, second, &reason, now).await?;
    let reasons = [reason];
    let judged = store::Judged {
        provision_id: Some(second.provision_id),
        reasons: &reasons,
        key_differs: false,
        second_join: true,
        at: now,
    };
    store::join_judged(connection, join.id, &judged).await?;
    tracing::warn!(join_id = %join.id, provision_id = second.provision_id, "second join from a provisioned address refused (AC-11)");
    Ok(if refused.is_err() {
        Judged::PendingForNow
    } else {
        Judged::Pending
    })
}

async fn judge_one(
    workflow: &Workflow,
    connection: &mut PgConnection,
    join: &Join,
    facts: &Facts<'_>,
    now: DateTime<Utc>,
) -> Result<Judged, StoreError> {
    let Facts {
        rows,
        provisions,
        known,
        reports,
    } = facts;
    if let Some(second) = approval::second_join(join, provisions, known) {
        return refuse_second(workflow, connection, join, &second, now).await;
    }
    let Some(matched) = approval::matching(join, provisions) else {
        return Ok(Judged::Pending);
    };
    let Some(provision_row) = rows.iter().find(|each| each.id == matched.id) else {
        return Ok(Judged::Pending);
    };
    let report =
        reports
            .get(&provision_row.id)
            .cloned()
            .unwrap_or_else(|| ProviderReport::Unanswered {
                why: "the provider was not asked".to_string(),
            });
    let verdict = approval::verdict(join, provisions, &report, known);
    let mut soon = false;
    let (mut reasons, key_differs): (Vec<String>, bool) = match &verdict {
        Verdict::NotProvisioned => return Ok(Judged::Pending),
        Verdict::Approve { .. } => (Vec::new(), false),
        Verdict::Pending {
            reasons,
            key_differs,
            ..
        } => {
            soon = reasons.iter().any(approval::Reason::may_pass_by_itself);
            (
                reasons.iter().map(ToString::to_string).collect(),
                *key_differs,
            )
        }
    };
    if reasons.is_empty() && !workflow.settings.auto_approve {
        reasons.push(OFF.to_string());
    }
    if reasons.is_empty() {
        match approve(workflow, connection, join, provision_row, now).await? {
            Ok(()) => return Ok(Judged::Approved),
            Err(why) => {
                soon = true;
                reasons.push(why);
            }
        }
    }
    let judged = store::Judged {
        provision_id: Some(matched.id),
        reasons: &reasons,
        key_differs,
        second_join: false,
        at: now,
    };
    store::join_judged(connection, join.id, &judged).await?;
    Ok(if soon {
        Judged::PendingForNow
    } else {
        Judged::Pending
    })
}

/// Asks the agent channel to bind the join to the provision's node; records and tells it.
async fn approve(
    workflow: &Workflow,
    connection: &mut PgConnection,
    join: &Join,
    provision: &ProvisionRow,
    now: DateTime<Utc>,
) -> Result<Result<(), String>, StoreError> {
    let Some(node) = provision.node_id else {
        return Ok(Err("the provision has no node yet".to_string()));
    };
    let asked = ApproveProvisionedJoin {
        actor: actor(),
        join_id: join.id,
        node_id: node,
        fingerprint: join.fingerprint.clone(),
        provision_id: provision.id,
    };
    let Approved { node_id } = match workflow.bus.ask(&asked, ASK_TIMEOUT).await {
        Ok(approved) => approved,
        Err(error) => {
            return Ok(Err(format!(
                "the agent channel did not approve it: {}",
                error.message
            )))
        }
    };
    // The join is the provision's (its page shows the verdict), approved with no reason left.
    let judged = store::Judged {
        provision_id: Some(provision.id),
        reasons: &[],
        key_differs: false,
        second_join: false,
        at: now,
    };
    store::join_judged(connection, join.id, &judged).await?;
    store::join_approved(connection, join.id, node_id).await?;
    store::set_join(connection, provision.id, join.id).await?;
    let event = JoinAutoApproved {
        provision_id: provision.id,
        join_id: join.id,
        node_id,
        name: join.name.clone(),
        address: join.address.to_string(),
        fingerprint: join.fingerprint.clone(),
        approved_at: now,
    };
    outbox::push(connection, Envelope::new(event, None)).await?;
    tracing::info!(join_id = %join.id, provision_id = provision.id, node_id = %node_id, "join auto-approved (AC-08)");
    Ok(Ok(()))
}
