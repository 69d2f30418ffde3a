//! The Fleet security page in Chromium against a real plane (MO-16, MO-17): three machines
//! whose agents (written in the test) report host reports — one running replaced Apache code
//! (red), one patched (green), one that never reported (grey) — are listed red first with
//! their facts, through the real agent channel and monitor; the red machine is a Docker host
//! whose site containers are rows under it with the fixes they wait for (its helper container
//! is not listed); what a node said is text, never markup; the page is reachable from the
//! keyboard and the API answers the same rows.

use capstan_e2e::plane::Plane;
use capstan_e2e::wait_for;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

use super::Driver;
use crate::agent_channel::{PairedAgent, TestAgent};

/// Runs a `host_report` on `node` through `agent`, which reports `report`.
async fn report(plane: &Plane, agent: &TestAgent, node: i64, report: Value) {
    let job = plane.queue(node, "host_report", json!({})).await;
    let (status, claimed) = agent.claim(&json!({})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["job"]["id"], job);
    let (status, answer) = agent
        .send(
            "result",
            &json!({"job_id": job, "outcome": "completed", "output": "", "result": report,
                    "reason": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

fn patched(os: &str) -> Value {
    json!({"os": {"pretty_name": os}, "security_pending": 0, "security_packages": [],
           "upgrades_pending": 0, "services_needing_restart": [], "dpkg_unfinished": [],
           "reboot_required": {"owed": false, "since": null, "packages": []},
           "last_auto_update": chrono::Utc::now().to_rfc3339()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mo_16_the_fleet_security_page_lists_machines_red_first_with_their_facts() {
    let plane = Plane::start().await;
    let (green_agent, green) = plane.paired_agent("a-patched").await;
    let (red_agent, red) = plane.paired_agent("b-old-apache").await;
    let (_grey_agent, grey) = plane.paired_agent("c-silent").await;
    report(
        &plane,
        &green_agent,
        green,
        patched("Debian GNU/Linux 12 (bookworm)"),
    )
    .await;
    let mut old = patched("<b>Debian</b> https://evil.example/");
    old["services_needing_restart"] = json!(["apache2", "cron"]);
    old["security_pending"] = json!(1);
    old["security_packages"] = json!(["openssl"]);
    old["containers"] = json!([
        {"name": "shop", "state": "running", "status": "Up 2 days", "site": "shop.example"},
        {"name": "buildkit", "state": "running", "status": "Up 2 days", "site": ""},
        {"name": "<i>blog</i>", "state": "exited", "status": "Exited (0)", "site": "blog.example"}
    ]);
    report(&plane, &red_agent, red, old).await;

    // The API: red first, then grey, then green, once the monitor has read both reports.
    let machines = wait_for(
        "the monitor to judge both reports",
        Duration::from_secs(60),
        || async {
            let (status, view) = plane
                .api(&plane.reader, "GET", "/api/v1/fleet/security", None)
                .await;
            assert_eq!(status, StatusCode::OK, "{view}");
            let machines = view["machines"].as_array().cloned().unwrap_or_default();
            let colours: Vec<&str> = machines
                .iter()
                .map(|machine| machine["colour"].as_str().unwrap_or_default())
                .collect();
            (colours == ["red", "grey", "green"]).then_some(machines)
        },
    )
    .await;
    assert_eq!(machines[0]["node_id"], red);
    assert_eq!(
        machines[0]["services_needing_restart"],
        json!(["apache2", "cron"])
    );
    assert_eq!(machines[0]["reasons"][0], "old code is serving: apache2");
    // MO-16: the Docker host's site containers under it, with the fix waiting for its base.
    let containers = machines[0]["containers"].as_array().unwrap();
    let names: Vec<&str> = containers
        .iter()
        .map(|container| container["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["<i>blog</i>", "shop"]);
    for container in containers {
        assert_eq!(container["colour"], "red", "{container}");
        assert_eq!(container["security_pending"], 1, "{container}");
        assert_eq!(
            container["security_packages"],
            json!(["openssl"]),
            "{container}"
        );
        assert_eq!(
            container["reasons"],
            json!(["a critical fix waits for its base: openssl"])
        );
    }
    assert_eq!(containers[1]["state"], "running");
    assert_eq!(machines[2]["containers"], json!([]));
    assert_eq!(machines[1]["node_id"], grey);
    assert_eq!(machines[1]["reasons"], json!(["nothing reported yet"]));
    assert_eq!(machines[2]["node_id"], green);
    assert_eq!(machines[2]["security_pending"], 0);

    // The page, from the menu.
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;
    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    browser.sign_in(&base, ada.name, &ada.password).await;
    browser.click("a[data-test=nav-security]").await;
    browser.wait_path("/ui/fleet/security").await;
    let order = browser
        .run(
            "return [...document.querySelectorAll('tr[id^=security-]')]
                 .map(row => [row.id, row.querySelector('[data-test=colour]').getAttribute('data-colour')]);",
        )
        .await;
    assert_eq!(
        order,
        json!([
            [format!("security-{red}"), "red"],
            [format!("security-{grey}"), "grey"],
            [format!("security-{green}"), "green"]
        ])
    );
    // The containers are rows right under their host, red, with the fix they wait for.
    let under = browser
        .run(&format!(
            "const host = document.querySelector('#security-{red}');
             return [host.nextElementSibling.id, host.nextElementSibling.nextElementSibling.id];"
        ))
        .await;
    assert_eq!(
        under,
        json!([format!("container-{red}-0"), format!("container-{red}-1")])
    );
    let shop = format!("#container-{red}-1");
    assert_eq!(
        browser
            .text(&format!("{shop} [data-test=container-name]"))
            .await,
        "shop"
    );
    assert_eq!(
        browser
            .text(&format!("{shop} [data-test=security-pending]"))
            .await,
        "1"
    );
    assert!(browser
        .text(&format!("{shop} [data-test=reasons]"))
        .await
        .contains("a critical fix waits for its base: openssl"));
    // a container name is text, never markup
    assert_eq!(
        browser
            .text(&format!("#container-{red}-0 [data-test=container-name]"))
            .await,
        "<i>blog</i>"
    );
    assert_eq!(browser.count(&format!("#container-{red}-0 i")).await, 0);
    let row = format!("#security-{red}");
    assert!(browser
        .text(&format!("{row} [data-test=needing-restart]"))
        .await
        .contains("apache2, cron"));
    assert!(browser
        .text(&format!("{row} [data-test=reasons]"))
        .await
        .contains("old code is serving: apache2"));
    // What the node said is text: no markup, no link made of it.
    assert!(browser.text(&row).await.contains("<b>Debian</b>"));
    assert_eq!(browser.count(&format!("{row} b")).await, 0);
    assert_eq!(
        browser
            .count(&format!("{row} a[href*='evil.example']"))
            .await,
        0
    );
    // A fact nothing measured is unknown, never a guess: the silent machine's.
    assert_eq!(
        browser
            .text(&format!("#security-{grey} [data-test=security-pending]"))
            .await,
        "unknown"
    );
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "{controls:#?}");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "{errors:#?}");
    browser.screenshot("fleet-security").await;
    browser.close().await;
    plane.stop().await;
}
