//! The header line (IN-16): one line at the top of every page, from counts alone, so it names
//! no node. Red when a critical incident that needs you is still happening, amber when any
//! needs you, blue when only problem reports wait, absent otherwise (the incidents service
//! decides; `domain/header.rs` there). The session guard asks for it once per page, with a
//! short wait: a page never waits long for it, and without an answer the line is left out.

use capstan_events::{
    incidents::rpc::{Header, HeaderRequest},
    rpc::Actor,
};
use std::time::Duration;

use crate::{
    route::{Method, Op, Route, UiOp},
    state::AppState,
    ui::agent_channel::AgentChannelPage,
};

/// The longest a page waits for its header line.
const HEADER_WAIT: Duration = Duration::from_millis(1500);

/// The line as the page frame shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentLine {
    /// `red`, `amber` or `blue`.
    pub colour: &'static str,
    pub words: String,
    /// For the menu's count (the same count, IN-16).
    pub needs_you: u64,
}

impl IncidentLine {
    fn of(header: Header) -> Option<IncidentLine> {
        let colour = match header.colour.as_deref()? {
            "red" => "red",
            "amber" => "amber",
            "blue" => "blue",
            _ => return None,
        };
        Some(IncidentLine {
            colour,
            words: header.words,
            needs_you: header.needs_you,
        })
    }
}

/// Whether `route` draws a page with the frame (a GET, not the job page's live output poll).
pub fn shows_header_line(route: &Route) -> bool {
    route.method == Method::Get
        && route.op != Op::Ui(UiOp::AgentChannel(AgentChannelPage::JobOutput))
}

/// The header line for `actor`, or `None` when there is nothing to say or no answer in time.
pub async fn line(state: &AppState, actor: &Actor) -> Option<IncidentLine> {
    let request = HeaderRequest {
        actor: actor.clone(),
    };
    let answer = state
        .bus
        .ask(&request, HEADER_WAIT.min(state.rpc_timeout))
        .await;
    match answer {
        Ok(header) => IncidentLine::of(header),
        Err(error) => {
            tracing::debug!(error = %error.message, "no header line for this page");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(colour: Option<&str>) -> Header {
        Header {
            needs_you: 2,
            happening: 3,
            colour: colour.map(str::to_string),
            words: "2 incidents need you · 3 still happening".into(),
        }
    }

    #[test]
    fn in_16_the_line_is_red_amber_blue_or_absent_and_nothing_else() {
        for colour in ["red", "amber", "blue"] {
            assert_eq!(
                IncidentLine::of(header(Some(colour))).unwrap().colour,
                colour
            );
        }
        assert_eq!(IncidentLine::of(header(None)), None);
        assert_eq!(IncidentLine::of(header(Some("\" onclick=\"x"))), None);
    }
}
