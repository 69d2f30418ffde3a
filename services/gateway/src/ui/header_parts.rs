//! The header parts of every page: a line at the top of the frame (and a count beside its
//! menu entry) that a domain says for the signed-in operator, such as the incidents' IN-16
//! line. The session guard asks each part of the list it is given (`routes.rs` gives it the
//! domains' list) once per page; a part that has nothing to say, or no answer in time, is left
//! out. The frame names no domain: it draws the lines it is handed.

use capstan_events::rpc::Actor;
use std::{future::Future, pin::Pin};

use crate::state::AppState;

/// A line of the header, as the frame draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderLine {
    /// Whose line it is, for its class and test hook: `incident` draws
    /// `p.incident-line.incident-<colour>[data-test=incident-line]`.
    pub source: &'static str,
    /// `red`, `amber` or `blue`.
    pub colour: &'static str,
    pub words: String,
    /// Where the line leads.
    pub href: &'static str,
    /// The count the menu shows beside the source's entry (0 shows none).
    pub count: u64,
}

/// What a header part answers, in time or not at all.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Option<HeaderLine>> + Send + 'a>>;

/// A header part: asks its domain for the operator's line.
pub type HeaderPart = for<'a> fn(&'a AppState, &'a Actor) -> Answer<'a>;

/// The lines of `parts` for `actor`, in the list's order, leaving out those that say nothing.
pub async fn lines(parts: &[HeaderPart], state: &AppState, actor: &Actor) -> Vec<HeaderLine> {
    let answers = futures::future::join_all(parts.iter().map(|part| part(state, actor))).await;
    answers.into_iter().flatten().collect()
}

/// The count the menu shows beside `source`'s entry.
pub fn count_of(lines: &[HeaderLine], source: &str) -> u64 {
    lines
        .iter()
        .filter(|line| line.source == source)
        .map(|line| line.count)
        .sum()
}
