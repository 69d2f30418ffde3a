//! The OpenAPI 3.1 document of the gateway (`GET /api/v1/openapi.json`), generated from the
//! route table and kept as a file beside the code. Each row says what its path entry needs
//! (`route.doc`: summary, description, parameters, answer, refusals; `api_doc.rs`) and names the
//! contract types it takes and answers, whose schemas become `components.schemas`; what is the
//! gateway's as a whole (its info, tags, shared parameters and refusals) is [`FRAME`]. A test
//! fails when the file drifts from the code (`CAPSTAN_WRITE_DOCS=1` rewrites it).

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use capstan_events::agent_channel::recipes::{ReportedCase, ReportedRecipe};
use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{json, Map, Value};

use crate::{
    api_doc::{Answer, Body, Doc, Parameter, Refusal},
    error::ErrorBody,
    route::{Access, Route},
};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("../openapi.json");

pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

/// What the document holds beside the rows' paths and the contract types' schemas.
pub const FRAME: &str = r##"{
  "components": {
    "parameters": {
      "JobId": {
        "description": "The job's id.",
        "in": "path",
        "name": "id",
        "required": true,
        "schema": {
          "format": "int64",
          "minimum": 1,
          "type": "integer"
        }
      },
      "JoinId": {
        "description": "The join request's id.",
        "in": "path",
        "name": "id",
        "required": true,
        "schema": {
          "format": "uuid",
          "type": "string"
        }
      },
      "NodeId": {
        "description": "The node's id.",
        "in": "path",
        "name": "id",
        "required": true,
        "schema": {
          "format": "int64",
          "minimum": 1,
          "type": "integer"
        }
      }
    },
    "responses": {
      "BadRequest": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`invalid_request`: a path id, query value or body field is wrong; the message names it."
      },
      "Conflict": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`conflict` or `already_exists`: the thing is not in a state that allows this."
      },
      "Forbidden": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`forbidden`: the operator's level is below the route's (or, for a job, below its primitive's class)."
      },
      "Internal": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`internal`: something failed inside the plane; the message says what."
      },
      "NotFound": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`not_found`: no such join, node or job."
      },
      "TooLarge": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`too_large`: the body is over the route's cap."
      },
      "TooManyRequests": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "Asked too often (`rate_limited`); the message names the limit."
      },
      "Unauthorized": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`unauthorized`: no bearer token, or one that is unknown or revoked."
      },
      "Unavailable": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`unavailable`: the agent channel did not answer in time."
      },
      "Unprocessable": {
        "content": {
          "application/json": {
            "schema": {
              "$ref": "#/components/schemas/ErrorBody"
            }
          }
        },
        "description": "`refused`, `needs_newer_agent` or `not_paired`: the agent channel refuses the act, saying why."
      }
    },
    "securitySchemes": {
      "bearer": {
        "description": "An operator API token, `cap_...`.",
        "scheme": "bearer",
        "type": "http"
      }
    }
  },
  "info": {
    "description": "The operator JSON API and, as documentation, the agent channel (PROTOCOL.md). Operator routes take `Authorization: Bearer <token>` (`capstan admin create-operator` issues one) and need the level in `x-capstan-level`: 7 reads and runs read jobs, 8 changes, 10 trust-changing acts. Every error is `{\"error\": {\"code\", \"message\"}}`; an unknown route is `404 not_found`.",
    "title": "Capstan gateway",
    "version": "1"
  },
  "openapi": "3.1.0",
  "security": [
    {
      "bearer": []
    }
  ],
  "servers": [
    {
      "url": "/"
    }
  ],
  "tags": [
    {
      "name": "joins"
    },
    {
      "name": "nodes"
    },
    {
      "name": "jobs"
    },
    {
      "description": "Used by `capstan-agent`; signed per PROTOCOL.md, never by a bearer token.",
      "name": "agent"
    },
    {
      "name": "probes"
    },
    {
      "name": "meta"
    },
    {
      "description": "Uptime and served-certificate checks.",
      "name": "monitor"
    },
    {
      "description": "Staged rollouts of site releases and patch runs",
      "name": "rollouts"
    },
    {
      "description": "Backup targets and the broker (docs/backups.md).",
      "name": "backups"
    },
    {
      "description": "The machines inventory, adopting cloud servers, and Docker hosts (docs/provisioning.md).",
      "name": "machines"
    }
  ]
}"##;

/// The headers every agent request is signed with (PROTOCOL.md; RFC 9421, RFC 9530).
const SIGNATURE_HEADERS: &str = r##"[
  {"description": "`sha-256=:<base64 SHA-256 of the exact body>:` (RFC 9530).", "in": "header", "name": "Content-Digest", "required": true, "schema": {"type": "string"}},
  {"description": "`sig1=(\"@method\" \"@path\" \"content-digest\");created=...;nonce=\"...\";keyid=\"SHA256:...\";alg=\"ed25519\"` (RFC 9421).", "in": "header", "name": "Signature-Input", "required": true, "schema": {"type": "string"}},
  {"description": "`sig1=:<base64 Ed25519 signature>:` (RFC 9421).", "in": "header", "name": "Signature", "required": true, "schema": {"type": "string"}}
]"##;

fn generator(settings: SchemaSettings) -> schemars::SchemaGenerator {
    settings
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        })
        .into_generator()
}

fn answers_generator() -> schemars::SchemaGenerator {
    generator(SchemaSettings::draft2020_12().for_serialize())
}

fn bodies_generator() -> schemars::SchemaGenerator {
    generator(SchemaSettings::draft2020_12().for_deserialize())
}

fn add<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// The schemas `components.schemas` must hold: what the routes of `table` answer (as
/// serialised) and the bodies they take (as parsed), each row naming its own types, with
/// everything they refer to; and the gateway's error body.
pub fn component_schemas(table: &[Route]) -> Map<String, Value> {
    let mut answers = answers_generator();
    for answer in table.iter().filter_map(|route| route.answer) {
        answer(&mut answers);
    }
    add::<ErrorBody>(&mut answers);
    let mut bodies = bodies_generator();
    for body in table.iter().filter_map(|route| route.body) {
        body(&mut bodies);
    }
    // A claim's `recipes` entry and `cases` value (the agent route's body is written as JSON
    // in its row and refers to these).
    add::<ReportedRecipe>(&mut bodies);
    add::<ReportedCase>(&mut bodies);
    let mut schemas = answers.take_definitions(true);
    schemas.extend(bodies.take_definitions(true));
    schemas
}

/// The rows of `table` the document must cover (every one but the UI's) that say nothing of
/// themselves, as `GET /path`.
pub fn undocumented(table: &[Route]) -> Vec<String> {
    table
        .iter()
        .filter(|route| !route.is_ui() && route.doc.is_none())
        .map(|route| format!("{} {}", route.method.as_ref(), route.path))
        .collect()
}

/// The whole document of `table`: the frame, a path entry for each documented row and the
/// component schemas. JSON text in a row that does not read is a programming error, named.
pub fn generate(table: &[Route]) -> Value {
    let mut document: Value = serde_json::from_str(FRAME).expect("the frame is JSON");
    let mut paths = Map::new();
    for route in table.iter().filter(|route| !route.is_ui()) {
        let Some(doc) = route.doc else { continue };
        let item = paths
            .entry(route.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method.as_ref().to_ascii_lowercase()] = operation(route, &doc);
    }
    document["paths"] = Value::Object(paths);
    document["components"]["schemas"] = Value::Object(component_schemas(table));
    document
}

/// `text`, JSON written in a row, read.
fn parsed(text: &str, route: &Route) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| {
        panic!(
            "{} {}: the JSON in its row does not read: {error}",
            route.method.as_ref(),
            route.path
        )
    })
}

fn operation(route: &Route, doc: &Doc) -> Value {
    let mut operation = Map::new();
    operation.insert("operationId".into(), doc.operation.into());
    operation.insert("summary".into(), doc.summary.into());
    if let Some(description) = description(route, doc) {
        operation.insert("description".into(), description.into());
    }
    operation.insert("tags".into(), json!([doc.tag]));
    let mut parameters: Vec<Value> = doc
        .parameters
        .iter()
        .map(|parameter| parameter_of(*parameter, route))
        .collect();
    if route.access == Access::AgentSigned {
        parameters.extend(
            parsed(SIGNATURE_HEADERS, route)
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    if !parameters.is_empty() {
        operation.insert("parameters".into(), Value::Array(parameters));
    }
    if let Some(body) = request_body(route, doc.body) {
        operation.insert("requestBody".into(), body);
    }
    let mut responses = Map::new();
    responses.insert(doc.answer.status.to_string(), answer_of(route, doc.answer));
    for refusal in doc.refusals {
        responses.insert(refusal.status().to_string(), refusal_of(*refusal, route));
    }
    operation.insert("responses".into(), Value::Object(responses));
    let security = match route.access {
        Access::Operator(_) => json!([{"bearer": []}]),
        _ => json!([]),
    };
    operation.insert("security".into(), security);
    operation.insert("x-capstan-level".into(), route.access.as_json());
    if route.access == Access::AgentSigned {
        operation.insert("x-capstan-security".into(), "signed per PROTOCOL.md".into());
    }
    Value::Object(operation)
}

/// The row's description; an agent route's ends with how it is signed and its body's cap,
/// from the endpoint it is (`AgentEndpoint::body_limit`), so the document and the cap agree.
fn description(route: &Route, doc: &Doc) -> Option<String> {
    let Some(endpoint) = route.endpoint else {
        return doc.description.map(str::to_string);
    };
    let signed = format!(
        "Signed per PROTOCOL.md; the body is at most {} bytes (`413 too_large` above, refused \
         before it is read whole).",
        endpoint.body_limit()
    );
    Some(match doc.description {
        Some(description) => format!("{description} {signed}"),
        None => signed,
    })
}

fn parameter_of(parameter: Parameter, route: &Route) -> Value {
    match parameter {
        Parameter::Shared(name) => json!({"$ref": format!("#/components/parameters/{name}")}),
        Parameter::Id(description) => json!({
            "description": description,
            "in": "path",
            "name": "id",
            "required": true,
            "schema": {"minimum": 1, "type": "integer"},
        }),
        Parameter::TextId {
            description,
            schema,
        } => json!({
            "description": description,
            "in": "path",
            "name": "id",
            "required": true,
            "schema": parsed(schema, route),
        }),
        Parameter::Query {
            name,
            description,
            schema,
        } => json!({
            "description": description,
            "in": "query",
            "name": name,
            "required": false,
            "schema": parsed(schema, route),
        }),
    }
}

/// The row's body type (or the schema its doc writes), with what its doc says of it.
fn request_body(route: &Route, body: Option<Body>) -> Option<Value> {
    let schema = match (route.body, body.and_then(|body| body.schema)) {
        (Some(body), _) => Value::from(body(&mut bodies_generator())),
        (None, Some(schema)) => parsed(schema, route),
        (None, None) => return None,
    };
    let mut request = Map::new();
    request.insert(
        "content".into(),
        json!({"application/json": {"schema": schema}}),
    );
    if let Some(description) = body.and_then(|body| body.description) {
        request.insert("description".into(), description.into());
    }
    let required = body.is_none_or(|body| body.required);
    request.insert("required".into(), required.into());
    Some(Value::Object(request))
}

fn answer_of(route: &Route, answer: Answer) -> Value {
    let content = match (answer.content, route.answer) {
        (Some(content), _) => parsed(content, route),
        (None, Some(answer)) => {
            json!({"application/json": {"schema": Value::from(answer(&mut answers_generator()))}})
        }
        (None, None) => panic!(
            "{} {}: its answer has neither a type nor content",
            route.method.as_ref(),
            route.path
        ),
    };
    json!({"content": content, "description": answer.description})
}

fn refusal_of(refusal: Refusal, route: &Route) -> Value {
    let error_body =
        json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}});
    match refusal {
        Refusal::Shared(_, name) => json!({"$ref": format!("#/components/responses/{name}")}),
        Refusal::Said(_, description) => json!({"content": error_body, "description": description}),
        Refusal::RetryAfter(_, description) => json!({
            "content": error_body,
            "description": description,
            "headers": {"Retry-After": {
                "description": "Seconds to wait.",
                "schema": {"minimum": 0, "type": "integer"},
            }},
        }),
        Refusal::Other {
            description,
            content,
            ..
        } => json!({"content": parsed(content, route), "description": description}),
    }
}
