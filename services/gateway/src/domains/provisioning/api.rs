//! `/api/v1/provisioning` (issue 29): our cloud accounts (level 10; the token is write-only:
//! sealed by the service, never answered, never in the audit log) and what each sells, and
//! provisions: read at level 7, asked for and retried at 10. Provisioning owns every rule; the
//! handlers read the body into the contract's words, naming a field that is wrong, and ask.

use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use capstan_events::provisioning::{
    provisions::{
        GetProvision, ListProvisions, ProvisionView, Provisions, RequestProvision, RetryProvision,
    },
    rpc::{AccountOffer, AccountView, Accounts, AddAccount, DeleteAccount, ListAccounts, Offer},
    AccountFlag, CloudProvider, InstallKind,
};
use capstan_events::rpc::Level::{Admin, Read};
use capstan_events::Word as _;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use crate::api_doc::{refusals, Answer, Doc, Parameter, Refusal};
use crate::route::schema;
use crate::{
    ask::ask,
    error::ApiError,
    identity::{AuditDetail, Operator},
    input::{JsonBody, PathId, QueryParams},
    route::{Method, Route},
    AppState,
};

/// The query parameters of `GET /api/v1/provisioning/provisions`.
const PROVISION_LISTING: &[&str] = &["flag", "in_flight"];

/// An act the provider is asked about: refused when it refuses (a token, a size the region
/// does not sell: 422), busy (429) or silent (503).
const PROVIDER_ASKED: &[Refusal] = &[
    refusals::BAD_REQUEST,
    refusals::UNAUTHORIZED,
    refusals::FORBIDDEN,
    refusals::NOT_FOUND,
    refusals::CONFLICT,
    refusals::UNPROCESSABLE,
    refusals::TOO_MANY_REQUESTS,
    refusals::INTERNAL,
    refusals::UNAVAILABLE,
];

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/provisioning/accounts",
        Admin,
        |filter| on(filter, list_accounts),
        None,
    )
    .answer(schema::<Accounts>)
    .doc(Doc {
        operation: "listCloudAccounts",
        tag: "provisioning",
        summary: "Our cloud accounts, never their tokens (PV-12, PV-58)",
        description: Some(
            "`seal_key_set` says whether the service can seal tokens \
            (`CAPSTAN__PROVISIONING__SEAL_KEY_FILE`); without it no account can be added or used.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::LISTING,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/provisioning/accounts",
        Admin,
        |filter| on(filter, add_account),
        Some("add_cloud_account"),
    )
    .body(schema::<AccountBody>)
    .answer(schema::<AccountView>)
    .doc(Doc {
        operation: "addCloudAccount",
        tag: "provisioning",
        summary: "Add a cloud account by its API token (PV-12, PV-57)",
        description: Some(
            "Audited (never with the token). The provider is asked with the token \
            first; a token it refuses is refused here. The token is sealed at rest and never \
            shown again: no answer, listing, log line or audit row holds it. `flag` marks the \
            account `main` or `test` (the test cloud, PV-55).",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: PROVIDER_ASKED,
    }),
    Route::operator(
        Method::Delete,
        "/api/v1/provisioning/accounts/{id}",
        Admin,
        |filter| on(filter, delete_account),
        Some("delete_cloud_account"),
    )
    .answer(schema::<AccountView>)
    .doc(Doc {
        operation: "deleteCloudAccount",
        tag: "provisioning",
        summary: "Forget a cloud account (its servers are left as they are)",
        description: Some(
            "Audited. Refused with 409 while a provision in flight uses the \
            account. Answers the account as it was.",
        ),
        parameters: &[Parameter::Id("The account's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/provisioning/accounts/{id}/offer",
        Admin,
        |filter| on(filter, account_offer),
        None,
    )
    .answer(schema::<Offer>)
    .doc(Doc {
        operation: "getCloudAccountOffer",
        tag: "provisioning",
        summary: "What the account's provider sells: its regions, each with the sizes it sells \
            (PV-23)",
        description: Some("Asked of the provider just now, with the account's token."),
        parameters: &[Parameter::Id("The account's id")],
        body: None,
        answer: Answer::DONE,
        refusals: PROVIDER_ASKED,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/provisioning/provisions",
        Read,
        |filter| on(filter, list_provisions),
        None,
    )
    .answer(schema::<Provisions>)
    .doc(Doc {
        operation: "listProvisions",
        tag: "provisioning",
        summary: "Provisions, newest first (at most 200), without their steps and install logs",
        description: None,
        parameters: &[
            Parameter::Query {
                name: "flag",
                description: "Only provisions in accounts of this flag (the Main | Test tab, \
                    PV-13).",
                schema: r#"{"type": "string", "enum": ["main", "test"]}"#,
            },
            Parameter::Query {
                name: "in_flight",
                description: "`true`: only provisions still under way (the dashboard's banner, \
                    PV-03).",
                schema: r#"{"type": "boolean"}"#,
            },
        ],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::LISTING,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/provisioning/provisions",
        Admin,
        |filter| on(filter, request_provision),
        Some("request_provision"),
    )
    .body(schema::<ProvisionBody>)
    .answer(schema::<ProvisionView>)
    .doc(Doc {
        operation: "requestProvision",
        tag: "provisioning",
        summary: "Ask for a new server of a kind in an account, region and size (PV-03)",
        description: Some(
            "Audited. `kind` is `agent` (a machine that joins, siteless), `site` \
            (an agent and a site laid out for site releases) or `docker-host` (a host agent \
            joining as `<name>-host`). A size the region does not sell is refused before \
            anything is made, naming those it does. The service then creates the instance, \
            waits for it to run, bootstraps it over SSH and lets its agent in when AC-08's \
            five conditions hold; follow it with `GET /api/v1/provisioning/provisions/{id}`.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: PROVIDER_ASKED,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/provisioning/provisions/{id}",
        Read,
        |filter| on(filter, get_provision),
        None,
    )
    .answer(schema::<ProvisionView>)
    .doc(Doc {
        operation: "getProvision",
        tag: "provisioning",
        summary: "A provision: its state, steps with times, instance, addresses, node, the \
            install's log (secrets masked) and the auto-approval verdict with reasons",
        description: None,
        parameters: &[Parameter::Id("The provision's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/provisioning/provisions/{id}/retry",
        Admin,
        |filter| on(filter, retry_provision),
        Some("retry_provision"),
    )
    .answer(schema::<ProvisionView>)
    .doc(Doc {
        operation: "retryProvision",
        tag: "provisioning",
        summary: "Retry a provision whose install failed (PV-02)",
        description: Some("Audited. Refused with 409 unless the provision is `install_failed`."),
        parameters: &[Parameter::Id("The provision's id")],
        body: Some(crate::api_doc::Body::IGNORED),
        answer: Answer::DONE,
        refusals: PROVIDER_ASKED,
    }),
];

/// A secret the operator gives and is never shown again: its `Debug` hides it, and a value of
/// the wrong shape is refused without repeating it (the refusal's words reach the audit log).
#[derive(Clone, PartialEq, Eq)]
pub struct WriteOnly(String);

impl WriteOnly {
    pub fn new(secret: impl Into<String>) -> WriteOnly {
        WriteOnly(secret.into())
    }

    /// The secret, for the one question that carries it to its owner.
    pub fn expose(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for WriteOnly {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("WriteOnly(<redacted>)")
    }
}

impl<'de> Deserialize<'de> for WriteOnly {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<WriteOnly, D::Error> {
        // Read as any value first: serde_json's own refusal of a number would quote it.
        match serde_json::Value::deserialize(deserializer) {
            Ok(serde_json::Value::String(secret)) => Ok(WriteOnly(secret)),
            _ => Err(serde::de::Error::custom(
                "must be a string (the provider's API token)",
            )),
        }
    }
}

impl JsonSchema for WriteOnly {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WriteOnlySecret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "writeOnly": true,
            "description": "Write-only: sealed at rest, never answered, logged or audited."
        })
    }
}

/// `POST /api/v1/provisioning/accounts`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountBody {
    /// `linode` or `hetzner`.
    pub provider: CloudProvider,
    /// The operator's name for it.
    pub label: String,
    /// `main` or `test`.
    pub flag: AccountFlag,
    /// The provider's API token (write-only).
    pub token: WriteOnly,
}

/// `POST /api/v1/provisioning/provisions`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvisionBody {
    /// The cloud account to make it in.
    pub account_id: i64,
    /// `agent`, `site` or `docker-host`.
    pub kind: InstallKind,
    /// The node's name: lower-case letters, digits and `-`, 1 to 50 characters.
    pub name: String,
    /// A region the account's provider sells in (`GET .../accounts/{id}/offer`).
    pub region: String,
    /// A size that region sells.
    pub size: String,
    /// The provider's image; absent, its Debian image.
    #[serde(default)]
    pub image: Option<String>,
}

impl AccountBody {
    /// The question that adds it, asked as `actor`.
    pub fn into_request(self, actor: capstan_events::rpc::Actor) -> AddAccount {
        AddAccount {
            actor,
            provider: self.provider.as_str().to_string(),
            label: self.label,
            flag: self.flag.as_str().to_string(),
            token: self.token.expose(),
        }
    }

    /// What the audit log keeps of it: everything but the token.
    pub fn audited(&self) -> serde_json::Value {
        serde_json::json!({
            "provider": self.provider.as_str(),
            "label": self.label,
            "flag": self.flag.as_str(),
        })
    }
}

impl ProvisionBody {
    /// The question that asks for it, as `actor`.
    pub fn into_request(self, actor: capstan_events::rpc::Actor) -> RequestProvision {
        RequestProvision {
            actor,
            account_id: self.account_id,
            kind: self.kind.as_str().to_string(),
            name: self.name,
            region: self.region,
            size: self.size,
            image: self.image.filter(|image| !image.trim().is_empty()),
        }
    }

    /// What the audit log keeps of it.
    pub fn audited(&self) -> serde_json::Value {
        serde_json::json!({
            "account_id": self.account_id,
            "kind": self.kind.as_str(),
            "name": self.name,
            "region": self.region,
            "size": self.size,
            "image": self.image,
        })
    }
}

/// An answer with the audit detail of the act beside it.
fn audited<T: serde::Serialize>(
    status: StatusCode,
    answer: T,
    detail: serde_json::Value,
) -> Response {
    let mut response = (status, Json(answer)).into_response();
    response.extensions_mut().insert(AuditDetail(detail));
    response
}

pub async fn list_accounts(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Accounts>, ApiError> {
    Ok(Json(ask(&state, &ListAccounts { actor }).await?))
}

pub async fn add_account(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<AccountBody>,
) -> Result<Response, ApiError> {
    let detail = body.audited();
    let added = ask(&state, &body.into_request(actor)).await?;
    Ok(audited(
        StatusCode::CREATED,
        added.clone(),
        serde_json::json!({"account_id": added.id, "account": detail}),
    ))
}

pub async fn delete_account(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(account_id): PathId,
) -> Result<Json<AccountView>, ApiError> {
    Ok(Json(
        ask(&state, &DeleteAccount { actor, account_id }).await?,
    ))
}

pub async fn account_offer(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(account_id): PathId,
) -> Result<Json<Offer>, ApiError> {
    Ok(Json(
        ask(&state, &AccountOffer { actor, account_id }).await?,
    ))
}

/// The listing `uri` asks for.
pub fn provision_listing(
    uri: &Uri,
    actor: capstan_events::rpc::Actor,
) -> Result<ListProvisions, ApiError> {
    let query = QueryParams::parse(uri, PROVISION_LISTING)?;
    Ok(ListProvisions {
        actor,
        flag: query.get::<AccountFlag>("flag", "main or test")?,
        in_flight: query
            .get::<bool>("in_flight", "true or false")?
            .unwrap_or(false),
    })
}

pub async fn list_provisions(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<Provisions>, ApiError> {
    let request = provision_listing(&uri, actor)?;
    Ok(Json(ask(&state, &request).await?))
}

pub async fn request_provision(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<ProvisionBody>,
) -> Result<Response, ApiError> {
    let detail = body.audited();
    let made = ask(&state, &body.into_request(actor)).await?;
    let provision_id = made.id;
    Ok(audited(
        StatusCode::CREATED,
        made,
        serde_json::json!({"provision_id": provision_id, "provision": detail}),
    ))
}

pub async fn get_provision(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(provision_id): PathId,
) -> Result<Json<ProvisionView>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &GetProvision {
                actor,
                provision_id,
            },
        )
        .await?,
    ))
}

pub async fn retry_provision(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(provision_id): PathId,
) -> Result<Json<ProvisionView>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &RetryProvision {
                actor,
                provision_id,
            },
        )
        .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::parse_json;

    #[test]
    fn a_token_of_the_wrong_shape_is_refused_without_being_repeated() {
        let refusal = parse_json::<AccountBody>(
            br#"{"provider": "linode", "label": "ours", "flag": "main", "token": 987654321}"#,
        )
        .unwrap_err();
        assert!(refusal.message.starts_with("token:"), "{}", refusal.message);
        assert!(
            !refusal.message.contains("987654321"),
            "{}",
            refusal.message
        );
        let body = parse_json::<AccountBody>(
            br#"{"provider": "linode", "label": "ours", "flag": "main", "token": "s3cret"}"#,
        )
        .unwrap();
        assert!(!format!("{body:?}").contains("s3cret"));
        assert!(!body.audited().to_string().contains("s3cret"));
        assert_eq!(body.into_request(actor()).token, "s3cret");
    }

    #[test]
    fn an_unknown_provider_flag_or_kind_is_refused_naming_its_field() {
        for (body, field) in [
            (
                r#"{"provider": "aws", "label": "x", "flag": "main", "token": "t"}"#,
                "provider",
            ),
            (
                r#"{"provider": "linode", "label": "x", "flag": "prod", "token": "t"}"#,
                "flag",
            ),
        ] {
            let refusal = parse_json::<AccountBody>(body.as_bytes()).unwrap_err();
            assert!(
                refusal.message.starts_with(&format!("{field}:")),
                "{}",
                refusal.message
            );
        }
        let refusal = parse_json::<ProvisionBody>(
            br#"{"account_id": 1, "kind": "vm", "name": "a", "region": "r", "size": "s"}"#,
        )
        .unwrap_err();
        assert!(refusal.message.starts_with("kind:"), "{}", refusal.message);
    }

    #[test]
    fn a_provision_body_reads_into_the_contracts_words_and_an_empty_image_is_none() {
        let body: ProvisionBody = parse_json(
            br#"{"account_id": 3, "kind": "docker-host", "name": "box", "region": "us-east",
                 "size": "g6-nanode-1", "image": " "}"#,
        )
        .unwrap();
        let request = body.into_request(actor());
        assert_eq!(request.kind, "docker-host");
        assert_eq!(request.account_id, 3);
        assert_eq!(request.image, None);
    }

    fn actor() -> capstan_events::rpc::Actor {
        capstan_events::rpc::Actor {
            name: "ada".into(),
            level: capstan_events::rpc::Level::Admin,
            address: None,
        }
    }
}
