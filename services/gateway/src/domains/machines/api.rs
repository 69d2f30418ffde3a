//! `/api/v1/machines`, `/api/v1/nodes/{id}/adopt` and `/api/v1/hosts`: the provisioning
//! service's machines inventory with its colours (PV-53, PV-54; read at 7), what is written
//! down about a machine (8; Save confirms, `{"confirm_only": true}` re-confirms), adopting the
//! cloud server the page showed for a node (10; only on exactly one match, PV-52), and the
//! Docker hosts' placement records (read at 7, added and deleted at 10; a host is not deleted
//! while anything lives on it, PV-16).

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use capstan_events::provisioning::machines::{
    AddHost, AdoptBody, AdoptMachine, Adopted, DeleteHost, HostBody, HostView, Hosts, ListHosts,
    ListMachines, MachineNoteBody, MachineView, Machines, WriteMachine,
};
use capstan_events::rpc::Level::{Admin, Change, Read};

use crate::api_doc::{refusals, Answer, Doc, Parameter};
use crate::route::schema;
use crate::{
    ask::ask,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, NodePath, PathId},
    route::{Method, Route},
    AppState,
};

const MACHINE_ID: Parameter = Parameter::TextId {
    description: "The machine's id as the inventory names it: `node-<node id>` or \
        `server-<account id>-<instance id>`.",
    schema: r#"{"type": "string", "pattern": "^(node-[0-9]+|server-[0-9]+-[A-Za-z0-9._-]+)$"}"#,
};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/machines",
        Read,
        |filter| on(filter, list_machines),
        None,
    )
    .answer(schema::<Machines>)
    .doc(Doc {
        operation: "listMachines",
        tag: "machines",
        summary: "The machines inventory with its colours (PV-53, PV-54)",
        description: Some(
            "Every node that is not a container site, in any install state, then every server \
            in our main accounts with no node (the test account is left out). Accounts that \
            could not be listed are named in `unreachable`.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::LISTING,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/machines/{id}",
        Change,
        |filter| on(filter, write_machine),
        Some("write_machine"),
    )
    .body(schema::<MachineNoteBody>)
    .answer(schema::<MachineView>)
    .doc(Doc {
        operation: "writeMachine",
        tag: "machines",
        summary: "Write down what a machine is (PV-53)",
        description: Some(
            "Audited. Every field is written and Save confirms; `{\"confirm_only\": true}` \
            re-confirms what is written (a machine unconfirmed for 90 days is amber).",
        ),
        parameters: &[MACHINE_ID],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/adopt",
        Admin,
        |filter| on(filter, adopt_machine),
        Some("adopt_machine"),
    )
    .body(schema::<AdoptBody>)
    .answer(schema::<Adopted>)
    .doc(Doc {
        operation: "adoptMachine",
        tag: "machines",
        summary: "Adopt the cloud server the page showed for a node (PV-52)",
        description: Some(
            "Audited. Every held account is listed and matched by address (the node's own \
            address beats its join's); adopted only when exactly one server is at the strongest \
            match, it is `instance_id`, and no other node records it. Otherwise nothing is \
            adopted and the answer names the candidates (409), or says none matched (404).",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/hosts",
        Read,
        |filter| on(filter, list_hosts),
        None,
    )
    .answer(schema::<Hosts>)
    .doc(Doc {
        operation: "listHosts",
        tag: "machines",
        summary: "Docker hosts' placement records with their containers (PV-14, PV-15)",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::LISTING,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/hosts",
        Admin,
        |filter| on(filter, add_host),
        Some("add_host"),
    )
    .body(schema::<HostBody>)
    .answer(schema::<HostView>)
    .doc(Doc {
        operation: "addHost",
        tag: "machines",
        summary: "Add a Docker host's placement record (PV-14)",
        description: Some(
            "Audited. The host's own node is linked when its agent is approved or reports \
            from the address (a paired host agent there is linked at once). `flag` is `main` \
            unless given (PV-12).",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Delete,
        "/api/v1/hosts/{id}",
        Admin,
        |filter| on(filter, delete_host),
        Some("delete_host"),
    )
    .answer(schema::<HostView>)
    .doc(Doc {
        operation: "deleteHost",
        tag: "machines",
        summary: "Delete a host's placement record (PV-16)",
        description: Some(
            "Audited. A soft delete, refused (409) while a container site is placed on the \
            host or the host's own agent node is live.",
        ),
        parameters: &[Parameter::Id("The host's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
];

pub async fn list_machines(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Machines>, ApiError> {
    Ok(Json(ask(&state, &ListMachines { actor }).await?))
}

/// `PUT /api/v1/machines/{id}`: the service reads the id and names what is wrong with it.
pub async fn write_machine(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(machine_id): Path<String>,
    JsonBody(body): JsonBody<MachineNoteBody>,
) -> Result<Json<MachineView>, ApiError> {
    let request = WriteMachine {
        actor,
        machine_id,
        body,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn adopt_machine(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<AdoptBody>,
) -> Result<Response, ApiError> {
    let request = AdoptMachine {
        actor,
        node_id,
        instance_id: body.instance_id,
    };
    let adopted = ask(&state, &request).await?;
    Ok((StatusCode::CREATED, Json(adopted)).into_response())
}

pub async fn list_hosts(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Hosts>, ApiError> {
    Ok(Json(ask(&state, &ListHosts { actor }).await?))
}

pub async fn add_host(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<HostBody>,
) -> Result<Response, ApiError> {
    let host = ask(&state, &AddHost { actor, body }).await?;
    Ok((StatusCode::CREATED, Json(host)).into_response())
}

pub async fn delete_host(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(host_id): PathId,
) -> Result<Json<HostView>, ApiError> {
    Ok(Json(ask(&state, &DeleteHost { actor, host_id }).await?))
}
