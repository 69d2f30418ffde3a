//! The machines and hosts pages: what the provisioning service answers, drawn.

use askama::Template;
use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::provisioning::machines::{
    HostView, Hosts, ListHosts, ListMachines, MachineColour, MachineKind, MachineNoteBody,
    MachineView, Machines, WriteMachine,
};
use capstan_events::rpc::Level;

use crate::{
    ask::ask,
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{acted, format::clip, guard::FormFields, render, Chrome, UiError, UiSession},
};

struct MachineLine {
    id: String,
    kind: &'static str,
    colour: &'static str,
    node_id: Option<i64>,
    name: String,
    addresses: String,
    account: String,
    os: String,
    state: String,
    note: String,
    has_note: bool,
    confirmed: String,
    purpose: String,
    owner: String,
    serves: String,
    release: String,
    retire_by: String,
}

fn colour(colour: MachineColour) -> &'static str {
    match colour {
        MachineColour::Red => "red",
        MachineColour::Amber => "amber",
        MachineColour::Plain => "plain",
    }
}

fn machine_line(machine: &MachineView) -> MachineLine {
    let note = machine.note.as_ref();
    let written = note
        .map(|note| {
            [
                ("purpose", &note.purpose),
                ("owner", &note.owner),
                ("serves", &note.serves),
                ("release", &note.release),
            ]
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(field, value)| format!("{field}: {}", clip(value, 120)))
            .chain(note.retire_by.map(|by| format!("retire by {by}")))
            .collect::<Vec<_>>()
            .join("; ")
        })
        .unwrap_or_default();
    MachineLine {
        id: machine.id.clone(),
        kind: match machine.kind {
            MachineKind::Managed => "managed",
            MachineKind::NotManaged => "not_managed",
        },
        colour: colour(machine.colour),
        node_id: machine.node_id.map(|node| node.0),
        name: clip(&machine.name, 100),
        addresses: clip(&machine.addresses.join(", "), 200),
        account: match (&machine.account_id, &machine.instance_id) {
            (Some(account), Some(instance)) => format!("account {account}, instance {instance}"),
            _ => String::new(),
        },
        os: machine
            .os
            .clone()
            .map(|os| clip(&os, 100))
            .unwrap_or_default(),
        state: match (&machine.install_state, machine.has_agent) {
            (Some(state), _) => state.to_string(),
            (None, true) => "operational".into(),
            (None, false) => "no agent".into(),
        },
        has_note: !written.is_empty(),
        note: written,
        confirmed: note
            .and_then(|note| note.confirmed_at)
            .map(|at| at.format("%Y-%m-%d").to_string())
            .unwrap_or_default(),
        purpose: note.map(|note| note.purpose.clone()).unwrap_or_default(),
        owner: note.map(|note| note.owner.clone()).unwrap_or_default(),
        serves: note.map(|note| note.serves.clone()).unwrap_or_default(),
        release: note.map(|note| note.release.clone()).unwrap_or_default(),
        retire_by: note
            .and_then(|note| note.retire_by)
            .map(|by| by.to_string())
            .unwrap_or_default(),
    }
}

#[derive(Template)]
#[template(path = "machines.html")]
struct MachinesPage {
    chrome: Chrome,
    machines: Vec<MachineLine>,
    unreachable: Vec<String>,
    can_confirm: bool,
}

pub async fn machines(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let listed: Machines = ask(
        &state,
        &ListMachines {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = MachinesPage {
        chrome: Chrome::signed_in(&session, &headers, "Machines", "machines"),
        machines: listed.machines.iter().map(machine_line).collect(),
        unreachable: listed.unreachable.clone(),
        can_confirm: session.actor().level >= Level::Change,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// Save writes every field down and confirms it (PV-53).
pub async fn save(
    State(state): State<AppState>,
    session: UiSession,
    Path(machine_id): Path<String>,
    fields: FormFields,
) -> Response {
    let text = |name: &str| fields.get(name).unwrap_or_default().trim().to_string();
    let retire_by = match text("retire_by").as_str() {
        "" => None,
        written => match chrono::NaiveDate::parse_from_str(written, "%Y-%m-%d") {
            Ok(date) => Some(date),
            Err(_) => {
                return acted(
                    "/ui/machines",
                    Err(ApiError::invalid(
                        "retire_by",
                        "a date as YYYY-MM-DD, or empty",
                    )),
                )
            }
        },
    };
    let request = WriteMachine {
        actor: session.actor(),
        machine_id: machine_id.clone(),
        body: MachineNoteBody {
            purpose: text("purpose"),
            owner: text("owner"),
            serves: text("serves"),
            release: text("release"),
            retire_by,
            confirm_only: false,
        },
    };
    let answer: Result<MachineView, ApiError> = ask(&state, &request).await;
    let mut response = acted(
        "/ui/machines",
        answer.map(|machine| {
            format!(
                "Written down and confirmed for {}.",
                clip(&machine.name, 100)
            )
        }),
    );
    response
        .extensions_mut()
        .insert(AuditDetail(serde_json::json!({"machine_id": machine_id})));
    response
}

/// Confirm alone re-confirms what is written (PV-53).
pub async fn confirm(
    State(state): State<AppState>,
    session: UiSession,
    Path(machine_id): Path<String>,
) -> Response {
    let request = WriteMachine {
        actor: session.actor(),
        machine_id: machine_id.clone(),
        body: MachineNoteBody {
            confirm_only: true,
            ..MachineNoteBody::default()
        },
    };
    let answer: Result<MachineView, ApiError> = ask(&state, &request).await;
    let mut response = acted(
        "/ui/machines",
        answer.map(|machine| {
            format!(
                "What is written about {} is confirmed.",
                clip(&machine.name, 100)
            )
        }),
    );
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"machine_id": machine_id, "confirm_only": true}),
    ));
    response
}

struct HostLine {
    id: i64,
    address: String,
    flag: String,
    node: String,
    node_id: Option<i64>,
    node_live: bool,
    containers: Vec<(i64, String, bool)>,
    max_sites: u32,
    has_room: bool,
    provisioning_enabled: bool,
}

fn host_line(host: &HostView) -> HostLine {
    HostLine {
        id: host.id,
        address: host.address.clone(),
        flag: host.flag.to_string(),
        node: host
            .node_name
            .as_deref()
            .map(|name| clip(name, 100))
            .unwrap_or_default(),
        node_id: host.node_id.map(|node| node.0),
        node_live: host.node_live,
        containers: host
            .containers
            .iter()
            .map(|container| {
                (
                    container.node_id.0,
                    clip(&container.name, 100),
                    container.live,
                )
            })
            .collect(),
        max_sites: host.max_sites,
        has_room: host.has_room,
        provisioning_enabled: host.provisioning_enabled,
    }
}

#[derive(Template)]
#[template(path = "hosts.html")]
struct HostsPage {
    chrome: Chrome,
    hosts: Vec<HostLine>,
}

pub async fn hosts(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let listed: Hosts = ask(
        &state,
        &ListHosts {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = HostsPage {
        chrome: Chrome::signed_in(&session, &headers, "Hosts", "hosts"),
        hosts: listed.hosts.iter().map(host_line).collect(),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
