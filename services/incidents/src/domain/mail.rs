//! The mail a signal sends (IN-14): plain text, the plane's words first, and nothing a node
//! said turned into a link — its words are defanged so that no mail program makes one of them
//! (`https://x` reads `https[:]//x`, `www.x` reads `www[.]x`).

use super::record::Severity;
use super::signals::SignalReason;
use super::webhooks::IncidentSignal;

/// Makes text from a node unlinkable in a mail program, keeping it readable.
pub fn defang(text: &str) -> String {
    text.replace("://", "[:]//")
        .replace("www.", "www[.]")
        .replace('@', "[@]")
}

/// The subject and body of the mail for `incident`, from the plane called `plane`.
pub fn mail(plane: &str, incident: &IncidentSignal) -> (String, String) {
    let severity = match incident.severity {
        Severity::Critical => "Critical",
        Severity::Warning => "Warning",
    };
    let what = match incident.reason {
        SignalReason::Opened => "opened",
        SignalReason::Reopened => "reopened",
        SignalReason::Unproven => "is back: the fix is not proven",
    };
    let node = defang(&incident.node_name);
    let subject = format!(
        "[{plane}] {severity} incident {what} on {node}: {}",
        incident.title
    );
    let body = format!(
        "{severity} incident {what} on {node} (node {node_id}).\n\n\
         {title}\n\n\
         What the source saw:\n{detail}\n\n\
         Source: {source}\nIncident: {id}\nAt: {at}\n\n\
         Open the plane's Incidents page to triage it.\n",
        node_id = incident.node_id,
        title = incident.title,
        detail = defang(&incident.detail),
        source = incident.source,
        id = incident.incident_id,
        at = incident
            .at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    (subject, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;

    fn incident(detail: &str, node_name: &str) -> IncidentSignal {
        IncidentSignal {
            incident_id: 7,
            node_id: 3,
            node_name: node_name.to_string(),
            source: "agent:disk_headroom".to_string(),
            title: "The site's disk is running out of space".to_string(),
            detail: detail.to_string(),
            severity: Severity::Critical,
            reason: SignalReason::Opened,
            at: at(0),
        }
    }

    #[test]
    fn in_14_the_mail_names_the_severity_the_node_and_the_planes_words_first() {
        let (subject, body) = mail("Capstan", &incident("3% free", "web-1"));
        assert_eq!(
            subject,
            "[Capstan] Critical incident opened on web-1: The site's disk is running out of space"
        );
        assert!(body.starts_with("Critical incident opened on web-1 (node 3)."));
        assert!(body.contains("What the source saw:\n3% free"));
    }

    #[test]
    fn in_20_nothing_a_node_said_becomes_a_link_in_the_mail() {
        let (subject, body) = mail(
            "Capstan",
            &incident(
                "see https://evil.example/x or www.evil.example, mail a@evil.example",
                "www.shop",
            ),
        );
        for text in [&subject, &body] {
            assert!(!text.contains("https://"), "{text}");
            assert!(!text.contains("www."), "{text}");
            assert!(!text.contains("a@evil"), "{text}");
        }
        assert!(body.contains("https[:]//evil.example/x"));
    }
}
