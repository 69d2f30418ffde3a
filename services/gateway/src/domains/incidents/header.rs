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
    state::AppState,
    ui::header_parts::{Answer, HeaderLine, HeaderPart},
};

/// The longest a page waits for its header line.
const HEADER_WAIT: Duration = Duration::from_millis(1500);

/// The incidents' part of every page's header: the line, and the menu's count of incidents
/// that need you (the same count, IN-16).
pub const HEADER_PART: HeaderPart = |state, actor| -> Answer<'_> { Box::pin(line(state, actor)) };

/// The line as the page frame shows it, when there is one to show.
fn line_of(header: Header) -> Option<HeaderLine> {
    let colour = match header.colour.as_deref()? {
        "red" => "red",
        "amber" => "amber",
        "blue" => "blue",
        _ => return None,
    };
    Some(HeaderLine {
        source: "incident",
        colour,
        words: header.words,
        href: "/ui/incidents",
        count: header.needs_you,
    })
}

/// The header line for `actor`, or `None` when there is nothing to say or no answer in time.
pub async fn line(state: &AppState, actor: &Actor) -> Option<HeaderLine> {
    let request = HeaderRequest {
        actor: actor.clone(),
    };
    let answer = state
        .bus
        .ask(&request, HEADER_WAIT.min(state.rpc_timeout))
        .await;
    match answer {
        Ok(header) => line_of(header),
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
            assert_eq!(line_of(header(Some(colour))).unwrap().colour, colour);
        }
        assert_eq!(line_of(header(None)), None);
        assert_eq!(line_of(header(Some("\" onclick=\"x"))), None);
    }
}
