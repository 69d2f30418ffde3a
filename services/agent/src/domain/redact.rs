//! Redaction of everything a word returns, on the node, before it leaves (spec "Log access",
//! AG-64, AG-65): credential values by key name in the quoted and assignment shapes (any case;
//! a lowercase name ending in `_key` is a flag or a column and stays readable; a value may hold
//! a `;`) and after a password word and a space (`password hunter2`), credentials in
//! URLs and `Authorization` values, the local part of email addresses (the domain is kept),
//! IP addresses, and long opaque tokens. Configuration text (`file_head`) is redacted by line:
//! a line whose key names a credential keeps the key alone, whatever the separator, and
//! addresses in configuration are infrastructure and stay.

mod credentials;

pub use credentials::names_credential;
use credentials::{credentials, KEY};

use regex::{Captures, Regex};
use serde_json::Value;
use std::{
    net::{Ipv4Addr, Ipv6Addr},
    sync::LazyLock,
};

/// What replaces a credential value or an opaque token.
pub const HIDDEN: &str = "[redacted]";
/// What replaces an IP address.
pub const HIDDEN_ADDRESS: &str = "[ip]";
/// What replaces the local part of an email address.
pub const HIDDEN_MAILBOX: &str = "[user]";
/// The shortest run of token characters taken for an opaque token.
pub const TOKEN_MIN_LENGTH: usize = 32;

static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?P<local>[A-Za-z0-9._%+-]+)@(?P<domain>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})",
    )
    .expect("the email shape compiles")
});

static IPV4: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<address>[0-9]{1,3}(?:\.[0-9]{1,3}){3})").expect("the ipv4 shape compiles")
});

static IPV6: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<address>[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})")
        .expect("the ipv6 shape compiles")
});

static MAPPED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)::ffff:\[ip\]").expect("the mapped address shape compiles"));

/// The canonical UUID shape (a boot id, a request id): an identifier, not a secret.
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
        .expect("the uuid shape compiles")
});

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<token>[A-Za-z0-9+/=_-]{32,})").expect("the token shape compiles")
});

/// Whether the character before `start` or at `end` would make a match part of a longer word.
fn inside_word(text: &str, start: usize, end: usize, joiners: &[char]) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    let joins = |c: char| c.is_ascii_alphanumeric() || joiners.contains(&c);
    before.is_some_and(joins) || after.is_some_and(joins)
}

fn mailboxes(text: &str) -> String {
    EMAIL
        .replace_all(text, |caps: &Captures| {
            format!("{HIDDEN_MAILBOX}@{}", &caps["domain"])
        })
        .into_owned()
}

fn addresses(text: &str) -> String {
    let text = IPV4.replace_all(text, |caps: &Captures| {
        let found = caps.name("address").expect("the group is always there");
        let whole = &caps[0];
        if found.as_str().parse::<Ipv4Addr>().is_ok()
            && !inside_word(text, found.start(), found.end(), &['.'])
        {
            HIDDEN_ADDRESS.to_string()
        } else {
            whole.to_string()
        }
    });
    // `::ffff:[ip]` once the IPv4 part was hidden: the rest is the same address.
    let owned = MAPPED.replace_all(&text, HIDDEN_ADDRESS).into_owned();
    IPV6.replace_all(&owned, |caps: &Captures| {
        let found = caps.name("address").expect("the group is always there");
        let is_address = found.as_str().parse::<Ipv6Addr>().is_ok();
        if is_address && !inside_word(&owned, found.start(), found.end(), &[':']) {
            HIDDEN_ADDRESS.to_string()
        } else {
            caps[0].to_string()
        }
    })
    .into_owned()
}

fn tokens(text: &str) -> String {
    TOKEN
        .replace_all(text, |caps: &Captures| {
            let token = &caps["token"];
            let digits = token.chars().filter(char::is_ascii_digit).count();
            let letters = token.chars().filter(char::is_ascii_alphabetic).count();
            // A path (`/var/www/...`) is not a token; a token mixes letters and digits.
            if token.starts_with('/')
                || token.contains("//")
                || digits < 2
                || letters < 2
                || UUID.is_match(token)
            {
                token.to_string()
            } else {
                HIDDEN.to_string()
            }
        })
        .into_owned()
}

/// Redacts free text: log lines, journal lines, command output.
pub fn text(text: &str) -> String {
    let text = credentials(text);
    let text = mailboxes(&text);
    let text = addresses(&text);
    tokens(&text)
}

static CONFIG_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"^(?P<lead>\s*(?:export\s+|set\s+|define\(\s*)?["']?)(?P<key>{KEY})"#
    ))
    .expect("the configuration key shape compiles")
});

/// Redacts one line of configuration (AG-65): a line whose key names a credential is the key
/// alone, whatever the separator; a secret named later in the line loses its value; addresses
/// stay.
pub fn config_line(line: &str) -> String {
    if let Some(caps) = CONFIG_KEY.captures(line) {
        let key = &caps["key"];
        let comment = line.trim_start().starts_with(['#', ';']);
        if !comment && names_credential(key) && caps[0].len() < line.len() {
            return caps[0].to_string();
        }
    }
    tokens(&mailboxes(&credentials(line)))
}

/// Redacts configuration text line by line.
pub fn config(text: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| {
            let (body, end) = match line.strip_suffix('\n') {
                Some(body) => (body, "\n"),
                None => (line, ""),
            };
            format!("{}{end}", config_line(body))
        })
        .collect()
}

/// Redacts every string in a structured result with `redact`, and hides entirely a value
/// whose key names a credential.
pub fn value_with(value: &mut Value, redact: fn(&str) -> String) {
    match value {
        Value::String(text_value) => *text_value = redact(text_value),
        Value::Array(items) => items.iter_mut().for_each(|item| value_with(item, redact)),
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                if names_credential(key) && !matches!(field, Value::Null | Value::Bool(_)) {
                    *field = Value::String(HIDDEN.into());
                } else {
                    value_with(field, redact);
                }
            }
        }
        _ => {}
    }
}

/// Redacts every string in a structured result as free text.
pub fn value(value: &mut Value) {
    value_with(value, text);
}

/// Asserts that `redact` turns each input of a table into its expected output, and leaves
/// that output as it is (text redacted twice, as a reason quoted in an output, is not mangled).
#[cfg(test)]
fn check(cases: &[(&str, &str)], redact: fn(&str) -> String) {
    for (input, expected) in cases {
        assert_eq!(&redact(input), expected, "input: {input}");
        assert_eq!(&redact(expected), expected, "redacted again: {expected}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ag_64_the_local_part_of_an_email_is_masked_and_the_domain_kept() {
        check(
            &[
                (
                    "mail to alice.smith+x@example.com bounced",
                    "mail to [user]@example.com bounced",
                ),
                (
                    "from=<bob@mail.example.org>",
                    "from=<[user]@mail.example.org>",
                ),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_ip_addresses_are_masked() {
        check(
            &[
                (
                    "203.0.113.7 - - [29/Nov/2026] GET /",
                    "[ip] - - [29/Nov/2026] GET /",
                ),
                ("client 2001:db8::1 port 443", "client [ip] port 443"),
                ("from ::ffff:198.51.100.4", "from [ip]"),
                ("fe80::1%eth0", "[ip]%eth0"),
                // Not addresses: a time, a MAC address, an out-of-range quad, a longer number.
                ("at 10:07:54 UTC", "at 10:07:54 UTC"),
                ("ether aa:bb:cc:dd:ee:ff", "ether aa:bb:cc:dd:ee:ff"),
                ("version 999.1.2.3", "version 999.1.2.3"),
                ("id 1.2.3.4.5", "id 1.2.3.4.5"),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_long_opaque_tokens_are_masked_and_paths_and_words_kept() {
        check(
            &[
                (
                    "session 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 ok",
                    "session [redacted] ok",
                ),
                (
                    "cookie Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbA x",
                    "cookie [redacted] x",
                ),
                // A boot id or request id is an identifier, not a token.
                (
                    "boot 3f2a4b5c-1234-4abc-9def-0123456789ab",
                    "boot 3f2a4b5c-1234-4abc-9def-0123456789ab",
                ),
                (
                    "GET /wp-content/uploads/2024/05/some-image-name-1234.jpg",
                    "GET /wp-content/uploads/2024/05/some-image-name-1234.jpg",
                ),
                (
                    "Internationalization_and_localization_notes",
                    "Internationalization_and_localization_notes",
                ),
            ],
            text,
        );
    }

    #[test]
    fn ag_65_a_configuration_line_naming_a_credential_keeps_the_key_alone() {
        check(
            &[
                ("DB_PASSWORD=hunter2", "DB_PASSWORD"),
                ("  password   hunter2", "  password"),
                ("export API_TOKEN=\"abc\"", "export API_TOKEN"),
                ("secret: {{ vault }}", "secret"),
                ("define('DB_PASSWORD', 'hunter2');", "define('DB_PASSWORD"),
                // A secret named later in the line loses its value.
                (
                    "dsn host=db user=site password=hunter2",
                    "dsn host=db user=site password=[redacted]",
                ),
                // Addresses in configuration are infrastructure and stay.
                ("listen 203.0.113.7:443 ssl;", "listen 203.0.113.7:443 ssl;"),
                ("127.0.0.1 localhost", "127.0.0.1 localhost"),
                // A path-valued lowercase *_key stays (nginx's ssl_certificate_key).
                (
                    "ssl_certificate_key /etc/ssl/site.key;",
                    "ssl_certificate_key /etc/ssl/site.key;",
                ),
                ("# password is set elsewhere", "# password is set elsewhere"),
            ],
            config_line,
        );
    }

    #[test]
    fn configuration_text_is_redacted_line_by_line_keeping_line_ends() {
        assert_eq!(
            config("user=site\nPASSWORD=x\nport=5432"),
            "user=site\nPASSWORD\nport=5432"
        );
    }

    #[test]
    fn every_string_of_a_structured_result_is_redacted_and_credential_fields_hidden() {
        let mut result = json!({
            "lines": ["login from 203.0.113.7 by carol@example.com"],
            "api_token": "abc",
            "nested": {"password": 12345, "enabled": true, "secret_set": false},
            "count": 3
        });
        value(&mut result);
        assert_eq!(
            result,
            json!({
                "lines": ["login from [ip] by [user]@example.com"],
                "api_token": "[redacted]",
                "nested": {"password": "[redacted]", "enabled": true, "secret_set": false},
                "count": 3
            })
        );
    }
}
