//! What an operator does in the browser, end to end (issue 5's "What it must show"): sign in,
//! compare and approve a join, see the node, run `check_status` from the node page and watch
//! its job reach completed with output, the level-7 view without trust acts (and the server
//! refusing them anyway), and sign out; no console errors on any page, and the narrow layout.

use capstan_e2e::{agent::Agent, plane::Plane, wait_for};
use serde_json::json;
use std::time::Duration;

use super::{Browser, Driver};

/// The fingerprint as the page shows it, with the grouping spaces taken out.
fn ungrouped(shown: &str) -> String {
    shown.split_whitespace().collect()
}

/// Fails with every console error the browser logged on the pages since the last look.
async fn no_console_errors(browser: &Browser, page: &str) {
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors on {page}: {errors:#?}");
}

/// GW-01, GW-02, GW-09, GW-11, AC-05, AC-21, MO-07: the whole operator path in Chromium.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_a_join_runs_check_status_and_watches_it_complete() {
    let plane = Plane::start().await;
    // Chromium keeps `Secure` cookies over plain HTTP only for localhost.
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;

    // A machine asks to join (the real agent, running, waiting for approval).
    let mut agent = Agent::new(capstan_e2e::agent::binary());
    agent
        .ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            "--name=web-1",
            "--no-wait",
        ])
        .await;
    agent.ok(&["enable"]).await;
    // The node's owner asks to approve read words first: the job then waits on the node while
    // the job page is open, so the page has to follow it live to see it end.
    agent.policy(r#"{"read": "ask"}"#, 0o600);
    agent.start();
    let fingerprint = agent.fingerprint();

    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    browser.sign_in(&base, ada.name, &ada.password).await;
    no_console_errors(&browser, "sign-in").await;

    // The pending join, with the fingerprint to compare by eye (AC-05).
    let join = wait_for("the join to be listed", Duration::from_secs(30), || async {
        plane.join_of(&fingerprint).await
    })
    .await;
    let join_id = join["id"].as_str().unwrap().to_string();
    browser.goto(&format!("{base}/ui/")).await;
    let row = format!("#join-{join_id}");
    let shown = browser
        .text(&format!("{row} [data-test=fingerprint]"))
        .await;
    assert_eq!(
        ungrouped(&shown),
        fingerprint,
        "the fingerprint as shown: {shown}"
    );
    assert!(browser.text(&row).await.contains("web-1"));
    // Issue 27: with no node yet, the dashboard says how to add one, with this plane's URL.
    let install = browser.text("[data-test=install-command]").await;
    assert!(
        install.contains(&format!("--management-node={base} ")),
        "{install}"
    );
    browser.screenshot("dashboard-first-server").await;
    browser
        .run(&format!(
            "document.querySelector('{row}').scrollIntoView({{block: 'center'}}); return true;"
        ))
        .await;
    browser.screenshot("dashboard-join").await;
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "on the dashboard: {controls:#?}");
    // Approve from the keyboard alone.
    assert!(
        browser
            .tab_to(&format!("{row} button[data-test=approve]"))
            .await,
        "Tab reaches the Approve button"
    );
    browser.press_enter().await;

    // The node appears and its agent reports in.
    let flash = browser.text("[data-test=flash]").await;
    assert!(flash.to_lowercase().contains("approved"), "{flash}");
    let node_id = wait_for("the node to be listed", Duration::from_secs(30), || async {
        let (_, nodes) = plane.api(&plane.reader, "GET", "/api/v1/nodes", None).await;
        nodes["nodes"]
            .as_array()?
            .iter()
            .find(|node| node["fingerprint"] == fingerprint.as_str())?["id"]
            .as_i64()
    })
    .await;
    plane.wait_online(node_id).await;
    browser.goto(&format!("{base}/ui/")).await;
    let node_row = format!("#node-{node_id}");
    assert!(browser.text(&node_row).await.contains("web-1"));
    assert_eq!(browser.count(&format!("#join-{join_id}")).await, 0);

    // Run check_status from the node page (the form generated from its vocabulary).
    browser
        .click(&format!("{node_row} [data-test=node-link]"))
        .await;
    browser.click("[data-test=tab-jobs]").await;
    browser.click("[data-test=run-check_status]").await;
    // A new job opens its page.
    let job_id: i64 = browser.wait_path("/ui/jobs/").await["/ui/jobs/".len()..]
        .split(['?', '/'])
        .next()
        .unwrap()
        .parse()
        .unwrap();

    // The job waits on the node for its owner; the page shows it unfinished, with no output.
    agent.held_for_approval(job_id).await;
    let waiting = browser.text("[data-test=job-state]").await;
    assert!(
        waiting == "pending" || waiting == "running",
        "the page opened before the job ended: {waiting}"
    );
    assert!(browser.text("[data-test=job-output]").await.is_empty());
    agent.ok(&["approve", &job_id.to_string()]).await;

    // Without the test touching the page, it follows the job until it completes, with output.
    wait_for(
        "the job page to say completed",
        Duration::from_secs(60),
        || async {
            (browser
                .text("[data-test=job-state]")
                .await
                .contains("completed"))
            .then_some(())
        },
    )
    .await;
    let output = wait_for("the output to arrive", Duration::from_secs(10), || async {
        let output = browser.text("[data-test=job-output]").await;
        output.contains("agent_version").then_some(output)
    })
    .await;
    // At the end the page shows the ended job whole: its structured result, no Cancel.
    browser.find("pre[data-test=job-result]").await;
    assert_eq!(browser.count("button[data-test=cancel]").await, 0);
    let job = plane.job(job_id).await;
    assert_eq!(job["state"], "completed");
    assert_eq!(job["requested_by"], "ada");
    assert!(output.contains("disk"), "{output}");
    browser.screenshot("job").await;
    no_console_errors(&browser, "the job page").await;

    // The node page's Overview shows what the check found; the dashboard its dot.
    browser
        .goto(&format!("{base}/ui/nodes/{node_id}?tab=overview"))
        .await;
    browser.find("[data-test=fact-agent-version]").await;
    browser.screenshot("node").await;
    // The Recipes tab lists what the agent runs on its own clock (AC-45), one line each.
    browser
        .goto(&format!("{base}/ui/nodes/{node_id}?tab=recipes"))
        .await;
    browser.find("[data-test=recipe-disk_headroom]").await;
    browser.find("[data-test=recipe-service_health]").await;
    // Its breadcrumb leads to the node list.
    browser.click("a[data-test=crumb-nodes]").await;
    browser.find("form#node-filters").await;
    assert_eq!(browser.path().await, "/ui/nodes");
    for tab in ["overview", "jobs", "agent", "recipes"] {
        browser
            .goto(&format!("{base}/ui/nodes/{node_id}?tab={tab}"))
            .await;
        let controls = browser.unreachable_or_unnamed_controls().await;
        assert!(
            controls.is_empty(),
            "on the node's {tab} tab: {controls:#?}"
        );
    }
    browser.goto(&format!("{base}/ui/jobs/{job_id}")).await;
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "on the job page: {controls:#?}");
    // The monitor judges the finished check into the node's dot (MO-07) and tells the agent
    // channel: the dashboard shows it once told.
    let dot = wait_for("the node's dot", Duration::from_secs(30), || async {
        browser.goto(&format!("{base}/ui/")).await;
        let dot = browser
            .find(&format!("{node_row} [data-test=health]"))
            .await
            .attr("data-dot")
            .await
            .unwrap()
            .unwrap();
        (dot != "gray").then_some(dot)
    })
    .await;
    assert_ne!(dot, "gray", "the node has been checked");
    browser.screenshot("dashboard").await;
    no_console_errors(&browser, "the dashboard and node page").await;

    // The narrow layout: nothing scrolls sideways on a phone-sized window.
    browser.client.set_window_size(390, 844).await.unwrap();
    for (page, name) in [
        (format!("{base}/ui/jobs/{job_id}"), "job-narrow"),
        (
            format!("{base}/ui/nodes/{node_id}?tab=overview"),
            "node-narrow",
        ),
        (format!("{base}/ui/"), "dashboard-narrow"),
    ] {
        browser.goto(&page).await;
        assert!(
            browser.fits_width().await,
            "{page} scrolls sideways at 390 px"
        );
        browser.screenshot(name).await;
    }
    browser.client.set_window_size(1280, 900).await.unwrap();

    // Sign out: the session is gone, the pages send to sign-in again.
    browser.goto(&format!("{base}/ui/")).await;
    browser.click("button[data-test=sign-out]").await;
    browser.wait_path("/ui/sign-in").await;
    browser.goto(&format!("{base}/ui/nodes/{node_id}")).await;
    assert!(
        browser.path().await.starts_with("/ui/sign-in"),
        "signed out: {}",
        browser.path().await
    );
    no_console_errors(&browser, "sign-out").await;
    browser.close().await;
    drop(agent);
    plane.stop().await;
}

/// GW-02, GW-18: a level-7 operator sees no approve, reject or disconnect, and the server
/// refuses those posts even with the operator's own valid CSRF token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_operator_cannot_see_or_post_trust_acts() {
    let plane = Plane::start().await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;

    // One node paired, one machine asking to join.
    let mut paired = Agent::new(capstan_e2e::agent::binary());
    let node_id = paired.paired(&plane, "web-1").await;
    let asking = Agent::new(capstan_e2e::agent::binary());
    asking
        .ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            "--name=web-2",
            "--no-wait",
        ])
        .await;
    let join = wait_for("the join to be listed", Duration::from_secs(30), || async {
        plane.join_of(&asking.fingerprint()).await
    })
    .await;
    let join_id = join["id"].as_str().unwrap().to_string();

    let rita = plane.operator("rita").clone();
    let browser = driver.browser("rita").await;
    browser.sign_in(&base, rita.name, &rita.password).await;
    browser.goto(&format!("{base}/ui/")).await;
    let row = format!("#join-{join_id}");
    // The join is listed, fingerprint and all, but offers nothing to press.
    browser
        .find(&format!("{row} [data-test=fingerprint]"))
        .await;
    assert_eq!(browser.count("button[data-test=approve]").await, 0);
    assert_eq!(browser.count("button[data-test=reject]").await, 0);
    browser
        .goto(&format!("{base}/ui/nodes/{node_id}?tab=agent"))
        .await;
    assert_eq!(browser.count("a[data-test=disconnect]").await, 0);
    assert_eq!(
        browser.count("button[data-test=confirm-disconnect]").await,
        0
    );
    // The Jobs tab offers read words only.
    browser
        .goto(&format!("{base}/ui/nodes/{node_id}?tab=jobs"))
        .await;
    browser.find("[data-test=run-check_status]").await;
    assert_eq!(browser.count("[data-test=run-restart_unit]").await, 0);
    no_console_errors(&browser, "the level-7 pages").await;

    // The posts themselves, from this page with its own CSRF token, are refused.
    let post = |path: String| {
        format!(
            "const csrf = document.querySelector('input[name=csrf]').value;
             const body = new URLSearchParams({{csrf}});
             return fetch('{path}', {{method: 'POST', body, redirect: 'manual'}})
                 .then(response => response.status);"
        )
    };
    for path in [
        format!("/ui/joins/{join_id}/approve"),
        format!("/ui/joins/{join_id}/reject"),
        format!("/ui/nodes/{node_id}/disconnect"),
    ] {
        let status = browser
            .client
            .execute_async(
                &format!(
                    "const done = arguments[arguments.length - 1];
                     (async () => {{ {} }})().then(done, error => done(String(error)));",
                    post(path.clone())
                ),
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(status, json!(403), "POST {path} as level 7");
    }
    // Nothing changed on the plane.
    let join = plane.join_of(&asking.fingerprint()).await.unwrap();
    assert_eq!(join["state"], "pending");
    assert!(plane.node(node_id).await["fingerprint"].is_string());
    // The console shows the refused fetches as failed loads; those are the test's own.
    let _ = browser.console_errors().await;

    // The console check itself sees an error the page logs (so its silence above means
    // something too).
    browser
        .run("console.error('capstan console self-test'); return null;")
        .await;
    let logged = browser.console_errors().await;
    assert!(
        logged
            .iter()
            .any(|entry| entry.contains("capstan console self-test")),
        "{logged:#?}"
    );

    // The control checker itself notices a control the keyboard cannot reach and one with no
    // name (so its silence above means something).
    browser
        .run(
            "const b = document.createElement('button'); b.tabIndex = -1; b.textContent = 'x';
             const i = document.createElement('input'); i.type = 'text';
             document.querySelector('main, body').append(b, i); return null;",
        )
        .await;
    let found = browser.unreachable_or_unnamed_controls().await;
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("not reachable"), "{found:#?}");
    assert!(found[1].starts_with("no name"), "{found:#?}");
    browser.close().await;
    drop(paired);
    plane.stop().await;
}
