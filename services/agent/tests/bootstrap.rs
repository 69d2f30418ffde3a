//! `deploy/agent/bootstrap.sh` (issue 29) as the provisioning service runs it: the upload
//! directory (the agent binary, install.sh, bootstrap.sh, bootstrap.env) and `sh bootstrap.sh`,
//! here with `--prefix` (a scratch root) and the process supervision, against the real plane.
//! The script runs as an unprivileged user where the test runs as root, so that the agent it
//! starts can change nothing of this machine outside the scratch root. Covered: the three
//! kinds (PV-04, PV-09), the one `CAPSTAN_AGENT_KEY=` line (AC-10), the join made from the
//! configured local address (AC-08's first condition), bad `bootstrap.env` values refused
//! without being evaluated, and a second site install refused (PV-02).

use capstan_agent::domain::site::{DatabaseSource, Site};
use capstan_e2e::{agent::mode_of, plane::Plane};
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

const AGENT: &str = env!("CARGO_BIN_EXE_capstan-agent");
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agent");
/// The user the script runs as when the test runs as root (nobody).
const UNPRIVILEGED: u32 = 65534;

fn admin_url() -> String {
    std::env::var("CAPSTAN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn running_as_root() -> bool {
    // The owner of a file this process just made is its effective user.
    let probe = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::MetadataExt::uid(&probe.as_file().metadata().unwrap()) == 0
}

/// One machine as the provisioning service finds it: `up/` is /root/capstan-bootstrap,
/// `root/` the scratch root everything is installed under.
struct Machine {
    dir: tempfile::TempDir,
}

/// What one run of bootstrap.sh said.
struct Ran {
    code: i32,
    output: String,
}

impl Ran {
    fn last_line(&self) -> &str {
        self.output.lines().last().unwrap_or_default()
    }

    /// The fingerprints of every `CAPSTAN_AGENT_KEY=` line.
    fn keys(&self) -> Vec<String> {
        self.output
            .lines()
            .filter_map(|line| line.strip_prefix("CAPSTAN_AGENT_KEY="))
            .map(str::to_string)
            .collect()
    }
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let up = dir.path().join("up");
        std::fs::create_dir_all(&up).unwrap();
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        std::fs::copy(AGENT, up.join("capstan-agent")).unwrap();
        for script in ["install.sh", "bootstrap.sh"] {
            std::fs::copy(Path::new(DEPLOY).join(script), up.join(script)).unwrap();
        }
        Machine { dir }
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.dir
            .path()
            .join("root")
            .join(inside.trim_start_matches('/'))
    }

    fn prefix(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Runs `sh up/bootstrap.sh --prefix=root` with `env` as bootstrap.env.
    fn bootstrap(&self, env: &str) -> Ran {
        self.bootstrap_with(env, &[format!("--prefix={}", self.prefix().display())])
    }

    /// Runs `sh up/bootstrap.sh ARGUMENTS` with `env` as bootstrap.env.
    fn bootstrap_with(&self, env: &str, arguments: &[String]) -> Ran {
        std::fs::write(self.dir.path().join("up/bootstrap.env"), env).unwrap();
        let root = running_as_root();
        if root {
            chown_all(self.dir.path());
        }
        let mut command = if root {
            let mut command = Command::new("setpriv");
            command.args([
                &format!("--reuid={UNPRIVILEGED}"),
                &format!("--regid={UNPRIVILEGED}"),
                "--clear-groups",
                "sh",
            ]);
            command
        } else {
            Command::new("sh")
        };
        let output = command
            .arg(self.dir.path().join("up/bootstrap.sh"))
            .args(arguments)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", "/")
            .env("CAPSTAN_SITE_DATABASE_ADMIN_URL", admin_url())
            // The started agent's recipes keep to their first tick.
            .env("CAPSTAN_AGENT_RECIPE_TICK_SECS", "86400")
            .output()
            .unwrap();
        assert!(
            output.stderr.is_empty(),
            "bootstrap.sh joins stderr to stdout: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ran {
            code: output.status.code().unwrap_or(-1),
            output: String::from_utf8_lossy(&output.stdout).into_owned(),
        }
    }

    fn installed(&self) -> bool {
        self.path("/usr/local/bin/capstan-agent").exists()
    }

    /// The identity file's fingerprint.
    fn fingerprint(&self) -> String {
        let identity: serde_json::Value = serde_json::from_slice(
            &std::fs::read(self.path("/etc/capstan-agent/node_identity.json")).unwrap(),
        )
        .unwrap();
        identity["fingerprint"].as_str().unwrap().to_string()
    }

    fn agent_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.path("/etc/capstan-agent/agent.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// The agent bootstrap.sh started keeps running after it; it is stopped with the test.
impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(pid) = self.agent_pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

fn chown_all(path: &Path) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{UNPRIVILEGED}:{UNPRIVILEGED}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The session a process leads or belongs to (`/proc/<pid>/stat`'s sixth field).
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(3)?.parse().ok()
}

fn env_of(plane: &Plane, name: &str, kind: &str, extra: &str) -> String {
    format!(
        "# written by the provisioning service\nCAPSTAN_PLANE_URL={}\nCAPSTAN_NAME={name}\nCAPSTAN_KIND={kind}\nCAPSTAN_SUPERVISION=process\n{extra}",
        plane.base
    )
}

fn assert_installed(ran: &Ran, kind: &str, name: &str) {
    assert_eq!(ran.code, 0, "{}", ran.output);
    assert!(
        ran.last_line()
            .starts_with(&format!("bootstrap: installed {kind} {name} ")),
        "{}",
        ran.output
    );
}

/// Drops the site's database and role when the test ends, however it ends.
struct SiteDatabase(String);

impl Drop for SiteDatabase {
    fn drop(&mut self) {
        for statement in [
            format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.0),
            format!("DROP ROLE IF EXISTS \"{}\"", self.0),
        ] {
            let _ = Command::new("psql")
                .args(["-X", "-q", "-d", &admin_url(), "-c", &statement])
                .status();
        }
    }
}

/// PV-09, AC-08, AC-10: an `agent` and a `docker-host` bootstrap install the agent, start it
/// as a process of its own session that outlives the script, join from the configured local
/// address under the kind's name, and print the joining key's fingerprint exactly once; the
/// plane admits the agent and it comes online from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_and_a_docker_host_bootstrap_join_from_their_address_and_print_their_keys() {
    let plane = Plane::start().await;
    let local = format!("127.0.0.{}", 2 + rand::random::<u8>() % 250);

    let agent = Machine::new();
    let ran = agent.bootstrap(&env_of(
        &plane,
        "boot-agent",
        "agent",
        &format!("CAPSTAN_AGENT_LOCAL_ADDRESS={local}\n"),
    ));
    assert_installed(&ran, "agent", "boot-agent");
    let fingerprint = agent.fingerprint();
    assert_eq!(ran.keys(), vec![fingerprint.clone()], "{}", ran.output);
    let join = plane
        .join_of(&fingerprint)
        .await
        .expect("the join is lodged");
    assert_eq!(join["name"], "boot-agent");
    assert_eq!(join["source_address"], local.as_str(), "{join}");
    let env = std::fs::read_to_string(agent.path("/etc/capstan-agent/agent.env")).unwrap();
    assert!(
        env.contains(&format!("\nCAPSTAN_AGENT_LOCAL_ADDRESS={local}\n")),
        "{env}"
    );
    assert!(!env.contains("\nCAPSTAN_AGENT_SITE_ROOT="), "{env}");
    assert!(!agent.path("/etc/capstan-agent/site.json").exists());
    // The process supervision: the agent runs on after the script, in a session of its own,
    // holding none of its output (the test read the script's output to its end, which a
    // started agent holding the pipe, as it would an SSH channel, would not have let happen).
    let pid = agent
        .agent_pid()
        .expect("agent.pid names the started agent");
    assert_eq!(
        session_of(pid),
        Some(pid),
        "the agent leads its own session"
    );
    let node = plane.approve(&fingerprint).await;
    plane.wait_online(node).await;

    // The prefix may come from bootstrap.env (a login that is not root).
    let host = Machine::new();
    let ran = host.bootstrap_with(
        &env_of(
            &plane,
            "boot-dock",
            "docker-host",
            &format!("CAPSTAN_PREFIX={}\n", host.prefix().display()),
        ),
        &[],
    );
    assert_installed(&ran, "docker-host", "boot-dock");
    let fingerprint = host.fingerprint();
    assert_eq!(ran.keys(), vec![fingerprint.clone()], "{}", ran.output);
    let join = plane
        .join_of(&fingerprint)
        .await
        .expect("the join is lodged");
    assert_eq!(
        join["name"], "boot-dock-host",
        "PV-09: the host agent's name"
    );
    assert!(host.path("/srv/capstan/containers").is_dir());
    let env = std::fs::read_to_string(host.path("/etc/capstan-agent/agent.env")).unwrap();
    assert!(env.contains("# Siteless"), "{env}");
    assert!(!env.contains("\nCAPSTAN_AGENT_SITE_ROOT="), "{env}");
    assert!(!host.path("/etc/capstan-agent/site.json").exists());
    plane.stop().await;
}

/// PV-04, PV-02, AC-10: a `site` bootstrap makes the site's role and database with a password
/// generated on the machine and written only to a file of the agent's (0600), lays the root
/// out for site releases, writes `site.json` as the agent reads it, and joins with the site's
/// name; the password is in no output line. A second install of the same site is refused,
/// with the reason last, whether its root is still there or only its database is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_bootstrap_makes_its_database_and_site_json_and_a_second_is_refused() {
    let plane = Plane::start().await;
    let name = format!("site-{:08x}", rand::random::<u32>());
    let database = format!("site_{}", name.replace('-', "_"));
    let _dropped = SiteDatabase(database.clone());

    let machine = Machine::new();
    let ran = machine.bootstrap(&env_of(&plane, &name, "site", ""));
    assert_installed(&ran, "site", &name);
    let fingerprint = machine.fingerprint();
    assert_eq!(ran.keys(), vec![fingerprint.clone()], "{}", ran.output);
    let join = plane
        .join_of(&fingerprint)
        .await
        .expect("the join is lodged");
    assert_eq!(join["name"], name.as_str());

    // site.json, as the agent reads it.
    let site_json = machine.path("/etc/capstan-agent/site.json");
    assert_eq!(mode_of(&site_json) & 0o777, 0o600);
    let site = Site::parse(&std::fs::read(&site_json).unwrap()).expect("the agent reads it");
    let root = machine.path(&format!("/var/www/{name}"));
    assert_eq!(site.root, root);
    let url_file = machine.path("/etc/capstan-agent/site-db.url");
    assert_eq!(
        site.database,
        Some(DatabaseSource::UrlFile(url_file.clone()))
    );
    assert!(root.join("releases").is_dir() && root.join("shared/logs").is_dir());
    let env = std::fs::read_to_string(machine.path("/etc/capstan-agent/agent.env")).unwrap();
    assert!(
        env.contains(&format!("\nCAPSTAN_AGENT_SITE_ROOT={}\n", root.display())),
        "{env}"
    );

    // The role's password: only in the 0600 file, never in the output, and it logs in.
    assert_eq!(
        std::fs::metadata(&url_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let url = std::fs::read_to_string(&url_file)
        .unwrap()
        .trim()
        .to_string();
    let password = url
        .strip_prefix(&format!("postgres://{database}:"))
        .and_then(|rest| rest.split_once('@'))
        .map(|(password, _)| password.to_string())
        .expect("postgres://ROLE:PASSWORD@host:port/DATABASE");
    assert_eq!(password.len(), 32, "a generated password");
    assert!(!ran.output.contains(&password), "{}", ran.output);
    let pool = sqlx::PgPool::connect(&url).await.expect("the role logs in");
    let (user, db): (String, String) = sqlx::query_as("SELECT current_user, current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(
        (user.as_str(), db.as_str()),
        (database.as_str(), database.as_str())
    );

    // The running agent holds the site: once admitted, check_status reads its site.json.
    let node = plane.approve(&fingerprint).await;
    plane.wait_online(node).await;
    let job = plane
        .finished(
            plane
                .queue(node, "check_status", serde_json::json!({}))
                .await,
        )
        .await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["result"]["site"], true, "{job}");

    // PV-02: the same machine again, and a clean machine whose database server has the site.
    let again = machine.bootstrap(&env_of(&plane, &name, "site", ""));
    assert_eq!(again.code, 1, "{}", again.output);
    assert!(
        again.last_line().contains("already exists") && again.last_line().contains("PV-02"),
        "{}",
        again.output
    );
    assert!(again.keys().is_empty(), "{}", again.output);
    let clean = Machine::new();
    let refused = clean.bootstrap(&env_of(&plane, &name, "site", ""));
    assert_eq!(refused.code, 1, "{}", refused.output);
    assert!(
        refused.last_line().contains(&format!(
            "PostgreSQL already has the role database {database}"
        )),
        "{}",
        refused.output
    );
    assert!(!clean.installed(), "nothing installed: {}", refused.output);
    assert!(!clean.path(&format!("/var/www/{name}")).exists());
    plane.stop().await;
}

/// bootstrap.env is read, never evaluated: a value with any character outside
/// `[A-Za-z0-9._:/@-]` is refused (and never repeated: it may hold a password), as are unknown,
/// repeated and missing keys and a kind that is not one of the three. Nothing is installed and
/// nothing a value says is run.
#[test]
fn bootstrap_env_values_outside_the_safe_characters_are_refused_and_never_run() {
    let machine = Machine::new();
    let marker = machine.dir.path().join("evaluated");
    let touch = format!("$(touch {})", marker.display());
    let good =
        "CAPSTAN_PLANE_URL=https://plane.example.com\nCAPSTAN_NAME=web-1\nCAPSTAN_KIND=agent\n";
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace("web-1", &format!("web-1{touch}")),
            "line 2: CAPSTAN_NAME holds a character outside",
        ),
        (
            good.replace(
                "https://plane.example.com",
                &format!("`touch {}`", marker.display()),
            ),
            "line 1: CAPSTAN_PLANE_URL holds a character outside",
        ),
        (
            good.replace("web-1", "web-1;id"),
            "CAPSTAN_NAME holds a character outside",
        ),
        (
            good.replace("web-1", "\"web-1\""),
            "CAPSTAN_NAME holds a character outside",
        ),
        (
            good.replace("web-1", "web 1"),
            "CAPSTAN_NAME holds a character outside",
        ),
        (
            good.replace("web-1", "web-1\r"),
            "CAPSTAN_NAME holds a character outside",
        ),
        (
            format!("{good}CAPSTAN_SITE_DATABASE_ADMIN_URL=postgres://u:s3cret pw@h/db\n"),
            "CAPSTAN_SITE_DATABASE_ADMIN_URL holds a character outside",
        ),
        (
            good.replace("web-1", "Web-1"),
            "CAPSTAN_NAME must start with",
        ),
        (
            good.replace("CAPSTAN_KIND=agent\n", ""),
            "gives no CAPSTAN_KIND",
        ),
        (
            good.replace("=agent", "=bogus"),
            "CAPSTAN_KIND must be agent, site or docker-host",
        ),
        (
            format!("{good}CAPSTAN_COLOUR=red\n"),
            "CAPSTAN_COLOUR is not a key",
        ),
        (
            format!("{good}CAPSTAN_NAME=web-2\n"),
            "CAPSTAN_NAME is given twice",
        ),
        (format!("{good}hello\n"), "line 4 is not KEY=value"),
        (
            format!("{good}CAPSTAN_SUPERVISION=init\n"),
            "CAPSTAN_SUPERVISION must be",
        ),
        (
            format!("{good}CAPSTAN_AGENT_LOCAL_ADDRESS=host.example\n"),
            "CAPSTAN_AGENT_LOCAL_ADDRESS must be an IP address",
        ),
        (
            good.replace("web-1", &"a".repeat(60))
                .replace("=agent", "=docker-host"),
            "at most 59 characters",
        ),
        (
            good.replace("https://", "ftp://"),
            "CAPSTAN_PLANE_URL must be",
        ),
    ];
    for (env, expected) in cases {
        let ran = machine.bootstrap(&env);
        assert_eq!(ran.code, 1, "{env:?}: {}", ran.output);
        assert!(
            ran.last_line().starts_with("bootstrap: failed: ")
                && ran.last_line().contains(expected),
            "{env:?}: expected {expected:?} last, got {}",
            ran.output
        );
        assert!(!ran.output.contains("s3cret"), "{}", ran.output);
        assert!(ran.keys().is_empty());
        assert!(!machine.installed(), "{env:?}: installed anyway");
        assert!(!marker.exists(), "{env:?}: a value was evaluated");
    }
    // A prefix from bootstrap.env (no --prefix argument) is checked as the argument is.
    let ran = machine.bootstrap_with(&format!("{good}CAPSTAN_PREFIX=relative/dir\n"), &[]);
    assert_eq!(ran.code, 1, "{}", ran.output);
    assert!(
        ran.last_line()
            .ends_with("failed: the prefix must be an absolute path"),
        "{}",
        ran.output
    );
}

/// An install that fails ends `bootstrap: failed: ...` with a non-zero status and no key line,
/// the cause in the lines before it: here the started agent refuses its local address and
/// exits, which the process supervision says at once with the end of the agent's log.
#[test]
fn a_bootstrap_whose_agent_cannot_start_fails_with_the_reason_last() {
    let machine = Machine::new();
    let started = std::time::Instant::now();
    let ran = machine.bootstrap(
        "CAPSTAN_PLANE_URL=http://127.0.0.1:9\nCAPSTAN_NAME=web-1\nCAPSTAN_KIND=agent\nCAPSTAN_SUPERVISION=process\nCAPSTAN_AGENT_LOCAL_ADDRESS=0.0.0.0\n",
    );
    assert_eq!(ran.code, 1, "{}", ran.output);
    assert_eq!(
        ran.last_line(),
        "bootstrap: failed: install.sh failed (exit 1)",
        "{}",
        ran.output
    );
    assert!(
        ran.output.contains("install.sh: the agent did not start")
            && ran
                .output
                .contains("CAPSTAN_AGENT_LOCAL_ADDRESS (--local-address) must be"),
        "{}",
        ran.output
    );
    assert!(ran.keys().is_empty(), "{}", ran.output);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "an agent that exits is not waited for"
    );
}
