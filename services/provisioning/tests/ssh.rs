//! The plane's SSH client (`drivers::ssh`) against Debian's real sshd, one per stand-in instance
//! (`standin::sshd`): uploads and a command with their output and exit status, a wrong password
//! and a changed host key refused, the password's retirement proved by a refused login (PV-06),
//! the password in no process's arguments while a session runs (PV-05), and this machine's own
//! `/etc/shadow` untouched by what ran inside.
//!
//! Needs root (namespaces, mounts) and openssh-server (`deploy/local/test` installs it): as
//! anyone else every test fails saying so. Each test uses addresses of its own (127.0.2xx.y) and
//! a free port, so tests run side by side with each other and with other suites' stand-ins.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_provisioning::drivers::api::{http, Limits};
use capstan_provisioning::drivers::hetzner::Hetzner;
use capstan_provisioning::drivers::ssh::{
    self, password_refused, SshError, SshLimits, SshRun, SshTarget, Upload, MASK,
};
use capstan_provisioning::drivers::{CloudProvider, CreateInstance, Status};
use capstan_provisioning::standin::sshd::{free_port, Machine};
use capstan_provisioning::standin::{Flavor, StandIn};
use secrecy::SecretString;

const PASSWORD: &str = "Pv05-mach1ne-passw0rd";

fn require_root_and_sshd() {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let root = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    assert!(
        root,
        "these tests start sshd in namespaces of its own and need root: run them as root"
    );
    assert!(
        std::path::Path::new("/usr/sbin/sshd").exists(),
        "/usr/sbin/sshd is missing: install openssh-server (deploy/local/test does, ensure_sshd)"
    );
}

async fn machine(address: Ipv4Addr, port: u16) -> Machine {
    require_root_and_sshd();
    Machine::start(address, port, PASSWORD, &[]).await
}

fn target(machine: &Machine, password: &str) -> SshTarget {
    SshTarget {
        address: SocketAddr::from((machine.address, machine.port)),
        user: "root".into(),
        password: SecretString::from(password.to_string()),
    }
}

fn limits() -> SshLimits {
    SshLimits {
        connect: Duration::from_secs(15),
        session: Duration::from_secs(60),
    }
}

async fn run(
    target: &SshTarget,
    expected: Option<&str>,
    uploads: &[Upload],
    command: &str,
) -> (Result<SshRun, SshError>, Vec<String>) {
    let mut lines = Vec::new();
    let result = ssh::run(target, &limits(), expected, uploads, command, &mut |line| {
        lines.push(line.to_string())
    })
    .await;
    (result, lines)
}

fn sha256(path: &str) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"));
    ring::digest::digest(&ring::digest::SHA256, &bytes)
        .as_ref()
        .to_vec()
}

#[tokio::test]
async fn uploads_land_with_their_mode_and_the_command_s_output_and_status_come_back_masked() {
    let machine = machine(Ipv4Addr::new(127, 0, 201, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let uploads = [
        Upload {
            path: "/srv/capstan/deep/install.sh".into(),
            mode: 0o750,
            bytes: Bytes::from_static(
                b"#!/bin/sh\necho \"installing as $(id -un)\"\necho to-stderr >&2\ncat /etc/capstan-agent/agent.env\nexit 3\n",
            ),
        },
        Upload {
            path: "/etc/capstan-agent/agent.env".into(),
            mode: 0o600,
            bytes: Bytes::from(format!("ROOT_PASSWORD={PASSWORD}\n")),
        },
    ];
    let (result, lines) = run(&target, None, &uploads, "/srv/capstan/deep/install.sh").await;
    let big: Vec<u8> = (0..6 * 1024 * 1024u32)
        .map(|index| (index % 251) as u8)
        .collect();
    let done = result.expect("the session runs");
    assert_eq!(done.exit_status, 3, "the command's own exit status");
    assert!(done.host_key.starts_with("SHA256:"), "{}", done.host_key);
    assert!(
        lines.contains(&"installing as root".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"to-stderr".to_string()),
        "stderr too: {lines:?}"
    );
    assert!(
        lines.contains(&format!("ROOT_PASSWORD={MASK}")),
        "the password is masked in the streamed lines: {lines:?}"
    );
    assert!(!done.output.contains(PASSWORD), "{}", done.output);
    assert!(lines.iter().all(|line| !line.contains(PASSWORD)));
    assert!(done.output.contains("installing as root\n"));

    // The files are where the install expects them, with their modes, inside the machine only.
    let script = machine.path("/srv/capstan/deep/install.sh");
    let meta = std::fs::metadata(&script).expect("the uploaded script");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
    let env = std::fs::read_to_string(machine.path("/etc/capstan-agent/agent.env"))
        .expect("the uploaded env file");
    assert_eq!(env, format!("ROOT_PASSWORD={PASSWORD}\n"));
    assert!(
        !std::path::Path::new("/etc/capstan-agent/agent.env").exists()
            || std::fs::read_to_string("/etc/capstan-agent/agent.env").unwrap_or_default() != env,
        "the upload reached this machine's own /etc"
    );
    assert!(!std::path::Path::new("/srv/capstan/deep").exists());

    // The recorded key lets the next session in; a file larger than the channel's window
    // arrives whole (input is written while the channel's messages are read).
    let large = [Upload {
        path: "/usr/local/bin/capstan-agent".into(),
        mode: 0o755,
        bytes: Bytes::from(big.clone()),
    }];
    let (again, _) = run(
        &target,
        Some(&done.host_key),
        &large,
        "wc -c < /usr/local/bin/capstan-agent",
    )
    .await;
    let again = again.expect("the same key");
    assert_eq!(again.exit_status, 0);
    assert_eq!(again.output.trim(), big.len().to_string());
    assert_eq!(
        std::fs::read(machine.path("/usr/local/bin/capstan-agent")).expect("the binary"),
        big
    );
    assert!(
        std::fs::read("/usr/local/bin/capstan-agent").map_or(true, |bytes| bytes != big),
        "the upload reached this machine's own /usr/local"
    );
    // /run is the machine's own and empty but for what sshd needs: no systemd of this
    // machine's for an install to find.
    let (listing, _) = run(&target, Some(&done.host_key), &[], "ls -A /run").await;
    let listing = listing.expect("listed").output;
    let entries: Vec<&str> = listing.lines().collect();
    assert!(entries.contains(&"sshd"), "{entries:?}");
    let own: Vec<String> = std::fs::read_dir("/run")
        .expect("this machine's /run")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().to_string())
        .filter(|name| !["lock", "sshd", "mount"].contains(&name.as_str()))
        .collect();
    assert!(
        own.iter().all(|name| !entries.contains(&name.as_str())),
        "the machine sees this machine's /run: {entries:?}"
    );
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_the_error_names_no_password() {
    let machine = machine(Ipv4Addr::new(127, 0, 202, 1), free_port()).await;
    let wrong = target(&machine, "not-the-password-at-all");
    let (result, lines) = run(&wrong, None, &[], "true").await;
    let error = result.expect_err("refused");
    assert_eq!(
        error,
        SshError::AuthRefused {
            user: "root".into()
        }
    );
    assert!(!error.to_string().contains("not-the-password-at-all"));
    assert!(lines.is_empty());
}

#[tokio::test]
async fn nothing_listening_is_unreachable() {
    require_root_and_sshd();
    let target = SshTarget {
        address: SocketAddr::from((Ipv4Addr::new(127, 0, 203, 9), free_port())),
        user: "root".into(),
        password: SecretString::from(PASSWORD.to_string()),
    };
    let (result, _) = run(&target, None, &[], "true").await;
    assert!(
        matches!(result, Err(SshError::Unreachable { .. })),
        "{result:?}"
    );
    assert!(result.expect_err("unreachable").before_login());
}

#[tokio::test]
async fn a_changed_host_key_is_refused_before_the_password_is_sent() {
    let address = Ipv4Addr::new(127, 0, 204, 1);
    let port = free_port();
    let first = machine(address, port).await;
    let (result, _) = run(&target(&first, PASSWORD), None, &[], "true").await;
    let recorded = result.expect("first contact").host_key;
    let log_before = first.log();
    first.stop();
    drop(first);

    // Another machine on the same address: new host keys.
    let second = machine(address, port).await;
    let (result, lines) = run(
        &target(&second, PASSWORD),
        Some(&recorded),
        &[],
        "touch /root/ran",
    )
    .await;
    match result {
        Err(SshError::HostKeyChanged { expected, got }) => {
            assert_eq!(expected, recorded);
            assert!(got.starts_with("SHA256:") && got != recorded, "{got}");
        }
        other => panic!("a changed key was taken: {other:?}"),
    }
    assert!(lines.is_empty());
    assert!(!second.path("/root/ran").exists(), "the command ran");
    assert!(
        !second.log().contains("password"),
        "the password was sent: {}",
        second.log()
    );
    assert!(
        log_before.contains("Accepted password for root"),
        "{log_before}"
    );
    let refused = password_refused(&target(&second, PASSWORD), &limits(), Some(&recorded)).await;
    assert!(
        matches!(refused, Err(SshError::HostKeyChanged { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn pv_06_the_password_is_refused_after_passwd_lock_and_this_machine_s_shadow_is_unchanged() {
    let shadow_before = sha256("/etc/shadow");
    let machine = machine(Ipv4Addr::new(127, 0, 205, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let (result, _) = run(&target, None, &[], "true").await;
    let host_key = result.expect("first contact").host_key;
    assert!(
        !password_refused(&target, &limits(), Some(&host_key))
            .await
            .expect("asked"),
        "the password works before it is retired"
    );
    let (result, _) = run(&target, Some(&host_key), &[], "passwd -l root").await;
    assert_eq!(result.expect("the lock ran").exit_status, 0);
    assert!(
        password_refused(&target, &limits(), Some(&host_key))
            .await
            .expect("asked"),
        "a login with the retired password is refused"
    );
    let inside =
        std::fs::read_to_string(machine.path("/etc/shadow")).expect("the machine's shadow");
    let root_line = inside
        .lines()
        .find(|line| line.starts_with("root:"))
        .expect("root in the machine's shadow");
    assert!(
        root_line.starts_with("root:!"),
        "locked inside: {root_line}"
    );
    machine.stop();
    assert_eq!(
        sha256("/etc/shadow"),
        shadow_before,
        "this machine's own /etc/shadow changed"
    );
}

/// Every process's arguments and environment, read as they are now.
fn processes_holding(secret: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|name| name.chars().all(|c| c.is_ascii_digit()))
        else {
            continue;
        };
        for file in ["cmdline", "environ"] {
            let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{file}")) else {
                continue;
            };
            if bytes
                .windows(secret.len())
                .any(|window| window == secret.as_bytes())
            {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                found.push(format!(
                    "{pid} {file}: {}",
                    String::from_utf8_lossy(&cmdline).replace('\0', " ")
                ));
            }
        }
    }
    found
}

#[tokio::test]
async fn pv_05_while_a_session_runs_the_password_is_in_no_process_s_arguments() {
    let machine = machine(Ipv4Addr::new(127, 0, 206, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let (lines_to, mut lines_from) = tokio::sync::mpsc::unbounded_channel::<String>();
    let session = tokio::spawn(async move {
        let mut on_line = move |line: &str| {
            let _ = lines_to.send(line.to_string());
        };
        ssh::run(
            &target,
            &limits(),
            None,
            &[],
            "echo started; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo finished",
            &mut on_line,
        )
        .await
    });
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines_from.recv())
            .await
            .expect("the command starts")
            .expect("a line");
        if line == "started" {
            break;
        }
    }
    // The scan sees a secret where one is: a process of our own holding a canary.
    let canary = "canary-9f2c51d0a7";
    let mut holder = tokio::process::Command::new("/bin/sh")
        .args(["-c", "read line", canary])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("a canary process");
    assert!(
        !processes_holding(canary).is_empty(),
        "the scan finds nothing"
    );
    holder.kill().await.expect("the canary ends");
    // The session is open, the command runs: no process shows the password.
    let holding = processes_holding(PASSWORD);
    assert!(
        holding.is_empty(),
        "the password is visible in: {holding:?}"
    );
    std::fs::write(machine.path("/tmp/go"), b"").expect("the go file, inside");
    let done = tokio::time::timeout(Duration::from_secs(30), session)
        .await
        .expect("the session ends")
        .expect("the task")
        .expect("the session runs");
    assert_eq!(done.exit_status, 0);
    assert_eq!(done.output, "started\nfinished\n");
    assert!(
        !std::path::Path::new("/tmp/go").exists(),
        "the machine's /tmp is its own"
    );
}

#[tokio::test]
async fn every_instance_a_stand_in_makes_gets_a_machine_that_takes_its_password() {
    require_root_and_sshd();
    let standin = StandIn::start(Flavor::Hetzner).await;
    let port = free_port();
    standin.start_machines(
        port,
        vec![(
            "CAPSTAN_AGENT_LOCAL_ADDRESS".to_string(),
            "{address}".to_string(),
        )],
    );
    let driver = Hetzner::new(
        &standin.base_url(),
        SecretString::from("standin-token"),
        http(),
        Limits::default(),
    )
    .expect("a driver");
    let created = driver
        .create(&CreateInstance {
            label: "web-1".into(),
            region: "fsn1".into(),
            size: "cx22".into(),
            image: "debian-12".into(),
            disk_encryption: None,
            swap_mb: None,
            tags: Vec::new(),
            root_password: SecretString::from("unused-by-hetzner".to_string()),
        })
        .await
        .expect("created");
    let server = standin.world().servers[0].clone();
    assert_eq!(created.instance.id, server.id.to_string());
    // The server reports running only once its machine listens.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let instance = driver
            .get(&created.instance.id)
            .await
            .expect("the instance");
        if instance.status == Status::Running {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let machine: Arc<Machine> = standin
        .machine(server.id)
        .expect("a running instance has its machine");
    assert_eq!(machine.address, server.ipv4);
    let target = SshTarget {
        address: SocketAddr::from((server.ipv4, port)),
        user: "root".into(),
        password: SecretString::from(server.root_password.clone()),
    };
    let (result, lines) = run(
        &target,
        None,
        &[],
        "echo \"from $CAPSTAN_AGENT_LOCAL_ADDRESS\"",
    )
    .await;
    assert_eq!(result.expect("logged in").exit_status, 0);
    assert_eq!(lines, vec![format!("from {}", server.ipv4)]);
    assert!(standin.machine_at(server.ipv4).is_some());
    let pid = machine.init_pid();
    drop(machine);
    drop(standin);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z")),
        "the machine outlived its stand-in"
    );
}

#[tokio::test]
async fn a_command_that_outlives_the_session_bound_ends_in_a_session_timeout() {
    let machine = machine(Ipv4Addr::new(127, 0, 207, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let short = SshLimits {
        connect: Duration::from_secs(15),
        session: Duration::from_millis(1500),
    };
    let mut lines = Vec::new();
    let started = std::time::Instant::now();
    let result = ssh::run(
        &target,
        &short,
        None,
        &[],
        "echo begun; sleep 60",
        &mut |line| lines.push(line.to_string()),
    )
    .await;
    let error = result.expect_err("timed out");
    assert!(matches!(error, SshError::SessionTimeout(_)), "{error:?}");
    assert!(
        !error.before_login(),
        "the command had begun: not to be retried blindly"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(lines, vec!["begun".to_string()]);
}

#[tokio::test]
async fn a_process_left_running_with_the_output_open_does_not_hold_the_session() {
    let machine = machine(Ipv4Addr::new(127, 0, 208, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let started = std::time::Instant::now();
    let (result, lines) = run(&target, None, &[], "sleep 120 & echo left").await;
    let done = result.expect("the session ends");
    assert_eq!(done.exit_status, 0);
    assert!(
        started.elapsed() < ssh::EXIT_GRACE + Duration::from_secs(20),
        "held {:?}",
        started.elapsed()
    );
    assert_eq!(lines.first().map(String::as_str), Some("left"));
    assert!(
        lines
            .last()
            .is_some_and(|line| line.contains("was not waited for")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn an_upload_that_cannot_be_written_says_why_and_the_command_does_not_run() {
    let machine = machine(Ipv4Addr::new(127, 0, 209, 1), free_port()).await;
    let target = target(&machine, PASSWORD);
    let uploads = [Upload {
        // /etc/hostname is a file: no directory can be made under it.
        path: "/etc/hostname/capstan.env".into(),
        mode: 0o600,
        bytes: Bytes::from_static(b"x=1\n"),
    }];
    let (result, lines) = run(&target, None, &uploads, "touch /root/ran").await;
    match result {
        Err(SshError::Upload { path, why }) => {
            assert_eq!(path, "/etc/hostname/capstan.env");
            assert!(why.contains("mkdir"), "{why}");
        }
        other => panic!("the upload was taken: {other:?}"),
    }
    assert!(lines.is_empty());
    assert!(!machine.path("/root/ran").exists(), "the command ran");
}
