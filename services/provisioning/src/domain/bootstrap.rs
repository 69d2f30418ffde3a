//! The bootstrap over SSH (PV-05, PV-06, AC-10), its words without I/O: the files a session
//! uploads and the one fixed command it runs (the plane never composes a command from input:
//! the parameters travel in `bootstrap.env`, each value checked), the key line read from the
//! install's output, and the masking every line passes through before it is stored or shown.

use capstan_events::provisioning::InstallKind;

/// Where a session puts its files on the new machine.
pub const DIRECTORY: &str = "/root/capstan-bootstrap";
/// The one command an install session runs (`deploy/agent/bootstrap.sh`, uploaded).
pub const INSTALL_COMMAND: &str = "sh /root/capstan-bootstrap/bootstrap.sh";
/// The one command that retires the login's password (PV-06): the account stays, its password
/// login is locked; the refusal of a new login with it is the proof.
pub const RETIRE_COMMAND: &str = "passwd -l \"$(id -un)\"";
/// The line of the install's output that carries the agent's key fingerprint (AC-10).
pub const KEY_LINE: &str = "CAPSTAN_AGENT_KEY=";
/// What a secret is replaced with wherever it appears.
pub const MASK: &str = "********";
/// The most of an install's output kept (the end is kept: it says how it ended).
pub const LOG_MAX_BYTES: usize = 256 * 1024;
/// The lines of output a failure's reason quotes.
pub const REASON_LINES: usize = 5;

/// Why a bootstrap's parameters cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bootstrap parameter {key}: {why}")]
pub struct BadParameter {
    pub key: &'static str,
    pub why: String,
}

fn value_ok(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 500
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '-'))
}

/// `bootstrap.env`: one `KEY=value` line per parameter, each value of the characters
/// `bootstrap.sh` accepts (it never evaluates them). `local_address` is the instance's own
/// address, which its agent connects to the plane from (AC-08 (1) judges the join by it).
pub fn parameters(
    plane_url: &str,
    name: &str,
    kind: InstallKind,
    local_address: std::net::IpAddr,
) -> Result<String, BadParameter> {
    let address = local_address.to_string();
    let pairs = [
        ("CAPSTAN_PLANE_URL", plane_url),
        ("CAPSTAN_NAME", name),
        ("CAPSTAN_KIND", kind.into()),
        ("CAPSTAN_AGENT_LOCAL_ADDRESS", address.as_str()),
    ];
    let mut text = String::new();
    for (key, value) in pairs {
        if !value_ok(value) {
            return Err(BadParameter {
                key,
                why: format!("{value:?} holds a character bootstrap.sh refuses"),
            });
        }
        text.push_str(key);
        text.push('=');
        text.push_str(value);
        text.push('\n');
    }
    Ok(text)
}

/// Why the install's output does not give the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the install printed no {KEY_LINE} line")]
    Missing,
    #[error("the install printed two different keys ({0} and {1})")]
    Two(String, String),
    #[error("the install's key line {0:?} is not a SHA256 fingerprint")]
    Malformed(String),
}

/// AC-10: the key fingerprint the install printed (`CAPSTAN_AGENT_KEY=SHA256:...`).
pub fn agent_key(output: &str) -> Result<String, KeyError> {
    let mut found: Option<String> = None;
    for line in output.lines() {
        let Some(key) = line.trim().strip_prefix(KEY_LINE) else {
            continue;
        };
        let key = key.trim();
        let well_formed = key.strip_prefix("SHA256:").is_some_and(|digest| {
            !digest.is_empty()
                && digest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | ':'))
        });
        if !well_formed {
            return Err(KeyError::Malformed(key.to_string()));
        }
        match &found {
            Some(earlier) if earlier != key => {
                return Err(KeyError::Two(earlier.clone(), key.to_string()))
            }
            _ => found = Some(key.to_string()),
        }
    }
    found.ok_or(KeyError::Missing)
}

/// `text` with every secret (of at least 4 characters) replaced by [`MASK`].
pub fn mask(text: &str, secrets: &[&str]) -> String {
    let mut masked = text.to_string();
    for secret in secrets.iter().filter(|secret| secret.len() >= 4) {
        masked = masked.replace(secret, MASK);
    }
    masked
}

/// Keeps the last [`LOG_MAX_BYTES`] of a log (cut at a line or character boundary).
pub fn kept(log: &str) -> &str {
    if log.len() <= LOG_MAX_BYTES {
        return log;
    }
    let mut start = log.len() - LOG_MAX_BYTES;
    while !log.is_char_boundary(start) {
        start += 1;
    }
    match log[start..].find('\n') {
        Some(newline) => &log[start + newline + 1..],
        None => &log[start..],
    }
}

/// PV-02: why an install that exited `status` failed, in its own last words (already masked).
pub fn failure_reason(status: u32, output: &str) -> String {
    let last: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let tail = &last[last.len().saturating_sub(REASON_LINES)..];
    if tail.is_empty() {
        format!("the install exited {status} and printed nothing")
    } else {
        format!("the install exited {status}: {}", tail.join(" / "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pv_05_parameters_travel_in_a_file_and_a_value_that_could_be_code_is_refused() {
        let at: std::net::IpAddr = "203.0.113.9".parse().unwrap();
        let text = parameters(
            "https://plane.example:8443",
            "shop-1",
            InstallKind::DockerHost,
            at,
        )
        .unwrap();
        assert_eq!(
            text,
            "CAPSTAN_PLANE_URL=https://plane.example:8443\nCAPSTAN_NAME=shop-1\nCAPSTAN_KIND=docker-host\nCAPSTAN_AGENT_LOCAL_ADDRESS=203.0.113.9\n"
        );
        for url in ["https://x/$(id)", "https://x/`id`", "a b", "x;y", ""] {
            let refused = parameters(url, "shop", InstallKind::Site, at).unwrap_err();
            assert_eq!(refused.key, "CAPSTAN_PLANE_URL", "{url}");
        }
        assert_eq!(
            parameters(
                "https://x",
                "shop\nCAPSTAN_KIND=site",
                InstallKind::Agent,
                at
            )
            .unwrap_err()
            .key,
            "CAPSTAN_NAME"
        );
    }

    #[test]
    fn ac_10_the_key_is_read_from_the_install_output() {
        let output = "installing\nCAPSTAN_AGENT_KEY=SHA256:abcDEF+/12=\ndone\n";
        assert_eq!(agent_key(output).unwrap(), "SHA256:abcDEF+/12=");
        let twice = "CAPSTAN_AGENT_KEY=SHA256:abc\nCAPSTAN_AGENT_KEY=SHA256:abc\n";
        assert_eq!(agent_key(twice).unwrap(), "SHA256:abc");
        assert_eq!(agent_key("nothing\n"), Err(KeyError::Missing));
        assert!(matches!(
            agent_key("CAPSTAN_AGENT_KEY=SHA256:a\nCAPSTAN_AGENT_KEY=SHA256:b\n"),
            Err(KeyError::Two(_, _))
        ));
        assert!(matches!(
            agent_key("CAPSTAN_AGENT_KEY=md5:zz\n"),
            Err(KeyError::Malformed(_))
        ));
    }

    #[test]
    fn pv_05_a_secret_is_masked_wherever_it_appears() {
        let masked = mask("pw=Hunter22 then Hunter22.", &["Hunter22", ""]);
        assert_eq!(masked, "pw=******** then ********.");
    }

    #[test]
    fn pv_02_a_failure_names_the_exit_and_the_last_lines() {
        let reason = failure_reason(3, "a\n\nb\nc\nd\ne\nf\ninstall.sh: the site exists\n");
        assert_eq!(
            reason,
            "the install exited 3: c / d / e / f / install.sh: the site exists"
        );
        assert_eq!(
            failure_reason(1, ""),
            "the install exited 1 and printed nothing"
        );
    }

    #[test]
    fn a_long_log_keeps_its_end() {
        let log = format!("{}\nthe end\n", "x".repeat(LOG_MAX_BYTES + 10));
        assert!(kept(&log).ends_with("the end\n"));
        assert!(kept(&log).len() <= LOG_MAX_BYTES);
    }
}
