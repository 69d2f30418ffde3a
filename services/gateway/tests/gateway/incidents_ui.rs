//! The incidents pages' forms against the fake incidents service: the bulk triage asks once per
//! selected incident as the operator and is audited as one act; bad input is refused naming
//! what was wrong and asks nothing (IN-17, IN-19).

use capstan_events::{
    incidents::rpc as ops,
    rpc::{Level, Rpc},
};

use crate::harness::Gateway;

/// The triage requests the fake was asked, in order.
fn triages(gateway: &Gateway) -> Vec<serde_json::Value> {
    gateway
        .script
        .lock()
        .unwrap()
        .asked
        .iter()
        .filter(|(op, _)| op == ops::TriageIncident::OP)
        .map(|(_, request)| request.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_17_a_bulk_triage_asks_for_each_selected_incident_and_is_audited_once() {
    let gateway = Gateway::start().await;
    let changer = gateway.signed_in(Level::Change).await;
    let page = changer
        .submit(
            "/ui/incidents/bulk-triage",
            &[
                ("id", "5"),
                ("id", "6"),
                ("id", "5"),
                ("do", "snooze_24"),
                ("back", "/ui/incidents?view=all&node_id=17"),
            ],
        )
        .await;
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location.as_deref(),
        Some("/ui/incidents?view=all&node_id=17")
    );
    let asked = triages(&gateway);
    assert_eq!(asked.len(), 2, "each selected incident once: {asked:?}");
    for (request, id) in asked.iter().zip([5, 6]) {
        assert_eq!(request["id"], id);
        assert_eq!(request["do"], "snooze_24");
        assert_eq!(request["actor"]["name"], changer.name.as_str());
        assert_eq!(request["actor"]["level"], 8);
    }
    let after = changer.get("/ui/incidents?view=all&node_id=17").await;
    assert!(
        after.has("2 incidents snoozed for 1 day."),
        "{}",
        after.body
    );
    let acts: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, outcome FROM audit_log WHERE action = 'triage_incidents' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    assert_eq!(acts, [("triage_incidents".to_string(), "ok".to_string())]);

    // Nothing selected, an unknown act, a row that is not a number, a list elsewhere: refused
    // in words, nothing asked, and back to the list.
    for (fields, words) in [
        (vec![("do", "ignored")], "select at least one incident"),
        (vec![("id", "5"), ("do", "later")], "choose what to do"),
        (
            vec![("id", "five"), ("do", "ignored")],
            "is not an incident number",
        ),
    ] {
        let mut fields = fields;
        fields.push(("back", "https://evil.example/"));
        let page = changer.submit("/ui/incidents/bulk-triage", &fields).await;
        assert_eq!(page.status, 303);
        assert_eq!(page.location.as_deref(), Some("/ui/incidents"));
        let after = changer.get("/ui/incidents").await;
        assert!(after.has(words), "{words}: {}", after.body);
    }
    assert_eq!(
        triages(&gateway).len(),
        2,
        "the refused forms asked nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_18_the_incident_page_offers_triage_at_8_and_only_reading_at_7() {
    let gateway = Gateway::start().await;
    let changer = gateway.signed_in(Level::Change).await;
    let page = changer.get("/ui/incidents/5").await;
    assert_eq!(page.status, 200);
    for act in [
        "resolved",
        "ignored",
        "new",
        "snooze_4",
        "snooze_24",
        "snooze_72",
        "snooze_168",
    ] {
        assert!(
            page.has(&format!("data-test=\"triage-{act}\"")),
            "{act}: {}",
            page.body
        );
    }
    assert!(page.has("data-test=\"add-note\""));
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/incidents/5").await;
    assert_eq!(page.status, 200);
    assert!(page.has("The agent has stopped checking in"));
    assert!(!page.has("data-test=\"triage-"), "{}", page.body);
    assert!(!page.has("data-test=\"add-note\""));
    let refused = reader
        .submit("/ui/incidents/5/triage", &[("do", "ignored")])
        .await;
    assert_eq!(refused.status, 403);
    assert!(triages(&gateway).is_empty());
}
