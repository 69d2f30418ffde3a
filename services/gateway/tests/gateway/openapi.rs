//! The OpenAPI document covers exactly the route table, with each route's level; it is the one
//! the rows and the contract types generate (`CAPSTAN_WRITE_DOCS=1` rewrites it).

use capstan_events::rpc::Level;
use capstan_gateway::{
    openapi::{component_schemas, generate, undocumented, DOCUMENT},
    routes::ROUTES,
};
use serde_json::Value;
use std::collections::BTreeSet;

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("openapi.json is JSON")
}

#[test]
fn no_ui_route_is_in_the_api_document() {
    let document = document();
    for path in document["paths"].as_object().unwrap().keys() {
        assert!(!path.starts_with("/ui") && path != "/", "{path}");
    }
}

#[test]
fn the_document_covers_every_route_in_the_table_at_its_level_and_nothing_else() {
    let document = document();
    assert_eq!(document["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented.insert((method.to_uppercase(), path.clone()));
            let route = ROUTES
                .iter()
                .find(|route| route.path == path && route.method.as_ref() == method.to_uppercase());
            let route = route.unwrap_or_else(|| {
                panic!("{method} {path} is documented but not in the route table")
            });
            assert_eq!(
                operation["x-capstan-level"],
                route.access.as_json(),
                "{method} {path}: x-capstan-level"
            );
            let bearer = operation["security"]
                .as_array()
                .is_some_and(|security| !security.is_empty());
            assert_eq!(
                bearer,
                matches!(route.access, capstan_gateway::route::Access::Operator(_)),
                "{method} {path}: bearer security exactly on operator routes"
            );
        }
    }
    // The UI's routes are pages, not API: the document covers every other route.
    let table: BTreeSet<_> = ROUTES
        .iter()
        .filter(|route| !route.is_ui())
        .map(|route| (route.method.as_ref().to_string(), route.path.to_string()))
        .collect();
    let missing: Vec<_> = table.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "routes missing from openapi.json: {missing:?}"
    );
    assert_eq!(table, documented);
}

#[test]
fn every_api_row_says_what_the_document_says_of_it() {
    let missing = undocumented(&ROUTES);
    assert!(
        missing.is_empty(),
        "rows without a `.doc(...)`: {missing:?}"
    );
}

#[test]
fn the_document_is_the_one_the_rows_and_the_contract_types_generate() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = generate(&ROUTES);
    assert_eq!(
        generated["components"]["schemas"],
        Value::Object(component_schemas(&ROUTES))
    );
    if document() != generated {
        if std::env::var_os("CAPSTAN_WRITE_DOCS").is_some() {
            let mut text = serde_json::to_string_pretty(&generated).unwrap();
            text.push('\n');
            std::fs::write(&path, text).unwrap();
            return;
        }
        panic!(
            "services/gateway/openapi.json drifted from the route table's rows and the contract \
             types; run `CAPSTAN_WRITE_DOCS=1 cargo test -p capstan-gateway --test gateway openapi` and commit it"
        );
    }
}

#[test]
fn every_reference_in_the_document_resolves() {
    let document = document();
    let mut references = Vec::new();
    collect_references(&document, &mut references);
    assert!(!references.is_empty());
    for reference in references {
        let pointer = reference.strip_prefix('#').expect("local references only");
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} does not resolve"
        );
    }
}

fn collect_references(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                into.push(reference.clone());
            }
            map.values()
                .for_each(|value| collect_references(value, into));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|value| collect_references(value, into)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_the_document_to_a_level_7_operator() {
    let gateway = crate::harness::Gateway::start_alone().await;
    let token = gateway.token(Level::Read).await;
    let response = gateway
        .get("/api/v1/openapi.json", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/json"
    );
    assert_eq!(response.json::<Value>().await.unwrap(), document());
}

/// The listings' query parameters are documented exactly as the handlers read them (the same
/// lists refuse any other parameter with `400`).
#[test]
fn the_listings_document_exactly_the_query_parameters_they_take() {
    let document = document();
    for (path, taken) in [
        (
            "/api/v1/nodes",
            capstan_gateway::domains::agent_channel::api::NODE_LISTING,
        ),
        (
            "/api/v1/joins",
            capstan_gateway::domains::agent_channel::api::JOIN_LISTING,
        ),
    ] {
        let documented: BTreeSet<&str> = document["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{path} documents its parameters"))
            .iter()
            .map(|parameter| {
                assert_eq!(parameter["in"], "query", "{path}");
                parameter["name"].as_str().unwrap()
            })
            .collect();
        assert_eq!(documented, taken.iter().copied().collect(), "{path}");
    }
}

/// The document tells an operator which acts are audited: an API row's description says so
/// exactly when the row has an audit name.
#[test]
fn the_document_says_audited_exactly_of_the_acts_the_audit_log_names() {
    let mut acts = 0;
    for route in ROUTES.iter().filter(|route| !route.is_ui()) {
        let doc = route.doc.expect("every API row has a doc");
        let description = doc.description.unwrap_or_default();
        let says = description.contains("Audited") || description.contains("recorded as an act");
        assert_eq!(
            says,
            route.action.is_some(),
            "{} {}: {description:?}",
            route.method.as_ref(),
            route.path
        );
        acts += usize::from(says);
    }
    assert!(acts > 0);
}

/// Every query parameter a route documents is one its handler takes, and the other way round:
/// a parameter the route does not take is refused naming the ones it does, which must be the
/// documented ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_documents_exactly_the_query_parameters_its_handler_takes() {
    use capstan_gateway::api_doc::Parameter;
    let gateway = crate::harness::Gateway::start_alone().await;
    let token = gateway.token(Level::Admin).await;
    let mut checked = 0;
    for route in ROUTES.iter().filter(|route| {
        matches!(route.access, capstan_gateway::route::Access::Operator(_))
            && route.method.as_ref() == "GET"
    }) {
        let documented: BTreeSet<&str> = route
            .doc
            .expect("every API row has a doc")
            .parameters
            .iter()
            .filter_map(|parameter| match parameter {
                Parameter::Query { name, .. } => Some(*name),
                _ => None,
            })
            .collect();
        if documented.is_empty() {
            continue;
        }
        let path = route.path.replace("{id}", "1");
        let response = gateway
            .get(&format!("{path}?not_a_parameter=1"), &token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        let taken: BTreeSet<&str> = message
            .split_once("(it takes: ")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{path}: {message}"))
            .split(", ")
            .collect();
        assert_eq!(taken, documented, "{path}");
        checked += 1;
    }
    assert!(checked >= 5, "{checked}");
}
