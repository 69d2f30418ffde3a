//! A real sshd per stand-in instance (issue 29: "a real sshd ... with its own configuration and
//! host keys that takes the password the stand-in generated for the instance"), so the
//! bootstrap is tested against Debian's openssh-server and not a fake.
//!
//! Each [`Machine`] is Debian's `/usr/sbin/sshd` started by `unshare --mount --pid --fork` in
//! namespaces of its own: copy-on-write views (overlayfs, upper dirs in a temporary directory)
//! of `/etc`, `/usr` (so `/usr/local` too), `/opt`, `/var`, `/srv`, `/root` and `/home`, a private
//! `/tmp`, and an empty `/run` as a machine has after boot, so an install can write anywhere it
//! would on a real machine and `passwd`/`usermod` can rewrite `/etc/shadow` while nothing on this
//! machine changes ("never change this machine's own accounts or files"). sshd is the pid
//! namespace's init: killing it ends everything started in its sessions, agents included.
//!
//! What a machine lacks beside a real one: no systemd and no cron run inside (`/run` is empty,
//! so `deploy/agent/install.sh` picks its cron keepalive and starts the agent itself); the
//! network is this machine's (an agent reaches the plane on 127.0.0.1 and, with
//! `CAPSTAN_AGENT_LOCAL_ADDRESS`, connects from the instance's own address); and
//! PostgreSQL's socket under /run is not there (use 127.0.0.1:5432).
//!
//! Root's password inside is set through `chpasswd`'s standard input, never in a process's
//! arguments. Needs root (namespaces, mounts) and openssh-server (`deploy/local/services.sh`:
//! `ensure_sshd`).

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// The port an instance's sshd listens on unless a test says otherwise: each instance has an
/// address of its own, so the usual port works for every one.
pub const DEFAULT_SSH_PORT: u16 = 22;

/// The directories each machine sees through an overlay of its own (the rest of the file system
/// is this machine's, read-write as root: tests must not write outside these).
pub const OVERLAID: [&str; 7] = ["/etc", "/usr", "/opt", "/var", "/srv", "/root", "/home"];

/// A port free on every address now (bound on the wildcard address, then let go): give each
/// stand-in its own when tests run side by side, since every stand-in numbers its instances'
/// addresses from `127.0.1.1` (Linode) or `127.0.101.1` (Hetzner).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// How long sshd may take to listen.
const START_BOUND: Duration = Duration::from_secs(20);

/// Where the machine's own sshd configuration and host keys live, inside it.
const CONFIG_DIR: &str = "/etc/ssh/capstan-machine";

/// Runs inside the namespaces: the overlays, the configuration copied in, root's password from
/// standard input, an empty /run, the private /tmp, then sshd as the pid namespace's init.
/// (`/run` is a fresh tmpfs, not a view of this machine's: through it an install would find
/// this machine's systemd and install its units here.)
const INSIDE: &str = r#"set -eu
dir=$1
for top in /etc /usr /opt /var /srv /root /home; do
    [ -d "$top" ] || continue
    name=$(printf '%s' "$top" | tr / _)
    mkdir -p "$dir/upper/$name" "$dir/work/$name"
    mount -t overlay overlay -o "lowerdir=$top,upperdir=$dir/upper/$name,workdir=$dir/work/$name" "$top"
done
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /etc/ssh/capstan-machine /run/sshd /run/lock
chmod 0755 /run/sshd
chmod 1777 /run/lock
cp -p "$dir/sshd_config" "$dir/ssh_host_ed25519_key" "$dir/ssh_host_ed25519_key.pub" /etc/ssh/capstan-machine/
chpasswd
mkdir -p "$dir/tmp"
chmod 1777 "$dir/tmp"
mount --bind "$dir/tmp" /tmp
exec /usr/sbin/sshd -D -e -f /etc/ssh/capstan-machine/sshd_config </dev/null
"#;

/// One instance's sshd and everything started inside it.
pub struct Machine {
    pub address: Ipv4Addr,
    pub port: u16,
    /// Configuration, host keys, the overlays' upper dirs, the private /tmp, sshd's log.
    dir: tempfile::TempDir,
    /// `unshare` (outside the namespaces); it takes its child, the namespace's init, with it.
    unshare: Mutex<Option<Child>>,
    /// The namespace's init (sshd), as this machine numbers it.
    init_pid: u32,
}

impl Machine {
    /// Starts an sshd on `address:port` in private namespaces (see the module), root's password
    /// `password`, and `SetEnv` of every pair in `environment` for every session (for example
    /// `CAPSTAN_AGENT_LOCAL_ADDRESS=<address>`, so the agent installed there connects from the
    /// instance's own address). Panics with the reason when it cannot (a test fixture).
    pub async fn start(
        address: Ipv4Addr,
        port: u16,
        password: &str,
        environment: &[(String, String)],
    ) -> Machine {
        match Machine::try_start(address, port, password, environment).await {
            Ok(machine) => machine,
            Err(why) => panic!("the machine at {address}:{port} did not start: {why}"),
        }
    }

    /// [`Machine::start`], answering why it could not.
    pub async fn try_start(
        address: Ipv4Addr,
        port: u16,
        password: &str,
        environment: &[(String, String)],
    ) -> Result<Machine, String> {
        if !is_root() {
            return Err(
                "the machine needs root (namespaces and mounts): run the tests as root".into(),
            );
        }
        if !Path::new("/usr/sbin/sshd").exists() {
            return Err(
                "/usr/sbin/sshd is missing: install openssh-server (deploy/local/test does, ensure_sshd)".into(),
            );
        }
        if password.is_empty() || password.contains(['\n', '\r', ':']) {
            return Err(
                "the password must be one line without ':' (chpasswd reads user:password)".into(),
            );
        }
        let config = sshd_config(address, port, environment)?;
        let dir = tempfile::Builder::new()
            .prefix("capstan-machine-")
            .tempdir()
            .map_err(|error| format!("no temporary directory: {error}"))?;
        let key = dir.path().join("ssh_host_ed25519_key");
        let keygen = Command::new("/usr/bin/ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "capstan-machine",
                "-f",
            ])
            .arg(&key)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|error| format!("ssh-keygen did not run: {error}"))?;
        if !keygen.status.success() {
            return Err(format!(
                "ssh-keygen failed: {}",
                String::from_utf8_lossy(&keygen.stderr).trim()
            ));
        }
        fs::write(dir.path().join("sshd_config"), config)
            .map_err(|error| format!("the sshd configuration was not written: {error}"))?;
        let log = fs::File::create(dir.path().join("sshd.log"))
            .map_err(|error| format!("sshd's log was not made: {error}"))?;
        let mut unshare = Command::new("/usr/bin/unshare")
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "--kill-child=SIGKILL",
                "/bin/sh",
                "-c",
                INSIDE,
                "capstan-machine",
            ])
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("unshare did not start: {error}"))?;
        let mut stdin = unshare.stdin.take().expect("unshare's standard input");
        let fed = stdin
            .write_all(format!("root:{password}\n").as_bytes())
            .await;
        drop(stdin);
        let unshare_pid = unshare.id().unwrap_or_default();
        let started = Instant::now();
        let listening = SocketAddr::from((address, port));
        let failed = |dir: &Path, what: &str| {
            let log = fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
            format!("{what}; its log: {}", log.trim())
        };
        loop {
            if let Ok(Some(status)) = unshare.try_wait() {
                return Err(failed(dir.path(), &format!("it exited ({status})")));
            }
            if fed.is_ok() && TcpStream::connect(listening).await.is_ok() {
                break;
            }
            if started.elapsed() > START_BOUND {
                let _ = unshare.start_kill();
                return Err(failed(
                    dir.path(),
                    &format!("nothing listened on {listening} within {START_BOUND:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(init_pid) = child_of(unshare_pid) else {
            let _ = unshare.start_kill();
            return Err(failed(dir.path(), "the namespace's init was not found"));
        };
        Ok(Machine {
            address,
            port,
            dir,
            unshare: Mutex::new(Some(unshare)),
            init_pid,
        })
    }

    /// A path inside the machine's view, as the test process can read it: through the running
    /// init's root (`/proc/<pid>/root/...`, which sees the machine's overlays), or once stopped,
    /// the overlay's upper dir when the file was written there.
    pub fn path(&self, inside: &str) -> PathBuf {
        let inside = inside.trim_start_matches('/');
        if self.running() {
            return PathBuf::from(format!("/proc/{}/root", self.init_pid)).join(inside);
        }
        if let Some(rest) = inside.strip_prefix("tmp/") {
            return self.dir.path().join("tmp").join(rest);
        }
        for top in OVERLAID {
            let top = top.trim_start_matches('/');
            if let Some(rest) = inside.strip_prefix(&format!("{top}/")) {
                let name = format!("_{}", top.replace('/', "_"));
                return self.dir.path().join("upper").join(name).join(rest);
            }
        }
        PathBuf::from("/").join(inside)
    }

    /// sshd's own log (its `-e` output: logins, refusals).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// The namespace's init (sshd) as this machine numbers it.
    pub fn init_pid(&self) -> u32 {
        self.init_pid
    }

    /// Whether sshd (and so the machine) still runs.
    pub fn running(&self) -> bool {
        Path::new(&format!("/proc/{}", self.init_pid)).exists()
            && self
                .unshare
                .lock()
                .map(|unshare| unshare.is_some())
                .unwrap_or(false)
    }

    /// Stops sshd and everything started inside (the pid namespace's init goes, and the kernel
    /// ends every process in its namespace); also on Drop. Waits until the init is gone.
    pub fn stop(&self) {
        let Ok(mut unshare) = self.unshare.lock() else {
            return;
        };
        let Some(mut child) = unshare.take() else {
            return;
        };
        // The namespace's init first, so that unshare (its parent, waiting on it) reaps it and
        // exits; unshare itself only if the init would not go.
        if let Some(init) = rustix::process::Pid::from_raw(self.init_pid as i32) {
            let _ = rustix::process::kill_process(init, rustix::process::Signal::KILL);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let unshare_gone = matches!(child.try_wait(), Ok(Some(_)) | Err(_));
            let init_gone =
                !Path::new(&format!("/proc/{}", self.init_pid)).exists() || zombie(self.init_pid);
            if unshare_gone && init_gone {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.start_kill();
        let _ = child.try_wait();
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The machine's sshd configuration: its address, password logins for root, its own host key,
/// no PAM (the password is checked against the machine's own /etc/shadow), and `SetEnv` of
/// `environment` for every session.
pub fn sshd_config(
    address: Ipv4Addr,
    port: u16,
    environment: &[(String, String)],
) -> Result<String, String> {
    let mut config = format!(
        "ListenAddress {address}:{port}\n\
         HostKey {CONFIG_DIR}/ssh_host_ed25519_key\n\
         PidFile none\n\
         PasswordAuthentication yes\n\
         KbdInteractiveAuthentication no\n\
         PubkeyAuthentication yes\n\
         PermitRootLogin yes\n\
         UsePAM no\n\
         UseDNS no\n\
         MaxStartups 200\n\
         MaxSessions 50\n\
         LogLevel INFO\n\
         Subsystem sftp internal-sftp\n"
    );
    // sshd takes the first SetEnv line only: every pair goes on one.
    let mut pairs = Vec::new();
    for (name, value) in environment {
        let name_ok = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name
                .chars()
                .all(|character| character.is_ascii_alphanumeric() || character == '_');
        if !name_ok {
            return Err(format!("{name:?} is not an environment variable's name"));
        }
        if value
            .chars()
            .any(|character| character.is_control() || character == '"' || character == '\\')
        {
            return Err(format!(
                "the value of {name} holds a quote, a backslash or a control character"
            ));
        }
        pairs.push(format!("\"{name}={value}\""));
    }
    if !pairs.is_empty() {
        config.push_str(&format!("SetEnv {}\n", pairs.join(" ")));
    }
    Ok(config)
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|id| id == "0"))
        })
        .unwrap_or(false)
}

/// The parent's pid and state from `/proc/<pid>/stat` (after the command's closing paren).
fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

fn zombie(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state == 'Z' || state == 'X')
}

/// The (one) child of `parent`: unshare's fork, the namespace's init.
fn child_of(parent: u32) -> Option<u32> {
    fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| stat(*pid).is_some_and(|(_, of)| of == parent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_listens_on_the_instance_and_sets_its_environment() {
        let config = sshd_config(
            Ipv4Addr::new(127, 0, 1, 2),
            22,
            &[
                (
                    "CAPSTAN_AGENT_LOCAL_ADDRESS".to_string(),
                    "127.0.1.2".to_string(),
                ),
                ("SITE_URL".to_string(), "postgres://a@b:1/c".to_string()),
            ],
        )
        .expect("a configuration");
        assert!(config.contains("ListenAddress 127.0.1.2:22\n"));
        assert!(config.contains("PermitRootLogin yes\n"));
        assert!(config.contains("PasswordAuthentication yes\n"));
        assert!(config.contains("UsePAM no\n"));
        // One SetEnv line: sshd reads the first only.
        assert!(config.contains(
            "SetEnv \"CAPSTAN_AGENT_LOCAL_ADDRESS=127.0.1.2\" \"SITE_URL=postgres://a@b:1/c\"\n"
        ));
        assert_eq!(config.matches("SetEnv").count(), 1);
    }

    #[test]
    fn an_environment_sshd_would_read_otherwise_is_refused() {
        for (name, value) in [
            ("1BAD", "x"),
            ("BAD NAME", "x"),
            ("", "x"),
            ("GOOD", "a\"b"),
            ("GOOD", "line\nbreak"),
            ("GOOD", "back\\slash"),
        ] {
            let pairs = [(name.to_string(), value.to_string())];
            assert!(
                sshd_config(Ipv4Addr::LOCALHOST, 22, &pairs).is_err(),
                "{name:?}={value:?} was taken"
            );
        }
    }
}
