//! What the OpenAPI document says of each agent route (`agent.rs`'s rows): PROTOCOL.md's
//! endpoints, their bodies and answers written as JSON (they are the protocol's, not contract
//! types), and the refusals each gives.

use crate::api_doc::{refusals, Answer, Body, Doc, Parameter, Refusal};

pub const JOIN: Doc = Doc {
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
        Refusal::Said(409, "`already_joined`: the key is already approved."),
        refusals::AGENT_TOO_LARGE,
        refusals::AGENT_THROTTLED,
        refusals::AGENT_UNAVAILABLE,
    ],
};

pub const JOIN_STATUS: Doc = Doc {
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
};

pub const CLAIM: Doc = Doc {
    operation: "agent_claim",
    tag: "agent",
    summary: "Report in, and take the next job",
    description: None,
    parameters: &[Parameter::Query {
        name: "wait",
        description: "Seconds to hold the request open for a job (long poll).",
        schema: r##"{"default": 0, "maximum": 30, "minimum": 0, "type": "integer"}"##,
    }],
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
};

pub const RESULT: Doc = Doc {
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
        Refusal::Said(409, "`not_running`: the job is not running for this node."),
        refusals::AGENT_TOO_LARGE,
        refusals::AGENT_THROTTLED,
        refusals::AGENT_UNAVAILABLE,
    ],
};

pub const JOB_STATUS: Doc = Doc {
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
        Refusal::Said(404, "`not_found`: not this node's job."),
        refusals::AGENT_TOO_LARGE,
        refusals::AGENT_THROTTLED,
        refusals::AGENT_UNAVAILABLE,
    ],
};

pub const LEAVE: Doc = Doc {
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
};

pub const ARTIFACT: Doc = Doc {
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
        Refusal::Said(404, "`not_found`."),
        refusals::AGENT_TOO_LARGE,
        refusals::AGENT_THROTTLED,
        refusals::AGENT_UNAVAILABLE,
    ],
};

pub const BACKUP_URLS: Doc = Doc {
    operation: "agent_backup_urls",
    tag: "agent",
    summary: "Presigned storage URLs for a running backup job",
    description: Some(
        "The backups broker (docs/agent-protocol.md, BACKUPS-CONTRACT.md): \
        presigned URLs for the keys of a running backup job of this node. `put` only for a \
        running `backup_run`, only keys under its own seq that are not stored yet; `get` for \
        a running `verify_backup`, `restore_*` or `backup_run` (its previous runs), only this \
        node's runs. URLs expire in 10 minutes; a PUT must carry every header of `headers`.",
    ),
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
};

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
