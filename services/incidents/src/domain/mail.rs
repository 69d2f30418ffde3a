//! The mail a signal sends (IN-14): plain text, the plane's words first, and nothing a node
//! said turned into a link — its words are defanged so that no mail program makes one of them
//! (`https://x` reads `https[:]//x`, a bare domain `evil.com` reads `evil[.]com`, `a@x` reads
//! `a[@]x`): IN-20, "none of it ever becomes a link". A node may be named `evil.com`.

use super::record::Severity;
use super::signals::SignalReason;
use super::webhooks::IncidentSignal;

/// Makes text from a node unlinkable in a mail program, keeping it readable: a scheme's `://`,
/// every `@`, and every dot that joins a name to a label beginning with a letter (`evil.com`,
/// `www.x`, `a.b.example`; mail programs make links of bare domains) — so `3.5 GB` and
/// `8.2` stay as they are. The ideographic and full-width dots some programs also read as
/// dots in a name are treated the same.
pub fn defang(text: &str) -> String {
    let text = text.replace("://", "[:]//");
    let mut out = String::with_capacity(text.len() + 8);
    let mut previous: Option<char> = None;
    let mut characters = text.chars().peekable();
    while let Some(character) = characters.next() {
        let joins_a_name = matches!(character, '.' | '\u{3002}' | '\u{ff0e}' | '\u{ff61}')
            && previous
                .is_some_and(|before| before.is_alphanumeric() || before == '-' || before == '_')
            && characters.peek().is_some_and(|after| after.is_alphabetic());
        match character {
            _ if joins_a_name => out.push_str("[.]"),
            '@' => out.push_str("[@]"),
            other => out.push(other),
        }
        previous = Some(character);
    }
    out
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
    let title = defang(&incident.title);
    let subject = format!("[{plane}] {severity} incident {what} on {node}: {title}");
    let body = format!(
        "{severity} incident {what} on {node} (node {node_id}).\n\n\
         {title}\n\n\
         What the source saw:\n{detail}\n\n\
         Source: {source}\nIncident: {id}\nAt: {at}\n\n\
         Open the plane's Incidents page to triage it.\n",
        node_id = incident.node_id,
        detail = defang(&incident.detail),
        source = defang(&incident.source),
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
    use capstan_events::NodeId;

    fn incident(detail: &str, node_name: &str) -> IncidentSignal {
        IncidentSignal {
            incident_id: 7,
            node_id: NodeId(3),
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
        assert!(body.contains("https[:]//evil[.]example/x"));
    }

    #[test]
    fn in_20_a_bare_domain_a_node_is_named_or_says_is_defanged_in_the_mail() {
        let mut signal = incident("mirror at downloads.evil.com is down", "evil.com");
        signal.title = "Backups to store.evil.co.uk failed".to_string();
        let (subject, body) = mail("Capstan", &signal);
        for text in [&subject, &body] {
            assert!(!text.contains("evil.com"), "{text}");
            assert!(!text.contains("evil.co"), "{text}");
            assert!(text.contains("evil[.]com"), "{text}");
        }
        assert!(subject.contains("on evil[.]com: Backups to store[.]evil[.]co[.]uk failed"));
        assert!(body.contains("mirror at downloads[.]evil[.]com is down"));
    }

    #[test]
    fn defanging_breaks_every_name_but_leaves_numbers_and_sentences_readable() {
        for (said, defanged) in [
            ("evil.com", "evil[.]com"),
            ("EVIL.COM/login", "EVIL[.]COM/login"),
            ("xn--80ak6aa92e.com", "xn--80ak6aa92e[.]com"),
            ("пример.рф", "пример[.]рф"),
            ("evil\u{3002}com", "evil[.]com"),
            ("evil\u{ff0e}com", "evil[.]com"),
            ("https://a.b/c", "https[:]//a[.]b/c"),
            ("root@evil.com", "root[@]evil[.]com"),
            ("3.5 GB free of 20.0", "3.5 GB free of 20.0"),
            ("php 8.2 at 10.0.0.1", "php 8.2 at 10.0.0.1"),
            ("Done. Next", "Done. Next"),
            ("ends with a dot.", "ends with a dot."),
            (".hidden", ".hidden"),
        ] {
            assert_eq!(defang(said), defanged, "{said}");
        }
    }
}
