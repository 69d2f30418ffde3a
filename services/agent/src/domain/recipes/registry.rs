//! The compiled recipes (AG-46, AG-49): each is registered like a primitive, with no
//! parameters, a scope, whether it is check-only and whether its repair passes a value the node
//! derived for itself. The pinned test below lists every recipe, so one cannot arrive in a build
//! without a person naming it.

use capstan_events::agent_channel::primitives;

/// What a recipe watches (AG-46: host, site, release; and `Node` for disk_headroom, which the spec runs "on every node", a container too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Scope {
    /// Every node, with or without a site, inside a container or not: what it reads every
    /// agent can see (disk_headroom: "it runs on every node, paired or not").
    Node,
    /// The machine itself: runs wherever the agent runs, except inside a container, which
    /// cannot see the machine.
    Host,
    /// A site on the machine: needs a site root.
    Site,
    /// A site installed from a signed release: never a source checkout.
    Release,
    /// The machine, when a Docker engine answers on it (AG-54's container_health): its site
    /// containers are the engine's to list and restart.
    DockerHost,
}

/// How often a recipe's check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cadence {
    /// Every tick (AG-41).
    EveryTick,
    /// At most once an hour (AG-56's certificate_expiry).
    Hourly,
}

/// One compiled recipe. It takes no parameters (AG-49): there is no field for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recipe {
    pub name: &'static str,
    pub scope: Scope,
    pub cadence: Cadence,
    /// The word its repair runs; `None` for a check-only recipe (`NoRepair`, AG-52).
    pub repair_word: Option<&'static str>,
    /// Its repair passes the word a value the node derived for itself (the unit that failed),
    /// which the word re-validates against its own compiled set (AG-49).
    pub node_derived: bool,
    /// The plane-facing words of its case's summary.
    pub gives_up: &'static str,
}

impl Recipe {
    /// `NoRepair`: the loop opens a case on the first failing check and spends no attempts.
    pub fn check_only(&self) -> bool {
        self.repair_word.is_none()
    }
}

crate::domain::refusal!(
    /// Why a recipe cannot be registered (AG-49).
    BadRecipe
);
crate::domain::refusal!(
    /// Why a recipe does not apply on this machine (AG-46), reported once.
    NotApplicable
);

/// Why a recipe cannot be registered (AG-49).
pub fn register(recipe: &Recipe) -> Result<(), BadRecipe> {
    let name_ok = recipe.name.len() <= 64
        && recipe.name.starts_with(|c: char| c.is_ascii_lowercase())
        && recipe
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !name_ok {
        return Err(format!("{:?} is not a recipe name", recipe.name).into());
    }
    match recipe.repair_word {
        None if recipe.node_derived => Err(format!(
            "{}: a check-only recipe has no repair to derive a value for",
            recipe.name
        )
        .into()),
        None => Ok(()),
        Some(word) => {
            let Some(primitive) = primitives::find(word) else {
                return Err(format!(
                    "{}: its repair word {word} is not in the catalog",
                    recipe.name
                )
                .into());
            };
            if crate::domain::vocabulary::find(word).is_none() {
                return Err(format!(
                    "{}: its repair word {word} is not compiled into this agent",
                    recipe.name
                )
                .into());
            }
            let takes_params = !primitive.params.is_empty();
            if takes_params && !recipe.node_derived {
                return Err(format!(
                    "{}: {word} takes a parameter, which only a node-derived recipe may pass",
                    recipe.name
                )
                .into());
            }
            Ok(())
        }
    }
}

/// Every recipe compiled into this agent.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "disk_headroom",
        scope: Scope::Node,
        cadence: Cadence::EveryTick,
        repair_word: None,
        node_derived: false,
        gives_up: "The site's filesystem is running out of space",
    },
    Recipe {
        name: "service_health",
        scope: Scope::Site,
        cadence: Cadence::EveryTick,
        repair_word: Some("restart_unit"),
        node_derived: true,
        gives_up: "A service the site needs does not answer and restarting it did not help",
    },
    // AG-56, check-only here: the spec's repair is provision_certificate, which this build
    // does not have, and the fallback (`certbot renew --cert-name <name>`) is not an honest
    // repair from the agent: a failing check means certbot's own timer already ran that renewal
    // and it failed (a challenge that no longer passes, a rate limit, a DNS change), so running
    // it again from here repeats what failed; a lineage is not always named after the name it
    // serves; and an issued certificate reaches visitors only after a reload the word would
    // have to run too. A person is told instead: the case names the name with the fewest days.
    Recipe {
        name: "certificate_expiry",
        scope: Scope::Site,
        cadence: Cadence::Hourly,
        repair_word: None,
        node_derived: false,
        gives_up: "A certificate the site serves expires in under 14 days",
    },
    Recipe {
        name: "container_health",
        scope: Scope::DockerHost,
        cadence: Cadence::EveryTick,
        repair_word: Some("restart_container"),
        node_derived: true,
        gives_up: "A site container does not run or answer and restarting it did not help",
    },
    // AG-50. The spec's repair is host_converge running host_housekeeping.sh; this project has
    // no such script, so the repair restarts the unit (`restart_unit fail2ban`: fail2ban is in
    // the compiled UNITS). The unit is the recipe's constant, passed only as the target the
    // check set when it found the unit failing, and re-validated by the word (node-derived).
    Recipe {
        name: "fail2ban",
        scope: Scope::Host,
        cadence: Cadence::EveryTick,
        repair_word: Some("restart_unit"),
        node_derived: true,
        gives_up: "fail2ban is not active with a jail and restarting it did not help",
    },
    // AG-51. Site-scoped in the spec because its repair (install_agent.sh) lives in a site
    // tree; here the repair is the compiled word `agent_converge`, which needs no site, so it
    // applies wherever the agent runs (in a container with neither systemd nor cron it answers
    // unknown: the container runtime's restart policy is out of its sight).
    Recipe {
        name: "agent_supervision",
        scope: Scope::Node,
        cadence: Cadence::EveryTick,
        repair_word: Some("agent_converge"),
        node_derived: false,
        gives_up: "Nothing would restart the agent if it stopped, or start it after a reboot, and writing its supervision did not help",
    },
];

/// The compiled recipe named `name`.
pub fn find(name: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|recipe| recipe.name == name)
}

/// What the node knows of itself that decides where a recipe applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub has_site: bool,
    /// The agent runs inside a container (it cannot see the machine).
    pub in_container: bool,
    /// The site is a source checkout (a `.git` at its root), not a release install.
    pub site_is_checkout: bool,
    /// A Docker engine answers on the configured socket.
    pub docker_engine: bool,
}

/// AG-46: whether `recipe` applies here, or why not (reported once and never ticked).
pub fn applies(recipe: &Recipe, placement: &Placement) -> Result<(), NotApplicable> {
    match recipe.scope {
        Scope::Node => Ok(()),
        Scope::Host if placement.in_container => Err(
            "host-scoped, and this agent runs inside a container, which cannot see the machine; the host's own agent watches the host"
                .into(),
        ),
        Scope::Host => Ok(()),
        Scope::Site | Scope::Release if !placement.has_site => {
            Err("site-scoped, and this machine has no site".into())
        }
        Scope::Release if placement.site_is_checkout => Err(
            "release-scoped, and this site is a source checkout whose files are the developer's"
                .into(),
        ),
        Scope::Site | Scope::Release => Ok(()),
        Scope::DockerHost if placement.in_container => Err(
            "Docker-host-scoped, and this agent runs inside a container; the host's own agent watches its containers"
                .into(),
        ),
        Scope::DockerHost if !placement.docker_engine => Err(
            "Docker-host-scoped, and no Docker engine answers on this machine's Docker socket (a docker client alone is not an engine)"
                .into(),
        ),
        Scope::DockerHost => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use capstan_events::Word as _;

    use super::*;

    /// AG-49: the registry is pinned: every recipe, its scope, whether it is check-only and
    /// whether it is node-derived. Adding one changes this list.
    #[test]
    fn ag_49_the_registry_is_exactly_these_recipes() {
        let pinned: Vec<(&str, &str, bool, bool)> = RECIPES
            .iter()
            .map(|r| (r.name, r.scope.as_str(), r.check_only(), r.node_derived))
            .collect();
        assert_eq!(
            pinned,
            [
                ("disk_headroom", "node", true, false),
                ("service_health", "site", false, true),
                ("certificate_expiry", "site", true, false),
                ("container_health", "docker-host", false, true),
                ("fail2ban", "host", false, true),
                ("agent_supervision", "node", false, false),
            ]
        );
        for recipe in RECIPES {
            register(recipe).unwrap();
        }
    }

    #[test]
    fn ag_49_no_repair_only_with_no_repair_word_and_a_parameter_only_when_node_derived() {
        let base = *find("service_health").unwrap();
        assert!(register(&Recipe {
            node_derived: false,
            ..base
        })
        .unwrap_err()
        .contains("only a node-derived recipe"));
        assert!(register(&Recipe {
            repair_word: None,
            ..base
        })
        .unwrap_err()
        .contains("check-only"));
        assert!(register(&Recipe {
            repair_word: Some("rm_rf"),
            ..base
        })
        .unwrap_err()
        .contains("not in the catalog"));
        assert!(register(&Recipe {
            name: "Bad Name",
            ..base
        })
        .is_err());
    }

    #[test]
    fn ag_46_scopes_decide_where_a_recipe_applies() {
        let machine = Placement {
            has_site: false,
            in_container: false,
            site_is_checkout: false,
            docker_engine: false,
        };
        let site = Placement {
            has_site: true,
            ..machine
        };
        let contained = Placement {
            in_container: true,
            ..site
        };
        let checkout = Placement {
            site_is_checkout: true,
            ..site
        };
        let disk = find("disk_headroom").unwrap();
        let health = find("service_health").unwrap();
        assert!(applies(disk, &machine).is_ok());
        assert!(
            applies(disk, &contained).is_ok(),
            "every node, in a container too"
        );
        let host = Recipe {
            scope: Scope::Host,
            ..*disk
        };
        assert!(applies(&host, &contained)
            .unwrap_err()
            .contains("container"));
        assert!(applies(&host, &machine).is_ok());
        assert!(applies(health, &machine).unwrap_err().contains("no site"));
        assert!(applies(health, &site).is_ok());
        let release = Recipe {
            scope: Scope::Release,
            ..*health
        };
        assert!(applies(&release, &checkout)
            .unwrap_err()
            .contains("checkout"));
        assert!(applies(&release, &site).is_ok());
    }

    /// AG-54: container_health applies only where a Docker engine answers, and never inside a
    /// container; AG-56: certificate_expiry is hourly and needs the site's vhost.
    #[test]
    fn ag_54_container_health_needs_a_docker_engine_and_ag_56_certificate_expiry_a_site() {
        let docker = Placement {
            has_site: false,
            in_container: false,
            site_is_checkout: false,
            docker_engine: true,
        };
        let containers = find("container_health").unwrap();
        assert!(applies(containers, &docker).is_ok());
        assert!(applies(
            containers,
            &Placement {
                docker_engine: false,
                ..docker
            }
        )
        .unwrap_err()
        .contains("no Docker engine answers"));
        assert!(applies(
            containers,
            &Placement {
                in_container: true,
                ..docker
            }
        )
        .unwrap_err()
        .contains("inside a container"));
        let certificates = find("certificate_expiry").unwrap();
        assert_eq!(certificates.cadence, Cadence::Hourly);
        assert!(applies(certificates, &docker)
            .unwrap_err()
            .contains("no site"));
        assert!(applies(
            certificates,
            &Placement {
                has_site: true,
                ..docker
            }
        )
        .is_ok());
    }
}
