//! The bounds on what a job sends back: its output text is capped at 1 MiB with a marker
//! that says so, cut on a character boundary.

/// Appended when output was cut.
pub fn truncation_marker(limit: usize) -> String {
    format!("\n[output truncated by the agent at {limit} bytes]\n")
}

/// `text` cut so that it and the marker fit in `limit` bytes; unchanged when it fits.
pub fn cap(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let marker = truncation_marker(limit);
    let mut end = limit.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// The last `lines` lines of `text` (all of them when there are fewer).
pub fn last_lines(text: &str, lines: usize) -> Vec<&str> {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_within_the_cap_is_unchanged() {
        assert_eq!(cap("hello", 1024), "hello");
    }

    #[test]
    fn output_over_the_cap_is_cut_with_a_marker_and_fits() {
        let long = "x".repeat(5000);
        let capped = cap(&long, 1024);
        assert_eq!(capped.len(), 1024);
        assert!(capped.ends_with(&truncation_marker(1024)));
        assert!(capped.starts_with("xxxx"));
    }

    #[test]
    fn output_is_cut_on_a_character_boundary() {
        let long = "é".repeat(3000);
        let capped = cap(&long, 1001);
        assert!(capped.len() <= 1001);
        assert!(capped.contains("[output truncated by the agent at 1001 bytes]"));
    }

    #[test]
    fn the_last_lines_are_taken_from_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), vec!["b", "c"]);
        assert_eq!(last_lines("a\nb", 10), vec!["a", "b"]);
        assert!(last_lines("", 3).is_empty());
    }
}
