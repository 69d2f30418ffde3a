//! The incidents pages in Chromium against a real plane (issue 11's "What it must show"): an
//! agent written in the test carries a case in its claims and then stops checking in, so a
//! warning and a critical incident open (`agent:disk_headroom`, `plane:agent_silent`). The
//! header line turns amber, then red (IN-16); the list shows both with their counts (IN-17);
//! an incident's timeline, snooze, triage and note work from the keyboard alone (IN-18,
//! IN-19); what the node and a note said is shown as text, never a link (IN-20); a level-7
//! operator sees no triage buttons and the server refuses the POST anyway.

use capstan_e2e::wait_for;
use serde_json::{json, Value};
use std::time::Duration;

use super::{Browser, Driver};
use crate::agent_channel::PairedAgent;
use crate::incidents::{carrying, claim, detail, open_case, plane_with, wait_incident};

/// What the node says, with markup and an address in it: shown as text, never as markup or a
/// link (IN-20).
const SAID: &str = "<b>3% free</b> on / — see https://evil.example/fix";
/// A note with markup and an address in it.
const NOTE: &str = "<img src=x id=injected> checked https://evil.example/notes";

/// Waits until the page's flash says `words` (the page after a form's redirect).
async fn wait_flash(browser: &Browser, words: &str) -> String {
    wait_for(
        &format!("a flash saying {words:?}"),
        Duration::from_secs(20),
        || async {
            let found = browser
                .client
                .find(fantoccini::Locator::Css("[data-test=flash]"))
                .await
                .ok()?;
            let text = found.text().await.ok()?;
            text.contains(words).then_some(text)
        },
    )
    .await
}

/// The header line's colour on the page shown, or `None` when it is absent.
async fn header_colour(browser: &Browser) -> Option<String> {
    let value = browser
        .run(
            "const line = document.querySelector('[data-test=incident-line]');
             return line ? line.getAttribute('data-colour') : null;",
        )
        .await;
    value.as_str().map(str::to_string)
}

/// Types `text` into the focused element, as a keyboard does.
async fn type_text(browser: &Browser, text: &str) {
    browser
        .client
        .active_element()
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

/// The kinds of the incident page's timeline, oldest first.
async fn timeline_kinds(browser: &Browser) -> Vec<String> {
    let kinds = browser
        .run(
            "return [...document.querySelectorAll('[data-test=timeline] li')]
                 .map(li => li.getAttribute('data-kind'));",
        )
        .await;
    serde_json::from_value(kinds).unwrap()
}

async fn no_console_errors(browser: &Browser, page: &str) {
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors on {page}: {errors:#?}");
}

/// Fails with every control on the page the keyboard cannot reach or that has no name.
async fn all_controls_reachable(browser: &Browser, page: &str) {
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "on {page}: {controls:#?}");
}

/// IN-16, IN-17, IN-18, IN-19, IN-20, GW-17: the header line, the list and an incident's page
/// in the browser, triage, snooze and a note from the keyboard, and a level-7 operator refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_16_the_header_line_turns_red_and_an_incident_is_triaged_from_the_keyboard() {
    let plane = plane_with(&[("CAPSTAN__INCIDENTS__AGENT_SILENT_SECS", "60")]).await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;

    // A node reports a case (a warning), then its agent falls silent (critical, 60 s on).
    let (agent, node) = plane.paired_agent("web-incidents").await;
    claim(&agent, carrying("disk_headroom", open_case(5, SAID))).await;
    let warning = wait_incident(
        &plane,
        node,
        "agent:disk_headroom",
        "the case's incident",
        |incident| incident["status"] == "open",
    )
    .await;
    let warning_id = warning["id"].as_i64().unwrap();

    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    browser.sign_in(&base, ada.name, &ada.password).await;

    // Amber: an incident needs you, none of them critical and happening. (The agent checks in
    // once more first, so its silence starts now, not at pairing.)
    claim(&agent, carrying("disk_headroom", open_case(5, SAID))).await;
    browser.goto(&format!("{base}/ui/")).await;
    assert_eq!(header_colour(&browser).await.as_deref(), Some("amber"));
    let line = browser.text("[data-test=incident-line]").await;
    assert!(line.contains("1 incident needs you"), "{line}");
    assert_eq!(browser.text("[data-test=nav-count]").await, "1");

    // The critical one: the agent has not checked in for the silence's length.
    let silent = wait_for(
        "the silent agent's incident",
        Duration::from_secs(240),
        || async {
            crate::incidents::incidents_of(&plane, node, "plane:agent_silent")
                .await
                .into_iter()
                .find(|incident| incident["status"] == "open")
        },
    )
    .await;
    let silent_id = silent["id"].as_i64().unwrap();
    assert_eq!(silent["severity"], "critical");

    // Red, on every page, naming no node.
    for page in ["/ui/", "/ui/account", &format!("/ui/nodes/{node}")] {
        browser.goto(&format!("{base}{page}")).await;
        assert_eq!(
            header_colour(&browser).await.as_deref(),
            Some("red"),
            "the header line on {page}"
        );
    }
    let line = browser.text("[data-test=incident-line]").await;
    assert!(line.contains("2 incidents need you"), "{line}");
    assert!(line.contains("2 still happening"), "{line}");
    assert!(
        !line.contains("web-incidents"),
        "IN-16: names no node: {line}"
    );
    // The node page's card has the same counts for the node.
    let card = browser.text("[data-test=node-incidents]").await;
    assert!(card.contains("2 need you"), "{card}");
    assert!(card.contains("2 still happening"), "{card}");

    // The list: views with counts, both rows, what the node said as text.
    browser.goto(&format!("{base}/ui/incidents")).await;
    assert_eq!(
        browser
            .text("[data-test=view-needs_you] [data-test=count]")
            .await,
        "2"
    );
    assert_eq!(
        browser.text("[data-test=view-all] [data-test=count]").await,
        "2"
    );
    let row = browser.text(&format!("#incident-{warning_id}")).await;
    assert!(row.contains(SAID), "IN-20: the node's words as text: {row}");
    browser.find(&format!("#incident-{silent_id}")).await;
    assert_eq!(
        browser.count("main a[href*='evil']").await,
        0,
        "IN-20: nothing a node said is a link"
    );
    assert_eq!(browser.count("main b").await, 0, "IN-20: nor markup");
    // The filters narrow the list to one type.
    browser
        .goto(&format!(
            "{base}/ui/incidents?view=all&source=plane%3Aagent_silent"
        ))
        .await;
    browser.find(&format!("#incident-{silent_id}")).await;
    assert_eq!(browser.count(&format!("#incident-{warning_id}")).await, 0);
    browser.goto(&format!("{base}/ui/incidents")).await;
    all_controls_reachable(&browser, "the incidents list").await;
    browser.screenshot("incidents").await;
    no_console_errors(&browser, "the incidents list").await;

    // The critical incident's page, from the list by the keyboard.
    assert!(
        browser
            .tab_to(&format!("#incident-{silent_id} a[data-test=incident-link]"))
            .await,
        "Tab reaches the incident's link"
    );
    browser.press_enter().await;
    browser
        .wait_path(&format!("/ui/incidents/{silent_id}"))
        .await;
    assert_eq!(timeline_kinds(&browser).await, ["opened"]);
    all_controls_reachable(&browser, "the incident page").await;
    browser.screenshot("incident").await;

    // Snooze it for a day from the keyboard (IN-18): it no longer needs you, so the line is
    // amber again (the warning still needs you).
    assert!(
        browser.tab_to("button[data-test=triage-snooze_24]").await,
        "Tab reaches Snooze 1 day"
    );
    browser.press_enter().await;
    wait_flash(&browser, "snoozed for 1 day").await;
    let triage = browser
        .find("[data-test=incident-triage]")
        .await
        .attr("data-triage")
        .await
        .unwrap();
    assert_eq!(triage.as_deref(), Some("snoozed"));
    assert_eq!(timeline_kinds(&browser).await, ["opened", "triage"]);
    assert_eq!(header_colour(&browser).await.as_deref(), Some("amber"));
    let api = detail(&plane, silent_id).await;
    assert_eq!(api["triage"], "snoozed");
    assert_eq!(api["needs_you"], false);

    // A note, typed and sent from the keyboard: on the timeline as text (IN-20).
    assert!(
        browser.tab_to("textarea[name=note]").await,
        "Tab reaches the note box"
    );
    type_text(&browser, NOTE).await;
    assert!(browser.tab_to("button[data-test=add-note]").await);
    browser.press_enter().await;
    wait_flash(&browser, "Your note is on the timeline").await;
    assert_eq!(timeline_kinds(&browser).await, ["opened", "triage", "note"]);
    assert_eq!(browser.text("[data-test=note]").await, NOTE);
    assert_eq!(browser.count("#injected").await, 0, "IN-20: no markup");
    assert_eq!(browser.count("main a[href*='evil']").await, 0);

    // Resolve it, then resolve it again: the second records nothing (IN-19).
    assert!(browser.tab_to("button[data-test=triage-resolved]").await);
    browser.press_enter().await;
    wait_flash(&browser, "is resolved").await;
    assert!(browser.tab_to("button[data-test=triage-resolved]").await);
    browser.press_enter().await;
    wait_flash(&browser, "nothing was recorded").await;
    assert_eq!(
        timeline_kinds(&browser).await,
        ["opened", "triage", "note", "triage"],
        "IN-19: the same triage records nothing"
    );
    // Resolved while the node is still silent: waiting for proof.
    let api = detail(&plane, silent_id).await;
    assert_eq!(api["view"], "waiting", "{api}");
    no_console_errors(&browser, "the incident page").await;

    // The incident page's evidence shows what the case said, as text.
    browser
        .goto(&format!("{base}/ui/incidents/{warning_id}"))
        .await;
    assert_eq!(browser.text("[data-test=evidence]").await, SAID);
    assert_eq!(browser.count("main a[href*='evil']").await, 0);

    // The bell: the critical opening told ada, a level-10 operator.
    browser.goto(&format!("{base}/ui/bell")).await;
    let bell = browser.text("main").await;
    assert!(bell.contains(silent["title"].as_str().unwrap()), "{bell}");

    // A silence, from its form (level 8), listed with who and why.
    browser
        .goto(&format!("{base}/ui/silences?node_id={node}"))
        .await;
    browser.fill("#silence-reason", "moving the disk").await;
    browser.click("button[data-test=create-silence]").await;
    wait_flash(&browser, "is silenced until").await;
    let silences = browser.text("main table").await;
    assert!(
        silences.contains("moving the disk") && silences.contains("ada"),
        "{silences}"
    );

    // A webhook: its secret shown once, on the answer to its creation only.
    browser.goto(&format!("{base}/ui/webhooks")).await;
    browser
        .fill("#webhook-url", "http://127.0.0.1:9/capstan")
        .await;
    browser.click("button[data-test=create-webhook]").await;
    let secret = browser.text("[data-test=webhook-secret]").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    browser.goto(&format!("{base}/ui/webhooks")).await;
    assert!(browser
        .text("main table")
        .await
        .contains("127.0.0.1:9/capstan"));
    assert_eq!(browser.count("[data-test=webhook-secret]").await, 0);
    // The delivery log is read (nothing was signalled since the webhook was added).
    browser.find("[data-test=no-deliveries]").await;
    let page = browser
        .run("return document.documentElement.outerHTML;")
        .await;
    assert!(
        !page.as_str().unwrap().contains(&secret),
        "the secret is shown once"
    );

    // The other pages: reachable controls and no console errors.
    for page in ["/ui/silences", "/ui/webhooks", "/ui/bell", "/ui/account"] {
        browser.goto(&format!("{base}{page}")).await;
        all_controls_reachable(&browser, page).await;
    }
    no_console_errors(&browser, "silences, webhooks, bell and account").await;

    // Narrow: nothing scrolls sideways on a phone-sized window.
    browser.client.set_window_size(390, 844).await.unwrap();
    for page in [
        "/ui/incidents?view=all".to_string(),
        format!("/ui/incidents/{silent_id}"),
        format!("/ui/incidents/{warning_id}"),
        format!("/ui/nodes/{node}"),
        "/ui/silences".to_string(),
        "/ui/webhooks".to_string(),
        "/ui/bell".to_string(),
        "/ui/account".to_string(),
    ] {
        browser.goto(&format!("{base}{page}")).await;
        assert!(
            browser.fits_width().await,
            "{page} scrolls sideways at 390 px"
        );
    }
    browser.goto(&format!("{base}/ui/incidents?view=all")).await;
    browser.screenshot("incidents-narrow").await;
    browser.client.set_window_size(1280, 900).await.unwrap();
    browser.close().await;

    // Level 7: the page without triage buttons or a note box, and the POST refused.
    let rita = plane.operator("rita").clone();
    let reader = driver.browser("rita").await;
    reader.sign_in(&base, rita.name, &rita.password).await;
    reader
        .goto(&format!("{base}/ui/incidents/{warning_id}"))
        .await;
    reader.find("[data-test=timeline]").await;
    assert_eq!(reader.count("button[data-test^=triage-]").await, 0);
    assert_eq!(reader.count("button[data-test=add-note]").await, 0);
    reader.goto(&format!("{base}/ui/incidents")).await;
    assert_eq!(reader.count("button[data-test=bulk-triage]").await, 0);
    assert_eq!(reader.count("input[name=id]").await, 0);
    for path in [
        format!("/ui/incidents/{warning_id}/triage"),
        format!("/ui/incidents/{warning_id}/notes"),
        "/ui/incidents/bulk-triage".to_string(),
    ] {
        let status = reader
            .client
            .execute_async(
                &format!(
                    "const done = arguments[arguments.length - 1];
                     const csrf = document.querySelector('input[name=csrf]').value;
                     const body = new URLSearchParams({{csrf, do: 'ignored', note: 'x', id: '{warning_id}'}});
                     fetch('{path}', {{method: 'POST', body, redirect: 'manual'}})
                         .then(response => done(response.status), error => done(String(error)));"
                ),
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(status, json!(403), "POST {path} as level 7");
    }
    let unchanged: Value = detail(&plane, warning_id).await;
    assert_eq!(unchanged["triage"], "new", "{unchanged}");
    assert_eq!(
        unchanged["timeline"].as_array().unwrap().len(),
        1,
        "{unchanged}"
    );
    reader.close().await;
    drop(agent);
    plane.stop().await;
}
