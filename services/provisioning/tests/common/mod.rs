//! What the service's tests share: a world of their own (a database, both providers'
//! stand-ins), the service's state over it, an operator at level 10.

#![allow(dead_code)]

use capstan_events::provisioning::rpc::AddAccount;
use capstan_events::rpc::{Actor, Level, RpcError};
use capstan_provisioning::drivers::api::{http, Limits};
use capstan_provisioning::drivers::seal::Sealer;
use capstan_provisioning::drivers::Providers;
use capstan_provisioning::rpc::State;
use capstan_provisioning::settings::ProvisioningSettings;
use capstan_provisioning::standin::{Flavor, StandIn};
use capstan_runtime::ServiceError;
use capstan_store::testsuite::TestDatabase;
use capstan_store::Store;
use std::time::Duration;

pub const TOKEN: &str = "standin-token";

pub struct World {
    pub _database: TestDatabase,
    pub store: Store,
    pub linode: StandIn,
    pub hetzner: StandIn,
}

pub async fn world() -> World {
    let database = TestDatabase::create().await;
    let store = Store::connect(database.url(), "provisioning", 2)
        .await
        .unwrap();
    store
        .migrate(&capstan_provisioning::MIGRATOR)
        .await
        .unwrap();
    World {
        _database: database,
        store,
        linode: StandIn::start(Flavor::Linode).await,
        hetzner: StandIn::start(Flavor::Hetzner).await,
    }
}

impl World {
    pub fn state(&self, key: Option<[u8; 32]>) -> State {
        self.state_with(key, ProvisioningSettings::default())
    }

    pub fn state_with(&self, key: Option<[u8; 32]>, settings: ProvisioningSettings) -> State {
        State {
            store: self.store.clone(),
            sealer: Sealer::new(key),
            providers: Providers {
                linode_base_url: self.linode.base_url(),
                hetzner_base_url: self.hetzner.base_url(),
                limits: Limits {
                    call_timeout: Duration::from_secs(5),
                    attempts: 2,
                    first_wait: Duration::from_millis(10),
                    longest_wait: Duration::from_secs(1),
                },
                http: http(),
            },
            settings: std::sync::Arc::new(settings),
            wake: Default::default(),
        }
    }
}

pub fn admin() -> Actor {
    Actor {
        name: "ada".into(),
        level: Level::Admin,
        address: None,
    }
}

pub fn add(provider: &str, label: &str, flag: &str, token: &str) -> AddAccount {
    AddAccount {
        actor: admin(),
        provider: provider.into(),
        label: label.into(),
        flag: flag.into(),
        token: token.into(),
    }
}

pub fn refused(error: ServiceError) -> RpcError {
    match error {
        ServiceError::Refused(refused) => refused,
        other => panic!("not a refusal: {other:?}"),
    }
}

pub const KEY: Option<[u8; 32]> = Some([9u8; 32]);
