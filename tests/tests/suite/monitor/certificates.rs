//! MO-08..MO-10 end to end: five origins the test runs on one TLS port (127.0.0.1..5), each
//! serving a certificate the test made with `rcgen` for one of the five reasons; the monitor
//! reads each without validating it, names the first reason and its fix, stores the expiry only
//! for a certificate that is the node's, and `plane:cert_problem` (warning) opens for each.

use capstan_e2e::dns::DnsServer;
use capstan_e2e::plane::Plane;
use capstan_e2e::wait_for;
use capstan_e2e::web::Site;
use chrono::{Datelike, Duration, Utc};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
};
use reqwest::StatusCode;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};

use super::{loopback, node_at, set_uptime};
use crate::incidents::{wait_incident, PATIENCE};

/// `(year, month, day)` of today plus `offset` days.
fn day(offset: i64) -> (i32, u8, u8) {
    let date = (Utc::now() + Duration::days(offset)).date_naive();
    (date.year(), date.month() as u8, date.day() as u8)
}

fn dates(params: &mut CertificateParams, from: i64, to: i64) {
    let (a, b) = (day(from), day(to));
    params.not_before = rcgen::date_time_ymd(a.0, a.1, a.2);
    params.not_after = rcgen::date_time_ymd(b.0, b.1, b.2);
}

pub(super) struct Authority {
    pub(super) certificate: Certificate,
    key: KeyPair,
}

pub(super) fn authority() -> Authority {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "Capstan Test CA");
    dates(&mut params, -400, 4000);
    Authority {
        certificate: params.self_signed(&key).unwrap(),
        key,
    }
}

pub(super) type Served = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// A certificate for `names`, valid from `from` to `to` days from today, issued by `ca` or
/// self-signed (the placeholder) when `ca` is none.
pub(super) fn certificate(names: &[&str], from: i64, to: i64, ca: Option<&Authority>) -> Served {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(
        names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    dates(&mut params, from, to);
    let certificate = match ca {
        Some(ca) => params.signed_by(&key, &ca.certificate, &ca.key).unwrap(),
        None => params.self_signed(&key).unwrap(),
    };
    let der = certificate.der().clone();
    (
        vec![der],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

/// TLS origins on one port, at 127.0.0.1, .2, …, serving `served` in order.
pub(super) async fn origins(served: Vec<Served>) -> (u16, Vec<Site>) {
    'port: loop {
        let probe = tokio::net::TcpListener::bind((loopback(1), 0))
            .await
            .unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let mut sites = Vec::new();
        for (index, (chain, key)) in served.iter().enumerate() {
            let ip = loopback(index as u8 + 1);
            if tokio::net::TcpListener::bind((ip, port)).await.is_err() {
                continue 'port;
            }
            sites.push(Site::start_tls(ip, port, chain.clone(), key.clone_key()).await);
        }
        return (port, sites);
    }
}

async fn certificate_of(plane: &Plane, node: i64) -> Value {
    wait_for("the certificate to be read", PATIENCE, || async {
        let (status, body) = plane
            .api(
                &plane.reader,
                "GET",
                &format!("/api/v1/nodes/{node}/certificate"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        (!body["checked_at"].is_null()).then_some(body)
    })
    .await
}

/// MO-08, MO-09, MO-10: each of the five reasons, first match, with its fix; the expiry stored
/// only for the node's own, non-placeholder certificate; `plane:cert_problem` opens (warning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_09_each_of_the_five_reasons_is_named_with_its_fix_and_opens_cert_problem() {
    let ca = authority();
    let served = vec![
        // 1. a 90-day certificate 65 days old: renewal was due on day 60
        certificate(&["overdue.test"], -65, 25, Some(&ca)),
        // 2. a short-lived certificate with 10 days left, its renewal not yet due
        certificate(&["expiring.test"], -1, 10, Some(&ca)),
        // 3. the apex only, while www resolves
        certificate(&["apex.test"], -1, 89, Some(&ca)),
        // 4. a fallback vhost's certificate for another name
        certificate(&["fallback.hosting.test"], -1, 89, Some(&ca)),
        // 5. the self-signed placeholder, ten years
        certificate(&["placeholder.test"], -1, 3650, None),
    ];
    let (port, _sites) = origins(served).await;
    let dns = DnsServer::start().await;
    dns.set("www.apex.test", &[loopback(3)]);
    let resolver = dns.address.to_string();
    let port_text = port.to_string();
    let plane = Plane::start_with(&[
        ("CAPSTAN__MONITOR__RESOLVER", resolver.as_str()),
        ("CAPSTAN__MONITOR__TLS_PORT", port_text.as_str()),
        // The origins are on loopback.
        ("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true"),
        ("CAPSTAN__MONITOR__TIMEOUT_SECS", "2"),
        ("CAPSTAN__MONITOR__TICK_MS", "100"),
        ("CAPSTAN__INCIDENTS__PASS_SECS", "1"),
    ])
    .await;
    let cases = [
        ("overdue.test", "renewal_overdue", "renew"),
        ("expiring.test", "expiry_approaching", "Renew"),
        ("apex.test", "www_uncovered", "www.apex.test"),
        ("origin.test", "origin_uncovered", "issue_origin_cert.sh"),
        ("placeholder.test", "placeholder", "setup_ssl.sh"),
    ];
    let mut nodes = Vec::new();
    for (index, (name, _, _)) in cases.iter().enumerate() {
        let address = format!("127.0.0.{}", index + 1);
        let node = node_at(&plane, &format!("web-{index}"), &[address.as_str()]).await;
        let (status, body) = set_uptime(
            &plane,
            node,
            json!({"enabled": true, "url": format!("https://{name}/"), "interval_secs": 900}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        nodes.push(node);
    }
    for ((name, reason, fix), node) in cases.iter().zip(&nodes) {
        let read = certificate_of(&plane, *node).await;
        let problem = &read["problem"];
        assert_eq!(problem["reason"], *reason, "{name}: {read}");
        assert!(
            problem["fix"].as_str().unwrap().contains(fix),
            "{name}: {read}"
        );
        let stored = !read["expires_at"].is_null();
        let own = !matches!(*reason, "origin_uncovered" | "placeholder");
        assert_eq!(stored, own, "MO-10, {name}: {read}");
        let incident = wait_incident(
            &plane,
            *node,
            "plane:cert_problem",
            "plane:cert_problem to open",
            |incident| incident["status"] == "open",
        )
        .await;
        assert_eq!(incident["severity"], "warning");
    }
    // the uncovered origin names the names presented and wanted
    let read = certificate_of(&plane, nodes[3]).await;
    let detail = read["problem"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("fallback.hosting.test") && detail.contains("origin.test"),
        "{detail}"
    );
    assert_eq!(read["names"], json!(["fallback.hosting.test"]));
}
