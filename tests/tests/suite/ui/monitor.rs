//! The monitor's pages in Chromium against a real plane (issue 12's "Pages"): a site of the
//! test's own goes down; the dashboard's Sites card lists it with since when and why, the
//! node page's Uptime card says Down, since when and why, and draws the last day's response
//! times as an inline SVG; a level-7 operator compares edge and direct from the node page and
//! reads the run's verdict on its page (MO-11, MO-12).

use capstan_e2e::dns::DnsServer;
use capstan_e2e::wait_for;
use capstan_e2e::web::{Answer, Site};
use serde_json::json;
use std::time::Duration;

use super::Driver;
use crate::monitor::{loopback, monitored_plane, node_at, set_uptime, wait_check};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uptime_card_sparkline_and_edge_probe_pages_show_a_down_site_and_a_verdict() {
    let dns = DnsServer::start().await;
    let site = Site::start(loopback(1), 0).await;
    dns.set("shop.pages.test", &[loopback(1)]);
    let plane = monitored_plane(&dns).await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let node = node_at(&plane, "web-pages", &["127.0.0.1"]).await;
    let url = format!("http://shop.pages.test:{}/", site.address.port());
    let (status, _) = set_uptime(
        &plane,
        node,
        json!({"enabled": true, "url": url, "interval_secs": 1}),
    )
    .await;
    assert_eq!(status.as_u16(), 200);
    wait_check(&plane, node, "the site to be up", |check| {
        check["status"] == "up"
    })
    .await;
    site.answer(Answer::ServerError);
    let down = wait_check(&plane, node, "the site to be down", |check| {
        check["status"] == "down"
    })
    .await;

    let driver = Driver::start().await;
    let rita = plane.operator("rita").clone();
    let browser = driver.browser("rita").await;
    browser.sign_in(&base, rita.name, &rita.password).await;

    // The dashboard lists it among the sites down, with why.
    browser.goto(&format!("{base}/ui/")).await;
    let counts = browser.text("[data-test=sites-counts]").await;
    assert!(counts.contains("1 down"), "{counts}");
    let row = browser.text(&format!("#site-down-{node}")).await;
    assert!(row.contains("HTTP 500"), "{row}");
    assert!(row.contains("shop.pages.test"), "{row}");

    // The node page: Down, since when (the outage's start), why, and the sparkline.
    browser.goto(&format!("{base}/ui/nodes/{node}")).await;
    let shown = browser.find("[data-test=uptime-status]").await;
    assert_eq!(
        shown.attr("data-status").await.unwrap().as_deref(),
        Some("down")
    );
    let since = browser
        .find("[data-test=uptime-since]")
        .await
        .attr("datetime")
        .await
        .unwrap()
        .unwrap();
    let since: chrono::DateTime<chrono::Utc> = since.parse().unwrap();
    let down_since: chrono::DateTime<chrono::Utc> =
        down["down_since"].as_str().unwrap().parse().unwrap();
    assert_eq!(since.timestamp(), down_since.timestamp());
    assert!(browser
        .text("[data-test=uptime-reason]")
        .await
        .contains("HTTP 500"));
    let drawn = browser
        .run(
            "const svg = document.querySelector('svg[data-test=sparkline]');
             return svg ? { path: svg.querySelector('path').getAttribute('d'),
                            failures: svg.querySelectorAll('rect').length,
                            label: svg.getAttribute('aria-label') } : null;",
        )
        .await;
    assert!(drawn["path"].as_str().unwrap().starts_with('M'), "{drawn}");
    assert!(drawn["failures"].as_u64().unwrap() >= 1, "{drawn}");
    assert!(
        drawn["label"].as_str().unwrap().contains("failing"),
        "{drawn}"
    );

    // A reader (level 7) compares edge and direct: the page of the run says how it went.
    browser.click("button[data-test=edge-probe-run]").await;
    let path = browser.wait_path("/ui/edge-probes/").await;
    let verdict = wait_for(
        "the run's verdict on its page",
        Duration::from_secs(120),
        || async {
            browser.goto(&format!("{base}{path}")).await;
            let status = browser
                .find("[data-test=edge-probe-status]")
                .await
                .attr("data-status")
                .await
                .ok()??;
            (status == "done").then_some(())?;
            Some(browser.text("[data-test=edge-verdict]").await)
        },
    )
    .await;
    // The site answers (500s are answers, not stalls) on the one path there is.
    assert_eq!(verdict, "No problem seen");
    let notes = browser.text("[data-test=edge-notes]").await;
    assert!(
        notes.contains("resolves to the machine itself (127.0.0.1)"),
        "{notes}"
    );
    assert_eq!(browser.text("#edge-path-0 [data-test=stalls]").await, "0");
    assert_eq!(browser.count("tr[id^=edge-path-]").await, 2);
    browser.goto(&format!("{base}/ui/nodes/{node}")).await;
    assert_eq!(browser.count("[id^=edge-probe-]").await, 1);
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
