//! What the agent's systemd unit must grant, derived from what each compiled word and the
//! agent's own update write, and which of root's capabilities they use
//! (`docs/agent-confinement.md`, "What the unit grants, derived"). The unit grants exactly the
//! union: `tests/systemd_unit.rs` checks every need is granted and nothing else is.

/// A tree a word writes, as the unit names it in `ReadWritePaths=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// The state directory (`cli::DEFAULT_STATE_DIR`): identity, switches, indexes, safety
    /// dumps, kept deployment files, the security suites' sources list.
    StateDir,
    /// The site root and the directory it lives in: a restore and a rehearsal build beside the
    /// site and swap it in; a site release lands `releases/` and renames `current`. The unit
    /// grants the sites' usual home (install.sh's suggestion is `/var/www/site`); a site
    /// elsewhere needs a drop-in naming its parent.
    SiteTree,
    /// The agent's binary's directory: a self-update writes `.new`, `.bak`, `.pending`,
    /// `.rejected` beside the binary and renames, and so does the start guard.
    AgentBinary,
    /// The directory the support bundle lands in (`--bundle-dir`'s parent, install.sh makes
    /// it): a siteless machine's bundle is built beside `tree` and swapped in (AG-32).
    SupportBundle,
}

impl Writes {
    /// The path the unit grants for it.
    pub fn path(self) -> &'static str {
        match self {
            Writes::StateDir => "/etc/capstan-agent",
            Writes::SiteTree => "/var/www",
            Writes::AgentBinary => "/usr/local/bin",
            Writes::SupportBundle => "/opt/capstan-agent",
        }
    }
}

/// Reading and listing another user's files (the web user's site tree, logs, certificates).
pub const READ_ANY: &str = "CAP_DAC_READ_SEARCH";
/// Writing into another user's directories (the web user's site tree).
pub const WRITE_ANY: &str = "CAP_DAC_OVERRIDE";

/// What one word (or the agent itself) needs of the unit beyond root's uid.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    /// The word's name, or [`THE_AGENT`].
    pub who: &'static str,
    pub writes: &'static [Writes],
    pub capabilities: &'static [&'static str],
}

/// The agent's own work between jobs: its state, its self-update (AG-24..AG-30).
pub const THE_AGENT: &str = "the agent itself";

/// Every compiled word's needs, and the agent's own.
pub const NEEDS: &[Needs] = &[
    needs("check_status", &[], &[READ_ANY]),
    needs("host_report", &[], &[]),
    needs("disk_usage", &[], &[READ_ANY]),
    needs("unit_journal", &[], &[]),
    needs("restart_unit", &[], &[]),
    needs("reset_failed_unit", &[], &[]),
    needs("site_log", &[], &[READ_ANY]),
    needs("file_head", &[], &[]),
    needs("restart_container", &[], &[]),
    needs("backup_run", &[Writes::StateDir], &[READ_ANY]),
    needs(
        "verify_backup",
        &[Writes::StateDir, Writes::SiteTree],
        &[READ_ANY, WRITE_ANY],
    ),
    needs("list_backups", &[], &[]),
    needs("restore_database", &[Writes::StateDir], &[]),
    needs(
        "restore_project",
        &[Writes::StateDir, Writes::SiteTree],
        &[READ_ANY, WRITE_ANY],
    ),
    needs("agent_converge", &[], &[]),
    needs("install_security_updates", &[Writes::StateDir], &[]),
    needs(
        "apply_update",
        &[Writes::StateDir, Writes::SiteTree],
        &[READ_ANY, WRITE_ANY],
    ),
    needs("upgrade_preflight", &[], &[READ_ANY]),
    needs("page_probe", &[], &[]),
    needs(
        THE_AGENT,
        &[Writes::StateDir, Writes::AgentBinary, Writes::SupportBundle],
        &[],
    ),
];

const fn needs(
    who: &'static str,
    writes: &'static [Writes],
    capabilities: &'static [&'static str],
) -> Needs {
    Needs {
        who,
        writes,
        capabilities,
    }
}

/// What a unit grants: its `ReadWritePaths=` (a leading `-`, "ignore when absent", dropped)
/// and its `CapabilityBoundingSet=`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Grants {
    pub paths: Vec<String>,
    pub capabilities: Vec<String>,
}

impl Grants {
    /// The grants of a unit file's `[Service]` section.
    pub fn of_unit(unit: &str) -> Grants {
        let mut grants = Grants::default();
        let service = unit
            .split_once("[Service]")
            .map(|(_, rest)| rest)
            .unwrap_or("");
        let service = service.split("\n[").next().unwrap_or_default();
        for line in service.lines().map(str::trim) {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let words = value.split_whitespace().map(str::to_string);
            match key.trim() {
                "ReadWritePaths" => grants
                    .paths
                    .extend(words.map(|path| path.trim_start_matches('-').to_string())),
                "CapabilityBoundingSet" => grants.capabilities.extend(words),
                _ => {}
            }
        }
        grants
    }

    /// What `needs` asks that these grants lack, each named.
    pub fn missing(&self, needs: &Needs) -> Vec<String> {
        let paths = needs
            .writes
            .iter()
            .filter(|writes| !self.paths.iter().any(|path| path == writes.path()))
            .map(|writes| format!("{}: ReadWritePaths lacks {}", needs.who, writes.path()));
        let capabilities = needs
            .capabilities
            .iter()
            .filter(|capability| !self.capabilities.iter().any(|held| held == *capability))
            .map(|capability| format!("{}: CapabilityBoundingSet lacks {capability}", needs.who));
        paths.chain(capabilities).collect()
    }

    /// What these grants give that no need asks for.
    pub fn unneeded(&self, all: &[Needs]) -> Vec<String> {
        let paths = self
            .paths
            .iter()
            .filter(|path| {
                !all.iter()
                    .any(|needs| needs.writes.iter().any(|writes| writes.path() == *path))
            })
            .map(|path| format!("ReadWritePaths grants {path}, which no word writes"));
        let capabilities = self
            .capabilities
            .iter()
            .filter(|held| {
                !all.iter()
                    .any(|needs| needs.capabilities.contains(&held.as_str()))
            })
            .map(|held| format!("CapabilityBoundingSet grants {held}, which no word uses"));
        paths.chain(capabilities).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::vocabulary;

    #[test]
    fn every_compiled_word_has_its_needs_written_down_once() {
        let mut named: Vec<&str> = NEEDS.iter().map(|needs| needs.who).collect();
        named.sort_unstable();
        let before = named.len();
        named.dedup();
        assert_eq!(before, named.len(), "a word is listed twice");
        let mut expected = vocabulary::names();
        expected.push(THE_AGENT);
        expected.sort_unstable();
        assert_eq!(named, expected);
    }

    #[test]
    fn a_unit_granting_less_than_a_word_needs_names_what_it_lacks() {
        let grants = Grants::of_unit(
            "[Unit]\nReadWritePaths=/nowhere\n[Service]\nReadWritePaths=-/etc/capstan-agent\nCapabilityBoundingSet=CAP_DAC_READ_SEARCH\n[Install]\n",
        );
        assert_eq!(grants.paths, ["/etc/capstan-agent"]);
        let restore = NEEDS
            .iter()
            .find(|needs| needs.who == "restore_project")
            .unwrap();
        assert_eq!(
            grants.missing(restore),
            [
                "restore_project: ReadWritePaths lacks /var/www",
                "restore_project: CapabilityBoundingSet lacks CAP_DAC_OVERRIDE"
            ]
        );
        let extra = Grants {
            paths: vec!["/etc/capstan-agent".into(), "/srv".into()],
            capabilities: vec!["CAP_SYS_ADMIN".into()],
        };
        assert_eq!(
            extra.unneeded(NEEDS),
            [
                "ReadWritePaths grants /srv, which no word writes",
                "CapabilityBoundingSet grants CAP_SYS_ADMIN, which no word uses"
            ]
        );
    }
}
