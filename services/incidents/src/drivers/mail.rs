//! Mail over SMTP with lettre: `smtp://host:port` (STARTTLS when the server offers it) or
//! `smtps://user:pass@host:465` (TLS from the start), rustls with the system's roots.

use futures::future::BoxFuture;
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::{DeliveryError, Mailer};

pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: lettre::message::Mailbox,
}

/// `smtp://` without a `tls=` choice asks for STARTTLS when offered, as the settings promise.
fn with_starttls(url: &str) -> String {
    if url.starts_with("smtp://") && !url.contains("tls=") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}tls=opportunistic")
    } else {
        url.to_string()
    }
}

impl Smtp {
    /// A mailer for `url` sending as `from`; a bad URL or address is refused, naming which.
    pub fn new(url: &str, from: &str) -> Result<Smtp, DeliveryError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&with_starttls(url))
            .map_err(|error| DeliveryError::Unusable(format!("incidents.smtp_url: {error}")))?
            .timeout(Some(std::time::Duration::from_secs(20)))
            .build();
        let from = from
            .parse()
            .map_err(|error| DeliveryError::Unusable(format!("incidents.mail_from: {error}")))?;
        Ok(Smtp { transport, from })
    }
}

impl Mailer for Smtp {
    fn send<'a>(
        &'a self,
        to: &'a str,
        subject: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            let to = to.parse().map_err(|error| {
                DeliveryError::Unusable(format!("the operator's address {to:?}: {error}"))
            })?;
            let message = Message::builder()
                .from(self.from.clone())
                .to(to)
                .subject(subject)
                .header(ContentType::TEXT_PLAIN)
                .body(body.to_string())
                .map_err(|error| DeliveryError::Unusable(format!("building the mail: {error}")))?;
            let response = self.transport.send(message).await.map_err(|error| {
                // A permanent answer is the server's refusal; anything else is the way there.
                let said = format!("smtp: {error}");
                if error.is_permanent() {
                    DeliveryError::Rejected(said)
                } else if error.is_timeout() {
                    DeliveryError::Timeout(said)
                } else {
                    DeliveryError::Unreachable(said)
                }
            })?;
            Ok(format!(
                "smtp {}: {}",
                response.code(),
                response.message().collect::<Vec<_>>().join(" ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_smtp_url_asks_for_starttls_unless_it_says_otherwise() {
        assert_eq!(
            with_starttls("smtp://mx:25"),
            "smtp://mx:25?tls=opportunistic"
        );
        assert_eq!(
            with_starttls("smtp://mx:25?tls=required"),
            "smtp://mx:25?tls=required"
        );
        assert_eq!(with_starttls("smtps://u:p@mx:465"), "smtps://u:p@mx:465");
    }

    #[test]
    fn a_bad_sender_address_is_refused_naming_the_setting() {
        let error = Smtp::new("smtp://127.0.0.1:25", "not an address")
            .err()
            .unwrap();
        assert!(
            error.to_string().starts_with("incidents.mail_from"),
            "{error}"
        );
    }
}
