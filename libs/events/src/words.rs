//! The contract's closed words: every state, kind and code that crosses the bus or reaches a
//! page is an enum whose spelling comes from one `strum` derive (`IntoStaticStr`, `EnumString`,
//! `Display`), set to the same case as its serde name; nothing spells it by hand a second time.
//! [`Word`] gives each the two ways a caller reads it.

use std::str::FromStr;

/// A closed word: `as_str` is its name on the wire, in the database and on a page; `parse`
/// reads that name back, and nothing else.
pub trait Word: Copy + Into<&'static str> + FromStr + 'static {
    /// The word's name, as serde writes it.
    fn as_str(self) -> &'static str {
        self.into()
    }

    /// The word named `text`, or `None` when `text` names none.
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl<T: Copy + Into<&'static str> + FromStr + 'static> Word for T {}
