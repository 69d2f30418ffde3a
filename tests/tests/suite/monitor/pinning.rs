//! MO-03 against a DNS server and two sites the test runs: a node is checked at its own
//! address (SNI and Host kept) only when that address is among the name's public records;
//! otherwise through the name.

use capstan_e2e::dns::DnsServer;
use capstan_e2e::web::{Answer, Site};
use capstan_events::monitor::CheckKind;
use capstan_monitor::domain::pinning::Route;
use capstan_monitor::domain::uptime::Outcome;
use capstan_monitor::drivers::http::Target;
use capstan_monitor::drivers::Prober;
use capstan_monitor::settings::MonitorSettings;
use capstan_runtime::outbound::Outbound;
use url::Url;

use super::loopback;

/// Two sites on one port, at 127.0.0.1 (answering 200) and 127.0.0.2 (answering 500).
async fn partners() -> (Site, Site) {
    loop {
        let second = Site::start(loopback(2), 0).await;
        let port = second.address.port();
        if let Ok(first) = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            tokio::net::TcpListener::bind((loopback(1), port)).await
        })
        .await
        .unwrap()
        {
            drop(first);
            let first = Site::start(loopback(1), port).await;
            second.answer(Answer::ServerError);
            return (first, second);
        }
    }
}

fn prober(dns: &DnsServer) -> Prober {
    let resolver = dns.address.to_string();
    let (_, monitor) = capstan_settings::load_from::<MonitorSettings>(
        None,
        [
            ("CAPSTAN__MONITOR__RESOLVER".to_string(), resolver),
            (
                "CAPSTAN__MONITOR__TIMEOUT_SECS".to_string(),
                "2".to_string(),
            ),
        ],
    )
    .unwrap();
    // The sites are on loopback: private targets are allowed here.
    Prober::new(&monitor, Outbound::allowing_private()).unwrap()
}

/// MO-03: two nodes share a name (dual A records); the one at 127.0.0.2 is dead. Checked as
/// itself it is seen failing, though its live partner answers first in the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_03_a_node_whose_address_is_in_the_names_records_is_checked_at_that_address() {
    let (live, dead) = partners().await;
    let dns = DnsServer::start().await;
    dns.set("dns.shared.test", &[loopback(1), loopback(2)]);
    let prober = prober(&dns);
    let url = Url::parse(&format!("http://dns.shared.test:{}/", live.address.port())).unwrap();
    let addresses = vec!["127.0.0.2".to_string()];
    let checked = prober
        .check(Target {
            url: &url,
            kind: CheckKind::HttpStatus,
            keyword: None,
            addresses: &addresses,
        })
        .await;
    assert_eq!(checked.route, Some(Route::Pinned(loopback(2))));
    assert_eq!(checked.outcome, Outcome::Failed("HTTP 500".into()));
    assert_eq!((live.requests(), dead.requests()), (0, 1));
    // its partner, checked as itself, answers
    let partner = vec!["127.0.0.1".to_string()];
    let checked = prober
        .check(Target {
            url: &url,
            kind: CheckKind::HttpStatus,
            keyword: None,
            addresses: &partner,
        })
        .await;
    assert_eq!(checked.outcome, Outcome::Passed);
    assert_eq!((live.requests(), dead.requests()), (1, 1));
    assert!(dns.asked().iter().all(|name| name == "dns.shared.test"));
}

/// MO-03: a node whose address is not among the name's records (behind an edge) is checked
/// through the name, never pinned to its origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_03_a_node_not_in_the_names_records_is_checked_through_the_name() {
    let (edge, origin) = partners().await;
    let dns = DnsServer::start().await;
    // the public name lists only the edge
    dns.set("shop.fronted.test", &[loopback(1)]);
    let prober = prober(&dns);
    let url = Url::parse(&format!(
        "http://shop.fronted.test:{}/",
        edge.address.port()
    ))
    .unwrap();
    let addresses = vec!["127.0.0.2".to_string()];
    let checked = prober
        .check(Target {
            url: &url,
            kind: CheckKind::HttpStatus,
            keyword: None,
            addresses: &addresses,
        })
        .await;
    assert_eq!(checked.route, Some(Route::ThroughName));
    assert_eq!(checked.outcome, Outcome::Passed);
    assert_eq!((edge.requests(), origin.requests()), (1, 0));
    // a name that does not resolve fails the check saying so
    let gone = Url::parse("http://gone.fronted.test/").unwrap();
    let checked = prober
        .check(Target {
            url: &gone,
            kind: CheckKind::HttpStatus,
            keyword: None,
            addresses: &addresses,
        })
        .await;
    assert_eq!(
        checked.outcome,
        Outcome::Failed("gone.fronted.test does not resolve".into())
    );
}

/// MO-02, MO-03 over HTTPS, against origins serving certificates of the test's own authority
/// (made with `rcgen`): a node pinned to its own address is checked there with the name kept
/// for SNI and Host, so the origin serving the name's certificate passes (`http_status` and
/// `tls_certificate`); the other origin of the same name serves a certificate for another name
/// and its node fails saying TLS failed, although its partner would pass; and a keyword the
/// page lacks fails the keyword check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_03_an_https_check_pinned_to_the_nodes_address_keeps_the_name_for_sni_and_host() {
    use super::certificates::{authority, certificate, origins};
    let ca = authority();
    let (port, sites) = origins(vec![
        certificate(&["tls.shared.test"], -1, 89, Some(&ca)),
        certificate(&["other.test"], -1, 89, Some(&ca)),
    ])
    .await;
    let dns = DnsServer::start().await;
    dns.set("tls.shared.test", &[loopback(1), loopback(2)]);
    let (_, monitor) = capstan_settings::load_from::<MonitorSettings>(
        None,
        [
            (
                "CAPSTAN__MONITOR__RESOLVER".to_string(),
                dns.address.to_string(),
            ),
            (
                "CAPSTAN__MONITOR__TIMEOUT_SECS".to_string(),
                "2".to_string(),
            ),
        ],
    )
    .unwrap();
    let prober = Prober::with_roots(
        &monitor,
        Outbound::allowing_private(),
        vec![ca.certificate.der().clone()],
    )
    .unwrap();
    let url = Url::parse(&format!("https://tls.shared.test:{port}/")).unwrap();
    let own = vec!["127.0.0.1".to_string()];
    for kind in [CheckKind::HttpStatus, CheckKind::TlsCertificate] {
        let checked = prober
            .check(Target {
                url: &url,
                kind,
                keyword: None,
                addresses: &own,
            })
            .await;
        assert_eq!(checked.route, Some(Route::Pinned(loopback(1))), "{kind:?}");
        assert_eq!(checked.outcome, Outcome::Passed, "{kind:?}");
    }
    let heads = sites[0].heads();
    assert!(!heads.is_empty());
    for head in &heads {
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("host: tls.shared.test:{port}")),
            "{head}"
        );
    }
    // the keyword check reads the page, and a word it lacks fails it
    let checked = prober
        .check(Target {
            url: &url,
            kind: CheckKind::Keyword,
            keyword: Some("a-word-the-page-lacks"),
            addresses: &own,
        })
        .await;
    assert!(matches!(checked.outcome, Outcome::Failed(_)), "{checked:?}");
    // the origin at .2 serves another name's certificate: checked as itself, it fails on TLS
    let other = vec!["127.0.0.2".to_string()];
    let checked = prober
        .check(Target {
            url: &url,
            kind: CheckKind::TlsCertificate,
            keyword: None,
            addresses: &other,
        })
        .await;
    assert_eq!(checked.route, Some(Route::Pinned(loopback(2))));
    match &checked.outcome {
        Outcome::Failed(reason) => {
            assert!(reason.starts_with("TLS with tls.shared.test"), "{reason}")
        }
        passed => panic!("another name's certificate passed: {passed:?}"),
    }
    assert_eq!(sites[1].requests(), 0);
}
