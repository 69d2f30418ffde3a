//! The machines inventory (PV-53, PV-54, level 7), what is written down about a machine
//! (level 8: Save confirms, Confirm alone re-confirms) and adopting a cloud server for a node
//! (PV-52, level 10: only on exactly one match, naming the candidates otherwise).

use std::collections::HashMap;
use std::net::IpAddr;

use capstan_events::provisioning::machines::{
    AdoptMachine, Adopted, ListMachines, MachineColour, MachineKind, MachineNote, MachineNoteBody,
    MachineView, Machines, WriteMachine, NOTE_FIELD_MAX_CHARS,
};
use capstan_events::provisioning::{AccountFlag, InstallState, MachineAdopted};
use capstan_events::rpc::{ErrorCode, InvalidInput, Level, RpcError};
use capstan_events::{Envelope, NodeId, Word as _};
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::domain::install::NodeInstall;
use crate::domain::machines::{
    self, AdoptRefusal, CloudServer, Colour, Machine, MachineId, ManagedNode, NodeAddresses, Note,
};
use crate::drivers::Instance;
use crate::store::machines::{self as store, NodeRow, NoteRow};
use crate::store::{self as accounts_store, AccountRow};

use super::{driver, provider_failed, Answer, State};

/// A server one of our accounts lists, with the account it is in.
pub struct Listed {
    pub account: AccountRow,
    pub instance: Instance,
}

/// Every server in `accounts`, asked of each provider now; the accounts that could not be
/// listed are named (by id, and in words with why).
pub async fn list_servers(
    state: &State,
    accounts: &[AccountRow],
) -> (Vec<Listed>, Vec<(i64, String)>) {
    let mut listed = Vec::new();
    let mut unreachable = Vec::new();
    for account in accounts {
        let listing = match driver(state, account) {
            Ok(provider) => provider.list().await.map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        match listing {
            Ok(instances) => listed.extend(instances.into_iter().map(|instance| Listed {
                account: account.clone(),
                instance,
            })),
            Err(error) => unreachable.push((
                account.id,
                format!("account {} ({}): {error}", account.id, account.label),
            )),
        }
    }
    (listed, unreachable)
}

fn cloud_server(listed: &Listed) -> Answer<CloudServer> {
    Ok(CloudServer {
        account_id: listed.account.id,
        flag: listed.account.flag()?,
        instance_id: listed.instance.id.clone(),
        addresses: listed.instance.addresses(),
        region: listed.instance.region.clone(),
        image: listed.instance.image.clone(),
    })
}

fn parse_addresses(texts: &[String]) -> Vec<IpAddr> {
    texts
        .iter()
        .filter_map(|text| text.split('/').next()?.parse().ok())
        .collect()
}

fn note_of(row: &NoteRow) -> Note {
    Note {
        purpose: row.purpose.clone(),
        owner: row.owner.clone(),
        serves: row.serves.clone(),
        release: row.release.clone(),
        retire_by: row.retire_by,
        confirmed_at: row.confirmed_at,
    }
}

fn note_view(row: &NoteRow) -> MachineNote {
    MachineNote {
        purpose: row.purpose.clone(),
        owner: row.owner.clone(),
        serves: row.serves.clone(),
        release: row.release.clone(),
        retire_by: row.retire_by,
        confirmed_at: row.confirmed_at,
        confirmed_by: row.confirmed_by.clone(),
    }
}

fn colour_word(colour: Colour) -> MachineColour {
    match colour {
        Colour::Red => MachineColour::Red,
        Colour::Amber => MachineColour::Amber,
        Colour::Plain => MachineColour::Plain,
    }
}

fn managed(row: &NodeRow, notes: &HashMap<String, NoteRow>) -> ManagedNode {
    ManagedNode {
        node_id: row.node_id,
        addresses: parse_addresses(&row.addresses.0),
        container: row.container.is_some(),
        has_agent: row.paired,
        install: NodeInstall::read(row.install_state.as_deref()),
        os: row.os.clone(),
        note: notes
            .get(&MachineId::Node(row.node_id).to_string())
            .map(note_of),
    }
}

fn install_word(install: &NodeInstall) -> Option<InstallState> {
    match install {
        NodeInstall::State(state) => Some(*state),
        // An unknown word is not operational (PV-01): shown as a failed install would be.
        NodeInstall::Unknown(_) => Some(InstallState::InstallFailed),
        NodeInstall::Operational => None,
    }
}

/// The inventory at `now`: the managed nodes, then our main accounts' servers with no node.
pub async fn inventory(state: &State, now: DateTime<Utc>) -> Answer<Machines> {
    let (rows, note_rows, accounts, instances) = {
        let mut connection = state.store.acquire().await?;
        (
            store::nodes(&mut connection).await?,
            store::notes(&mut connection).await?,
            accounts_store::accounts(&mut connection).await?,
            store::our_instances(&mut connection).await?,
        )
    };
    let notes: HashMap<String, NoteRow> = note_rows
        .into_iter()
        .map(|row| (row.machine_id.clone(), row))
        .collect();
    // The test account's servers are not listed (PV-53): only main accounts are asked.
    let mut main_accounts = Vec::new();
    for account in &accounts {
        if account.flag()? == AccountFlag::Main {
            main_accounts.push(account.clone());
        }
    }
    let (listed, unreachable) = list_servers(state, &main_accounts).await;
    let servers = listed
        .iter()
        .map(cloud_server)
        .collect::<Answer<Vec<_>>>()?;
    let nodes: Vec<ManagedNode> = rows.iter().map(|row| managed(row, &notes)).collect();
    let by_node: HashMap<NodeId, &NodeRow> = rows.iter().map(|row| (row.node_id, row)).collect();
    let mut machines = Vec::new();
    for machine in machines::inventory(&nodes, &servers) {
        match &machine {
            Machine::Managed(node) => {
                let row = by_node[&node.node_id];
                let known = instances
                    .iter()
                    .find(|instance| instance.node_id == Some(node.node_id));
                let account = known.and_then(|instance| {
                    accounts
                        .iter()
                        .find(|account| account.id == instance.account_id)
                });
                let id = MachineId::Node(node.node_id).to_string();
                machines.push(MachineView {
                    kind: MachineKind::Managed,
                    node_id: Some(node.node_id),
                    name: row.name.clone(),
                    addresses: row.addresses.0.clone(),
                    account_id: known.map(|instance| instance.account_id),
                    provider: account.map(AccountRow::provider).transpose()?,
                    instance_id: known.map(|instance| instance.instance_id.clone()),
                    region: known.map(|instance| instance.region.clone()),
                    os: node.os.clone(),
                    has_agent: node.has_agent,
                    install_state: install_word(&node.install),
                    note: notes.get(&id).map(note_view),
                    colour: colour_word(machines::colour(&machine, now)),
                    id,
                });
            }
            Machine::NotManaged(server) => {
                let listing = listed
                    .iter()
                    .find(|listed| {
                        listed.account.id == server.account_id
                            && listed.instance.id == server.instance_id
                    })
                    .expect("an inventory server comes from the listing");
                let id = MachineId::Server {
                    account_id: server.account_id,
                    instance_id: server.instance_id.clone(),
                }
                .to_string();
                let note = notes.get(&id);
                machines.push(MachineView {
                    kind: MachineKind::NotManaged,
                    node_id: None,
                    name: listing.instance.label.clone(),
                    addresses: server.addresses.iter().map(IpAddr::to_string).collect(),
                    account_id: Some(server.account_id),
                    provider: Some(listing.account.provider()?),
                    instance_id: Some(server.instance_id.clone()),
                    region: Some(server.region.clone()),
                    os: Some(server.image.clone()),
                    has_agent: false,
                    install_state: None,
                    note: note.map(note_view),
                    colour: colour_word(machines::server_colour(note.map(note_of).as_ref(), now)),
                    id,
                });
            }
        }
    }
    Ok(Machines {
        machines,
        unreachable: unreachable.into_iter().map(|(_, line)| line).collect(),
    })
}

pub async fn list_machines(state: State, request: ListMachines) -> Answer<Machines> {
    request.actor.require(Level::Read, "reading the machines")?;
    inventory(&state, Utc::now()).await
}

fn check_note(body: &MachineNoteBody) -> Result<(), InvalidInput> {
    if body.confirm_only {
        let written = !body.purpose.is_empty()
            || !body.owner.is_empty()
            || !body.serves.is_empty()
            || !body.release.is_empty()
            || body.retire_by.is_some();
        if written {
            return Err(InvalidInput::new(
                "confirm_only",
                "confirms what is written as it stands: leave the other fields out",
            ));
        }
        return Ok(());
    }
    for (field, value) in [
        ("purpose", &body.purpose),
        ("owner", &body.owner),
        ("serves", &body.serves),
        ("release", &body.release),
    ] {
        if value.chars().count() > NOTE_FIELD_MAX_CHARS {
            return Err(InvalidInput::new(
                field,
                format!("at most {NOTE_FIELD_MAX_CHARS} characters"),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(InvalidInput::new(field, "no control characters"));
        }
    }
    Ok(())
}

/// Whether the machine `id` names exists now: a node this service knows, or a server one of
/// our accounts lists.
async fn machine_exists(state: &State, id: &MachineId) -> Answer<bool> {
    match id {
        MachineId::Node(node) => {
            let mut connection = state.store.acquire().await?;
            Ok(store::node(&mut connection, *node).await?.is_some())
        }
        MachineId::Server {
            account_id,
            instance_id,
        } => {
            let account = {
                let mut connection = state.store.acquire().await?;
                accounts_store::account(&mut connection, *account_id).await?
            };
            let Some(account) = account else {
                return Ok(false);
            };
            // The inventory leaves the test account out (PV-53): nothing is written about its
            // servers.
            if account.flag()? != AccountFlag::Main {
                return Ok(false);
            }
            match driver(state, &account)?.get(instance_id).await {
                Ok(_) => Ok(true),
                Err(crate::drivers::ProviderError::NotFound(_)) => Ok(false),
                Err(error) => Err(provider_failed(error).into()),
            }
        }
    }
}

/// Writes down what is known about a machine (Save confirms), or confirms it as it stands.
pub async fn write_machine(state: State, request: WriteMachine) -> Answer<MachineView> {
    request
        .actor
        .require(Level::Change, "writing down what a machine is")?;
    let id =
        MachineId::parse(&request.machine_id).map_err(|reason| InvalidInput::new("id", reason))?;
    check_note(&request.body)?;
    if !machine_exists(&state, &id).await? {
        return Err(RpcError::new(ErrorCode::NotFound, format!("no machine {id}")).into());
    }
    let key = id.to_string();
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    if request.body.confirm_only {
        if !store::confirm_note(&mut transaction, &key, now, &request.actor.name).await? {
            return Err(RpcError::new(
                ErrorCode::Conflict,
                format!("nothing is written down about {key} to confirm; save it first"),
            )
            .into());
        }
    } else {
        store::save_note(
            &mut transaction,
            &key,
            &request.body,
            now,
            &request.actor.name,
        )
        .await?;
    }
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(machine = %key, actor = %request.actor.name, confirm_only = request.body.confirm_only, "machine written down");
    let machines = inventory(&state, now).await?;
    machines
        .machines
        .into_iter()
        .find(|machine| machine.id == key)
        .ok_or_else(|| {
            RpcError::new(
                ErrorCode::Unavailable,
                format!(
                    "{key} was written down but is not listed now (its account did not answer)"
                ),
            )
            .into()
        })
}

fn refused(refusal: AdoptRefusal) -> RpcError {
    let code = match refusal {
        AdoptRefusal::NoMatch => ErrorCode::NotFound,
        _ => ErrorCode::Conflict,
    };
    RpcError::new(code, format!("nothing was adopted: {refusal}"))
}

async fn adoptable(connection: &mut PgConnection, node: NodeId) -> Answer<NodeRow> {
    let row = store::node(connection, node)
        .await?
        .ok_or_else(|| RpcError::new(ErrorCode::NotFound, format!("no node {node}")))?;
    if row.container.is_some() {
        return Err(RpcError::new(
            ErrorCode::Refused,
            format!("node {node} is a container site: its machine is its host's"),
        )
        .into());
    }
    if store::provision_holds_instance(connection, node).await? {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!("node {node}'s provision holds its instance already: nothing to adopt"),
        )
        .into());
    }
    if store::adopted(connection, node).await? {
        return Err(RpcError::new(
            ErrorCode::AlreadyExists,
            format!("node {node} has adopted a server already"),
        )
        .into());
    }
    Ok(row)
}

/// PV-52: every held account is listed and matched by address (host beats join); only when
/// exactly one server is at the strongest match, it is the one shown, and no other node
/// records it, is it adopted, with `machine_adopted` in the same transaction.
pub async fn adopt_machine(state: State, request: AdoptMachine) -> Answer<Adopted> {
    request
        .actor
        .require(Level::Admin, "adopting a cloud server")?;
    let shown = request.instance_id.trim();
    if shown.is_empty() {
        return Err(InvalidInput::new("instance_id", "name the server the page showed").into());
    }
    let (row, accounts) = {
        let mut connection = state.store.acquire().await?;
        (
            adoptable(&mut connection, request.node_id).await?,
            accounts_store::accounts(&mut connection).await?,
        )
    };
    let (listed, unreachable) = list_servers(&state, &accounts).await;
    if !unreachable.is_empty() {
        return Err(RpcError::new(
            ErrorCode::Unavailable,
            format!(
                "nothing was adopted: every held account must be listed to know the match is the only one; {}",
                unreachable
                    .iter()
                    .map(|(_, line)| line.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
        .into());
    }
    let servers = listed
        .iter()
        .map(cloud_server)
        .collect::<Answer<Vec<_>>>()?;
    let addresses = parse_addresses(&row.addresses.0);
    let node = NodeAddresses {
        node_id: row.node_id,
        host: addresses.first().copied(),
        joined_from: addresses.iter().skip(1).copied().collect(),
    };
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    // Checked again under the transaction: a second adoption of the node loses here.
    adoptable(&mut transaction, request.node_id).await?;
    let recorded = store::recorded_instances(&mut transaction).await?;
    let found = machines::adopt(&node, &servers, shown, &recorded).map_err(refused)?;
    let account = accounts
        .iter()
        .find(|account| account.id == found.account_id)
        .expect("a listed server's account is held");
    let provider = account.provider()?;
    let ipv4 = found
        .addresses
        .iter()
        .find(|address| address.is_ipv4())
        .map(IpAddr::to_string);
    let ipv6 = found
        .addresses
        .iter()
        .find(|address| address.is_ipv6())
        .map(IpAddr::to_string);
    let inserted = store::insert_adoption(
        &mut transaction,
        &store::NewAdoption {
            node_id: row.node_id,
            account_id: account.id,
            provider: provider.as_str(),
            instance_id: &found.instance_id,
            ipv4: ipv4.as_deref(),
            ipv6: ipv6.as_deref(),
            region: &found.region,
            at: now,
            by: &request.actor.name,
        },
    )
    .await;
    if let Err(StoreError::AlreadyExists(_)) = inserted {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!(
                "nothing was adopted: server {} is adopted for another node",
                found.instance_id
            ),
        )
        .into());
    }
    inserted?;
    let adopted = MachineAdopted {
        node_id: row.node_id,
        account_id: account.id,
        provider,
        instance_id: found.instance_id.clone(),
        ipv4: ipv4.clone(),
        ipv6: ipv6.clone(),
        region: found.region.clone(),
        adopted_by: request.actor.name.clone(),
        adopted_at: now,
    };
    outbox::push(
        &mut transaction,
        Envelope::new(adopted, Some(format!("node/{}", row.node_id))),
    )
    .await?;
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(node_id = %row.node_id, instance = %found.instance_id, account_id = account.id, actor = %request.actor.name, "cloud server adopted");
    Ok(Adopted {
        node_id: row.node_id,
        account_id: account.id,
        provider,
        instance_id: found.instance_id.clone(),
        ipv4,
        ipv6,
        region: found.region.clone(),
        adopted_by: request.actor.name,
        adopted_at: now,
    })
}
