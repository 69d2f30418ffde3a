//! A provision's run (PV-03, PV-05, PV-06, AC-10): each step's result stored before the next
//! begins, so a restarted service (or another replica, once this one's lease lapses) resumes
//! without repeating a finished step.
//!
//! `requested` → a root password made and sealed → `creating` → the instance made (found again
//! by its label if a create may already have happened) → `booting` → the provider reports it
//! running at its addresses; its node registered with the agent channel, `installing` published
//! → `installing` → the bootstrap over SSH (the agent, its site, started pointed at this plane;
//! the key it printed recorded), then the root password retired and a login with it refused →
//! `done`, the node operational. Any step may end `install_failed` with its reason (PV-02).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use capstan_events::agent_channel::rpc::{NodeRegistered, RegisterNode};
use capstan_events::provisioning::{
    InstallFailed, InstallState, InstallStateChanged, InstanceRunning, ProvisionStep,
};
use capstan_events::rpc::{Actor, RpcError};
use capstan_events::{Envelope, NodeId};
use capstan_store::{outbox, Store, StoreError};
use chrono::Utc;
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::SecretString;
use tokio::sync::{Notify, OnceCell};

use crate::domain::{approval, bootstrap, request};
use crate::drivers::seal::Sealer;
use crate::drivers::ssh::{self, SshLimits, SshTarget, Upload};
use crate::drivers::{by_label, CloudProvider, CreateInstance, ProviderError, Providers, Status};
use crate::settings::ProvisioningSettings;
use crate::store::{self, ProvisionRow};

/// How long a replica's hold on a provision lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(60);
/// How often a running step renews its lease (and saves the install's log so far).
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a step that stopped for a passing reason waits before it is tried again.
pub const LATER: Duration = Duration::from_secs(10);
/// How long the agent channel may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// The length of a generated root password (letters and digits).
pub const PASSWORD_CHARS: usize = 32;

/// The bootstrap's scripts, from this repository.
const INSTALL_SH: &str = include_str!("../../../../deploy/agent/install.sh");
const BOOTSTRAP_SH: &str = include_str!("../../../../deploy/agent/bootstrap.sh");
const SYSTEMD_UNIT: &str = include_str!("../../../../deploy/systemd/capstan-agent.service");
const SUPERVISE: &str = include_str!("../../../../deploy/agent/capstan-agent-supervise");

/// The actor this service asks the agent channel as.
pub fn actor() -> Actor {
    Actor::service(capstan_events::Domain::Provisioning)
}

/// What a run reaches.
#[derive(Clone)]
pub struct Workflow {
    pub store: Store,
    pub sealer: Sealer,
    pub providers: Providers,
    pub settings: Arc<ProvisioningSettings>,
    pub bus: capstan_bus::Bus,
    /// This replica's name on the leases it takes.
    pub holder: String,
    /// Wakes auto-approval (a key was recorded, an install finished).
    pub judge: Arc<Notify>,
    /// The agent binary, read once and shared by every session.
    pub agent: Arc<OnceCell<Bytes>>,
    /// The address policy: an instance at a loopback, private or otherwise special address is
    /// not dialled unless the plane allows private targets (labs and tests).
    pub outbound: capstan_runtime::outbound::Outbound,
}

/// Why a step stopped short.
#[derive(Debug, thiserror::Error)]
pub enum Stop {
    /// The provision failed, for this reason (secrets masked): `install_failed`.
    #[error("{0}")]
    Failed(String),
    /// Something that may pass (a provider's 5xx, the bus): tried again later, same step.
    #[error("{0}")]
    Later(String),
    /// Another replica holds the provision, or it is no longer in flight.
    #[error("the provision is not ours to run now")]
    NotOurs,
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Stop {
        Stop::Later(format!("the database: {error}"))
    }
}

fn provider_stop(what: &str, error: ProviderError) -> Stop {
    if error.is_transient() {
        Stop::Later(format!("{what}: {error}"))
    } else {
        Stop::Failed(format!("{what}: {error}"))
    }
}

fn bus_stop(what: &str, error: RpcError) -> Stop {
    Stop::Later(format!("{what}: {}", error.message))
}

/// A root password: [`PASSWORD_CHARS`] letters and digits from the system's random source.
pub fn new_password() -> Result<SecretString, Stop> {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut bytes = [0u8; PASSWORD_CHARS];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Stop::Later("the system's random source failed".into()))?;
    let text: String = bytes
        .iter()
        .map(|byte| ALPHABET[usize::from(*byte) % ALPHABET.len()] as char)
        .collect();
    Ok(SecretString::from(text))
}

impl Workflow {
    /// Runs provision `id` as far as it goes now: to `done`, `install_failed`, or a step to be
    /// tried again later. Takes the lease first; gives it back at the end.
    pub async fn run(&self, id: i64) -> Result<(), StoreError> {
        let now = Utc::now();
        let taken = {
            let mut connection = self.store.acquire().await?;
            store::lease(&mut connection, id, &self.holder, now, now + LEASE).await?
        };
        if !taken {
            return Ok(());
        }
        let ended = self.steps(id).await;
        match ended {
            Ok(()) | Err(Stop::NotOurs) => {}
            Err(Stop::Later(why)) => {
                tracing::warn!(provision_id = id, %why, "provision step to be tried again");
                let mut connection = self.store.acquire().await?;
                store::later(&mut connection, id, Utc::now() + LATER).await?;
            }
            Err(Stop::Failed(reason)) => self.fail(id, &reason).await?,
        }
        let mut connection = self.store.acquire().await?;
        store::release(&mut connection, id, &self.holder).await
    }

    async fn row(&self, id: i64) -> Result<ProvisionRow, Stop> {
        let mut connection = self.store.acquire().await?;
        store::provision(&mut connection, id)
            .await?
            .ok_or(Stop::NotOurs)
    }

    async fn steps(&self, id: i64) -> Result<(), Stop> {
        loop {
            let row = self.row(id).await?;
            match row.step()? {
                ProvisionStep::Requested => self.requested(&row).await?,
                ProvisionStep::Creating => self.creating(&row).await?,
                ProvisionStep::Booting => self.booting(&row).await?,
                ProvisionStep::Installing => self.installing(&row).await?,
                ProvisionStep::Done | ProvisionStep::InstallFailed => return Ok(()),
            }
        }
    }

    async fn advance(&self, id: i64, to: ProvisionStep, detail: Option<&str>) -> Result<(), Stop> {
        let mut connection = self.store.acquire().await?;
        store::set_step(&mut connection, id, to, Utc::now(), detail, None).await?;
        Ok(())
    }

    /// The driver of a provision's account, its token opened for this use only.
    pub async fn driver_of(&self, row: &ProvisionRow) -> Result<Box<dyn CloudProvider>, String> {
        self.driver(row).await.map_err(|stop| stop.to_string())
    }

    async fn driver(&self, row: &ProvisionRow) -> Result<Box<dyn CloudProvider>, Stop> {
        let account = {
            let mut connection = self.store.acquire().await?;
            store::account(&mut connection, row.account_id)
                .await?
                .ok_or_else(|| Stop::Failed(format!("cloud account {} is gone", row.account_id)))?
        };
        let token = self
            .sealer
            .open(account.id, &account.sealed_token)
            .map_err(|error| Stop::Later(format!("the account's token: {error}")))?;
        self.providers
            .driver(account.provider()?, token)
            .map_err(|error| Stop::Failed(error.to_string()))
    }

    fn password(&self, row: &ProvisionRow) -> Result<SecretString, Stop> {
        let sealed = row.sealed_root_password.as_deref().ok_or_else(|| {
            Stop::Failed("the root password is no longer held (it was retired)".into())
        })?;
        self.sealer
            .open_root_password(row.id, sealed)
            .map_err(|error| Stop::Later(format!("the root password: {error}")))
    }

    /// `requested`: the root password made and sealed (kept across a retry).
    async fn requested(&self, row: &ProvisionRow) -> Result<(), Stop> {
        if row.sealed_root_password.is_none() {
            let password = new_password()?;
            let sealed = self
                .sealer
                .seal_root_password(row.id, &password)
                .map_err(|error| Stop::Later(error.to_string()))?;
            let mut connection = self.store.acquire().await?;
            store::set_password(&mut connection, row.id, Some(&sealed)).await?;
        }
        let next = if row.instance_id.is_some() {
            // A retry: the instance exists; see that it runs.
            self.advance(row.id, ProvisionStep::Creating, Some("the instance exists"))
                .await?;
            ProvisionStep::Booting
        } else {
            ProvisionStep::Creating
        };
        self.advance(row.id, next, None).await
    }

    /// `creating`: the instance made once (PV-57's create_once inside the driver); a label
    /// already in the account is the instance an earlier run made.
    async fn creating(&self, row: &ProvisionRow) -> Result<(), Stop> {
        let provider = self.driver(row).await?;
        let (disk_encryption, swap_mb) = request::create_options(row.provider()?);
        let label = request::instance_label(&row.name, row.id);
        let listed = provider
            .list()
            .await
            .map_err(|error| provider_stop("listing the account's servers", error))?;
        let (instance, password) = match by_label(&listed, &label) {
            Some(found) => (found.id.clone(), None),
            None => {
                let created = provider
                    .create(&CreateInstance {
                        label: label.clone(),
                        region: row.region.clone(),
                        size: row.size.clone(),
                        image: row.image.clone(),
                        disk_encryption,
                        swap_mb,
                        tags: request::instance_tags(row.kind()?),
                        root_password: self.password(row)?,
                    })
                    .await
                    .map_err(|error| provider_stop("creating the instance", error))?;
                (created.instance.id, Some(created.root_password))
            }
        };
        let mut transaction = self.store.begin().await?;
        if let Some(password) = password {
            // The provider's own password where it makes one (Hetzner), else the one given.
            let sealed = self
                .sealer
                .seal_root_password(row.id, &password)
                .map_err(|error| Stop::Later(error.to_string()))?;
            store::set_password(&mut transaction, row.id, Some(&sealed)).await?;
        }
        store::set_instance(&mut transaction, row.id, &instance).await?;
        store::set_step(
            &mut transaction,
            row.id,
            ProvisionStep::Booting,
            Utc::now(),
            Some(&format!("instance {instance} ({label})")),
            None,
        )
        .await?;
        transaction.commit().await.map_err(StoreError::from)?;
        Ok(())
    }

    /// `booting`: looks at the instance until the provider reports it running (bounded by
    /// `boot_timeout_secs` from when the step began); then its node is registered and the
    /// install state `installing` published with the addresses.
    async fn booting(&self, row: &ProvisionRow) -> Result<(), Stop> {
        let instance_id = row
            .instance_id
            .clone()
            .ok_or_else(|| Stop::Failed("no instance was recorded".into()))?;
        let provider = self.driver(row).await?;
        let deadline =
            row.step_since + chrono::Duration::seconds(i64::from(self.settings.boot_timeout_secs));
        let pause = Duration::from_millis(u64::from(self.settings.boot_poll_millis));
        let instance = loop {
            let looked = provider.get(&instance_id).await;
            let status = match looked {
                Ok(instance) if instance.status == Status::Running && !instance.ipv4.is_empty() => {
                    break instance
                }
                Ok(instance) => match instance.status {
                    Status::Running => "running without an IPv4 address".to_string(),
                    Status::Starting(word) | Status::Other(word) => word,
                },
                Err(ProviderError::NotFound(_)) => {
                    return Err(Stop::Failed(format!(
                        "the provider has no instance {instance_id} any more"
                    )))
                }
                Err(error) if error.is_transient() => format!("not answered ({error})"),
                Err(error) => return Err(provider_stop("looking at the instance", error)),
            };
            if Utc::now() >= deadline {
                return Err(Stop::Failed(format!(
                    "the instance did not report running within {} s (last: {status})",
                    self.settings.boot_timeout_secs
                )));
            }
            self.renew(row.id).await?;
            tokio::time::sleep(pause).await;
        };
        let ipv4: Vec<String> = instance.ipv4.iter().map(ToString::to_string).collect();
        let ipv6: Vec<String> = instance.ipv6.iter().map(ToString::to_string).collect();
        let node = match row.node_id {
            Some(node) => node,
            None => self.register(row, &ipv4, &ipv6).await?,
        };
        let now = Utc::now();
        let mut transaction = self.store.begin().await?;
        store::set_addresses(&mut transaction, row.id, &ipv4, &ipv6).await?;
        store::set_node(&mut transaction, row.id, node).await?;
        store::set_step(
            &mut transaction,
            row.id,
            ProvisionStep::Installing,
            now,
            Some(&format!("running at {}", ipv4.join(", "))),
            None,
        )
        .await?;
        let running = InstanceRunning {
            provision_id: row.id,
            instance_id: instance_id.clone(),
            ipv4,
            ipv6,
            running_at: now,
        };
        outbox::push(&mut transaction, Envelope::new(running, None)).await?;
        let previous = (row.retries > 0).then_some(InstallState::InstallFailed);
        push_state(
            &mut transaction,
            node,
            Some(InstallState::Installing),
            previous,
        )
        .await?;
        transaction.commit().await.map_err(StoreError::from)?;
        Ok(())
    }

    /// The provision's node, made by the agent channel without an agent (the join binds to it).
    async fn register(
        &self,
        row: &ProvisionRow,
        ipv4: &[String],
        ipv6: &[String],
    ) -> Result<NodeId, Stop> {
        let provision = approval::Provision {
            id: row.id,
            name: row.name.clone(),
            kind: row.kind()?,
            step: row.step()?,
            flag: row.flag()?,
            addresses: Vec::new(),
            expected_key: None,
            node_id: None,
        };
        let asked = RegisterNode {
            actor: actor(),
            reference: format!("provision:{}", row.id),
            name: approval::expected_name(&provision),
            addresses: ipv4.iter().chain(ipv6).cloned().collect(),
        };
        let NodeRegistered { node_id, .. } = self
            .bus
            .ask(&asked, ASK_TIMEOUT)
            .await
            .map_err(|error| bus_stop("registering the node", error))?;
        let mut connection = self.store.acquire().await?;
        store::set_node(&mut connection, row.id, node_id).await?;
        Ok(node_id)
    }

    async fn renew(&self, id: i64) -> Result<(), Stop> {
        let now = Utc::now();
        let mut connection = self.store.acquire().await?;
        if store::lease(&mut connection, id, &self.holder, now, now + LEASE).await? {
            Ok(())
        } else {
            Err(Stop::NotOurs)
        }
    }

    async fn agent_binary(&self) -> Result<Bytes, Stop> {
        let path = self.settings.agent_binary();
        self.agent
            .get_or_try_init(|| async {
                tokio::fs::read(&path)
                    .await
                    .map(Bytes::from)
                    .map_err(|error| {
                        Stop::Failed(format!(
                            "the agent binary {} cannot be read: {error}",
                            path.display()
                        ))
                    })
            })
            .await
            .cloned()
    }

    fn target(&self, row: &ProvisionRow, password: SecretString) -> Result<SshTarget, Stop> {
        let address: std::net::IpAddr = row
            .ipv4
            .first()
            .ok_or_else(|| Stop::Failed("the instance has no IPv4 address".into()))?
            .parse()
            .map_err(|_| Stop::Failed("the instance's IPv4 address does not read".into()))?;
        self.outbound
            .check(address)
            .map_err(|refused| Stop::Failed(format!("the instance's address: {refused}")))?;
        Ok(SshTarget {
            address: std::net::SocketAddr::new(address, self.settings.ssh_port),
            user: self.settings.ssh_user.clone(),
            password,
        })
    }

    fn limits(&self) -> SshLimits {
        SshLimits {
            connect: Duration::from_secs(u64::from(self.settings.ssh_connect_timeout_secs)),
            session: Duration::from_secs(u64::from(self.settings.install_timeout_secs)),
        }
    }

    /// `installing`: the bootstrap (once its key is recorded it is not run again), then the
    /// password's retirement with its proof, then `done`.
    async fn installing(&self, row: &ProvisionRow) -> Result<(), Stop> {
        if row.expected_key.is_none() {
            self.bootstrap(row).await?;
            self.judge.notify_one();
        }
        if !row.password_retired {
            self.retire(&self.row(row.id).await?).await?;
        }
        let node = row
            .node_id
            .ok_or_else(|| Stop::Failed("no node was registered".into()))?;
        let mut transaction = self.store.begin().await?;
        store::set_step(
            &mut transaction,
            row.id,
            ProvisionStep::Done,
            Utc::now(),
            Some("installed; the root password retired"),
            None,
        )
        .await?;
        push_state(&mut transaction, node, None, Some(InstallState::Installing)).await?;
        transaction.commit().await.map_err(StoreError::from)?;
        self.judge.notify_one();
        tracing::info!(provision_id = row.id, node_id = %node, "provision installed");
        Ok(())
    }

    async fn bootstrap(&self, row: &ProvisionRow) -> Result<(), Stop> {
        let plane_url = self.settings.plane_url.clone().ok_or_else(|| {
            Stop::Failed("no plane URL is set (CAPSTAN__PROVISIONING__PLANE_URL)".into())
        })?;
        let target = self.target(row, self.password(row)?)?;
        let parameters =
            bootstrap::parameters(&plane_url, &row.name, row.kind()?, target.address.ip())
                .map_err(|error| Stop::Failed(error.to_string()))?;
        let uploads = self.uploads(parameters).await?;
        let log = Arc::new(Mutex::new(String::new()));
        let saver = self.save_log_while_running(row.id, log.clone());
        // Each line comes masked from the SSH client (drivers::ssh).
        let mut on_line = move |line: &str| {
            if let Ok(mut text) = log.lock() {
                text.push_str(line);
                text.push('\n');
            }
        };
        let ran = ssh::run(
            &target,
            &self.limits(),
            row.host_key.as_deref(),
            &uploads,
            bootstrap::INSTALL_COMMAND,
            &mut on_line,
        )
        .await;
        saver.abort();
        let ran = ran.map_err(|error| self.ssh_stop(row, "the SSH session", error))?;
        let output = ran.output;
        let mut connection = self.store.acquire().await?;
        store::set_host_key(&mut connection, row.id, &ran.host_key).await?;
        store::set_install_log(&mut connection, row.id, bootstrap::kept(&output)).await?;
        if ran.exit_status != 0 {
            return Err(Stop::Failed(bootstrap::failure_reason(
                ran.exit_status,
                &output,
            )));
        }
        let key = bootstrap::agent_key(&output).map_err(|error| Stop::Failed(error.to_string()))?;
        store::set_expected_key(&mut connection, row.id, &key).await?;
        tracing::info!(provision_id = row.id, fingerprint = %key, "install finished; its agent key recorded");
        Ok(())
    }

    /// The files a bootstrap session writes into [`bootstrap::DIRECTORY`]: the agent binary,
    /// this repository's scripts and unit, and the session's parameters.
    async fn uploads(&self, parameters: String) -> Result<Vec<Upload>, Stop> {
        let file = |name: &str, mode: u32, bytes: Bytes| Upload {
            path: format!("{}/{name}", bootstrap::DIRECTORY),
            mode,
            bytes,
        };
        let script = |text: &'static str| Bytes::from_static(text.as_bytes());
        Ok(vec![
            file("capstan-agent", 0o755, self.agent_binary().await?),
            file("install.sh", 0o755, script(INSTALL_SH)),
            file("bootstrap.sh", 0o755, script(BOOTSTRAP_SH)),
            file("capstan-agent.service", 0o644, script(SYSTEMD_UNIT)),
            file("capstan-agent-supervise", 0o755, script(SUPERVISE)),
            file("bootstrap.env", 0o600, Bytes::from(parameters)),
        ])
    }

    /// Saves the install's log so far, renewing the lease, every [`RENEW_EVERY`] until aborted
    /// (or the lease is lost).
    fn save_log_while_running(
        &self,
        id: i64,
        log: Arc<Mutex<String>>,
    ) -> tokio::task::JoinHandle<()> {
        let workflow = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                let text = log.lock().map(|text| text.clone()).unwrap_or_default();
                if workflow.renew(id).await.is_err() {
                    return;
                }
                if let Ok(mut connection) = workflow.store.acquire().await {
                    let _ =
                        store::set_install_log(&mut connection, id, bootstrap::kept(&text)).await;
                }
            }
        })
    }

    /// A session that failed before it logged in (no sshd listening yet on a machine just
    /// booted, or no answer) is tried again while the step is younger than the boot bound;
    /// any other failure, or one past it, fails the provision.
    fn ssh_stop(&self, row: &ProvisionRow, what: &str, error: ssh::SshError) -> Stop {
        let patience = chrono::Duration::seconds(i64::from(self.settings.boot_timeout_secs));
        if error.before_login() && Utc::now() < row.step_since + patience {
            Stop::Later(format!("{what}: {error}"))
        } else {
            Stop::Failed(format!("{what}: {error}"))
        }
    }

    /// PV-06: the password's login locked, and a new login with it refused (the proof); a
    /// machine that refuses it already counts as retired.
    async fn retire(&self, row: &ProvisionRow) -> Result<(), Stop> {
        let password = self.password(row)?;
        let target = self.target(row, password)?;
        let limits = self.limits();
        let host_key = row.host_key.as_deref();
        let refused = |error| self.ssh_stop(row, "retiring the root password", error);
        if !ssh::password_refused(&target, &limits, host_key)
            .await
            .map_err(refused)?
        {
            let ran = ssh::run(
                &target,
                &limits,
                host_key,
                &[],
                bootstrap::RETIRE_COMMAND,
                &mut |_: &str| {},
            )
            .await
            .map_err(refused)?;
            if ran.exit_status != 0 {
                return Err(Stop::Failed(format!(
                    "retiring the root password: the command exited {}",
                    ran.exit_status
                )));
            }
            if !ssh::password_refused(&target, &limits, host_key)
                .await
                .map_err(refused)?
            {
                return Err(Stop::Failed(
                    "the root password is still accepted after its retirement".into(),
                ));
            }
        }
        let mut connection = self.store.acquire().await?;
        store::password_retired(&mut connection, row.id).await?;
        Ok(())
    }

    /// `install_failed` with its reason (PV-02), told with its node's install state.
    async fn fail(&self, id: i64, reason: &str) -> Result<(), StoreError> {
        let mut transaction = self.store.begin().await?;
        let Some(row) = store::provision(&mut transaction, id).await? else {
            return Ok(());
        };
        let step = row.step()?;
        if !crate::domain::install::in_flight(step) {
            return Ok(());
        }
        let now = Utc::now();
        store::set_step(
            &mut transaction,
            id,
            ProvisionStep::InstallFailed,
            now,
            None,
            Some(reason),
        )
        .await?;
        let failed = InstallFailed {
            provision_id: id,
            node_id: row.node_id,
            step,
            reason: reason.to_string(),
            failed_at: now,
        };
        outbox::push(&mut transaction, Envelope::new(failed, None)).await?;
        if let Some(node) = row.node_id {
            let previous = (step == ProvisionStep::Installing).then_some(InstallState::Installing);
            push_state(
                &mut transaction,
                node,
                Some(InstallState::InstallFailed),
                previous,
            )
            .await?;
        }
        transaction.commit().await?;
        tracing::warn!(provision_id = id, %reason, "provision failed");
        Ok(())
    }
}

async fn push_state(
    connection: &mut capstan_store::PgConnection,
    node: NodeId,
    state: Option<InstallState>,
    previous: Option<InstallState>,
) -> Result<(), StoreError> {
    let changed = InstallStateChanged {
        node_id: node,
        state,
        previous,
        changed_at: Utc::now(),
    };
    outbox::push(connection, Envelope::new(changed, None)).await
}
