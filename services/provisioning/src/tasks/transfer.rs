//! The daily transfer watch: every instance of ours (a finished provision's or an adoption's)
//! is looked for in its account; one that left the account or changed address raises
//! `plane:machine_transfer` on its node, cleared when it is back where it was recorded (or no
//! longer ours to watch). An account that cannot be listed judges nothing.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use capstan_events::provisioning::machines::MACHINE_TRANSFER;
use capstan_events::NodeId;
use capstan_runtime::ServiceError;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::domain::transfer::{self, Seen, Watched};
use crate::rpc::machines::list_servers;
use crate::rpc::State;
use crate::store::{self as accounts_store, machines, watch};

pub const TASK: &str = "transfer_watch";
/// The lock that makes one replica run it.
pub const LOCK: &str = "capstan-provisioning-transfer-watch";

/// Daily.
pub fn every() -> chrono::Duration {
    chrono::Duration::days(1)
}

/// What one run found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub ran: bool,
    pub watched: usize,
    /// Nodes the condition is happening on after the run.
    pub transferred: Vec<NodeId>,
    /// Accounts that could not be listed.
    pub unreachable: Vec<(i64, String)>,
}

/// Runs the watch when due, looking every [`super::due::LOOK_EVERY`] until `stop`.
pub async fn watch(state: State, stop: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(super::due::LOOK_EVERY, "the transfer watch", stop, || {
        let state = state.clone();
        async move { tick(&state, Utc::now(), false).await.map(|_| ()) }
    })
    .await
}

fn parse(texts: &[String]) -> Vec<IpAddr> {
    texts.iter().filter_map(|text| text.parse().ok()).collect()
}

/// One look at `now`: runs the watch when it is due (or `force`), as the one replica.
pub async fn tick(state: &State, now: DateTime<Utc>, force: bool) -> Result<Report, ServiceError> {
    let Some(mut transaction) = state.store.lead_tick(LOCK).await? else {
        return Ok(Report::default());
    };
    if !force && !super::due::due(&mut transaction, TASK, every(), now).await? {
        return Ok(Report::default());
    }
    let accounts = accounts_store::accounts(&mut transaction).await?;
    let live: Vec<i64> = accounts.iter().map(|account| account.id).collect();
    let watched: Vec<Watched> = machines::our_instances(&mut transaction)
        .await?
        .into_iter()
        .filter(|instance| live.contains(&instance.account_id))
        .filter_map(|instance| {
            Some(Watched {
                node_id: instance.node_id?,
                account_id: instance.account_id,
                addresses: parse(&[instance.ipv4.clone(), instance.ipv6.clone()].concat()),
                instance_id: instance.instance_id,
            })
        })
        .collect();
    let (listed, unreachable) = list_servers(state, &accounts).await;
    let mut listings: HashMap<i64, Vec<(String, Vec<IpAddr>)>> = HashMap::new();
    for account in &accounts {
        let reached = !unreachable.iter().any(|(id, _)| *id == account.id);
        if reached {
            listings.insert(account.id, Vec::new());
        }
    }
    for server in &listed {
        if let Some(listing) = listings.get_mut(&server.account.id) {
            listing.push((server.instance.id.clone(), server.instance.addresses()));
        }
    }
    // Per node: its instances' evidence; a node any of whose accounts was not listed is left
    // as it stands.
    let mut judged: BTreeMap<NodeId, Option<Vec<String>>> = BTreeMap::new();
    for instance in &watched {
        let seen = transfer::seen(
            instance,
            listings.get(&instance.account_id).map(Vec::as_slice),
        );
        let entry = judged.entry(instance.node_id).or_insert(Some(Vec::new()));
        match (&seen, entry.as_mut()) {
            (Seen::Unknown, _) => *entry = None,
            (_, Some(evidence)) => evidence.extend(transfer::evidence(instance, &seen)),
            (_, None) => {}
        }
    }
    // Nodes it happens on that are no longer watched are cleared.
    for node in watch::happening_on(&mut transaction, &MACHINE_TRANSFER).await? {
        judged.entry(node).or_insert(Some(Vec::new()));
    }
    let mut transferred = Vec::new();
    for (node, evidence) in &judged {
        let Some(evidence) = evidence else {
            continue;
        };
        let text = (!evidence.is_empty()).then(|| evidence.join("; "));
        if text.is_some() {
            transferred.push(*node);
        }
        if watch::judge(
            &mut transaction,
            &MACHINE_TRANSFER,
            *node,
            text.as_deref(),
            now,
        )
        .await?
        {
            tracing::warn!(node_id = %node, happening = text.is_some(), "machine transfer judged");
        }
    }
    let outcome = format!(
        "{} watched, {} transferred, {} account(s) not listed",
        watched.len(),
        transferred.len(),
        unreachable.len()
    );
    watch::ran(&mut transaction, TASK, now, &outcome).await?;
    transaction
        .commit()
        .await
        .map_err(capstan_store::StoreError::from)?;
    tracing::info!(%outcome, "transfer watch ran");
    Ok(Report {
        ran: true,
        watched: watched.len(),
        transferred,
        unreachable,
    })
}
