//! Issue 29's whole browser flow, against a real plane, the real provisioning service and the
//! Linode stand-in whose instances are real machines (a real sshd on each instance's own
//! loopback address, `StandIn::start_machines`) and the real `capstan-agent`: an operator adds a
//! Linode account by the stand-in's token, asks for a site from the New server form, watches
//! its steps advance on the provision's page (requested → creating → booting → installing →
//! done, each with its time; the page refreshes itself), reads the install's log with no root
//! password in it, follows the node link once the join is auto-approved and sees the node
//! online; the dashboard's banner lists the provision while it is in flight and not after.
//!
//! It needs the provisioning workflow (create, boot, SSH bootstrap, auto-approval), the
//! stand-in's machines and the agent's `CAPSTAN_AGENT_LOCAL_ADDRESS` (the join must come from
//! the instance's own address, AC-08): `cargo build --workspace --bins` first, and root with
//! openssh-server for the machines.

use capstan_e2e::agent::binary;
use capstan_e2e::plane::Plane;
use capstan_e2e::wait_for;
use capstan_events::Domain;
use capstan_provisioning::settings::ProvisioningSettings;
use capstan_provisioning::standin::{sshd::free_port, Flavor, StandIn};
use reqwest::StatusCode;
use std::time::Duration;

use super::provisioning::{add_account, provisioning};
use super::Driver;

/// The order a provision's steps come in when nothing fails.
const STEPS: [&str; 5] = ["requested", "creating", "booting", "installing", "done"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_asks_for_a_site_watches_its_steps_and_sees_the_node_online() {
    // The test runs the provisioning service itself, pointed at its stand-in.
    // The instances live at loopback addresses: the address policy allows them here.
    let plane = Plane::start_without(
        &[Domain::Provisioning],
        &[("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true")],
    )
    .await;
    let linode = StandIn::start(Flavor::Linode).await;
    // A port of this test's own: other tests' stand-ins hand out the same loopback addresses.
    let port = free_port();
    linode.start_machines(
        port,
        vec![
            (
                "CAPSTAN_AGENT_LOCAL_ADDRESS".to_string(),
                "{address}".to_string(),
            ),
            (
                "CAPSTAN_SITE_DATABASE_ADMIN_URL".to_string(),
                crate::provisioning::SITE_DATABASE_ADMIN_URL.to_string(),
            ),
        ],
    );
    let token = linode.world().token.clone();
    let _provisioning = provisioning(
        &plane,
        ProvisioningSettings {
            linode_base_url: linode.base_url(),
            plane_url: Some(plane.base.clone()),
            agent_binary: Some(binary()),
            ssh_port: port,
            boot_poll_millis: 200,
            ..ProvisioningSettings::default()
        },
    )
    .await;

    let driver = Driver::start().await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    browser.sign_in(&base, ada.name, &ada.password).await;
    add_account(&browser, &plane, "linode-main", &token).await;

    // Ask for a site.
    browser.click("a[data-test=nav-provisioning]").await;
    browser.wait_path("/ui/provisioning").await;
    browser.click("a[data-test=new-server]").await;
    browser.wait_path("/ui/provisioning/new").await;
    browser
        .find("select[name=kind]")
        .await
        .select_by_value("site")
        .await
        .unwrap();
    browser
        .find("select[name=plan]")
        .await
        .select_by_value("us-east g6-nanode-1")
        .await
        .unwrap();
    // A name of its own: the site's database lives in this host's PostgreSQL.
    let name = crate::provisioning::unique("shop");
    browser.fill("input[name=name]", &name).await;
    browser.click("button[data-test=request-provision]").await;
    let path = browser.wait_path("/ui/provisioning/provisions/").await;
    let provision: i64 = path
        .trim_start_matches("/ui/provisioning/provisions/")
        .parse()
        .unwrap();

    // Watch the steps advance on the page, which refreshes itself while under way.
    let mut seen: Vec<String> = Vec::new();
    let mut banner_seen = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let step = browser
            .find("[data-test=provision-step]")
            .await
            .attr("data-step")
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        if !step.is_empty() && seen.last() != Some(&step) {
            seen.push(step.clone());
        }
        if step == "install_failed" {
            let failure = browser.text("[data-test=failure]").await;
            panic!("the install failed after {seen:?}: {failure}");
        }
        if step == "done" {
            break;
        }
        if !banner_seen {
            // While it is in flight the dashboard's banner lists it.
            browser.goto(&format!("{base}/ui/")).await;
            browser
                .find(&format!("#banner-provision-{provision}"))
                .await;
            browser.goto(&format!("{base}{path}")).await;
            banner_seen = true;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still at {step} after {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // What was seen came in order, and reached installing before done.
    let order: Vec<usize> = seen
        .iter()
        .map(|step| STEPS.iter().position(|known| known == step).unwrap())
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{seen:?}");
    assert!(seen.len() >= 2, "the page saw the steps advance: {seen:?}");
    for (index, step) in STEPS.iter().enumerate() {
        browser
            .find(&format!("#step-{}[data-step={step}] time", index + 1))
            .await;
    }

    // The install's log is there, and no root password is in it or anywhere on the page.
    let log = browser.text("[data-test=install-log]").await;
    assert!(!log.trim().is_empty());
    let source = browser.client.source().await.unwrap();
    for server in linode.world().servers.iter() {
        assert!(!server.root_password.is_empty());
        assert!(
            !source.contains(&server.root_password),
            "the provision's page shows a root password"
        );
    }
    assert_eq!(
        browser.text("[data-test=password-retired]").await,
        "retired (a login with it was refused)"
    );

    // The join is auto-approved: the node link appears, and the node is online.
    wait_for(
        "the provision's node link",
        Duration::from_secs(120),
        || async {
            browser.goto(&format!("{base}{path}")).await;
            (browser.count("a[data-test=node-link]").await > 0).then_some(())
        },
    )
    .await;
    let verdict = browser.find("[data-test=verdict]").await;
    assert_eq!(
        verdict.attr("data-approved").await.unwrap().as_deref(),
        Some("true")
    );
    browser.click("a[data-test=node-link]").await;
    browser.wait_path("/ui/nodes/").await;
    wait_for("the node online", Duration::from_secs(120), || async {
        browser.client.refresh().await.ok()?;
        (browser.count(".state-online").await > 0).then_some(())
    })
    .await;
    let (status, view) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/provisioning/provisions/{provision}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["step"], "done", "{view}");

    // Done, it leaves the dashboard's banner.
    browser.goto(&format!("{base}/ui/")).await;
    browser.find("[data-test=plane-status]").await;
    assert_eq!(
        browser
            .count(&format!("#banner-provision-{provision}"))
            .await,
        0
    );
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
    crate::provisioning::drop_site_database(&name).await;
}
