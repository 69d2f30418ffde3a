//! The agent routes (`POST /api/v1/agent/*`, PROTOCOL.md): the body is read under the
//! endpoint's cap ("a larger body is refused with `413 too_large` before it is read whole") and
//! forwarded byte for byte, with the request's path, query, signature headers and source
//! address, to the agent channel, which verifies the signature and answers. The gateway sends
//! that answer back as it is.

use crate::api_doc::{refusals, Answer, Body, Doc, Parameter, Refusal};
use crate::route::schema;
use axum::{
    extract::Request,
    http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use bytes::Bytes;
use capstan_events::{
    agent_channel::{
        rpc::{
            AgentEndpoint, AgentRequest, AgentResponse, ClaimsReleased, HandBack, HandedBack,
            ReleaseClaims, ReleasePoll, VetAgentRequest, Vetted,
        },
        wait,
    },
    Domain,
};
use futures::FutureExt;
use std::{future::Future, time::Duration};

use crate::{
    error::ApiError,
    identity::peer_address,
    input::read_limited,
    route::{Handler, Route},
    AppState,
};

/// Time beyond a claim's wait for the agent channel to answer.
pub const CLAIM_ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// Beyond the rpc timeout, for a claim whose `wait` the contract's rule refuses (unreadable or
/// out of 0..=30): the agent channel refuses it (`400`), and the gateway does not guess how long
/// it would have waited.
pub const UNREADABLE_WAIT_MARGIN: Duration = Duration::from_secs(30);

/// The row of an agent endpoint: signed per PROTOCOL.md and posted, answered by [`forward`].
macro_rules! endpoint {
    ($path:literal, $endpoint:ident) => {{
        const HANDLER: Handler = |filter| {
            axum::routing::on(
                filter,
                |axum::extract::State(state): axum::extract::State<AppState>, request: Request| {
                    forward(state, AgentEndpoint::$endpoint, request)
                },
            )
        };
        Route::agent($path, AgentEndpoint::$endpoint, HANDLER)
    }};
}

/// The agent channel's protocol endpoints, `POST /api/v1/agent/<endpoint>`.
pub const ROUTES: &[Route] = &[
    endpoint!("/api/v1/agent/join", Join)
    .doc(Doc {
        operation: "agent_join",
        tag: "agent",
        summary: "Ask to be admitted",
        description: Some("Signed by the key it introduces."),
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_JOIN_BODY),
        }),
        answer: Answer {
            status: 202,
            description: "Pending (or `rejected` for a key rejected within the last day).",
            content: Some(AGENT_JOIN_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            Refusal::Said(
                409,
                "`already_joined`: the key is already approved.",
            ),
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/join_status", JoinStatus)
    .doc(Doc {
        operation: "agent_join_status",
        tag: "agent",
        summary: "Has the ask been answered",
        description: Some("Signed by the pending key."),
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_JOIN_STATUS_BODY),
        }),
        answer: Answer {
            status: 200,
            description: "The join's state.",
            content: Some(AGENT_JOIN_STATUS_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/claim", Claim)
    .doc(Doc {
        operation: "agent_claim",
        tag: "agent",
        summary: "Report in, and take the next job",
        description: None,
        parameters: &[
            Parameter::Query {
                name: "wait",
                description: "Seconds to hold the request open for a job (long poll).",
                schema: r##"{"default": 0, "maximum": 30, "minimum": 0, "type": "integer"}"##,
            },
        ],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_CLAIM_BODY),
        }),
        answer: Answer {
            status: 200,
            description: "The next job, or none.",
            content: Some(AGENT_CLAIM_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/result", Result)
    .doc(Doc {
        operation: "agent_result",
        tag: "agent",
        summary: "Report how a job ended",
        description: None,
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_RESULT_BODY),
        }),
        answer: Answer {
            status: 200,
            description: "Acknowledged (again, for a repeat).",
            content: Some(AGENT_RESULT_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            Refusal::Said(
                409,
                "`not_running`: the job is not running for this node.",
            ),
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/job_status", JobStatus)
    .doc(Doc {
        operation: "agent_job_status",
        tag: "agent",
        summary: "Is this job still wanted",
        description: None,
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_JOB_STATUS_BODY),
        }),
        answer: Answer {
            status: 200,
            description: "The job's state.",
            content: Some(AGENT_JOB_STATUS_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            Refusal::Said(
                404,
                "`not_found`: not this node's job.",
            ),
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/leave", Leave)
    .doc(Doc {
        operation: "agent_leave",
        tag: "agent",
        summary: "End the pairing",
        description: None,
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(r##"{"type": "object"}"##),
        }),
        answer: Answer {
            status: 200,
            description: "The key is forgotten; later requests signed by it are `401 unknown_key`.",
            content: Some(r##"{"application/json": {"schema": {"type": "object"}}}"##),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/artifact", Artifact)
    .doc(Doc {
        operation: "agent_artifact",
        tag: "agent",
        summary: "Fetch a release artifact",
        description: Some("Names a kind, never a path."),
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_ARTIFACT_BODY),
        }),
        answer: Answer {
            status: 200,
            description: "The bytes, or for `manifest`, JSON.",
            content: Some(AGENT_ARTIFACT_ANSWER),
        },
        refusals: &[
            refusals::AGENT_INVALID,
            refusals::AGENT_UNSIGNED,
            Refusal::Said(
                404,
                "`not_found`.",
            ),
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            refusals::AGENT_UNAVAILABLE,
        ],
    }),
    endpoint!("/api/v1/agent/backup_urls", BackupUrls)
        .answer(schema::<capstan_events::backups::rpc::BackupUrlsAnswer>)
    .doc(Doc {
        operation: "agent_backup_urls",
        tag: "agent",
        summary: "Presigned storage URLs for a running backup job",
        description: Some("The backups broker (docs/agent-protocol.md, BACKUPS-CONTRACT.md): \
            presigned URLs for the keys of a running backup job of this node. `put` only for a \
            running `backup_run`, only keys under its own seq that are not stored yet; `get` for \
            a running `verify_backup`, `restore_*` or `backup_run` (its previous runs), only this \
            node's runs. URLs expire in 10 minutes; a PUT must carry every header of `headers`."),
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(AGENT_BACKUP_URLS_BODY),
        }),
        answer: Answer::new(200, "One URL per key, in key order."),
        refusals: &[
            Refusal::Said(
                400,
                "`invalid_request`: a key that is not `<seq>/<name>`, an op that is not put or \
                get, 0 or more than 64 keys.",
            ),
            refusals::AGENT_UNSIGNED,
            Refusal::Said(
                403,
                "`forbidden`: the job's word does not allow the op, or a PUT outside the job's \
                own seq.",
            ),
            Refusal::Said(
                404,
                "`not_found`: the job is not this node's or not running; a seq is not one of this \
                node's runs.",
            ),
            Refusal::Said(
                409,
                "`exists`: a key to write is stored already (no key is written twice).",
            ),
            refusals::AGENT_TOO_LARGE,
            refusals::AGENT_THROTTLED,
            Refusal::Said(
                503,
                "`unavailable`: the agent channel, the backups service or the storage did not \
                answer.",
            ),
        ],
    }),
];

/// The body of `POST /api/v1/agent/artifact`, for the OpenAPI document.
const AGENT_ARTIFACT_BODY: &str = r##"{
    "properties": {
        "arch": {
            "enum": [
                "linux-amd64",
                "linux-arm64"
            ],
            "type": "string"
        },
        "kind": {
            "enum": [
                "manifest",
                "binary",
                "support_bundle",
                "release_manifest",
                "release_file"
            ],
            "type": "string"
        },
        "sha256": {
            "type": "string"
        },
        "version": {
            "type": "string"
        }
    },
    "required": [
        "kind"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/artifact`, for the OpenAPI document.
const AGENT_ARTIFACT_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "type": "object"
        }
    },
    "application/octet-stream": {
        "schema": {
            "contentMediaType": "application/octet-stream",
            "type": "string"
        }
    }
}"##;

/// The body of `POST /api/v1/agent/backup_urls`, for the OpenAPI document.
const AGENT_BACKUP_URLS_BODY: &str = r##"{
    "properties": {
        "job_id": {
            "minimum": 1,
            "type": "integer"
        },
        "keys": {
            "items": {
                "pattern": "^[1-9][0-9]{0,15}/[a-z0-9][a-z0-9._-]{0,127}$",
                "type": "string"
            },
            "maxItems": 64,
            "minItems": 1,
            "type": "array"
        },
        "op": {
            "enum": [
                "put",
                "get"
            ],
            "type": "string"
        }
    },
    "required": [
        "job_id",
        "op",
        "keys"
    ],
    "type": "object"
}"##;

/// The body of `POST /api/v1/agent/claim`, for the OpenAPI document.
const AGENT_CLAIM_BODY: &str = r##"{
    "additionalProperties": true,
    "description": "A field the plane does not know is set aside and named in `ignored_fields`.",
    "properties": {
        "agent_version": {
            "examples": [
                "1.2.3"
            ],
            "type": "string"
        },
        "cases": {
            "additionalProperties": {
                "$ref": "#/components/schemas/ReportedCase"
            },
            "description": "Each source's most recent case, keyed by source (`recipe:<name>`); at most 64 KiB as JSON. Kept as sent in the node's `facts.cases`.",
            "propertyNames": {
                "pattern": "^recipe:[a-z][a-z0-9_]{0,63}$"
            },
            "type": "object"
        },
        "claim_bytes": {
            "type": "integer"
        },
        "container": {
            "type": [
                "string",
                "null"
            ]
        },
        "idle": {
            "type": "boolean"
        },
        "log_access": {
            "enum": [
                "on",
                "off"
            ],
            "type": "string"
        },
        "recipes": {
            "description": "Kept in the node's `facts.recipes`; an entry outside the closed sets is dropped.",
            "items": {
                "$ref": "#/components/schemas/ReportedRecipe"
            },
            "type": "array"
        },
        "site_root": {
            "description": "The root the node's `site.json` names (docs/agent-channel.md): it becomes the node's site root. Absent or null leaves the root the plane knows.",
            "type": [
                "string",
                "null"
            ]
        },
        "update_offered": {
            "type": "string"
        },
        "update_state": {
            "type": "string"
        },
        "vocabulary": {
            "items": {
                "type": "string"
            },
            "type": "array"
        }
    },
    "required": [
        "agent_version"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/claim`, for the OpenAPI document.
const AGENT_CLAIM_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "ignored_fields": {
                    "items": {
                        "type": "string"
                    },
                    "type": "array"
                },
                "job": {
                    "oneOf": [
                        {
                            "type": "null"
                        },
                        {
                            "properties": {
                                "budget_s": {
                                    "type": "integer"
                                },
                                "class": {
                                    "enum": [
                                        "read",
                                        "change",
                                        "destructive"
                                    ],
                                    "type": "string"
                                },
                                "id": {
                                    "type": "integer"
                                },
                                "params": {
                                    "type": "object"
                                },
                                "primitive": {
                                    "type": "string"
                                }
                            },
                            "type": "object"
                        }
                    ]
                }
            },
            "type": "object"
        }
    }
}"##;

/// The body of `POST /api/v1/agent/job_status`, for the OpenAPI document.
const AGENT_JOB_STATUS_BODY: &str = r##"{
    "properties": {
        "job_id": {
            "type": "integer"
        }
    },
    "required": [
        "job_id"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/job_status`, for the OpenAPI document.
const AGENT_JOB_STATUS_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "state": {
                    "enum": [
                        "pending",
                        "running",
                        "completed",
                        "failed",
                        "refused",
                        "lost",
                        "withdrawn"
                    ],
                    "type": "string"
                }
            },
            "type": "object"
        }
    }
}"##;

/// The body of `POST /api/v1/agent/join`, for the OpenAPI document.
const AGENT_JOIN_BODY: &str = r##"{
    "properties": {
        "addresses": {
            "items": {
                "description": "An IP literal.",
                "type": "string"
            },
            "maxItems": 16,
            "type": "array"
        },
        "agent_version": {
            "examples": [
                "1.2.3"
            ],
            "type": "string"
        },
        "container": {
            "type": [
                "string",
                "null"
            ]
        },
        "name": {
            "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$",
            "type": "string"
        },
        "public_key": {
            "description": "Standard base64 of the raw 32-byte Ed25519 public key.",
            "type": "string"
        },
        "site_root": {
            "type": [
                "string",
                "null"
            ]
        }
    },
    "required": [
        "name",
        "public_key",
        "agent_version",
        "addresses"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/join`, for the OpenAPI document.
const AGENT_JOIN_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "expires_at": {
                    "format": "date-time",
                    "type": "string"
                },
                "fingerprint": {
                    "type": "string"
                },
                "request_id": {
                    "format": "uuid",
                    "type": "string"
                },
                "state": {
                    "enum": [
                        "pending",
                        "rejected"
                    ],
                    "type": "string"
                }
            },
            "type": "object"
        }
    }
}"##;

/// The body of `POST /api/v1/agent/join_status`, for the OpenAPI document.
const AGENT_JOIN_STATUS_BODY: &str = r##"{
    "properties": {
        "request_id": {
            "format": "uuid",
            "type": "string"
        }
    },
    "required": [
        "request_id"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/join_status`, for the OpenAPI document.
const AGENT_JOIN_STATUS_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "node_id": {
                    "type": [
                        "integer",
                        "null"
                    ]
                },
                "state": {
                    "enum": [
                        "pending",
                        "approved",
                        "rejected",
                        "expired"
                    ],
                    "type": "string"
                }
            },
            "type": "object"
        }
    }
}"##;

/// The body of `POST /api/v1/agent/result`, for the OpenAPI document.
const AGENT_RESULT_BODY: &str = r##"{
    "properties": {
        "job_id": {
            "type": "integer"
        },
        "outcome": {
            "enum": [
                "completed",
                "failed",
                "refused"
            ],
            "type": "string"
        },
        "output": {
            "maxLength": 1048576,
            "type": "string"
        },
        "reason": {
            "type": [
                "string",
                "null"
            ]
        },
        "result": {
            "type": [
                "object",
                "null"
            ]
        }
    },
    "required": [
        "job_id",
        "outcome"
    ],
    "type": "object"
}"##;

/// The answer of `POST /api/v1/agent/result`, for the OpenAPI document.
const AGENT_RESULT_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "ack": {
                    "type": "boolean"
                }
            },
            "type": "object"
        }
    }
}"##;

const CONTENT_DIGEST: HeaderName = HeaderName::from_static("content-digest");
const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
const SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// Answers one agent request: the agent channel's answer, or the gateway's refusal. Not an
/// `async fn`, which would hold its arguments a second time beside `ask`'s future for as long as
/// a long poll waits.
pub fn forward(
    state: AppState,
    endpoint: AgentEndpoint,
    request: Request,
) -> impl Future<Output = Response> {
    ask(state, endpoint, request).map(|answer| answer.unwrap_or_else(IntoResponse::into_response))
}

async fn ask(
    state: AppState,
    endpoint: AgentEndpoint,
    request: Request,
) -> Result<Response, ApiError> {
    // A body hyper would read (not read already by `crate::connection`) of unknown or large
    // length is read only once the agent channel has heard the request's head.
    if request.extensions().get::<ReadHere>().is_none() && vetted_first(request.headers()) {
        let source = peer_address(&request);
        let vetting = vet(
            state.clone(),
            endpoint,
            request.uri(),
            request.headers(),
            source,
        );
        if let Some(refusal) = Box::pin(vetting).await {
            return Ok(refusal);
        }
    }
    // Boxed, as the question below: this future is as large as its largest state, and a long
    // poll holds it for its whole wait, so no state of it holds either inline.
    let (mut meta, body, timeout) =
        Box::pin(question(endpoint, request, state.rpc_timeout)).await?;
    meta.gateway = Some(state.long_polls().gateway);
    let long_poll =
        endpoint == AgentEndpoint::Claim && wait::wait_of(meta.query.as_deref()) != Ok(0);
    let poll = meta.poll;
    let asked = state
        .bus
        .ask_with_body(&meta, body, timeout + GIVE_UP_SLACK);
    // Written out already: a long poll waits without it.
    drop(meta);
    // The gateway's own deadline, so it knows when it gave up on a claim (the bus's is a
    // moment later and never the one that ends the wait). Boxed, with what giving up needs.
    let shared = &state;
    let mut asking = Box::pin(async move {
        match tokio::time::timeout(timeout, asked).await {
            Ok(answered) => answered.map_err(ApiError::from),
            Err(_) => Err(Box::pin(give_up(shared, endpoint, poll, timeout)).await),
        }
    });
    if !long_poll {
        let (answer, bytes) = asking.await?;
        return respond(endpoint, answer, bytes);
    }
    let stopping = &state.long_polls().stopping;
    let (answer, bytes) = tokio::select! {
        answered = &mut asking => answered?,
        _ = stopping.cancelled() => {
            // The agent channel ends a released claim at once with its own answer (or the job
            // it was handing out just then); past a moment, the agent gets an empty claim here.
            match tokio::time::timeout(RELEASE_GRACE, asking).await {
                Ok(answered) => answered?,
                Err(_) => return Ok(empty_claim()),
            }
        }
    };
    respond(endpoint, answer, bytes)
}

/// Beyond a request's own deadline, the bus's (which the gateway's always passes first).
const GIVE_UP_SLACK: Duration = Duration::from_secs(1);

/// The agent channel did not answer within `timeout`: the agent is answered `503` here. For a
/// claim, the agent channel is told to release it (`release_poll`, its `poll` id), since
/// nothing it answers now reaches the agent: a long poll still held ends without a job, and a
/// job already handed to it goes back to `pending`. Counted in
/// `capstan_gateway_claims_given_up_total`.
async fn give_up(
    state: &AppState,
    endpoint: AgentEndpoint,
    poll: Option<uuid::Uuid>,
    timeout: Duration,
) -> ApiError {
    if endpoint == AgentEndpoint::Claim {
        metrics::counter!("capstan_gateway_claims_given_up_total").increment(1);
        if let Some(poll) = poll {
            tracing::warn!(%poll, ?timeout, "gave up waiting for a claim's answer; releasing it");
            release_poll(state, poll).await;
        }
    }
    ApiError::from(capstan_events::rpc::RpcError::new(
        capstan_events::rpc::ErrorCode::Unavailable,
        format!(
            "{} did not answer {} within {timeout:?}",
            Domain::AgentChannel,
            <AgentRequest as capstan_events::rpc::Rpc>::OP
        ),
    ))
}

/// How long a stopping gateway waits for the agent channel to answer a released long poll.
pub const RELEASE_GRACE: Duration = Duration::from_millis(500);
/// How long a stopping gateway waits for the agent channel to take its release.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// A claim answered with no job, as the agent channel answers one whose wait ran out.
fn empty_claim() -> Response {
    (
        StatusCode::OK,
        Json(serde_json::json!({"job": null, "ignored_fields": []})),
    )
        .into_response()
}

/// As the gateway stops: answers its open long polls (each waits at most [`RELEASE_GRACE`] more)
/// and asks every agent-channel replica to release the claims it holds for them, so none is
/// handed a job nobody would take to its agent.
pub async fn release(state: &AppState) {
    let long_polls = state.long_polls();
    long_polls.stopping.cancel();
    let asked: Result<ClaimsReleased, _> = state
        .bus
        .ask(
            &ReleaseClaims {
                gateway: long_polls.gateway,
            },
            RELEASE_TIMEOUT,
        )
        .await;
    match asked {
        Ok(answer) => tracing::info!(
            gateway = %long_polls.gateway,
            released = answer.released,
            "long polls released"
        ),
        Err(error) => {
            tracing::warn!(%error, "the agent channel did not take the release of this gateway's long polls")
        }
    }
}

/// A body longer than this is read only after `vet_agent_request` (docs/security.md, "The
/// gateway's connections"): a stranger's large body is refused before it is read or stored.
pub const VET_ABOVE: usize = 16 * 1024;

/// On an agent request read by [`crate::connection`]: its body is read (and was vetted there
/// when large), and a claim's `poll` names it, to release it alone when its agent hangs up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHere {
    pub poll: Option<uuid::Uuid>,
}

/// Whether a request's body must be vetted before hyper reads it: its length is unknown
/// (chunked) or over [`VET_ABOVE`].
fn vetted_first(headers: &HeaderMap) -> bool {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    match declared {
        Some(length) => length > VET_ABOVE as u64,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// Asks the agent channel whether `request` (its head alone) would be refused whatever its
/// body: its `401`/`429` answer, or `None` to read the body. When the agent channel cannot say,
/// the request is refused `503` rather than read.
pub(crate) async fn vet(
    state: AppState,
    endpoint: AgentEndpoint,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    source: Option<std::net::IpAddr>,
) -> Option<Response> {
    let source = source?;
    let question = VetAgentRequest {
        request: AgentRequest {
            endpoint,
            path: uri.path().to_string(),
            query: uri.query().map(str::to_string),
            content_digest: field(headers, &CONTENT_DIGEST),
            signature_input: field(headers, &SIGNATURE_INPUT),
            signature: field(headers, &SIGNATURE),
            source_address: source.to_string(),
            gateway: None,
            poll: None,
        },
    };
    let asked: Result<Vetted, _> = state.bus.ask(&question, state.rpc_timeout).await;
    match asked {
        Ok(Vetted { refusal: None }) => None,
        Ok(Vetted {
            refusal: Some(answer),
        }) => Some(
            respond(endpoint, answer, Bytes::new()).unwrap_or_else(IntoResponse::into_response),
        ),
        Err(error) => Some(ApiError::from(error).into_response()),
    }
}

/// Releases one claim whose answer will reach no agent (its agent hung up while it was held, or
/// the gateway gave up waiting for it): the agent-channel replica holding it ends it at once,
/// without a job, and a job it had handed out already goes back to `pending` there. Whether the
/// agent channel took the release.
pub(crate) async fn release_poll(state: &AppState, poll: uuid::Uuid) -> bool {
    let asked: Result<ClaimsReleased, _> =
        state.bus.ask(&ReleasePoll { poll }, RELEASE_TIMEOUT).await;
    if let Err(error) = &asked {
        tracing::warn!(%error, %poll, "the agent channel did not take the release of a claim");
    }
    asked.is_ok()
}

/// A claim's answer that was never written to its agent: a job in it goes back to `pending`
/// (PROTOCOL.md: a job is handed out once; this one never reached the node).
pub(crate) async fn hand_back_unwritten(state: &AppState, response: Response) {
    if !response.status().is_success() {
        return;
    }
    let Ok(body) = axum::body::to_bytes(response.into_body(), usize::MAX).await else {
        return;
    };
    let Some(job_id) = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|answer| answer["job"]["id"].as_i64())
    else {
        return;
    };
    let asked: Result<HandedBack, _> = state.bus.ask(&HandBack { job_id }, state.rpc_timeout).await;
    match asked {
        Ok(HandedBack { returned }) => {
            tracing::info!(job_id, returned, "a claim's answer never reached its agent")
        }
        Err(error) => {
            tracing::warn!(%error, job_id, "a job whose answer never reached its agent could not be handed back")
        }
    }
}

/// The question for the agent channel: the request's path, query, signature headers and source
/// address, its body read under the endpoint's cap, and how long to wait for the answer.
async fn question(
    endpoint: AgentEndpoint,
    request: Request,
    usual_timeout: Duration,
) -> Result<(AgentRequest, Bytes, Duration), ApiError> {
    let source = peer_address(&request)
        .ok_or_else(|| ApiError::internal("the gateway does not know the caller's address"))?;
    // A claim's own id, for its release: the one `crate::connection` drew, else a new one.
    let poll = request
        .extensions()
        .get::<ReadHere>()
        .and_then(|read| read.poll)
        .or_else(|| (endpoint == AgentEndpoint::Claim).then(uuid::Uuid::now_v7));
    let (parts, body) = request.into_parts();
    let body = read_limited(&parts.headers, body, endpoint.body_limit()).await?;
    let query = parts.uri.query().map(str::to_string);
    let timeout = rpc_timeout(endpoint, query.as_deref(), usual_timeout);
    // Taken out of the request's head, which is let go before the answer is awaited: its URI
    // and header values are slices of the connection's read buffer, which hyper would otherwise
    // have to keep beside a second one while a long poll waits.
    let meta = AgentRequest {
        endpoint,
        path: parts.uri.path().to_string(),
        query,
        content_digest: field(&parts.headers, &CONTENT_DIGEST),
        signature_input: field(&parts.headers, &SIGNATURE_INPUT),
        signature: field(&parts.headers, &SIGNATURE),
        source_address: source.to_string(),
        gateway: None,
        poll,
    };
    Ok((meta, body, timeout))
}

/// A header's value as the agent sent it; several lines of one field are joined with `, `
/// (RFC 9110 §5.3), and a value that is not visible ASCII is treated as absent (the agent
/// channel then answers `missing_signature`).
fn field(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().ok())
        .collect::<Option<_>>()?;
    (!values.is_empty()).then(|| values.join(", "))
}

/// How long to wait for the agent channel: a claim is held open for its `wait` (clamped to
/// 0..=30 s) and then answered, so it gets that plus a margin; every other request the usual
/// rpc timeout.
pub fn rpc_timeout(endpoint: AgentEndpoint, query: Option<&str>, usual: Duration) -> Duration {
    if endpoint == AgentEndpoint::Artifact {
        // A binary is megabytes, through the object store twice (rollouts, the agent channel).
        return usual.max(ARTIFACT_TIMEOUT);
    }
    if endpoint != AgentEndpoint::Claim {
        return usual;
    }
    match wait::wait_of(query) {
        Ok(wait) => (Duration::from_secs(wait) + CLAIM_ANSWER_MARGIN).max(usual),
        Err(_) => usual + UNREADABLE_WAIT_MARGIN,
    }
}

/// How long an `artifact` request may take to be answered.
const ARTIFACT_TIMEOUT: Duration = Duration::from_secs(120);

/// The agent channel's answer as HTTP: its status and JSON body, `Retry-After` when it set
/// one, and for an artifact with bytes, the bytes.
fn respond(
    endpoint: AgentEndpoint,
    answer: AgentResponse,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let status = StatusCode::from_u16(answer.status)
        .ok()
        .filter(|status| !status.is_informational())
        .ok_or_else(|| {
            ApiError::internal(format!(
                "the agent channel answered status {}",
                answer.status
            ))
        })?;
    let mut response = if endpoint == AgentEndpoint::Artifact && !bytes.is_empty() {
        (
            status,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response()
    } else {
        (status, Json(answer.body)).into_response()
    };
    if let Some(seconds) = answer.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USUAL: Duration = Duration::from_secs(5);

    #[test]
    fn a_claim_waits_its_wait_plus_a_margin_and_others_the_usual_timeout() {
        let claim = |query| rpc_timeout(AgentEndpoint::Claim, query, USUAL);
        assert_eq!(claim(Some("wait=20")), Duration::from_secs(25));
        assert_eq!(claim(Some("x=1&wait=99")), Duration::from_secs(35));
        // Refused by the agent channel at once (the contract's one rule, never clamped): the
        // gateway does not guess a wait for it.
        assert_eq!(claim(Some("wait=-4")), Duration::from_secs(35));
        assert_eq!(claim(Some("wait=0")), USUAL);
        assert_eq!(claim(None), USUAL);
        assert_eq!(claim(Some("wait=soon")), Duration::from_secs(35));
        assert_eq!(
            rpc_timeout(AgentEndpoint::Result, Some("wait=20"), USUAL),
            USUAL
        );
        assert_eq!(
            rpc_timeout(AgentEndpoint::Artifact, None, USUAL),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn repeated_signature_fields_are_joined_and_absent_ones_are_none() {
        let mut headers = HeaderMap::new();
        assert_eq!(field(&headers, &SIGNATURE), None);
        headers.append(SIGNATURE, HeaderValue::from_static("a=:x:"));
        headers.append(SIGNATURE, HeaderValue::from_static("b=:y:"));
        assert_eq!(field(&headers, &SIGNATURE).as_deref(), Some("a=:x:, b=:y:"));
    }

    // Every agent in a fleet holds one of these for as long as its long poll waits, so at
    // thousands of agents each byte counts thousands of times. It was 4.2 KiB while the state
    // was 800 bytes copied by value and the question's meta was kept beside it, then about
    // 2 KiB while the rpc question was held inline (for the short requests' sake); boxed like
    // the question before it, it is under 1 KiB (debug build), the question's future apart.
    // And the span and metric around it (`http::answer_agent`) hold it once: as an `async fn`
    // taking it as an argument, they held it twice.
    #[tokio::test]
    async fn an_agents_request_holds_little_while_it_waits() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let state = AppState::from(crate::Shared {
            bus: capstan_bus::Bus::connect("nats://127.0.0.1:1", "sizes")
                .await
                .unwrap(),
            store: capstan_store::Store::connect(database.url(), "gateway", 1)
                .await
                .unwrap(),
            rpc_timeout: USUAL,
            metrics: capstan_telemetry::metrics(None).unwrap(),
            client_addresses: Default::default(),
        });
        assert_eq!(std::mem::size_of::<AppState>(), 8);
        let request = Request::new(axum::body::Body::from("{}"));
        let waiting = forward(state.clone(), AgentEndpoint::Claim, request);
        let size = std::mem::size_of_val(&waiting);
        assert!(size <= 1024, "an agent's request holds {size} bytes");
        let route = crate::routes::ROUTES
            .iter()
            .find(|route| route.path == "/api/v1/agent/claim")
            .expect("the claim's route");
        let request = Request::new(axum::body::Body::from("{}"));
        let traced = crate::http::answer_agent(state, route, AgentEndpoint::Claim, request);
        let whole = std::mem::size_of_val(&traced);
        assert!(
            whole <= size + 256,
            "an agent's request in its span holds {whole} bytes for {size} of its own"
        );
    }
}
