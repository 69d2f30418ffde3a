//! The real `capstan-agent` binary on a temporary state directory and site of its own, run
//! against a [`Plane`], in its systemd unit's file-system view ([`crate::confinement`]): the
//! test's state directory stands for `/etc/capstan-agent`, the directory its site root lives in
//! for `/var/www`, and the directory of the binary it runs for `/usr/local/bin`.

use serde_json::Value;
use std::{
    path::{Path, PathBuf},
    process::Stdio,
};
use tokio::process::Child;

use crate::{confinement, plane::Plane};
use std::os::unix::fs::PermissionsExt;

/// The `capstan-agent` binary that `cargo build` (or `cargo nextest run --workspace`) left
/// beside the running test binary's directory: `target/<profile>/capstan-agent`. Tests outside
/// the agent's own package find it here; a clear failure says how to build it when absent.
pub fn binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary sits in target/<profile>/deps");
    let binary = profile_dir.join("capstan-agent");
    assert!(
        binary.is_file(),
        "{} is missing: build it with `cargo build -p capstan-agent` (deploy/local/test builds \
         every binary of the workspace before it tests)",
        binary.display()
    );
    binary
}

/// The real agent binary on a state directory of its own.
pub struct Agent {
    pub dir: tempfile::TempDir,
    binary: PathBuf,
    child: Option<Child>,
    /// Environment every command of this agent gets (its `agent.env`).
    env: Vec<(String, String)>,
    /// A machine with no site: commands get no `--site-root`.
    siteless: bool,
    /// Directories a stand-in the agent runs writes, writable in its view beyond the unit's.
    stand_ins: Vec<PathBuf>,
}

impl Agent {
    /// An agent run from `binary` (`env!("CARGO_BIN_EXE_capstan-agent")` in the agent's own
    /// tests, [`binary`] elsewhere).
    pub fn new(binary: impl Into<PathBuf>) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        // install.sh makes /opt/capstan-agent, where a siteless machine's bundle lands.
        std::fs::create_dir_all(dir.path().join("opt")).unwrap();
        let site = dir.path().join("www/site");
        std::fs::create_dir_all(site.join("logs")).unwrap();
        std::fs::write(
            site.join("logs/access.log"),
            "203.0.113.9 - - GET /login?password=hunter2 200\n",
        )
        .unwrap();
        Agent {
            dir,
            binary: binary.into(),
            child: None,
            env: Vec::new(),
            siteless: false,
            stand_ins: Vec::new(),
        }
    }

    /// Makes this agent a machine with no site (machine posture): later commands get no
    /// `--site-root`.
    pub fn set_siteless(&mut self) {
        self.siteless = true;
    }

    /// Sets `key` in the environment of every later command (as the unit's `agent.env` would).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_string(), value.to_string()));
    }

    /// The site root, in a directory of its own (`/var/www/site` on a machine: the unit grants
    /// the directory it lives in, where a restore builds beside it).
    /// Keeps `dir` writable in the agent's view: the test's stand-in for a program the agent
    /// runs writes there, where the real one would ask its own daemon (a fake `supervisorctl`
    /// that starts the web server itself, where the real one asks supervisord over its socket).
    pub fn set_stand_in_dir(&mut self, dir: &Path) {
        self.stand_ins.push(dir.to_path_buf());
    }

    pub fn site(&self) -> PathBuf {
        self.dir.path().join("www/site")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.state_dir().join(name)
    }

    /// `capstan-agent <args>` on this agent's state directory and site, from its binary.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        self.command_of(&self.binary, args)
    }

    /// As [`Agent::command`], from another binary (a copy the agent updates in place).
    pub fn command_of(&self, binary: &Path, args: &[&str]) -> tokio::process::Command {
        let mut command = self.in_view_of(binary, binary);
        command.arg(format!("--state-dir={}", self.state_dir().display()));
        if !self.siteless {
            command.arg(format!("--site-root={}", self.site().display()));
        }
        command
            .arg(format!(
                "--letsencrypt-dir={}",
                self.dir.path().join("letsencrypt").display()
            ))
            // The test's stand-in for /opt/capstan-agent/tree (a test may name another).
            .env("CAPSTAN_AGENT_BUNDLE_DIR", self.dir.path().join("opt/tree"))
            .args(args)
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .env("CAPSTAN_AGENT_LOG", "capstan_agent=debug")
            .kill_on_drop(true);
        command
    }

    /// `program` in the unit's file-system view of this agent run from `binary`: read-only but
    /// the test's paths standing for the unit's `ReadWritePaths=` (unconfined, said once, where
    /// this machine cannot make the view).
    pub fn in_view(&self, program: &Path) -> tokio::process::Command {
        self.in_view_of(&self.binary, program)
    }

    fn in_view_of(&self, binary: &Path, program: &Path) -> tokio::process::Command {
        let mut writable: Vec<PathBuf> = confinement::unit_read_write_paths()
            .into_iter()
            .filter_map(|granted| {
                let path = self.stands_for(binary, &granted.path);
                // The unit makes its state directory (ConfigurationDirectory=, 0700).
                if granted.path == confinement::STATE_DIR && !path.exists() {
                    std::fs::create_dir_all(&path).unwrap();
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                        .unwrap();
                }
                // Absent and marked "-": the unit starts without it, as the view does.
                (path.exists() || !granted.optional).then_some(path)
            })
            .collect();
        writable.extend(self.stand_ins.iter().cloned());
        confinement::command(program, &writable)
    }

    /// This test's path for the unit's `path`.
    fn stands_for(&self, binary: &Path, path: &str) -> PathBuf {
        match path {
            confinement::STATE_DIR => self.state_dir(),
            "/var/www" => self.dir.path().join("www"),
            "/usr/local/bin" => binary
                .parent()
                .expect("the agent's binary is in a directory")
                .to_path_buf(),
            "/opt/capstan-agent" => self.dir.path().join("opt"),
            other => panic!(
                "the agent's unit grants {other}, which tests/src/agent.rs does not map to a \
                 path of the test's own (Agent::stands_for)"
            ),
        }
    }

    /// Runs a command to its end: (exit code, stdout, stderr).
    pub async fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.command(args).output().await.unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs a command that must succeed; its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.cli(args).await;
        assert_eq!(code, 0, "capstan-agent {args:?}: {stdout}{stderr}");
        stdout
    }

    /// Starts a command in the background (for `join` that waits).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts `run`, logging to `agent.log` beside the state directory.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .unwrap();
        let child = self
            .command(&["run"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// Kills `run` with SIGKILL (no chance to clean up) and waits for it.
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("the agent runs");
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    pub async fn status(&self) -> String {
        self.ok(&["status"]).await
    }

    /// Waits (30 s at most) until `status` shows `job` held on the node for its owner's
    /// approval, and returns that status.
    pub async fn held_for_approval(&self, job: i64) -> String {
        let held = format!("waiting for approval: job {job} ");
        crate::wait_for(
            "the job to wait for approval",
            std::time::Duration::from_secs(30),
            || async {
                let status = self.status().await;
                status.contains(&held).then_some(status)
            },
        )
        .await
    }

    /// The identity file as JSON.
    pub fn identity(&self) -> Option<Value> {
        let bytes = std::fs::read(self.file("node_identity.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn fingerprint(&self) -> String {
        self.identity().unwrap()["fingerprint"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Joins `plane` without waiting, approves it, starts `run` switched on, and waits until
    /// the node reports in; returns the node id.
    pub async fn paired(&mut self, plane: &Plane, name: &str) -> i64 {
        self.ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            &format!("--name={name}"),
            "--no-wait",
        ])
        .await;
        self.ok(&["enable"]).await;
        let node = plane.approve(&self.fingerprint()).await;
        self.start();
        plane.wait_online(node).await;
        node
    }

    /// Writes `policy.json` with `mode`.
    pub fn policy(&self, body: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file("policy.json");
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.log());
        }
    }
}

/// The permission bits of `path`.
pub fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `sh -c script` in the view of a fresh agent: (success, stderr).
    async fn in_view(agent: &Agent, script: &str) -> (bool, String) {
        let output = agent
            .in_view(Path::new("/bin/sh"))
            .args(["-c", script])
            .output()
            .await
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Issue 27: the test agents run in their unit's file-system view, so a word writing where
    /// the unit forbids fails in the end-to-end tests as on a machine. Where the harness can
    /// make the view (root with `unshare`, as CI is) it must.
    #[tokio::test]
    async fn an_agent_of_the_harness_cannot_write_outside_the_paths_its_unit_grants() {
        let root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|output| output.stdout.starts_with(b"0\n"));
        if !root || !Path::new("/usr/bin/unshare").exists() {
            eprintln!("not root with unshare: the harness runs its agents unconfined here");
            return;
        }
        assert!(confinement::available(), "root with unshare makes the view");
        // Any file will do for a binary, in a directory of the test's (`/usr/local/bin`).
        let bin = tempfile::tempdir().unwrap();
        std::fs::write(bin.path().join("capstan-agent"), "").unwrap();
        let agent = Agent::new(bin.path().join("capstan-agent"));
        let forbidden = [
            PathBuf::from("/usr/capstan-probe"),
            agent.dir.path().join("letsencrypt-probe"),
        ];
        for path in &forbidden {
            let (wrote, stderr) = in_view(&agent, &format!("touch '{}'", path.display())).await;
            assert!(
                !wrote && stderr.contains("Read-only file system"),
                "{}: {stderr}",
                path.display()
            );
            assert!(!path.exists(), "{}", path.display());
        }
        let granted = [
            agent.file("probe"),
            agent.dir.path().join("www/site-new"),
            agent.binary.with_extension("probe"),
        ];
        for path in &granted {
            let (wrote, stderr) = in_view(&agent, &format!("touch '{}'", path.display())).await;
            assert!(wrote, "{}: {stderr}", path.display());
            assert!(path.exists(), "{}", path.display());
            std::fs::remove_file(path).unwrap();
        }
        assert_eq!(mode_of(&agent.state_dir()), 0o700);
    }
}
