//! `capstan`: every service of the plane in one process (`capstan all`), one service alone
//! (`capstan <service>`), and the admin commands (`capstan migrate`,
//! `capstan admin create-operator`, ...).
#![forbid(unsafe_code)]

use anyhow::Context;
use capstan_events::{rpc::Level, Domain};
use capstan_runtime::Migrator;
use capstan_settings::Settings;
use clap::{Parser, Subcommand};
use futures::future::BoxFuture;
use settings::AllSections;
use std::process::ExitCode;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

mod http;
mod keys;
mod release;
mod settings;

#[derive(Parser)]
#[command(name = "capstan", version, about = "The Capstan control plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service in this process (the single-machine plane).
    All,
    /// Apply every service's migrations to its schema, then exit.
    Migrate,
    /// Ask one service whether it is ready (its health rpc over NATS): exit 0 when it is,
    /// 1 when not. What container probes run.
    Health {
        /// The service: gateway, agent-channel, incidents, ...
        service: String,
    },
    /// Operator administration: `capstan admin create-operator --name ada --level 10`.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Releases of the agent, run where the signing key lives (never on the plane):
    /// `capstan release keygen|sign|upload|publish`.
    Release {
        #[command(subcommand)]
        command: release::ReleaseCommand,
    },
    /// Run one service alone: gateway, agent-channel, incidents, monitor, backups, rollouts,
    /// provisioning, dns or billing.
    #[command(external_subcommand)]
    Service(Vec<String>),
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an operator and its first API token; prints `token: <token>` once (only a
    /// digest is kept).
    CreateOperator {
        /// Lower-case letters, digits, '.', '_', '@' or '-'.
        #[arg(long)]
        name: String,
        /// 7 reads and runs read jobs, 8 changes, 10 approves joins and disconnects.
        #[arg(long, value_parser = parse_level)]
        level: Level,
        /// Where incident signals are mailed to this operator (optional).
        #[arg(long)]
        email: Option<String>,
    },
    /// Give an operator a new one-time password for the web UI (changed at the next sign-in)
    /// and end their sessions; prints `password: <password>` once.
    ResetPassword {
        #[arg(long)]
        name: String,
    },
    /// Print the `authorization` block of the NATS server's configuration: one user per
    /// service with only its own subjects, and `all` for `capstan all`. Secrets are read by the
    /// server from its environment (`CAPSTAN_NATS_PASSWORD_<USER>`); include the block from
    /// the server's configuration file.
    NatsConfig {
        /// `password` (user and password) or `nkey` (the server holds public nkeys).
        #[arg(long, default_value = "password", value_parser = parse_auth)]
        auth: capstan_bus::access::Auth,
        /// Adds a read-only user for an outside program that follows the events
        /// (docs/subscribing.md); repeatable. Its password is read from
        /// `CAPSTAN_NATS_PASSWORD_<NAME>`; a fresh one is suggested on stderr.
        #[arg(long = "subscriber", value_parser = parse_subscriber)]
        subscribers: Vec<capstan_bus::access::Subscriber>,
    },
}

fn parse_auth(value: &str) -> Result<capstan_bus::access::Auth, String> {
    match value {
        "password" => Ok(capstan_bus::access::Auth::Password),
        "nkey" => Ok(capstan_bus::access::Auth::Nkey),
        other => Err(format!("{other:?} is not one of password, nkey")),
    }
}

fn parse_subscriber(value: &str) -> Result<capstan_bus::access::Subscriber, String> {
    capstan_bus::access::Subscriber::new(value)
}

fn parse_level(value: &str) -> Result<Level, String> {
    let number: u8 = value
        .parse()
        .map_err(|_| format!("{value:?} is not one of 7, 8, 10"))?;
    Level::try_from(number)
}

type Run = fn(Settings, &AllSections, CancellationToken) -> BoxFuture<'static, anyhow::Result<()>>;

/// Each service's `run`, by domain, given its own section: the one table the all-in-one
/// binary needs.
fn runner(domain: Domain) -> Run {
    match domain {
        Domain::Gateway => |s, own, t| Box::pin(capstan_gateway::run(s, own.gateway.clone(), t)),
        Domain::AgentChannel => {
            |s, own, t| Box::pin(capstan_agent_channel::run(s, own.agent_channel.clone(), t))
        }
        Domain::Incidents => |s, own, t| {
            let plane_name = own.gateway.plane_name.clone();
            Box::pin(capstan_incidents::run(
                s,
                (own.incidents.clone(), plane_name),
                t,
            ))
        },
        Domain::Monitor => |s, own, t| Box::pin(capstan_monitor::run(s, own.monitor.clone(), t)),
        Domain::Backups => |s, own, t| Box::pin(capstan_backups::run(s, own.backups.clone(), t)),
        Domain::Rollouts => |s, _, t| Box::pin(capstan_rollouts::run(s, t)),
        Domain::Provisioning => {
            |s, own, t| Box::pin(capstan_provisioning::run(s, own.provisioning.clone(), t))
        }
        Domain::Dns => |s, _, t| Box::pin(capstan_dns::run(s, t)),
        Domain::Billing => |s, _, t| Box::pin(capstan_billing::run(s, t)),
    }
}

/// One service alone (`capstan monitor`), reading the shared sections and its own only.
fn run_alone(domain: Domain) -> ExitCode {
    use capstan_runtime::{main, main_with};
    let name = format!("capstan-{}", domain.service_name());
    match domain {
        Domain::Gateway => main_with(&name, capstan_gateway::run),
        Domain::AgentChannel => main_with(&name, capstan_agent_channel::run),
        Domain::Incidents => main_with(&name, capstan_incidents::run),
        Domain::Monitor => main_with(&name, capstan_monitor::run),
        Domain::Backups => main_with(&name, capstan_backups::run),
        Domain::Rollouts => main(&name, capstan_rollouts::run),
        Domain::Provisioning => main_with(&name, capstan_provisioning::run),
        Domain::Dns => main(&name, capstan_dns::run),
        Domain::Billing => main(&name, capstan_billing::run),
    }
}

fn migrator(domain: Domain) -> &'static Migrator {
    match domain {
        Domain::Gateway => &capstan_gateway::MIGRATOR,
        Domain::AgentChannel => &capstan_agent_channel::MIGRATOR,
        Domain::Incidents => &capstan_incidents::MIGRATOR,
        Domain::Monitor => &capstan_monitor::MIGRATOR,
        Domain::Backups => &capstan_backups::MIGRATOR,
        Domain::Rollouts => &capstan_rollouts::MIGRATOR,
        Domain::Provisioning => &capstan_provisioning::MIGRATOR,
        Domain::Dns => &capstan_dns::MIGRATOR,
        Domain::Billing => &capstan_billing::MIGRATOR,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::All => capstan_runtime::main_with("capstan", run_all),
        Command::Migrate => capstan_runtime::command("capstan", |settings, _| migrate(settings)),
        Command::Health { service } => match service.parse::<Domain>() {
            Ok(domain) => {
                capstan_runtime::command("capstan", move |settings, _| health(settings, domain))
            }
            Err(error) => {
                eprintln!("capstan: {error}");
                ExitCode::from(2)
            }
        },
        Command::Admin {
            command: AdminCommand::CreateOperator { name, level, email },
        } => capstan_runtime::command("capstan", move |settings, _| async move {
            capstan_gateway::admin::create_operator(&settings, &name, level, email.as_deref()).await
        }),
        Command::Admin {
            command: AdminCommand::ResetPassword { name },
        } => capstan_runtime::command("capstan", move |settings, _| async move {
            capstan_gateway::admin::reset_password_command(&settings, &name).await
        }),
        Command::Admin {
            command: AdminCommand::NatsConfig { auth, subscribers },
        } => nats_config(auth, subscribers),
        Command::Release { command } => {
            let ran = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime
                    .block_on(release::run(command))
                    .map_err(|error| format!("capstan release: {error:#}")),
                Err(error) => Err(format!("capstan: cannot start: {error}")),
            };
            if let Err(said) = ran {
                eprintln!("{said}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Command::Service(words) => {
            let name = words.first().map(String::as_str).unwrap_or_default();
            match name.parse::<Domain>() {
                Ok(domain) => run_alone(domain),
                Err(error) => {
                    eprintln!("capstan: {error}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `capstan admin nats-config`: the server's `authorization` block on standard output, and a
/// fresh password for each new subscriber on standard error.
fn nats_config(
    auth: capstan_bus::access::Auth,
    mut subscribers: Vec<capstan_bus::access::Subscriber>,
) -> ExitCode {
    // A name given twice is one user (the server refuses a user defined twice).
    let mut seen = std::collections::BTreeSet::new();
    subscribers.retain(|subscriber| seen.insert(subscriber.name().to_string()));
    print!(
        "{}",
        capstan_bus::access::authorization_with(auth, &subscribers)
    );
    // A password for each new subscriber, for the operator to put in the server's
    // environment and give the program; never in the configuration itself.
    if auth == capstan_bus::access::Auth::Password {
        for subscriber in &subscribers {
            eprintln!(
                "{}={}",
                subscriber.secret_variable(auth),
                capstan_bus::access::generate_password()
            );
        }
    }
    ExitCode::SUCCESS
}

/// Every service together; the first to fail stops the others.
async fn run_all(
    settings: Settings,
    mut own: AllSections,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Start-up, before any service runs: a few small file operations.
    keys::ensure_seal_key(&mut own.backups, &settings.nats).context("the backups seal key")?;
    keys::ensure_seal_key(&mut own.provisioning, &settings.nats)
        .context("the provisioning seal key")?;
    let stop = shutdown.child_token();
    let mut services = JoinSet::new();
    for domain in Domain::ALL {
        let run = runner(domain)(settings.clone(), &own, stop.clone());
        services.spawn(async move { (domain, run.await) });
    }
    let mut first_failure = None;
    while let Some(finished) = services.join_next().await {
        match finished {
            Ok((domain, Ok(()))) => info!(service = %domain, "service stopped"),
            Ok((domain, Err(error))) => {
                error!(service = %domain, error = format!("{error:#}"), "service failed, stopping the plane");
                stop.cancel();
                first_failure.get_or_insert(error);
            }
            Err(panic) => {
                stop.cancel();
                first_failure.get_or_insert(anyhow::anyhow!("a service panicked: {panic}"));
            }
        }
    }
    first_failure.map_or(Ok(()), Err)
}

async fn migrate(settings: Settings) -> anyhow::Result<()> {
    for domain in Domain::ALL {
        capstan_runtime::migrate_only(&settings, domain, migrator(domain))
            .await
            .with_context(|| format!("migrating {domain}"))?;
        info!(service = %domain, "migrated");
    }
    Ok(())
}

async fn health(settings: Settings, domain: Domain) -> anyhow::Result<()> {
    // With the asked service's reply prefix: run beside a service with that service's
    // credentials, the probe may read only that service's replies.
    let mut options = capstan_runtime::bus_options(&settings, domain);
    options.name = "capstan-health".into();
    let bus = capstan_bus::Bus::connect_with(&options)
        .await
        .context("connecting to NATS")?;
    let health: capstan_events::rpc::Health = bus
        .health(domain, settings.bus.rpc_timeout())
        .await
        .with_context(|| format!("asking {domain} for its health"))?;
    anyhow::ensure!(health.ready, "{domain} answers but is not ready");
    println!("{} {} ready", health.service, health.version);
    Ok(())
}
