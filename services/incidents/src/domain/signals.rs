//! Telling people (IN-14, IN-15): an incident that opens or reopens, or a fix sent back to new
//! for want of proof, dispatches exactly one signal — never one per tick — unless it is held
//! back: the node's alerts are off, a silence covers the node, or the incident is folded under
//! its Docker host's open critical incident of the same kind. A signal goes to every level-10
//! operator: the bell always, mail by each one's preference, and each webhook whose minimum
//! severity it meets.

use serde::{Deserialize, Serialize};

use super::record::Severity;

/// Why a signal is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalReason {
    Opened,
    Reopened,
    /// A person's fix was not borne out and the incident is back to new (IN-07).
    Unproven,
}

/// The notification's type: `incident.opened` for a warning, `incident.opened_critical` for a
/// critical one (IN-14), whatever the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignalKind {
    #[serde(rename = "incident.opened")]
    Opened,
    #[serde(rename = "incident.opened_critical")]
    OpenedCritical,
}

impl SignalKind {
    pub const fn for_severity(severity: Severity) -> SignalKind {
        match severity {
            Severity::Warning => SignalKind::Opened,
            Severity::Critical => SignalKind::OpenedCritical,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            SignalKind::Opened => "incident.opened",
            SignalKind::OpenedCritical => "incident.opened_critical",
        }
    }
}

/// One signal to dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Signal {
    pub kind: SignalKind,
    pub reason: SignalReason,
    pub severity: Severity,
}

/// Why a signal was held back; the incident still opens, clears and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quiet {
    /// IN-15: the node's Alerts setting says nobody is told.
    AlertsOff,
    /// A maintenance window covers the node.
    Silenced,
    /// Folded under the Docker host's open critical incident of the same kind, which told.
    Grouped,
}

/// What held a signal back, if anything, for one incident at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hush {
    pub alerts_off: bool,
    pub silenced: bool,
    pub grouped: bool,
}

impl Hush {
    pub fn quiet(self) -> Option<Quiet> {
        if self.alerts_off {
            Some(Quiet::AlertsOff)
        } else if self.silenced {
            Some(Quiet::Silenced)
        } else if self.grouped {
            Some(Quiet::Grouped)
        } else {
            None
        }
    }
}

/// An opening, reopening or unproven fix either signals or says why it did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Announce {
    Signal(Signal),
    Held(Quiet),
}

impl Announce {
    pub fn signal(self) -> Option<Signal> {
        match self {
            Announce::Signal(signal) => Some(signal),
            Announce::Held(_) => None,
        }
    }
}

/// The one announcement an opening, reopening or unproven fix makes.
pub fn announce(reason: SignalReason, severity: Severity, hush: Hush) -> Announce {
    match hush.quiet() {
        Some(quiet) => Announce::Held(quiet),
        None => Announce::Signal(Signal {
            kind: SignalKind::for_severity(severity),
            reason,
            severity,
        }),
    }
}

/// An operator's mail preferences (`GET|PUT /api/v1/me/notifications`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailPreferences {
    pub email_warning: bool,
    pub email_critical: bool,
}

impl Default for MailPreferences {
    /// IN-14: on by default for critical, off for warning.
    fn default() -> Self {
        MailPreferences {
            email_warning: false,
            email_critical: true,
        }
    }
}

impl MailPreferences {
    pub fn wants(self, severity: Severity) -> bool {
        match severity {
            Severity::Warning => self.email_warning,
            Severity::Critical => self.email_critical,
        }
    }
}

/// A webhook's minimum severity: it is sent a signal at or above it.
pub fn webhook_wants(min_severity: Severity, signal: &Signal) -> bool {
    signal.severity >= min_severity
}

/// A level-10 operator, as a signal reaches them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub operator_id: i64,
    /// Mail goes only to an operator with an address.
    pub email: Option<String>,
    pub mail: MailPreferences,
}

/// A webhook, as a signal reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookTarget {
    pub webhook_id: i64,
    pub min_severity: Severity,
}

/// One delivery a signal makes: an outbox row, retried until delivered or given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "channel", content = "target", rename_all = "snake_case")]
pub enum Delivery {
    /// The operator's bell: always.
    Bell(i64),
    /// Mail to the operator, by their preference for this severity.
    Mail(i64),
    Webhook(i64),
}

/// Every delivery of `signal`: a bell for each recipient, mail where wanted, and each webhook
/// whose minimum severity it meets.
pub fn deliveries(
    signal: &Signal,
    recipients: &[Recipient],
    webhooks: &[WebhookTarget],
) -> Vec<Delivery> {
    let bells = recipients
        .iter()
        .map(|recipient| Delivery::Bell(recipient.operator_id));
    let mails = recipients
        .iter()
        .filter(|recipient| recipient.email.is_some() && recipient.mail.wants(signal.severity))
        .map(|recipient| Delivery::Mail(recipient.operator_id));
    let hooks = webhooks
        .iter()
        .filter(|webhook| webhook_wants(webhook.min_severity, signal))
        .map(|webhook| Delivery::Webhook(webhook.webhook_id));
    bells.chain(mails).chain(hooks).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_14_a_warning_signals_incident_opened_and_a_critical_incident_opened_critical() {
        let warning = announce(SignalReason::Opened, Severity::Warning, Hush::default());
        let critical = announce(SignalReason::Reopened, Severity::Critical, Hush::default());
        assert_eq!(warning.signal().unwrap().kind.as_str(), "incident.opened");
        assert_eq!(
            critical.signal().unwrap().kind.as_str(),
            "incident.opened_critical"
        );
    }

    #[test]
    fn in_15_a_node_whose_alerts_are_off_signals_nobody() {
        let hush = Hush {
            alerts_off: true,
            ..Hush::default()
        };
        assert_eq!(
            announce(SignalReason::Opened, Severity::Critical, hush),
            Announce::Held(Quiet::AlertsOff)
        );
    }

    #[test]
    fn a_silenced_or_grouped_incident_signals_nobody_and_says_why() {
        let silenced = Hush {
            silenced: true,
            ..Hush::default()
        };
        let grouped = Hush {
            grouped: true,
            ..Hush::default()
        };
        assert_eq!(
            announce(SignalReason::Opened, Severity::Warning, silenced),
            Announce::Held(Quiet::Silenced)
        );
        assert_eq!(
            announce(SignalReason::Unproven, Severity::Warning, grouped),
            Announce::Held(Quiet::Grouped)
        );
    }

    #[test]
    fn in_14_mail_is_on_by_default_for_critical_and_off_for_warning() {
        let preferences = MailPreferences::default();
        assert!(preferences.wants(Severity::Critical));
        assert!(!preferences.wants(Severity::Warning));
    }

    #[test]
    fn a_webhook_is_sent_signals_at_or_above_its_minimum_severity() {
        let warning = announce(SignalReason::Opened, Severity::Warning, Hush::default())
            .signal()
            .unwrap();
        assert!(webhook_wants(Severity::Warning, &warning));
        assert!(!webhook_wants(Severity::Critical, &warning));
    }

    #[test]
    fn in_14_a_signal_rings_every_bell_mails_by_preference_and_reaches_webhooks_at_their_severity()
    {
        let recipients = [
            Recipient {
                operator_id: 1,
                email: Some("ann@example.com".into()),
                mail: MailPreferences::default(),
            },
            Recipient {
                operator_id: 2,
                email: Some("bob@example.com".into()),
                mail: MailPreferences {
                    email_warning: true,
                    email_critical: false,
                },
            },
            Recipient {
                operator_id: 3,
                email: None,
                mail: MailPreferences::default(),
            },
        ];
        let webhooks = [
            WebhookTarget {
                webhook_id: 7,
                min_severity: Severity::Warning,
            },
            WebhookTarget {
                webhook_id: 8,
                min_severity: Severity::Critical,
            },
        ];
        let critical = announce(SignalReason::Opened, Severity::Critical, Hush::default())
            .signal()
            .unwrap();
        assert_eq!(
            deliveries(&critical, &recipients, &webhooks),
            [
                Delivery::Bell(1),
                Delivery::Bell(2),
                Delivery::Bell(3),
                Delivery::Mail(1),
                Delivery::Webhook(7),
                Delivery::Webhook(8),
            ]
        );
        let warning = announce(SignalReason::Opened, Severity::Warning, Hush::default())
            .signal()
            .unwrap();
        assert_eq!(
            deliveries(&warning, &recipients, &webhooks),
            [
                Delivery::Bell(1),
                Delivery::Bell(2),
                Delivery::Bell(3),
                Delivery::Mail(2),
                Delivery::Webhook(7),
            ]
        );
    }
}
