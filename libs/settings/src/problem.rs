//! What is wrong with a configuration: each [`Problem`] names its key both ways (the file's
//! `monitor.tick_ms` and the environment's `CAPSTAN__MONITOR__TICK_MS`), and
//! [`SettingsError::Problems`] carries every one found.

use std::{fmt, path::Path};

/// One key whose value cannot be used, and why (never the value when it is a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file's key: `monitor.tick_ms`, or a section's (`gateway`) for an unknown key in it.
    pub key: String,
    pub reason: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Problem {
        Problem {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The environment variable that sets the key: `CAPSTAN__MONITOR__TICK_MS`.
    pub fn variable(&self) -> String {
        format!(
            "CAPSTAN__{}",
            self.key.replace('.', "__").to_ascii_uppercase()
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "configuration key {} ({}): {}",
            self.key,
            self.variable(),
            self.reason
        )
    }
}

impl std::error::Error for Problem {}

/// Configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file cannot be read or is not TOML.
    #[error("configuration: {0}")]
    Invalid(String),
    /// Every key that is wrong, each named.
    #[error("{}", list(.0))]
    Problems(Vec<Problem>),
}

fn list(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let lines: Vec<String> = many.iter().map(|problem| format!("  {problem}")).collect();
            format!(
                "{} configuration problems:\n{}",
                many.len(),
                lines.join("\n")
            )
        }
    }
}

/// `None` when `value` lies in `least..=most`; else a problem naming `key` and the bounds.
pub fn within(key: &str, value: u64, least: u64, most: u64) -> Option<Problem> {
    (!(least..=most).contains(&value))
        .then(|| Problem::new(key, format!("must be from {least} to {most}, not {value}")))
}

/// Every bound of `checks` (`(key, value, least, most)`) that is broken.
pub fn all_within(checks: &[(&str, u64, u64, u64)]) -> Vec<Problem> {
    checks
        .iter()
        .filter_map(|(key, value, least, most)| within(key, *value, *least, *most))
        .collect()
}

/// A secret kept in a file (a mounted secret), without its final line break; a file that
/// cannot be read is a problem naming `key`.
pub fn read_secret(key: &str, path: &Path) -> Result<secrecy::SecretString, Problem> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| Problem::new(key, format!("cannot read {}: {error}", path.display())))?;
    Ok(secrecy::SecretString::from(text.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_names_its_file_key_and_its_environment_variable() {
        let problem = Problem::new("agent_channel.node_requests_per_minute", "must be from 1");
        assert_eq!(
            problem.to_string(),
            "configuration key agent_channel.node_requests_per_minute \
             (CAPSTAN__AGENT_CHANNEL__NODE_REQUESTS_PER_MINUTE): must be from 1"
        );
    }

    #[test]
    fn several_problems_are_listed_one_a_line() {
        let error = SettingsError::Problems(vec![
            Problem::new("nats.url", "bad"),
            Problem::new("bus.max_deliver", "worse"),
        ])
        .to_string();
        assert_eq!(error.lines().count(), 3, "{error}");
        assert!(error.starts_with("2 configuration problems"), "{error}");
        assert!(
            error.contains("CAPSTAN__NATS__URL") && error.contains("CAPSTAN__BUS__MAX_DELIVER")
        );
    }

    #[test]
    fn a_value_outside_its_bounds_is_named_with_them() {
        assert_eq!(within("bus.max_deliver", 3, 1, 5), None);
        let problem = within("bus.max_deliver", 0, 1, 5).unwrap();
        assert_eq!(problem.key, "bus.max_deliver");
        assert!(problem.reason.contains("1 to 5"), "{problem}");
    }
}
