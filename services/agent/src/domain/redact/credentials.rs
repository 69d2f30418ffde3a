//! Credentials, found by the shape they are written in: `key=value` and `key: value` (a value
//! may hold a `;`), the quoted shapes of JSON and PHP, `password hunter2`, credentials in URLs
//! and `Authorization` values. Every value found becomes [`HIDDEN`].

use regex::{Captures, Regex};
use std::sync::LazyLock;

use super::HIDDEN;

/// Key names whose values are credentials, compared in lower case. Names that merely contain
/// `password`, `passwd`, `secret`, `token` or `credential` are credentials too.
const CREDENTIAL_NAMES: &[&str] = &[
    "pass",
    "pwd",
    "passphrase",
    "pgpassword",
    "mysql_pwd",
    "dbpass",
    "db_pass",
    "api_key",
    "apikey",
    "access_key",
    "secret_key",
    "private_key",
    "auth",
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "session",
    "sessionid",
    "salt",
    "signature",
    "key",
];

const CREDENTIAL_PARTS: &[&str] = &["password", "passwd", "secret", "token", "credential"];

/// Whether a key, as written, names a credential.
pub fn names_credential(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    let lower = lower.trim_start_matches(['-', '$']);
    if CREDENTIAL_NAMES.contains(&lower) {
        return true;
    }
    if CREDENTIAL_PARTS.iter().any(|part| lower.contains(part)) {
        return true;
    }
    // `SORT_KEY=` in an environment is a key; `sort_key` in lower case is a flag or a column
    // (the spec: "a lowercase name ending in _key ... stays readable").
    let bare = key.trim_start_matches(['-', '$']);
    (lower.ends_with("_key") && bare != lower)
        || lower.ends_with("_pass")
        || lower.ends_with("_pwd")
}

pub(super) const KEY: &str = r"[A-Za-z_$-][A-Za-z0-9_.$-]*";
const VALUE: &str = r#""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&"'}\])]+"#;

/// `"password": "x"`, `'db_pass' => 'x'`, `['dbpass'] = 'x'`, `define('DB_PASSWORD', 'x')`.
static QUOTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"(?P<key>"{KEY}"|'{KEY}')(?P<sep>\]?\s*(?:=>|:=|=|:|,)\s*)(?P<value>{VALUE})"#
    ))
    .expect("the quoted shape compiles")
});

/// `PGPASSWORD=x`, `password=x`, `api_key: x`, `--password=x`.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?P<key>{KEY})(?P<sep>[ \t]*(?::=|=|:)[ \t]*)(?P<value>{VALUE})"
    ))
    .expect("the assignment shape compiles")
});

/// A word naming a password, as the key of `password hunter2` (no `=` or `:` between).
static SPACED_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)[A-Za-z0-9_]*(?:password|passwd|passphrase)[A-Za-z0-9_]*[ \t]+")
        .expect("the spaced key shape compiles")
});

/// A quoted value right at the start of what follows a spaced key.
static QUOTED_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"#)
        .expect("the quoted value shape compiles")
});

/// `scheme://user:password@host`.
static URL_CREDENTIAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<secret>[^\s@/]+)@")
        .expect("the url shape compiles")
});

/// `Bearer x`, `Basic x`.
static SCHEME_CREDENTIAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?P<scheme>\b(?:bearer|basic|token)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})")
        .expect("the authorization shape compiles")
});

fn hide_value(value: &str) -> String {
    match value.chars().next() {
        Some(quote @ ('"' | '\'')) => format!("{quote}{HIDDEN}{quote}"),
        _ => HIDDEN.to_string(),
    }
}

pub(super) fn credentials(text: &str) -> String {
    let text = URL_CREDENTIAL.replace_all(text, |caps: &Captures| {
        format!("{}{HIDDEN}@", &caps["head"])
    });
    let text = SCHEME_CREDENTIAL.replace_all(&text, |caps: &Captures| {
        format!("{}{HIDDEN}", &caps["scheme"])
    });
    let text = QUOTED.replace_all(&text, |caps: &Captures| {
        let key = &caps["key"];
        if names_credential(&key[1..key.len() - 1]) {
            format!("{key}{}{}", &caps["sep"], hide_value(&caps["value"]))
        } else {
            caps[0].to_string()
        }
    });
    spaced(&assignments(&text))
}

/// `key=value` and `key: value`: a credential's value is hidden; unquoted, it runs on through
/// a `;` (`password=ab;cd` is one password) unless what follows is the next `name=` pair of a
/// connection string or nothing (a `;` ending the line is the line's).
fn assignments(text: &str) -> String {
    let mut redacted = String::with_capacity(text.len());
    let mut done = 0;
    while let Some(caps) = ASSIGNMENT.captures_at(text, done) {
        let value = caps.name("value").expect("the group is always there");
        redacted.push_str(&text[done..value.start()]);
        let shown = value.as_str();
        // `://` is a URL, not an assignment; an already hidden value stays as it is (the
        // value's shape stops short of the closing `]`, so look at the text itself).
        let hidden_already = text[value.start()..].starts_with(HIDDEN);
        if names_credential(&caps["key"]) && !shown.starts_with("//") && !hidden_already {
            let quoted = shown.starts_with(['"', '\'']);
            done = if quoted {
                value.end()
            } else {
                value_through_semicolons(text, value.end())
            };
            redacted.push_str(&hide_value(shown));
        } else {
            redacted.push_str(shown);
            done = value.end();
        }
    }
    redacted.push_str(&text[done..]);
    redacted
}

/// Where an unquoted value ending at `end` really ends, taking in each `;` followed by more
/// of the value rather than by a `name=` pair, a space or the end.
fn value_through_semicolons(text: &str, mut end: usize) -> usize {
    while let Some(after) = text[end..].strip_prefix(';') {
        // The next pair runs to the next `;` or `&` (a connection string's names have spaces).
        let segment = after.split([';', '&', '\n']).next().unwrap_or_default();
        if segment.is_empty() || segment.starts_with(char::is_whitespace) || segment.contains('=') {
            break;
        }
        let run = after
            .find(|c: char| c.is_whitespace() || ",;&\"'}])".contains(c))
            .unwrap_or(after.len());
        end += 1 + run;
    }
    end
}

/// Whether the word after a spaced password key is a password rather than the sentence going
/// on: with a digit, a symbol or a capital past its first letter. A path is where a password
/// is kept, not the password; `***` has nothing to hide.
fn looks_like_a_password(word: &str) -> bool {
    if word.starts_with('/') {
        return false;
    }
    let mut characters = word.chars();
    let first = characters.next();
    let has_letter_or_digit = word.chars().any(char::is_alphanumeric);
    let plain_word = first.is_some_and(char::is_alphabetic) && characters.all(char::is_lowercase);
    has_letter_or_digit && !plain_word
}

/// `password hunter2`: a password word, as a key of its own (not inside a path or a query),
/// then a space, then what looks like a password (see [`looks_like_a_password`]).
fn spaced(text: &str) -> String {
    let mut redacted = String::with_capacity(text.len());
    let mut done = 0;
    for key in SPACED_KEY.find_iter(text) {
        if key.start() < done {
            continue;
        }
        // A key begins a word or a flag (`--password`), never a path or a query's value.
        let before = text[..key.start()].chars().next_back();
        if before.is_some_and(|c| !(c.is_whitespace() || "-\"'([".contains(c))) {
            continue;
        }
        let rest = &text[key.end()..];
        if rest.starts_with(HIDDEN) {
            continue;
        }
        let (value_length, hidden) = match QUOTED_VALUE.find(rest) {
            Some(quoted) => (quoted.end(), hide_value(quoted.as_str())),
            None => {
                let word = rest.split(char::is_whitespace).next().unwrap_or_default();
                // Punctuation closing a sentence or a list stays.
                let word = word.trim_end_matches([',', ';', '.', ':', ')', ']', '}']);
                if !looks_like_a_password(word) {
                    continue;
                }
                (word.len(), HIDDEN.to_string())
            }
        };
        redacted.push_str(&text[done..key.end()]);
        redacted.push_str(&hidden);
        done = key.end() + value_length;
    }
    redacted.push_str(&text[done..]);
    redacted
}

#[cfg(test)]
mod tests {
    use super::super::{check, text};

    #[test]
    fn ag_64_credentials_in_the_assignment_shape_are_masked_in_any_case() {
        check(
            &[
                (
                    "PGPASSWORD=hunter2 pg_dump site",
                    "PGPASSWORD=[redacted] pg_dump site",
                ),
                ("password=hunter2&user=bob", "password=[redacted]&user=bob"),
                ("Password: hunter2", "Password: [redacted]"),
                ("api_key=abc123", "api_key=[redacted]"),
                ("API_KEY=abc123", "API_KEY=[redacted]"),
                ("STRIPE_KEY=sk_live_1", "STRIPE_KEY=[redacted]"),
                ("DB_PASS='x y'", "DB_PASS='[redacted]'"),
                (
                    "mysql --password=hunter2 -u root",
                    "mysql --password=[redacted] -u root",
                ),
                ("client_secret = s3cr3t", "client_secret = [redacted]"),
                ("?token=abc&page=2", "?token=[redacted]&page=2"),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_a_password_holding_a_semicolon_is_masked_whole() {
        check(
            &[
                ("password=ab;cd", "password=[redacted]"),
                ("password=ab;cd;ef more", "password=[redacted] more"),
                ("password=ab;cd&user=bob", "password=[redacted]&user=bob"),
                // A `;` that ends the value is the line's, not the password's.
                ("password=hunter2;", "password=[redacted];"),
                (
                    "password=hunter2; user=bob",
                    "password=[redacted]; user=bob",
                ),
                // In a connection string a `;` before the next `name=` ends the value.
                (
                    "Server=db;Password=ab;cd;User Id=sa;",
                    "Server=db;Password=[redacted];User Id=sa;",
                ),
                (
                    "Password=abc;Initial Catalog=site",
                    "Password=[redacted];Initial Catalog=site",
                ),
                // Values of other keys are cut at `;` as before.
                ("user=bob;page=2", "user=bob;page=2"),
                ("PWD=/home/bob ; USER=root", "PWD=[redacted] ; USER=root"),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_a_password_after_a_space_is_masked_and_plain_words_are_not() {
        check(
            &[
                ("password hunter2", "password [redacted]"),
                (
                    "Password Tr0ub4dor&3 was set",
                    "Password [redacted] was set",
                ),
                (
                    "mysql --password s3cr3t -u root",
                    "mysql --password [redacted] -u root",
                ),
                (
                    "DB_PASSWORD \"correct horse\"",
                    "DB_PASSWORD \"[redacted]\"",
                ),
                ("passphrase hUnter", "passphrase [redacted]"),
                ("passwd 123456", "passwd [redacted]"),
                // Sentences in logs: the next word is plain words, not a password.
                (
                    "FATAL:  password authentication failed for user \"postgres\"",
                    "FATAL:  password authentication failed for user \"postgres\"",
                ),
                (
                    "Failed password for invalid user admin from [ip] port 22",
                    "Failed password for invalid user admin from [ip] port 22",
                ),
                ("Accepted password for root", "Accepted password for root"),
                ("Password Reset Required", "Password Reset Required"),
                ("password is too short", "password is too short"),
                // A path is where a password lives, not the password.
                (
                    "reading ssl_password_file /etc/nginx/keys.pass",
                    "reading ssl_password_file /etc/nginx/keys.pass",
                ),
                // A request path is not a key: an access log keeps its protocol.
                (
                    "\"GET /user/password HTTP/1.1\" 200",
                    "\"GET /user/password HTTP/1.1\" 200",
                ),
                (
                    "\"POST /wp-login.php?action=lostpassword HTTP/1.1\" 302",
                    "\"POST /wp-login.php?action=lostpassword HTTP/1.1\" 302",
                ),
                // Nothing to hide, or already hidden.
                ("password ***", "password ***"),
                ("password: [redacted]", "password: [redacted]"),
                ("password [redacted]", "password [redacted]"),
                // Only password words: other credential names keep the next word.
                (
                    "pam_unix(sshd:session): session opened for user root",
                    "pam_unix(sshd:session): session opened for user root",
                ),
                ("secret 42 rotated", "secret 42 rotated"),
                ("key 2 of 3", "key 2 of 3"),
                ("pass 3 of 5", "pass 3 of 5"),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_a_lowercase_name_ending_in_key_stays_readable() {
        check(
            &[
                ("sort_key=created_at", "sort_key=created_at"),
                ("foreign_key: user_id", "foreign_key: user_id"),
                ("user=bob page=2", "user=bob page=2"),
            ],
            text,
        );
    }

    #[test]
    fn ag_64_credentials_in_the_quoted_shapes_are_masked() {
        check(
            &[
                (
                    r#"{"password": "hunter2", "user": "bob"}"#,
                    r#"{"password": "[redacted]", "user": "bob"}"#,
                ),
                (r#"{"password":"hunter2"}"#, r#"{"password":"[redacted]"}"#),
                (
                    "$settings['dbpass'] = 'hunter2';",
                    "$settings['dbpass'] = '[redacted]';",
                ),
                (
                    "'db_password' => 'hunter2',",
                    "'db_password' => '[redacted]',",
                ),
                (
                    "define('DB_PASSWORD', 'hunter2');",
                    "define('DB_PASSWORD', '[redacted]');",
                ),
                (
                    r#""secret": "a \"quoted\" one""#,
                    r#""secret": "[redacted]""#,
                ),
                (r#""name": "site""#, r#""name": "site""#),
            ],
            text,
        );
    }

    #[test]
    fn credentials_in_urls_and_authorization_values_are_masked() {
        check(
            &[
                (
                    "postgres://site:hunter2@db.internal/site",
                    "postgres://site:[redacted]@db.internal/site",
                ),
                (
                    "Authorization: Bearer abcdefgh12345678",
                    "Authorization: [redacted] [redacted]",
                ),
                ("token abcdefgh12345678", "token [redacted]"),
                (
                    "curl https://example.com/path",
                    "curl https://example.com/path",
                ),
            ],
            text,
        );
    }
}
