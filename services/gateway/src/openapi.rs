//! The OpenAPI 3.1 document of the gateway (`GET /api/v1/openapi.json`), kept as a file beside
//! the code. Its paths' prose is written by hand; its component schemas are generated from the
//! route table, each row naming the contract types it takes and answers, and a test fails when
//! either drifts from the code (`CAPSTAN_WRITE_DOCS=1` rewrites the schemas).

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use capstan_events::agent_channel::recipes::{ReportedCase, ReportedRecipe};
use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{Map, Value};

use crate::{error::ErrorBody, route::Route};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("../openapi.json");

pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

fn generator(settings: SchemaSettings) -> schemars::SchemaGenerator {
    settings
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        })
        .into_generator()
}

fn add<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// The schemas `components.schemas` must hold: what the routes of `table` answer (as
/// serialised) and the bodies they take (as parsed), each row naming its own types, with
/// everything they refer to; and the gateway's error body.
pub fn component_schemas(table: &[Route]) -> Map<String, Value> {
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    for answer in table.iter().filter_map(|route| route.answer) {
        answer(&mut answers);
    }
    add::<ErrorBody>(&mut answers);
    let mut bodies = generator(SchemaSettings::draft2020_12().for_deserialize());
    for body in table.iter().filter_map(|route| route.body) {
        body(&mut bodies);
    }
    // A claim's `recipes` entry and `cases` value (the agent route's body is written by hand
    // and refers to these).
    add::<ReportedRecipe>(&mut bodies);
    add::<ReportedCase>(&mut bodies);
    let mut schemas = answers.take_definitions(true);
    schemas.extend(bodies.take_definitions(true));
    schemas
}
