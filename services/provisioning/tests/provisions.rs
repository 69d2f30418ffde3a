//! Asking for a server inside the service (PV-03, PV-02): the words and the offer are checked
//! before anything is saved or made, each refusal naming its field; a saved ask is listed in
//! flight with its first step; only a failed install is retried. The run itself (the instance,
//! the SSH bootstrap, the join) is tested end to end with the real plane (`tests/`).

mod common;

use capstan_events::provisioning::provisions::{
    GetProvision, JoinVerdicts, ListProvisions, RequestProvision, RetryProvision,
};
use capstan_events::provisioning::{AccountFlag, InstallKind, ProvisionStep};
use capstan_events::rpc::{ErrorCode, Level};
use capstan_provisioning::rpc::{self, State};
use capstan_provisioning::settings::ProvisioningSettings;
use common::{add, admin, refused, world, World, KEY, TOKEN};

fn settings() -> ProvisioningSettings {
    ProvisioningSettings {
        plane_url: Some("https://plane.example:8443".into()),
        ..ProvisioningSettings::default()
    }
}

async fn with_account(world: &World, settings: ProvisioningSettings) -> (State, i64) {
    let state = world.state_with(KEY, settings);
    let account = rpc::add_account(state.clone(), add("linode", "Ours", "main", TOKEN))
        .await
        .unwrap();
    (state, account.id)
}

fn ask(account_id: i64, name: &str, region: &str, size: &str) -> RequestProvision {
    RequestProvision {
        actor: admin(),
        account_id,
        kind: "site".into(),
        name: name.into(),
        region: region.into(),
        size: size.into(),
        image: None,
    }
}

fn creates(world: &World) -> usize {
    world
        .linode
        .world()
        .requests
        .iter()
        .filter(|line| line.starts_with("POST /v4/linode/instances"))
        .count()
}

#[tokio::test]
async fn pv_03_a_size_the_region_does_not_sell_is_refused_naming_those_it_does_and_nothing_is_made()
{
    let world = world().await;
    let (state, account) = with_account(&world, settings()).await;
    let error = refused(
        rpc::request_provision(
            state.clone(),
            ask(account, "shop", "eu-west", "g6-standard-2"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(error.code, ErrorCode::InvalidRequest);
    assert_eq!(
        error.message,
        "size: size \"g6-standard-2\" is not sold in eu-west; it sells: g6-nanode-1"
    );
    let unknown = refused(
        rpc::request_provision(state.clone(), ask(account, "shop", "mars-1", "g6-nanode-1"))
            .await
            .unwrap_err(),
    );
    assert!(
        unknown.message.starts_with("region: "),
        "{}",
        unknown.message
    );
    let listed = rpc::list_provisions(
        state,
        ListProvisions {
            actor: admin(),
            flag: None,
            in_flight: false,
        },
    )
    .await
    .unwrap();
    assert!(listed.provisions.is_empty());
    assert_eq!(creates(&world), 0);
}

#[tokio::test]
async fn pv_03_bad_words_a_lower_level_and_a_missing_plane_url_are_refused_before_the_provider_is_asked(
) {
    let world = world().await;
    let (state, account) = with_account(&world, settings()).await;
    let asked_before = world.linode.world().requests.len();
    for (mut request, field) in [
        (ask(account, "Shop!", "us-east", "g6-nanode-1"), "name"),
        (ask(account, "shop", "us east", "g6-nanode-1"), "region"),
        (
            ask(account + 99, "shop", "us-east", "g6-nanode-1"),
            "account_id",
        ),
    ] {
        request.kind = "site".into();
        let error = refused(
            rpc::request_provision(state.clone(), request)
                .await
                .unwrap_err(),
        );
        assert_eq!(error.code, ErrorCode::InvalidRequest);
        assert!(
            error.message.starts_with(field),
            "{field}: {}",
            error.message
        );
    }
    let mut vm = ask(account, "shop", "us-east", "g6-nanode-1");
    vm.kind = "vm".into();
    let error = refused(rpc::request_provision(state.clone(), vm).await.unwrap_err());
    assert!(error.message.starts_with("kind: "), "{}", error.message);

    let mut changer = ask(account, "shop", "us-east", "g6-nanode-1");
    changer.actor.level = Level::Change;
    let forbidden = refused(rpc::request_provision(state, changer).await.unwrap_err());
    assert_eq!(forbidden.code, ErrorCode::Forbidden);

    let no_url = world.state_with(KEY, ProvisioningSettings::default());
    let world_asked = world.linode.world().requests.len();
    let error = refused(
        rpc::request_provision(no_url, ask(account, "shop", "us-east", "g6-nanode-1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(error.message.contains("CAPSTAN__PROVISIONING__PLANE_URL"));
    assert_eq!(world.linode.world().requests.len(), world_asked);
    assert_eq!(
        world_asked, asked_before,
        "no provider was asked for a refused ask"
    );
}

#[tokio::test]
async fn pv_03_an_ask_is_saved_in_flight_with_its_first_step_and_a_name_in_flight_is_not_asked_twice(
) {
    let world = world().await;
    let (state, account) = with_account(&world, settings()).await;
    let saved = rpc::request_provision(
        state.clone(),
        ask(account, "shop", "us-east", "g6-nanode-1"),
    )
    .await
    .unwrap();
    assert_eq!(saved.step, ProvisionStep::Requested);
    assert_eq!(saved.kind, InstallKind::Site);
    assert_eq!(saved.image, "linode/debian12");
    assert_eq!(saved.flag, AccountFlag::Main);
    assert_eq!(saved.steps.len(), 1);
    assert_eq!(saved.requested_by, "ada");

    let again = refused(
        rpc::request_provision(
            state.clone(),
            ask(account, "shop", "us-east", "g6-nanode-1"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(again.code, ErrorCode::AlreadyExists);
    assert!(again.message.starts_with("name: "), "{}", again.message);

    let mut reader = admin();
    reader.level = Level::Read;
    let in_flight = rpc::list_provisions(
        state.clone(),
        ListProvisions {
            actor: reader.clone(),
            flag: Some(AccountFlag::Main),
            in_flight: true,
        },
    )
    .await
    .unwrap();
    assert_eq!(in_flight.provisions.len(), 1);
    let test_tab = rpc::list_provisions(
        state.clone(),
        ListProvisions {
            actor: reader.clone(),
            flag: Some(AccountFlag::Test),
            in_flight: false,
        },
    )
    .await
    .unwrap();
    assert!(
        test_tab.provisions.is_empty(),
        "the Test tab holds none (PV-13)"
    );
    let got = rpc::get_provision(
        state.clone(),
        GetProvision {
            actor: reader,
            provision_id: saved.id,
        },
    )
    .await
    .unwrap();
    assert_eq!(got.id, saved.id);
    assert!(!serde_json::to_string(&got)
        .unwrap()
        .contains("root_password"));

    // PV-02: Retry is for a failed install only.
    let retry = refused(
        rpc::retry_provision(
            state.clone(),
            RetryProvision {
                actor: admin(),
                provision_id: saved.id,
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(retry.code, ErrorCode::Conflict);
    assert!(retry.message.contains("requested"), "{}", retry.message);

    let too_many = refused(
        rpc::join_verdicts(
            state,
            JoinVerdicts {
                actor: admin(),
                join_ids: (0..501).map(uuid::Uuid::from_u128).collect(),
            },
        )
        .await
        .unwrap_err(),
    );
    assert!(
        too_many.message.starts_with("join_ids"),
        "{}",
        too_many.message
    );
}
