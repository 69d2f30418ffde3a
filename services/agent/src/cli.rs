//! The command line (AG-06, AG-13): `join`, `status`, `enable`, `disable`, `leave`, `run`,
//! `approve`, `deny`, `log-access`, `recipes`, `--version`. Every command takes `--state-dir`.

use anyhow::{bail, Context as _};
use chrono::Utc;
use clap::{Parser, Subcommand};
use serde_json::{json, Value};
use std::{path::PathBuf, process::ExitCode, time::Duration};

use crate::{
    config::{Config, Services},
    domain::{
        join::{name_from_hostname, next_step, valid_name, JoinStep, Pairing},
        AGENT_VERSION, JOIN_STATUS_EVERY, JOIN_WAIT, MAX_ANSWER_BYTES,
    },
    join::{self, JoinError},
    plane::{base_url, Plane},
    state::{self, Identity, RunStatus, StateDir},
};

/// Prints a line of a command's answer to stdout (as `println!`), ending the command quietly
/// when its reader has gone away (`capstan-agent recipes | head`): Rust ignores SIGPIPE, so
/// `println!` would panic with "failed printing to stdout: Broken pipe".
macro_rules! say {
    ($($arg:tt)*) => {
        say_text(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `text` to stdout. A reader gone away (EPIPE) ends the process quietly with success,
/// as `head` expects of a writer; any other failure to write ends it with a message and 1.
fn say_text(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("capstan-agent: cannot write to stdout: {error}");
        std::process::exit(1);
    }
}

/// The state directory when none is given; the systemd unit makes it the one place the agent
/// may write.
pub const DEFAULT_STATE_DIR: &str = "/etc/capstan-agent";

#[derive(Debug, Parser)]
#[command(
    name = "capstan-agent",
    version = AGENT_VERSION,
    about = "The Capstan node agent: joins a management node, takes work from it, and runs only the words compiled into it"
)]
pub struct Cli {
    /// Where the agent keeps its identity, switches and policy (0700).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_STATE_DIR",
        default_value = DEFAULT_STATE_DIR
    )]
    pub state_dir: PathBuf,
    /// The site's root directory; absent on a machine with no site.
    #[arg(long, global = true, env = "CAPSTAN_AGENT_SITE_ROOT")]
    pub site_root: Option<PathBuf>,
    /// Where certificate lineages live.
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_LETSENCRYPT_DIR",
        default_value = "/etc/letsencrypt/live"
    )]
    pub letsencrypt_dir: PathBuf,
    /// host:port where PostgreSQL should answer.
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_POSTGRES",
        default_value = "127.0.0.1:5432"
    )]
    pub postgres: String,
    /// The web server's unit, for service_health (one of the compiled units).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_WEB_UNIT",
        default_value = "nginx"
    )]
    pub web_unit: String,
    /// The app server's unit, for service_health; `none` for a site with none.
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_APP_UNIT",
        default_value = "php-fpm"
    )]
    pub app_unit: String,
    /// Where the web server answers for the site on this machine (http://, the host sent as
    /// the site's name).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_SITE_URL",
        default_value = "http://127.0.0.1/"
    )]
    pub site_url: String,
    /// supervisord's `supervisorctl`, when supervisord rather than systemd supervises the
    /// site's services.
    #[arg(long, global = true, env = "CAPSTAN_AGENT_SUPERVISORCTL")]
    pub supervisorctl: Option<PathBuf>,
    /// Seconds between recipe ticks (ten minutes; shorter only for tests).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_RECIPE_TICK_SECS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub recipe_tick_secs: u64,
    /// Seconds between the site release's manifest checks: an unusable manifest of the
    /// installed release is recovered from the management node (AG-34) and its deployment files
    /// settled (AG-37).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_MANIFEST_TICK_SECS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub manifest_tick_secs: u64,
    /// One directory of nginx site files to read instead of the compiled set
    /// (/etc/nginx/sites-enabled, /etc/nginx/conf.d); for tests.
    #[arg(long, global = true, env = "CAPSTAN_AGENT_NGINX_DIR")]
    pub nginx_dir: Option<PathBuf>,
    /// The port the machine's own web server serves TLS on (certificate_expiry).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_TLS_PORT",
        default_value_t = 443,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub tls_port: u16,
    /// The Docker engine's API socket (container_health, restart_container).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_DOCKER_SOCKET",
        default_value = "/var/run/docker.sock"
    )]
    pub docker_socket: PathBuf,
    /// The mount point the site's data lives on (PostgreSQL's data directory, uploads): while
    /// it is not mounted, service_health repairs nothing (AG-55).
    #[arg(long, global = true, env = "CAPSTAN_AGENT_DATA_ROOT")]
    pub data_root: Option<PathBuf>,
    /// Where a machine with no site unpacks its support bundle: the tree its scripts are
    /// verified against and run from (replaced whole whenever the bundle on offer changes).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_BUNDLE_DIR",
        default_value = crate::domain::script_trust::DEFAULT_BUNDLE_DIR
    )]
    pub bundle_dir: PathBuf,
    /// Seconds a new version of the agent runs on trial before it is trusted (AG-29: three
    /// minutes).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_TRIAL_SECS",
        default_value_t = crate::domain::update::TRIAL_UPTIME.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub trial_secs: u64,
    /// Seconds between the agent's asks for the release on offer (five minutes).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_UPDATE_EVERY_SECS",
        default_value_t = crate::domain::update::CHECK_EVERY.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub update_every_secs: u64,
    /// Seconds an `unlogged` verdict stands before it is reported (AG-31: fifteen minutes).
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_AGENT_UNLOGGED_GRACE_SECS",
        default_value_t = crate::domain::public_log::UNLOGGED_GRACE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub unlogged_grace_secs: u64,
    /// The local IP address this machine's connections to the management node are made from
    /// (bound before connecting; the plane sees it as the source address). Default: the
    /// system's choice.
    #[arg(long, global = true, env = "CAPSTAN_AGENT_LOCAL_ADDRESS")]
    pub local_address: Option<String>,
    /// What is logged, to stderr: a tracing filter such as `info` or `capstan_agent=debug`
    /// (default: `info` for run, `warn` for the other commands).
    #[arg(long, global = true, env = "CAPSTAN_AGENT_LOG")]
    pub log: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ask a management node to admit this machine (sends only the public key).
    Join {
        #[arg(long = "management-node", value_name = "URL")]
        management_node: String,
        /// The name the pending request shows (default: the hostname).
        #[arg(long)]
        name: Option<String>,
        /// Return once the request is lodged instead of waiting up to five minutes.
        #[arg(long)]
        no_wait: bool,
    },
    /// Show the pairing, fingerprint, management node, switches, version and last claim.
    Status,
    /// Switch the agent on: it takes work while paired.
    Enable,
    /// Switch the agent off: it takes no work.
    Disable,
    /// Say goodbye to the management node and delete this machine's identity.
    Leave,
    /// Run the agent (what the service runs).
    Run,
    /// Approve a job the policy holds for approval on this node.
    Approve { job: i64 },
    /// Deny a job the policy holds for approval on this node.
    Deny { job: i64 },
    /// The owner's log access switch (off by default): on allows the log words and file_head.
    LogAccess {
        #[arg(value_parser = ["on", "off"])]
        switch: String,
    },
    /// Each recipe's mode, last verdict, attempts in this run, open case and hold.
    Recipes,
    /// The owner's recovery key for backups: `set age1...` writes a challenge encrypted to it;
    /// `prove <answer>` completes it with what `age -d` printed; `show` says where it stands.
    RecoveryKey {
        #[command(subcommand)]
        action: RecoveryKeyAction,
    },
    /// Before every start (systemd's ExecStartPre, the cron keepalive): while a new version is
    /// on trial with a .bak kept, a binary that cannot answer --version, or that was started
    /// twice without once recording its start, is replaced by the .bak and its version
    /// rejected; otherwise the start is counted (AG-29, AG-30).
    StartGuard {
        /// The agent binary to guard (default: this one). The shipped supervision runs the
        /// guard from the .bak with --binary naming the agent's path.
        #[arg(long)]
        binary: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RecoveryKeyAction {
    /// Set the owner's recovery key (an age X25519 public key, age1...): prints a challenge
    /// to decrypt with `age -d -i <your key file>`.
    Set { recipient: String },
    /// Complete the challenge with the line `age -d` printed.
    Prove { answer: String },
    /// Show the recovery key's state and fingerprint (as check_status reports it).
    Show,
}

/// Parses the command line, runs the command, and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = if matches!(cli.command, Command::Run) {
        "info"
    } else {
        "warn"
    };
    let filter = match cli
        .log
        .as_deref()
        .map(tracing_subscriber::EnvFilter::try_new)
    {
        Some(Ok(filter)) => filter,
        Some(Err(error)) => {
            eprintln!(
                "capstan-agent: --log (CAPSTAN_AGENT_LOG) is not a log filter ({error}); logging at {level}"
            );
            tracing_subscriber::EnvFilter::new(level)
        }
        None => tracing_subscriber::EnvFilter::new(level),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("capstan-agent: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("capstan-agent: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let state = StateDir::open(&cli.state_dir)
        .with_context(|| format!("the state directory {}", cli.state_dir.display()))?;
    let (command, config, update_settings) = settings_of(cli, &state)?;
    match command {
        Command::Join {
            management_node,
            name,
            no_wait,
        } => join_command(&state, &config, &management_node, name, no_wait).await,
        Command::Status => status(&state).map(|()| ExitCode::SUCCESS),
        Command::Enable => {
            state.write(state::ENABLED, b"enabled\n", 0o600)?;
            say!("enabled: the agent takes work while paired");
            Ok(ExitCode::SUCCESS)
        }
        Command::Disable => {
            state.remove(state::ENABLED)?;
            say!("disabled: the agent takes no work");
            Ok(ExitCode::SUCCESS)
        }
        Command::LogAccess { switch } => {
            state.write(state::LOG_ACCESS, format!("{switch}\n").as_bytes(), 0o600)?;
            say!("log access {switch}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Leave => leave(&state, &config).await,
        Command::Run => crate::run::run(state, config, update_settings)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Recipes => {
            for line in crate::recipes::describe::describe(&state, &config) {
                say!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::StartGuard { binary } => {
            let paths = match binary {
                Some(binary) => crate::update::Paths::of(&binary),
                None => crate::update::Paths::current()?,
            };
            say!("{}", crate::update::start_guard(&paths).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::RecoveryKey { action } => recovery_key(&state, action),
        Command::Approve { job } => decide(&state, job, "approve"),
        Command::Deny { job } => decide(&state, job, "deny"),
    }
}

/// What the command line says, checked: the command to run, the agent's configuration and its
/// self-update settings.
fn settings_of(
    cli: Cli,
    state: &StateDir,
) -> anyhow::Result<(Command, Config, crate::update::Settings)> {
    let units = capstan_events::agent_channel::primitives::UNITS;
    if !units.contains(&cli.web_unit.as_str()) {
        bail!("--web-unit must be one of {}", units.join(", "));
    }
    let app_unit = match cli.app_unit.as_str() {
        "none" => None,
        unit if units.contains(&unit) => Some(unit.to_string()),
        _ => bail!("--app-unit must be none or one of {}", units.join(", ")),
    };
    if let Some(root) = cli.data_root.as_ref().filter(|root| !root.is_absolute()) {
        bail!(
            "--data-root (CAPSTAN_AGENT_DATA_ROOT) must be an absolute path, not {}",
            root.display()
        );
    }
    let local_address = match cli.local_address.as_deref() {
        None | Some("") => None,
        Some(text) => Some(crate::domain::join::local_address(text).map_err(anyhow::Error::msg)?),
    };
    let update_settings = crate::update::Settings {
        trial: Duration::from_secs(cli.trial_secs),
        check_every: Duration::from_secs(cli.update_every_secs),
        unlogged_grace: Duration::from_secs(cli.unlogged_grace_secs),
    };
    let config = Config {
        site_root: cli.site_root,
        letsencrypt_dir: cli.letsencrypt_dir,
        postgres: cli.postgres,
        services: Services {
            web_unit: cli.web_unit,
            app_unit,
            site_url: cli.site_url,
            supervisorctl: cli.supervisorctl,
        },
        recipe_tick: Duration::from_secs(cli.recipe_tick_secs),
        manifest_tick: Duration::from_secs(cli.manifest_tick_secs),
        nginx_dirs: match cli.nginx_dir {
            Some(dir) => vec![dir],
            None => crate::config::NGINX_SITE_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
        },
        tls_port: cli.tls_port,
        docker_socket: cli.docker_socket,
        container_holds: state.file("sites"),
        state_dir: cli.state_dir.clone(),
        data_root: cli.data_root,
        bundle_dir: cli.bundle_dir,
        local_address,
    };
    Ok((cli.command, config, update_settings))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default()
}

async fn join_command(
    state: &StateDir,
    config: &Config,
    management_node: &str,
    name: Option<String>,
    no_wait: bool,
) -> anyhow::Result<ExitCode> {
    let management_node = base_url(management_node).map_err(anyhow::Error::msg)?;
    if let Some(name) = &name {
        if !valid_name(name) {
            bail!("--name must match ^[a-z0-9][a-z0-9._-]{{0,63}}$");
        }
    }
    let plane = Plane::new(&management_node, config.local_address).map_err(anyhow::Error::msg)?;
    let (identity, saved) = staged_identity(state, &management_node, name)?;
    let identity = join::ask(state, config, &plane, identity, saved.as_deref()).await?;
    say!(
        "asked {management_node} to admit this machine as {:?}",
        identity.name
    );
    say!("fingerprint: {}", identity.fingerprint);
    say!("compare it with the pending request on the management node before approving it");
    if let Pairing::Rejected { .. } = identity.pairing {
        say!("rejected: the key is kept and asks again every five minutes; an operator may reopen the request");
        return Ok(ExitCode::FAILURE);
    }
    if no_wait {
        say!("the running agent finishes the join when the management node approves it");
        return Ok(ExitCode::SUCCESS);
    }
    wait_for_answer(state, config, &plane, &management_node, identity).await
}

/// The identity a join asks with, and the fingerprint already staged, if any: a pending or
/// rejected key asks again (AG-11), a disconnected node joins with a new key, and a paired
/// machine or a join staged elsewhere is refused.
fn staged_identity(
    state: &StateDir,
    management_node: &str,
    name: Option<String>,
) -> anyhow::Result<(Identity, Option<String>)> {
    let existing = state.identity()?;
    Ok(match existing {
        Some(identity) => match identity.pairing.clone() {
            Pairing::Paired { node_id, .. } => bail!(
                "this machine is already paired with {} as node {node_id}; run `capstan-agent leave` first",
                identity.management_node
            ),
            Pairing::Pending { .. } | Pairing::Rejected { .. }
                if identity.management_node != management_node =>
            {
                bail!(
                    "a join to {} is staged; run `capstan-agent leave` to discard it first",
                    identity.management_node
                )
            }
            // The same key asks again (a rejected key is kept, AG-11).
            Pairing::Pending { .. } | Pairing::Rejected { .. } => {
                let fingerprint = identity.fingerprint.clone();
                let mut identity = identity;
                if let Some(name) = name {
                    identity.name = name;
                }
                (identity, Some(fingerprint))
            }
            // A disconnected node joins again with a new key.
            Pairing::Disconnected { .. } => {
                let fingerprint = identity.fingerprint.clone();
                let name = name.unwrap_or(identity.name);
                (join::new_identity(management_node, &name), Some(fingerprint))
            }
        },
        None => {
            let name = name.unwrap_or_else(|| name_from_hostname(&hostname()));
            (join::new_identity(management_node, &name), None)
        }
    })
}

/// Waits up to five minutes for the plane's answer, asking its status now and then and asking
/// again when the staged request expired; the running agent finishes the join otherwise.
async fn wait_for_answer(
    state: &StateDir,
    config: &Config,
    plane: &Plane,
    management_node: &str,
    mut identity: Identity,
) -> anyhow::Result<ExitCode> {
    let deadline = tokio::time::Instant::now() + JOIN_WAIT;
    let mut last_check = None;
    loop {
        if let Pairing::Paired { node_id, .. } = identity.pairing {
            say!("approved: this machine is node {node_id} on {management_node}");
            return Ok(ExitCode::SUCCESS);
        }
        if let Pairing::Rejected { .. } = identity.pairing {
            say!("rejected: the key is kept and asks again every five minutes; an operator may reopen the request");
            return Ok(ExitCode::FAILURE);
        }
        if tokio::time::Instant::now() >= deadline {
            say!("no answer within five minutes; the running agent finishes the join when the management node approves it");
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(JOIN_STATUS_EVERY).await;
        // The running agent may have answered it meanwhile (or replaced a retired key).
        match state.identity()? {
            Some(current) => identity = current,
            None => bail!("the identity was deleted (capstan-agent leave) while waiting"),
        }
        let now = Utc::now();
        let step = next_step(&identity.pairing, last_check, now);
        let fingerprint = identity.fingerprint.clone();
        let advanced = match step {
            JoinStep::Wait => continue,
            JoinStep::AskStatus => {
                last_check = Some(now);
                join::check(state, config, plane, identity.clone()).await
            }
            JoinStep::AskAgain => {
                join::ask(state, config, plane, identity.clone(), Some(&fingerprint)).await
            }
        };
        match advanced {
            Ok(next) => {
                if next.fingerprint != fingerprint {
                    say!(
                        "the management node retired the key; new fingerprint: {}",
                        next.fingerprint
                    );
                }
                identity = next;
            }
            Err(JoinError::Superseded) => {}
            Err(error) => eprintln!("capstan-agent: {error} (still waiting)"),
        }
    }
}

/// AG-09: finishes any running job (by taking the job lock), sends one signed goodbye, and
/// deletes the identity even when the goodbye cannot be delivered.
async fn leave(state: &StateDir, config: &Config) -> anyhow::Result<ExitCode> {
    state.write(state::LEAVE_REQUEST, b"leave\n", 0o600)?;
    let lock = match state.try_lock(state::JOB_LOCK)? {
        Some(lock) => lock,
        None => {
            say!("waiting for the running agent to finish its job");
            let locking = state.clone();
            tokio::task::spawn_blocking(move || locking.lock(state::JOB_LOCK)).await??
        }
    };
    let outcome = goodbye(state, config).await;
    let _ = state.remove(state::LEAVE_REQUEST);
    drop(lock);
    outcome
}

async fn goodbye(state: &StateDir, config: &Config) -> anyhow::Result<ExitCode> {
    let identity = match state.identity() {
        Ok(Some(identity)) => identity,
        Ok(None) => {
            say!("this machine is not paired; nothing to leave");
            return Ok(ExitCode::SUCCESS);
        }
        // An identity the agent cannot trust is deleted all the same.
        Err(error) => {
            eprintln!("capstan-agent: {error}; deleting it");
            state.remove(state::IDENTITY)?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    if let Pairing::Paired { node_id, .. } = identity.pairing {
        let said = match (
            Plane::new(&identity.management_node, config.local_address),
            identity.key(),
        ) {
            (Ok(plane), Ok(key)) => plane
                .send(
                    &key,
                    "leave",
                    "",
                    &json!({}),
                    MAX_ANSWER_BYTES,
                    Duration::ZERO,
                )
                .await
                .map(|_| ())
                .map_err(|error| error.to_string()),
            (Err(error), _) => Err(error.to_string()),
            (_, Err(error)) => Err(error.to_string()),
        };
        match said {
            Ok(()) => say!(
                "said goodbye to {}: it forgot this machine's key (node {node_id})",
                identity.management_node
            ),
            Err(error) => say!(
                "the goodbye could not be delivered ({error}); the identity is deleted anyway: disconnect node {node_id} on {} too",
                identity.management_node
            ),
        }
    }
    state.remove(state::IDENTITY)?;
    for name in state.names_with_prefix("awaiting-")? {
        state.remove(&name)?;
    }
    say!("left: the identity is deleted; the agent takes no work until it joins again");
    Ok(ExitCode::SUCCESS)
}

fn recovery_key(state: &StateDir, action: RecoveryKeyAction) -> anyhow::Result<ExitCode> {
    use crate::backups::keys;
    match action {
        RecoveryKeyAction::Set { recipient } => {
            let challenge =
                keys::set_recovery_key(state, &recipient).map_err(anyhow::Error::msg)?;
            let path = state.file(keys::RECOVERY_CHALLENGE);
            say!("recovery key set, not yet proven: decrypt this challenge where your private key is,");
            say!("  age -d -i <your key file> {}", path.display());
            say!("then run: capstan-agent recovery-key prove <the line it printed>");
            say!("");
            say_text(&challenge);
            Ok(ExitCode::SUCCESS)
        }
        RecoveryKeyAction::Prove { answer } => {
            let key = keys::prove_recovery_key(state, &answer).map_err(anyhow::Error::msg)?;
            say!(
                "recovery key proven: backups from now on are sealed to {} (fingerprint {})",
                key.recipient,
                crate::domain::backup::sha256_hex(key.recipient.as_bytes())
            );
            Ok(ExitCode::SUCCESS)
        }
        RecoveryKeyAction::Show => {
            let report = crate::domain::backup::recovery_key_report(
                &keys::recovery_key(state),
                keys::recipient_parses,
            );
            say!("{report}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn decide(state: &StateDir, job: i64, decision: &str) -> anyhow::Result<ExitCode> {
    let Some(waiting) = state.read_json::<Value>(&state::awaiting(job))? else {
        bail!("no job {job} is waiting for approval on this node");
    };
    state.write(
        &state::decision(job),
        format!("{decision}\n").as_bytes(),
        0o600,
    )?;
    let verb = if decision == "approve" {
        "approved"
    } else {
        "denied"
    };
    say!(
        "{verb} job {job}: {} {}",
        waiting["primitive"].as_str().unwrap_or("?"),
        waiting["params"]
    );
    Ok(ExitCode::SUCCESS)
}

fn status(state: &StateDir) -> anyhow::Result<()> {
    say!("version: {AGENT_VERSION}");
    match state.identity() {
        Ok(Some(identity)) => {
            say!("pairing: {}", identity.pairing.describe());
            say!("fingerprint: {}", identity.fingerprint);
            say!("management node: {}", identity.management_node);
            say!("name: {}", identity.name);
        }
        Ok(None) => say!("pairing: not paired"),
        Err(error) => say!("pairing: unreadable: {error}"),
    }
    say!("enabled: {}", if state.enabled() { "yes" } else { "no" });
    let (log_access, note) = state.log_access();
    say!("log access: {}", if log_access { "on" } else { "off" });
    if let Some(note) = note {
        say!("  {note}");
    }
    say!("policy: {}", state.policy().describe());
    let running = state.try_lock(state::RUN_LOCK)?.is_none();
    let recorded: Option<RunStatus> = state.read_json(state::STATUS).unwrap_or_default();
    match (running, recorded) {
        (true, Some(recorded)) => {
            say!(
                "agent: running (pid {}): {}",
                recorded.pid,
                recorded.connection
            );
            print_run_status(&recorded);
        }
        (true, None) => say!("agent: running"),
        (false, Some(recorded)) => {
            say!("agent: not running (last: {})", recorded.connection);
            print_run_status(&recorded);
        }
        (false, None) => say!("agent: not running"),
    }
    for name in state.names_with_prefix("awaiting-")? {
        if let Ok(Some(waiting)) = state.read_json::<Value>(&name) {
            say!(
                "waiting for approval: job {} {} {} (capstan-agent approve|deny {})",
                waiting["job_id"],
                waiting["primitive"].as_str().unwrap_or("?"),
                waiting["params"],
                waiting["job_id"]
            );
        }
    }
    Ok(())
}

fn print_run_status(recorded: &RunStatus) {
    match (&recorded.last_claim_at, &recorded.last_claim) {
        (Some(at), Some(claim)) => say!("last claim: {} at {}", claim, at.to_rfc3339()),
        _ => say!("last claim: none yet"),
    }
    if let Some(error) = &recorded.last_error {
        say!("last error: {error}");
    }
    if let Some(crashed) = &recorded.crashed_job {
        say!("note: {crashed}");
    }
    for note in &recorded.notes {
        say!("note: {note}");
    }
}
