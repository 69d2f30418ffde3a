//! An operator's mail address, as the gateway takes it (create-operator `--email`, the Account
//! page, `PUT /api/v1/me/notifications`): one `@` between a local part and a dotted domain, no
//! white space or control characters, at most 254 characters. Deliverability is the mail
//! server's to judge; this keeps out what could never be an address or could break a header.

/// The longest address taken (RFC 5321's path limit less the brackets).
pub const MAX_EMAIL_CHARS: usize = 254;

/// Why a text is not taken as a mail address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadEmail {
    #[error("email: must be 1 to 254 characters")]
    Length,
    #[error("email: must not hold spaces, control characters or <>,;\"")]
    Characters,
    #[error("email: must be local@domain")]
    NoAt,
    #[error("email: must be local@domain, with a dotted domain")]
    NotDotted,
}

/// A checked mail address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    pub fn parse(text: &str) -> Result<Email, BadEmail> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > MAX_EMAIL_CHARS {
            return Err(BadEmail::Length);
        }
        if text.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ',' | ';' | '"')
        }) {
            return Err(BadEmail::Characters);
        }
        let Some((local, domain)) = text.split_once('@') else {
            return Err(BadEmail::NoAt);
        };
        if local.is_empty()
            || domain.contains('@')
            || !domain.contains('.')
            || domain.starts_with('.')
            || domain.ends_with('.')
        {
            return Err(BadEmail::NotDotted);
        }
        Ok(Email(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_local_at_a_dotted_domain_and_nothing_that_could_break_a_header() {
        assert_eq!(
            Email::parse(" ada@example.org ").unwrap().as_str(),
            "ada@example.org"
        );
        for bad in [
            "",
            "ada",
            "ada@",
            "@example.org",
            "ada@example",
            "a@b@c.org",
            "ada @x.org",
            "ada@x.org\r\nBcc: eve@x.org",
            "<ada@x.org>",
            "ada@.org",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Email::parse(&format!("{}@x.org", "a".repeat(260))).is_err());
    }
}
