//! Cloud accounts end to end inside the service, each test on a database of its own: added
//! only when the provider takes the token, sealed at rest, never answered back, deleted unless
//! a provision is in flight, and an account's offer asked of its provider (the stand-ins).

use capstan_events::provisioning::rpc::{AccountOffer, DeleteAccount, ListAccounts};
use capstan_events::provisioning::{AccountFlag, CloudProvider};
use capstan_events::rpc::{ErrorCode, Level};
use capstan_provisioning::rpc;
use secrecy::ExposeSecret;

mod common;

use common::{add, admin, refused, world, KEY, TOKEN};

#[tokio::test]
async fn an_account_is_saved_sealed_and_its_token_is_never_answered_back() {
    let world = world().await;
    let state = world.state(KEY);
    let added = rpc::add_account(state.clone(), add("linode", "Ours", "main", TOKEN))
        .await
        .unwrap();
    assert_eq!(
        (added.provider, added.flag),
        (CloudProvider::Linode, AccountFlag::Main)
    );
    let hetzner = rpc::add_account(state.clone(), add("hetzner", "Test cloud", "test", TOKEN))
        .await
        .unwrap();
    let listed = rpc::list_accounts(state.clone(), ListAccounts { actor: admin() })
        .await
        .unwrap();
    assert_eq!(listed.accounts, vec![added.clone(), hetzner]);
    assert!(listed.seal_key_set);
    assert!(!serde_json::to_string(&listed).unwrap().contains(TOKEN));
    assert!(!format!("{:?}", add("linode", "x", "main", TOKEN)).contains(TOKEN));

    // At rest: sealed, not in clear, and it opens with the key for that account only.
    let sealed: Vec<u8> = sqlx::query_scalar("SELECT sealed_token FROM accounts WHERE id = $1")
        .bind(added.id)
        .fetch_one(world.store.pool())
        .await
        .unwrap();
    assert!(!String::from_utf8_lossy(&sealed).contains(TOKEN));
    let every_column: String =
        sqlx::query_scalar("SELECT string_agg(accounts::text, '') FROM accounts")
            .fetch_one(world.store.pool())
            .await
            .unwrap();
    assert!(!every_column.contains(TOKEN));
    assert_eq!(
        state
            .sealer
            .open(added.id, &sealed)
            .unwrap()
            .expose_secret(),
        TOKEN
    );

    let taken = refused(
        rpc::add_account(state, add("hetzner", "Ours", "main", TOKEN))
            .await
            .unwrap_err(),
    );
    assert_eq!(taken.code, ErrorCode::AlreadyExists);
}

#[tokio::test]
async fn a_token_the_provider_refuses_saves_nothing_and_is_not_echoed() {
    let world = world().await;
    let state = world.state(KEY);
    let error = refused(
        rpc::add_account(
            state.clone(),
            add("linode", "Ours", "main", "wrong-token-123"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(error.code, ErrorCode::Refused);
    assert!(error.message.contains("was not saved"), "{}", error.message);
    assert!(
        !error.message.contains("wrong-token-123"),
        "{}",
        error.message
    );
    let listed = rpc::list_accounts(state, ListAccounts { actor: admin() })
        .await
        .unwrap();
    assert!(listed.accounts.is_empty());
}

#[tokio::test]
async fn without_a_seal_key_or_level_10_no_account_is_added() {
    let world = world().await;
    let unsealed = refused(
        rpc::add_account(world.state(None), add("linode", "Ours", "main", TOKEN))
            .await
            .unwrap_err(),
    );
    assert_eq!(unsealed.code, ErrorCode::Unavailable);
    assert!(unsealed
        .message
        .contains("CAPSTAN__PROVISIONING__SEAL_KEY_FILE"));
    let mut request = add("linode", "Ours", "main", TOKEN);
    request.actor.level = Level::Change;
    let forbidden = refused(
        rpc::add_account(world.state(KEY), request)
            .await
            .unwrap_err(),
    );
    assert_eq!(forbidden.code, ErrorCode::Forbidden);
    let bad = refused(
        rpc::add_account(world.state(KEY), add("aws", "Ours", "main", TOKEN))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, ErrorCode::InvalidRequest);
    assert_eq!(
        world.linode.world().requests.len(),
        0,
        "nothing was asked of a provider"
    );
}

#[tokio::test]
async fn an_account_is_deleted_unless_a_provision_in_flight_uses_it() {
    let world = world().await;
    let state = world.state(KEY);
    let account = rpc::add_account(state.clone(), add("hetzner", "Ours", "main", TOKEN))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO provisions (account_id, kind, name, region, size, image, step, step_since, \
         requested_by, requested_at) VALUES ($1, 'site', 'shop', 'fsn1', 'cx22', 'debian-12', \
         'booting', now(), 'ada', now())",
    )
    .bind(account.id)
    .execute(world.store.pool())
    .await
    .unwrap();
    let delete = || DeleteAccount {
        actor: admin(),
        account_id: account.id,
    };
    let busy = refused(
        rpc::delete_account(state.clone(), delete())
            .await
            .unwrap_err(),
    );
    assert_eq!(busy.code, ErrorCode::Conflict);
    sqlx::query("UPDATE provisions SET step = 'done'")
        .execute(world.store.pool())
        .await
        .unwrap();
    assert_eq!(
        rpc::delete_account(state.clone(), delete()).await.unwrap(),
        account
    );
    let listed = rpc::list_accounts(state.clone(), ListAccounts { actor: admin() })
        .await
        .unwrap();
    assert!(listed.accounts.is_empty());
    let again = refused(
        rpc::delete_account(state.clone(), delete())
            .await
            .unwrap_err(),
    );
    assert_eq!(again.code, ErrorCode::NotFound);
    // The label is free again for a new account.
    assert!(
        rpc::add_account(state, add("hetzner", "Ours", "main", TOKEN))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn an_accounts_offer_is_asked_of_its_provider_with_its_opened_token() {
    let world = world().await;
    let state = world.state(KEY);
    let account = rpc::add_account(state.clone(), add("linode", "Ours", "main", TOKEN))
        .await
        .unwrap();
    let offer = rpc::account_offer(
        state.clone(),
        AccountOffer {
            actor: admin(),
            account_id: account.id,
        },
    )
    .await
    .unwrap();
    assert_eq!(offer.provider, CloudProvider::Linode);
    let us_east = offer
        .regions
        .iter()
        .find(|region| region.id == "us-east")
        .unwrap();
    let sizes: Vec<&str> = us_east.sizes.iter().map(|size| size.id.as_str()).collect();
    assert_eq!(sizes, ["g6-nanode-1", "g6-standard-2"]);
    // Another seal key cannot open the token: the offer says so and asks nothing.
    let asked = world.linode.world().requests.len();
    let other = refused(
        rpc::account_offer(
            world.state(Some([1u8; 32])),
            AccountOffer {
                actor: admin(),
                account_id: account.id,
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(other.code, ErrorCode::Unavailable);
    assert_eq!(world.linode.world().requests.len(), asked);
}
