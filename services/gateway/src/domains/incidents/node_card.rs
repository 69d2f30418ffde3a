//! The node page's Incidents card (IN-16): the same counts for that node as the header line
//! gives for the fleet, the node's incidents that need you or are still happening, and the
//! ways on (all of its incidents, a silence for it).

use capstan_events::incidents::rpc::ListIncidents;
use capstan_events::NodeId;

use super::{
    ask, can_triage,
    list::{row, Row},
};
use crate::{
    state::AppState,
    ui::{refusal_sentence, UiSession},
};

/// The most rows the card lists; the rest are a click away.
const CARD_ROWS: usize = 10;

/// What the card shows.
pub struct NodeCard {
    pub needs_you: u64,
    pub happening: usize,
    pub all: u64,
    pub rows: Vec<Row>,
    pub more: usize,
    pub list_link: String,
    pub silence_link: Option<String>,
    /// Why the card could not be filled, in words.
    pub problem: Option<String>,
}

/// The card of node `node_id`, asked as the operator; a refusal is the card's problem, never
/// the page's.
pub async fn node_card(state: &AppState, session: &UiSession, node_id: NodeId) -> NodeCard {
    let request = ListIncidents {
        actor: session.actor(),
        view: Some("all".into()),
        node_id: Some(node_id),
        source: None,
        happening: None,
    };
    let mut card = NodeCard {
        needs_you: 0,
        happening: 0,
        all: 0,
        rows: Vec::new(),
        more: 0,
        list_link: format!("/ui/incidents?view=all&node_id={node_id}"),
        silence_link: can_triage(session).then(|| format!("/ui/silences?node_id={node_id}")),
        problem: None,
    };
    match ask(state, &request).await {
        Ok(listed) => {
            let current: Vec<Row> = listed
                .incidents
                .iter()
                .filter(|incident| {
                    incident.needs_you || incident.status == capstan_events::incidents::Status::Open
                })
                .map(row)
                .collect();
            card.needs_you = listed.counts.needs_you;
            card.all = listed.counts.all;
            card.happening = current.iter().filter(|row| row.happening).count();
            card.more = current.len().saturating_sub(CARD_ROWS);
            card.rows = current.into_iter().take(CARD_ROWS).collect();
        }
        Err(refusal) => card.problem = Some(refusal_sentence(&refusal)),
    }
    card
}
