//! The certificate a node's origin serves (MO-08..MO-10): read from the wire without
//! validating it, parsed with `x509-parser`, and judged for the first of five problems.
//!
//! One test decides whose certificate it is: its names must cover the node's name
//! ([`covers`]). A certificate for other names is not this node's to date, but it is a problem
//! of its own (origin uncovered). The expiry is stored only for a certificate that covers the
//! name and is not the self-signed placeholder (MO-10).

use capstan_events::monitor::{CertProblem, CertReason};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// MO-09's reason 1: a renewal is overdue when this long has passed since its due date.
pub const RENEWAL_GRACE: Duration = Duration::days(1);
/// MO-09's reason 2 when not configured (`server_manager_cert_expiry_warn_days`).
pub const DEFAULT_WARN_DAYS: u32 = 21;

/// What a served certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
    /// The DNS names it covers: its subject alternative names, or its common name when it has
    /// none; lower case.
    pub names: Vec<String>,
    /// Its issuer is its subject (the placeholder a site is given until its real certificate).
    pub self_signed: bool,
}

/// Why a served certificate does not read, in the parser's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// Reads a DER certificate; anything that is not one is refused with the parser's words.
pub fn parse(der: &[u8]) -> Result<Served, Unreadable> {
    let (_, certificate) = X509Certificate::from_der(der)
        .map_err(|error| Unreadable(format!("the served certificate cannot be read: {error}")))?;
    let validity = certificate.validity();
    let time = |seconds: i64| {
        DateTime::from_timestamp(seconds, 0).ok_or_else(|| {
            Unreadable("the served certificate's dates are out of range".to_string())
        })
    };
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(alternatives)) = certificate.subject_alternative_name() {
        for name in &alternatives.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        names.extend(
            certificate
                .subject()
                .iter_common_name()
                .filter_map(|name| name.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    names.dedup();
    Ok(Served {
        not_before: time(validity.not_before.timestamp())?,
        not_after: time(validity.not_after.timestamp())?,
        names,
        self_signed: certificate.issuer().as_raw() == certificate.subject().as_raw(),
    })
}

/// `cert_covers_host()`: one of `names` is `host` itself, or a wildcard of exactly one label
/// over it (`*.example.com` covers `www.example.com`, not `example.com` nor `a.b.example.com`).
pub fn covers(names: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    names.iter().any(|name| {
        let name = name.trim_end_matches('.');
        if name == host {
            return true;
        }
        match (name.strip_prefix("*."), host.split_once('.')) {
            (Some(parent), Some((label, rest))) => !label.is_empty() && parent == rest,
            _ => false,
        }
    })
}

/// `renewal_due_ts()`: a standard ACME client replaces a certificate at two thirds of its life.
pub fn renewal_due(served: &Served) -> DateTime<Utc> {
    served.not_before + (served.not_after - served.not_before) * 2 / 3
}

/// What `www.<name>` looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Www {
    /// It does not resolve (or the name is itself a www name): not mentioned.
    NotResolving,
    /// It resolves, and the origin served this for it.
    Served(Served),
}

/// What a read decides: the problem, the expiry to store and the placeholder's first sighting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub problem: Option<CertProblem>,
    pub expires_at: Option<DateTime<Utc>>,
    pub placeholder_since: Option<DateTime<Utc>>,
}

fn day(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "no names".to_string()
    } else {
        names.join(", ")
    }
}

/// MO-09, MO-10: the first of the five reasons for the certificate served for `host`, read at
/// `now`. `placeholder_since` is when the placeholder was first seen, from earlier reads;
/// `in_container` names the fix for a site in a container.
pub fn judge(
    host: &str,
    served: &Served,
    www: &Www,
    placeholder_since: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    warn_days: u32,
    in_container: bool,
) -> Judged {
    if !covers(&served.names, host) {
        // 4. Origin uncovered: a shared fallback vhost; nothing of it is this node's to store.
        return Judged {
            problem: Some(origin_uncovered(host, served)),
            expires_at: None,
            placeholder_since: None,
        };
    }
    let placeholder = served.self_signed;
    let expires_at = (!placeholder).then_some(served.not_after);
    let placeholder_since = placeholder.then(|| placeholder_since.unwrap_or(now));
    let due = renewal_due(served);
    let days_left = (served.not_after - now).num_days();
    let problem = if now - due > RENEWAL_GRACE {
        // 1. Renewal overdue: the certificate on the wire is still the one that was due.
        Some(renewal_overdue(served, due))
    } else if served.not_after <= now || days_left < i64::from(warn_days) {
        // 2. Expiry approaching: the safety net.
        Some(expiry_approaching(served, now, days_left))
    } else if let Www::Served(www_served) = www.clone().filter_uncovered(host) {
        // 3. www uncovered: a Strict flip would take the www address dark.
        Some(www_uncovered(host, served, &www_served))
    } else if placeholder {
        // 5. Origin on its placeholder: nothing renews it; Strict or a direct visitor refuse it.
        Some(on_placeholder(
            served,
            placeholder_since.unwrap_or(now),
            in_container,
        ))
    } else {
        None
    };
    Judged {
        problem,
        expires_at,
        placeholder_since,
    }
}

/// A problem of the served certificate, naming its expiry.
fn of_served(
    served: &Served,
    reason: CertReason,
    title: String,
    detail: String,
    fix: String,
) -> CertProblem {
    CertProblem {
        reason,
        title,
        not_after: Some(served.not_after),
        detail,
        fix,
        since: None,
    }
}

fn origin_uncovered(host: &str, served: &Served) -> CertProblem {
    CertProblem {
        reason: CertReason::OriginUncovered,
        title: "The origin serves a certificate for other names".to_string(),
        not_after: None,
        detail: format!(
            "The origin presented a certificate for {}; wanted {host}. Behind an edge \
             on Full (Strict), or reached directly, the site would be refused.",
            listed(&served.names)
        ),
        fix: format!(
            "Issue an origin certificate for {host} on the node with issue_origin_cert.sh."
        ),
        since: None,
    }
}

fn renewal_overdue(served: &Served, due: DateTime<Utc>) -> CertProblem {
    of_served(
        served,
        CertReason::RenewalOverdue,
        "The certificate was not renewed when it was due".to_string(),
        format!(
            "Issued {}, due for renewal at two thirds of its life on {}, and still served; \
             it expires {}.",
            day(served.not_before),
            day(due),
            day(served.not_after)
        ),
        "Renewal on the node is failing: run the certificate manager's renewal by hand \
         (certbot renew, or the manager's own command) and read why it fails."
            .to_string(),
    )
}

fn expiry_approaching(served: &Served, now: DateTime<Utc>, days_left: i64) -> CertProblem {
    let title = if served.not_after <= now {
        "The certificate has expired".to_string()
    } else {
        format!("The certificate expires in {days_left} days")
    };
    of_served(
        served,
        CertReason::ExpiryApproaching,
        title,
        format!("It expires {}.", day(served.not_after)),
        "Renew the certificate on the node (certbot renew, or the manager's own command)."
            .to_string(),
    )
}

fn www_uncovered(host: &str, served: &Served, www_served: &Served) -> CertProblem {
    of_served(
        served,
        CertReason::WwwUncovered,
        format!("www.{host} is not covered by its certificate"),
        format!(
            "www.{host} resolves, and the origin presents a certificate for {} for it.",
            listed(&www_served.names)
        ),
        format!("Add www.{host} to the node's certificate (reissue it for both names)."),
    )
}

fn on_placeholder(served: &Served, since: DateTime<Utc>, in_container: bool) -> CertProblem {
    let fix = if in_container {
        "Run the agent bundle's setup_ssl.sh on the container's host for this site."
    } else {
        "Run setup_ssl.sh on the site's own server."
    };
    CertProblem {
        reason: CertReason::Placeholder,
        title: "The origin serves its self-signed placeholder".to_string(),
        not_after: None,
        detail: format!(
            "The origin presents a self-signed certificate for {}, first seen {}.",
            listed(&served.names),
            day(since)
        ),
        fix: fix.to_string(),
        since: Some(since),
    }
}

impl Www {
    /// The www certificate, only when it does not cover `www.<host>`.
    fn filter_uncovered(self, host: &str) -> Www {
        match self {
            Www::Served(served) if !covers(&served.names, &format!("www.{host}")) => {
                Www::Served(served)
            }
            _ => Www::NotResolving,
        }
    }
}

/// Whether `www.<host>` is worth asking about: not for a name that is itself a www name.
pub fn www_name(host: &str) -> Option<String> {
    (!host.starts_with("www.") && host.parse::<std::net::IpAddr>().is_err())
        .then(|| format!("www.{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(days: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::days(days)
    }

    /// A 90-day certificate for `names` issued on day `issued`.
    fn served(names: &[&str], issued: i64) -> Served {
        Served {
            not_before: at(issued),
            not_after: at(issued + 90),
            names: names.iter().map(|name| name.to_string()).collect(),
            self_signed: false,
        }
    }

    fn reason(judged: &Judged) -> Option<CertReason> {
        judged.problem.as_ref().map(|problem| problem.reason)
    }

    const HOST: &str = "shop.example.com";

    #[test]
    fn mo_08_covering_is_exact_or_one_wildcard_label() {
        let names = vec!["*.example.com".to_string(), "example.com".to_string()];
        assert!(covers(&names, "shop.example.com"));
        assert!(covers(&names, "Example.COM."));
        assert!(!covers(&names, "a.shop.example.com"));
        assert!(!covers(&names, "example.org"));
        assert!(!covers(&["*.com".to_string()], "com"));
    }

    #[test]
    fn mo_09_a_healthy_certificate_has_no_problem_and_its_expiry_is_stored() {
        let cert = served(&[HOST], 0);
        let judged = judge(HOST, &cert, &Www::NotResolving, None, at(30), 21, false);
        assert_eq!(judged.problem, None);
        assert_eq!(judged.expires_at, Some(at(90)), "MO-10");
        assert_eq!(judged.placeholder_since, None);
    }

    #[test]
    fn mo_09_renewal_is_overdue_a_day_after_two_thirds_of_life_around_day_61() {
        let cert = served(&[HOST], 0);
        assert_eq!(renewal_due(&cert), at(60));
        let on_time = judge(HOST, &cert, &Www::NotResolving, None, at(61), 21, false);
        assert_eq!(reason(&on_time), None, "a day of grace");
        let late = judge(
            HOST,
            &cert,
            &Www::NotResolving,
            None,
            at(61) + Duration::hours(1),
            21,
            false,
        );
        assert_eq!(reason(&late), Some(CertReason::RenewalOverdue));
        assert_eq!(late.problem.as_ref().unwrap().not_after, Some(at(90)));
        assert!(!late.problem.unwrap().fix.is_empty());
        // nine days before the expiry threshold would have fired
        assert!(at(61) < at(90 - 21));
    }

    #[test]
    fn mo_09_a_replacement_has_its_own_due_date_ahead() {
        let renewed = served(&[HOST], 60);
        let judged = judge(HOST, &renewed, &Www::NotResolving, None, at(62), 21, false);
        assert_eq!(reason(&judged), None);
    }

    #[test]
    fn mo_09_expiry_under_the_warning_days_is_the_safety_net() {
        // a certificate whose due date lies ahead (issued long ago with a long life) expiring soon
        let cert = Served {
            not_before: at(-1000),
            not_after: at(10),
            names: vec![HOST.to_string()],
            self_signed: false,
        };
        // two thirds of 1010 days from day -1000 is day -327: renewal is overdue first
        assert_eq!(
            reason(&judge(
                HOST,
                &cert,
                &Www::NotResolving,
                None,
                at(0),
                21,
                false
            )),
            Some(CertReason::RenewalOverdue)
        );
        // a short-lived certificate: due at two thirds, expiring inside the warning days first
        let short = Served {
            not_before: at(0),
            not_after: at(30),
            names: vec![HOST.to_string()],
            self_signed: false,
        };
        let judged = judge(HOST, &short, &Www::NotResolving, None, at(10), 21, false);
        assert_eq!(reason(&judged), Some(CertReason::ExpiryApproaching));
        assert_eq!(
            judged.problem.unwrap().title,
            "The certificate expires in 20 days"
        );
    }

    #[test]
    fn mo_09_www_uncovered_only_when_www_resolves() {
        let cert = served(&[HOST], 0);
        let www = Www::Served(cert.clone());
        let judged = judge(HOST, &cert, &www, None, at(10), 21, false);
        assert_eq!(reason(&judged), Some(CertReason::WwwUncovered));
        assert!(judged
            .problem
            .unwrap()
            .detail
            .contains("www.shop.example.com"));
        assert_eq!(
            reason(&judge(
                HOST,
                &cert,
                &Www::NotResolving,
                None,
                at(10),
                21,
                false
            )),
            None
        );
        let both = served(&[HOST, "www.shop.example.com"], 0);
        assert_eq!(
            reason(&judge(
                HOST,
                &both,
                &Www::Served(both.clone()),
                None,
                at(10),
                21,
                false
            )),
            None
        );
        assert_eq!(www_name("www.example.com"), None);
        assert_eq!(www_name("example.com").as_deref(), Some("www.example.com"));
    }

    #[test]
    fn mo_09_mo_10_origin_uncovered_names_both_and_stores_nothing() {
        let foreign = served(&["fallback.hosting.test"], -80);
        let judged = judge(HOST, &foreign, &Www::NotResolving, None, at(0), 21, false);
        let problem = judged.problem.unwrap();
        assert_eq!(problem.reason, CertReason::OriginUncovered);
        assert!(problem.detail.contains("fallback.hosting.test"));
        assert!(problem.detail.contains(HOST));
        assert!(problem.fix.contains("issue_origin_cert.sh"));
        assert_eq!(
            judged.expires_at, None,
            "MO-10: a foreign expiry is not this node's"
        );
    }

    #[test]
    fn mo_09_the_placeholder_keeps_when_it_was_first_seen_and_stores_no_expiry() {
        let placeholder = Served {
            not_before: at(-5),
            not_after: at(3650),
            names: vec![HOST.to_string()],
            self_signed: true,
        };
        let first = judge(
            HOST,
            &placeholder,
            &Www::NotResolving,
            None,
            at(0),
            21,
            false,
        );
        let problem = first.problem.clone().unwrap();
        assert_eq!(problem.reason, CertReason::Placeholder);
        assert_eq!(problem.since, Some(at(0)));
        assert!(problem.fix.contains("setup_ssl.sh"));
        assert_eq!(
            first.expires_at, None,
            "MO-10: its ten-year expiry is not stored"
        );
        let later = judge(
            HOST,
            &placeholder,
            &Www::NotResolving,
            first.placeholder_since,
            at(3),
            21,
            false,
        );
        assert_eq!(later.problem.unwrap().since, Some(at(0)));
        let contained = judge(
            HOST,
            &placeholder,
            &Www::NotResolving,
            None,
            at(0),
            21,
            true,
        );
        assert!(contained.problem.unwrap().fix.contains("host"));
        // replaced by a real certificate: the sighting is forgotten
        let real = judge(
            HOST,
            &served(&[HOST], 0),
            &Www::NotResolving,
            first.placeholder_since,
            at(5),
            21,
            false,
        );
        assert_eq!(real.placeholder_since, None);
    }
}
