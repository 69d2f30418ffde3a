//! `install_security_updates` without I/O (RO-25, RO-29): which of the machine's apt sources
//! are its security origin, and what an apt run came to.
//!
//! The word installs from the security origin only by giving apt a sources list that holds
//! nothing else: the machine's own entries whose suite is a security suite (`bookworm-security`,
//! `noble-security`; before Debian 11, `<codename>/updates` on a security host), copied with
//! their options (`signed-by`, `arch`) so apt checks them as it always does. This is the
//! long-standing Debian/Ubuntu way of "security updates only" with plain apt (the sources list
//! decides where candidates come from; nothing else can be picked), and it needs no
//! unattended-upgrades installed or configured.
//!
//! What apt printed is read into one of RO-29's outcomes: installed (naming the packages),
//! nothing to install, another package run in the way (apt could not get a lock: it is asked
//! with `DPkg::Lock::Timeout=0`, so it never waits), or the updater failed (with apt's reason).

/// The most package names an outcome lists.
pub const MAX_NAMES: usize = 500;

/// Whether an apt suite is a security suite, given the URI it is fetched from.
pub fn security_suite(uri: &str, suite: &str) -> bool {
    let suite = suite.trim_end_matches('/');
    suite.ends_with("-security")
        || (suite.ends_with("/updates") && uri.to_ascii_lowercase().contains("security"))
}

/// RO-25: the one-line entries (`sources.list`, `*.list`) of a security suite, verbatim
/// (options included). `deb-src` lines, comments and other suites are left out.
pub fn security_lines(list: &str) -> Vec<String> {
    let mut kept = Vec::new();
    for line in list.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        let Some(rest) = line
            .strip_prefix("deb ")
            .or_else(|| line.strip_prefix("deb\t"))
        else {
            continue;
        };
        let rest = rest.trim_start();
        // Options: `[signed-by=/usr/share/keyrings/x.gpg arch=amd64]`.
        let after_options = match rest.strip_prefix('[') {
            Some(options) => match options.split_once(']') {
                Some((_, after)) => after.trim_start(),
                None => continue,
            },
            None => rest,
        };
        let mut fields = after_options.split_whitespace();
        let (Some(uri), Some(suite)) = (fields.next(), fields.next()) else {
            continue;
        };
        if security_suite(uri, suite) {
            kept.push(line.to_string());
        }
    }
    kept
}

/// RO-25: the deb822 stanzas (`*.sources`) that fetch a security suite, each rewritten to
/// fetch only its security suites and only binary packages; disabled stanzas are left out.
/// Fields are kept as written (continuation lines included), so `Signed-By` holds.
pub fn security_stanzas(sources: &str) -> Vec<String> {
    let mut kept = Vec::new();
    for stanza in stanzas(sources) {
        let field = |name: &str| -> Option<String> {
            stanza.iter().find_map(|(key, value)| {
                key.eq_ignore_ascii_case(name)
                    .then(|| value.split_whitespace().collect::<Vec<_>>().join(" "))
            })
        };
        if field("Enabled").is_some_and(|enabled| enabled.eq_ignore_ascii_case("no")) {
            continue;
        }
        if !field("Types").is_some_and(|types| types.split_whitespace().any(|t| t == "deb")) {
            continue;
        }
        let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) else {
            continue;
        };
        let security: Vec<&str> = suites
            .split_whitespace()
            .filter(|suite| {
                uris.split_whitespace()
                    .any(|uri| security_suite(uri, suite))
            })
            .collect();
        if security.is_empty() {
            continue;
        }
        let mut text = String::new();
        for (key, value) in &stanza {
            if key.eq_ignore_ascii_case("Types") {
                text.push_str("Types: deb\n");
            } else if key.eq_ignore_ascii_case("Suites") {
                text.push_str(&format!("Suites: {}\n", security.join(" ")));
            } else {
                text.push_str(&format!("{key}:{value}\n"));
            }
        }
        kept.push(text);
    }
    kept
}

/// A deb822 file's stanzas as (field, raw value) pairs; a value keeps its continuation lines.
fn stanzas(text: &str) -> Vec<Vec<(String, String)>> {
    let mut all = Vec::new();
    let mut current: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            if !current.is_empty() {
                all.push(std::mem::take(&mut current));
            }
            continue;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            if let Some((_, value)) = current.last_mut() {
                value.push('\n');
                value.push_str(line);
            }
            continue;
        }
        if let Some((key, value)) = line.split_once(':') {
            current.push((key.trim().to_string(), value.to_string()));
        }
    }
    if !current.is_empty() {
        all.push(current);
    }
    all
}

/// RO-29: what a run came to.
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// The packages upgraded from the security origin.
    Installed(Vec<String>),
    NothingToInstall,
    /// Another package run holds a lock apt needs; the path apt named.
    Busy(String),
    /// The updater failed; apt's reason.
    Failed(String),
}

impl Outcome {
    /// The word the plane reads (`outcome` of the word's result), from the derive.
    pub fn word(&self) -> &'static str {
        self.into()
    }
}

/// What one apt run printed.
#[derive(Debug, Clone, Copy)]
pub struct AptRun<'a> {
    pub success: bool,
    pub stdout: &'a str,
    pub stderr: &'a str,
}

/// The lock apt could not get, when that is why it stopped (`E: Could not get lock <path>.`).
pub fn lock_held(run: &AptRun) -> Option<String> {
    run.stderr
        .lines()
        .chain(run.stdout.lines())
        .find_map(|line| {
            // apt 2: `… lock-frontend. It is held by process 1234 (apt-get)`; apt 1: `… lock - open
            // (11: Resource temporarily unavailable)`.
            let rest = line.trim().strip_prefix("E: Could not get lock ")?;
            let path = rest.split_whitespace().next()?;
            Some(path.trim_end_matches('.').to_string())
        })
}

/// apt's errors (`E:` lines), joined; or how it exited when it printed none.
fn failure(run: &AptRun, what: &str) -> String {
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .chain(run.stdout.lines())
        .filter_map(|line| line.trim().strip_prefix("E: "))
        .collect();
    if errors.is_empty() {
        format!("{what} failed and printed no error")
    } else {
        format!("{what}: {}", errors.join("; "))
    }
}

/// The summary line's counts: `N upgraded, M newly installed, R to remove and K not upgraded.`
pub fn summary(stdout: &str) -> Option<(usize, usize)> {
    stdout.lines().find_map(|line| {
        let (upgraded, rest) = line.trim().split_once(" upgraded, ")?;
        let upgraded = upgraded.parse().ok()?;
        let (_, kept) = rest.split_once(" and ")?;
        let kept = kept.split_whitespace().next()?.parse().ok()?;
        Some((upgraded, kept))
    })
}

/// The names in apt's `The following packages will be upgraded:` block.
fn upgraded_names(stdout: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in stdout.lines() {
        if line.starts_with("The following packages will be upgraded:") {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            for name in line.split_whitespace() {
                if names.len() < MAX_NAMES {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// RO-29: the outcome of `apt-get update` (of the security sources) then `apt-get upgrade`
/// (`None` when the update already settled it).
pub fn outcome(update: &AptRun, upgrade: Option<&AptRun>) -> Outcome {
    if let Some(lock) = lock_held(update) {
        return Outcome::Busy(lock);
    }
    if !update.success {
        return Outcome::Failed(failure(update, "apt-get update"));
    }
    // `apt-get update` exits 0 when a source could not be fetched; it says so with `E:`/`W:`
    // lines. A security source that cannot be read means this run cannot see the fixes.
    let fetch_errors: Vec<&str> = update
        .stderr
        .lines()
        .chain(update.stdout.lines())
        .filter_map(|line| line.trim().strip_prefix("E: "))
        .collect();
    if !fetch_errors.is_empty() {
        return Outcome::Failed(format!("apt-get update: {}", fetch_errors.join("; ")));
    }
    let Some(upgrade) = upgrade else {
        return Outcome::Failed("apt-get upgrade did not run".into());
    };
    if let Some(lock) = lock_held(upgrade) {
        return Outcome::Busy(lock);
    }
    if !upgrade.success {
        return Outcome::Failed(failure(upgrade, "apt-get upgrade"));
    }
    match summary(upgrade.stdout) {
        Some((0, _)) => Outcome::NothingToInstall,
        Some(_) => Outcome::Installed(upgraded_names(upgrade.stdout)),
        None => Outcome::Failed("apt-get upgrade printed no summary to judge by".into()),
    }
}

/// Packages the run held back (a fix that needs a package from outside the security origin).
pub fn held_back(upgrade: &AptRun) -> usize {
    summary(upgrade.stdout).map_or(0, |(_, kept)| kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from apt 2.6.1 on Debian 12, run against a test root (`-o Dir=`) whose only
    // source was a local security suite, as `words::patching`'s tests run it.
    const UPDATE_OK: &str = "Get:1 file:/tmp/robench-apt/repo bookworm-security InRelease
Ign:1 file:/tmp/robench-apt/repo bookworm-security InRelease
Get:2 file:/tmp/robench-apt/repo bookworm-security Release [238 B]
Get:4 file:/tmp/robench-apt/repo bookworm-security/main amd64 Packages [255 B]
Reading package lists...
";
    const UPGRADE_ONE: &str = "Reading package lists...
Building dependency tree...
Calculating upgrade...
The following packages will be upgraded:
  capstan-fixture
1 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.
Inst capstan-fixture [1.0] (1.1 Debian-Security:bookworm-security [all])
Conf capstan-fixture (1.1 Debian-Security:bookworm-security [all])
";
    const UPGRADE_NONE: &str = "Reading package lists...
Building dependency tree...
Calculating upgrade...
0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.
";
    const FRONTEND_LOCK: &str = "E: Could not get lock /tmp/robench-apt/root/var/lib/dpkg/lock-frontend. It is held by process 28927 (python3)
E: Unable to acquire the dpkg frontend lock (/tmp/robench-apt/root/var/lib/dpkg/lock-frontend), is another process using it?
";
    const LISTS_LOCK: &str = "E: Could not get lock /tmp/robench-apt/root/var/lib/apt/lists/lock. It is held by process 29872 (python3)
E: Unable to lock directory /tmp/robench-apt/root/var/lib/apt/lists/
";
    const MISSING_REPO: &str =
        "E: The repository 'file:/nonexistent bookworm-security Release' does not exist.
";

    fn ran<'a>(success: bool, stdout: &'a str, stderr: &'a str) -> AptRun<'a> {
        AptRun {
            success,
            stdout,
            stderr,
        }
    }

    #[test]
    fn ro_25_only_the_security_suites_of_a_sources_list_are_kept_with_their_options() {
        let list = "# main archive
deb http://deb.debian.org/debian bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main contrib # fixes
deb-src http://deb.debian.org/debian-security bookworm-security main
deb http://deb.debian.org/debian bookworm-updates main
deb http://security.debian.org/debian-security buster/updates main
deb http://archive.ubuntu.com/ubuntu noble-security main restricted
deb http://mirror.example.org/debian sid/updates main
deb [broken http://x y-security
";
        assert_eq!(
            security_lines(list),
            [
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main contrib",
                "deb http://security.debian.org/debian-security buster/updates main",
                "deb http://archive.ubuntu.com/ubuntu noble-security main restricted",
            ]
        );
        assert!(security_lines("").is_empty());
    }

    #[test]
    fn ro_25_deb822_stanzas_keep_only_their_security_suites_and_their_keys() {
        // Debian 12's debian.sources and Ubuntu 24.04's ubuntu.sources, as installed.
        let sources = "Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

## Ubuntu
Types: deb
URIs: http://archive.ubuntu.com/ubuntu/
Suites: noble noble-updates noble-backports noble-security
Components: main restricted
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBFufwdoBEADv
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://security.example.org/debian
Suites: bookworm-security
Enabled: no
Components: main
";
        let kept = security_stanzas(sources);
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(
            kept[0],
            "Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"
        );
        assert!(kept[1].contains("Suites: noble-security\n"), "{}", kept[1]);
        assert!(
            kept[1].contains(
                "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBFufwdoBEADv\n"
            ),
            "{}",
            kept[1]
        );
    }

    #[test]
    fn ro_29_an_upgrade_that_installed_names_the_packages() {
        let update = ran(true, UPDATE_OK, "");
        let upgrade = ran(true, UPGRADE_ONE, "");
        assert_eq!(
            outcome(&update, Some(&upgrade)),
            Outcome::Installed(vec!["capstan-fixture".into()])
        );
        assert_eq!(outcome(&update, Some(&upgrade)).word(), "installed");
    }

    #[test]
    fn ro_29_an_upgrade_with_nothing_to_do_is_nothing_to_install() {
        let update = ran(true, UPDATE_OK, "");
        let upgrade = ran(true, UPGRADE_NONE, "");
        assert_eq!(outcome(&update, Some(&upgrade)), Outcome::NothingToInstall);
        let held = "0 upgraded, 0 newly installed, 0 to remove and 2 not upgraded.\n";
        assert_eq!(held_back(&ran(true, held, "")), 2);
    }

    #[test]
    fn ro_29_a_lock_held_by_another_package_run_is_in_the_way_not_a_failure() {
        let update = ran(true, UPDATE_OK, "");
        assert_eq!(
            outcome(&update, Some(&ran(false, "", FRONTEND_LOCK))),
            Outcome::Busy("/tmp/robench-apt/root/var/lib/dpkg/lock-frontend".into())
        );
        assert_eq!(
            outcome(&ran(false, "Reading package lists...\n", LISTS_LOCK), None),
            Outcome::Busy("/tmp/robench-apt/root/var/lib/apt/lists/lock".into())
        );
    }

    #[test]
    fn ro_29_an_updater_failure_carries_apts_reason() {
        let Outcome::Failed(reason) = outcome(&ran(false, "", MISSING_REPO), None) else {
            panic!("a missing repository is a failure");
        };
        assert!(reason.contains("does not exist"), "{reason}");
        let interrupted = "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem. \n";
        let Outcome::Failed(reason) = outcome(
            &ran(true, UPDATE_OK, ""),
            Some(&ran(false, "", interrupted)),
        ) else {
            panic!("an interrupted dpkg is a failure");
        };
        assert!(reason.contains("dpkg --configure -a"), "{reason}");
        // An update that exits 0 but could not read a source cannot see the fixes.
        assert!(matches!(
            outcome(
                &ran(true, UPDATE_OK, MISSING_REPO),
                Some(&ran(true, UPGRADE_NONE, ""))
            ),
            Outcome::Failed(_)
        ));
        // An upgrade whose output cannot be judged is not a success.
        assert!(matches!(
            outcome(
                &ran(true, UPDATE_OK, ""),
                Some(&ran(true, "Reading package lists...\n", ""))
            ),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            outcome(&ran(false, "", ""), None),
            Outcome::Failed(reason) if reason.contains("printed no error")
        ));
    }
}
