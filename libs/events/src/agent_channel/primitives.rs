//! The primitives the plane knows: each word's class, claim budget and parameter shape. The
//! agent compiles its own vocabulary and checks every job again on the node; this catalog is
//! what the plane uses to route, to decide who may ask for a word (its class), to give up on a
//! claim (its budget), and to draw a form. Adding a word is a visible decision: the test at the
//! bottom pins the set.

use serde::Serialize;
use std::time::Duration;

pub use super::PrimitiveClass;
use crate::Domain;

/// The only word a node below the version floor is offered (AC-20): how it gets back above.
/// Also the word a rollout applies a site release with.
pub const UPDATE: &str = "apply_update";
/// The monitor's status job (MO-05), whose result other services read too.
pub const CHECK_STATUS: &str = "check_status";
/// The monitor's host job (MO-06).
pub const HOST_REPORT: &str = "host_report";

/// The default claim budget (spec: "15 minutes, or the primitive's own budget").
pub const DEFAULT_CLAIM_BUDGET: Duration = Duration::from_secs(15 * 60);

/// The longest a node lets one word run before it stops it and reports it failed (AG-21:
/// "30 min per step by default").
pub const DEFAULT_RUN_BUDGET: Duration = Duration::from_secs(30 * 60);

/// What a node keeps back from a job's claim budget to post its result before the plane gives
/// up on the claim.
pub const REPORT_MARGIN: Duration = Duration::from_secs(60);

/// One word of the vocabulary.
#[derive(Debug, Clone, Serialize)]
pub struct Primitive {
    pub name: &'static str,
    pub class: PrimitiveClass,
    /// Seconds a claimed job may run before the plane marks it lost.
    #[serde(serialize_with = "seconds")]
    pub claim_budget: Duration,
    /// Seconds the node lets the word run before it stops it (AG-21: 30 minutes unless the
    /// word says otherwise; the backup words run for hours). Never past the claim budget less
    /// the report margin ([`Primitive::run_budget`]).
    #[serde(serialize_with = "seconds")]
    pub run_budget: Duration,
    pub summary: &'static str,
    pub params: &'static [Param],
    /// Who may ask for it (issue 27): operators through the generic jobs route, or one
    /// service alone. The agent channel holds every job to it, whichever door it came by.
    pub issuer: Issuer,
}

/// Who may ask for a word. Declared once, on the word; the agent channel enforces it on every
/// job it makes (an operator's, or a service's `request_job` by the subject it came on), and
/// the gateway answers the generic jobs route with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Issuer {
    /// Operators, through `POST /api/v1/nodes/{id}/jobs` at the word's class level; and the
    /// services named, by `request_job` (the monitor's status words on its cadence).
    Operators { services: &'static [Domain] },
    /// One service alone: its own rules make the job (a backup's run number and the one job
    /// per machine, a rollout's stages). Operators ask that service, through `route`.
    Service { domain: Domain, route: &'static str },
}

/// Operators only: no service asks for the word.
const OPERATORS: Issuer = Issuer::Operators { services: &[] };
/// Operators, and the monitor on its status cadence (MO-05, MO-06).
const OPERATORS_AND_MONITOR: Issuer = Issuer::Operators {
    services: &[Domain::Monitor],
};
/// The rollouts service's words: a release's apply and its checks, a patch run (RO-10..RO-29).
const ROLLOUTS: Issuer = Issuer::Service {
    domain: Domain::Rollouts,
    route: "POST /api/v1/rollouts",
};

fn seconds<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_secs())
}

/// One declared parameter.
#[derive(Debug, Clone, Serialize)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    pub required: bool,
    pub summary: &'static str,
}

/// The shape of a parameter's value.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ParamKind {
    Integer { min: i64, max: i64 },
    Text { max_len: usize },
    OneOf { values: &'static [&'static str] },
    Boolean,
}

/// The units a unit word may touch: a compiled allow-list, never a parameter's free text.
pub const UNITS: &[&str] = &[
    "nginx",
    "apache2",
    "php-fpm",
    "postgresql",
    "mariadb",
    "redis-server",
    "fail2ban",
    "capstan-agent",
];

/// Site logs a log word may read.
pub const SITE_LOGS: &[&str] = &["access", "error"];

/// Host files `file_head` may read.
pub const HEAD_FILES: &[&str] = &[
    "/etc/os-release",
    "/etc/nginx/nginx.conf",
    "/etc/fstab",
    "/etc/hosts",
];

const fn budget(minutes: u64) -> Duration {
    Duration::from_secs(minutes * 60)
}

/// Every word the plane knows, by name.
pub const CATALOG: &[Primitive] = &[
    Primitive {
        name: CHECK_STATUS,
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "agent version, uptime, load, memory, disk, certificates, database reachability",
        params: &[],
        issuer: OPERATORS_AND_MONITOR,
    },
    Primitive {
        name: HOST_REPORT,
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "operating system, kernel, boot id, disk, failed units, containers",
        params: &[],
        issuer: OPERATORS_AND_MONITOR,
    },
    Primitive {
        name: "disk_usage",
        class: PrimitiveClass::Read,
        claim_budget: budget(15),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "the largest directories under the site root",
        params: &[Param {
            name: "max_entries",
            kind: ParamKind::Integer { min: 1, max: 200 },
            required: false,
            summary: "how many directories to list (default 20)",
        }],
        issuer: OPERATORS,
    },
    Primitive {
        name: "unit_journal",
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "the latest journal lines of one service unit",
        params: &[
            Param {
                name: "unit",
                kind: ParamKind::OneOf { values: UNITS },
                required: true,
                summary: "the unit",
            },
            Param {
                name: "lines",
                kind: ParamKind::Integer { min: 1, max: 2000 },
                required: false,
                summary: "how many lines (default 200)",
            },
        ],
        issuer: OPERATORS,
    },
    Primitive {
        name: "restart_unit",
        class: PrimitiveClass::Change,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "restart one service unit",
        params: &[Param {
            name: "unit",
            kind: ParamKind::OneOf { values: UNITS },
            required: true,
            summary: "the unit",
        }],
        issuer: OPERATORS,
    },
    Primitive {
        name: "reset_failed_unit",
        class: PrimitiveClass::Change,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "clear a unit's failed state",
        params: &[Param {
            name: "unit",
            kind: ParamKind::OneOf { values: UNITS },
            required: true,
            summary: "the unit",
        }],
        issuer: OPERATORS,
    },
    Primitive {
        name: "site_log",
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "the latest lines of the site's log, redacted (needs the owner's log access)",
        params: &[
            Param {
                name: "log",
                kind: ParamKind::OneOf { values: SITE_LOGS },
                required: true,
                summary: "which log",
            },
            Param {
                name: "lines",
                kind: ParamKind::Integer { min: 1, max: 2000 },
                required: false,
                summary: "how many lines (default 200)",
            },
        ],
        issuer: OPERATORS,
    },
    Primitive {
        name: "file_head",
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "the first lines of a host configuration file (needs the owner's log access)",
        params: &[
            Param {
                name: "file",
                kind: ParamKind::OneOf { values: HEAD_FILES },
                required: true,
                summary: "which file",
            },
            Param {
                name: "lines",
                kind: ParamKind::Integer { min: 1, max: 500 },
                required: false,
                summary: "how many lines (default 50)",
            },
        ],
        issuer: OPERATORS,
    },
    Primitive {
        name: UPDATE,
        class: PrimitiveClass::Change,
        claim_budget: budget(30),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "apply a signed release (the site's, laid out beside the last ones; below the version floor, the only word offered)",
        params: &[Param {
            name: "version",
            kind: ParamKind::Text { max_len: 32 },
            required: true,
            summary: "the release to install",
        }],
        issuer: ROLLOUTS,
    },
    Primitive {
        name: "upgrade_preflight",
        class: PrimitiveClass::Read,
        claim_budget: budget(15),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "would an upgrade stop before it started: manifest, files, lock, room, version (RO-19)",
        params: &[],
        issuer: ROLLOUTS,
    },
    Primitive {
        name: "page_probe",
        class: PrimitiveClass::Read,
        claim_budget: budget(15),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "fetch one of the site's pages as a viewer: status, errors, assets that failed (RO-21)",
        params: &[
            Param {
                name: "path",
                kind: ParamKind::Text { max_len: 512 },
                required: true,
                summary: "the page's path, from /",
            },
            Param {
                name: "viewer",
                kind: ParamKind::OneOf {
                    values: &["anonymous", "admin"],
                },
                required: true,
                summary: "who the page is fetched as",
            },
        ],
        issuer: ROLLOUTS,
    },
    Primitive {
        name: "install_security_updates",
        class: PrimitiveClass::Change,
        claim_budget: budget(60),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "install the packages waiting from the security origin only (RO-25)",
        params: &[],
        issuer: ROLLOUTS,
    },
    Primitive {
        name: "restart_container",
        class: PrimitiveClass::Change,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "restart one of the node's own site containers (never a held one)",
        params: &[Param {
            name: "container",
            kind: ParamKind::Text { max_len: 128 },
            required: true,
            summary: "the container's name, which the node checks against its own site containers",
        }],
        issuer: OPERATORS,
    },
    Primitive {
        name: "backup_run",
        class: PrimitiveClass::Change,
        claim_budget: budget(240),
        run_budget: budget(235),
        summary: "back up the site's database and files, sealed to its owner's key (issue 14)",
        params: &[
            Param {
                name: "seq",
                kind: ParamKind::Integer {
                    min: 1,
                    max: 1 << 53,
                },
                required: true,
                summary: "the run's number, picked by the plane",
            },
            Param {
                name: "kind",
                kind: ParamKind::OneOf {
                    values: &["full", "incremental"],
                },
                required: true,
                summary: "full, or incremental on previous_seq",
            },
            Param {
                name: "previous_seq",
                kind: ParamKind::Integer {
                    min: 1,
                    max: 1 << 53,
                },
                required: false,
                summary: "the run an incremental extends (required iff incremental)",
            },
        ],
        issuer: Issuer::Service {
            domain: Domain::Backups,
            route: "POST /api/v1/nodes/{id}/backups/run",
        },
    },
    Primitive {
        name: "verify_backup",
        class: PrimitiveClass::Read,
        claim_budget: budget(240),
        run_budget: budget(235),
        summary: "open and read a backup (level 2) or rehearse its restore (level 3)",
        params: &[
            Param {
                name: "seq",
                kind: ParamKind::Integer {
                    min: 1,
                    max: 1 << 53,
                },
                required: true,
                summary: "the run to verify (with the chain it extends)",
            },
            Param {
                name: "level",
                kind: ParamKind::Integer { min: 2, max: 3 },
                required: true,
                summary: "2: open and read; 3: rehearse a restore",
            },
        ],
        issuer: Issuer::Service {
            domain: Domain::Backups,
            route: "POST /api/v1/nodes/{id}/backups/verify",
        },
    },
    Primitive {
        name: "list_backups",
        class: PrimitiveClass::Read,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "the node's own record of its backup runs and its recovery key",
        params: &[],
        issuer: OPERATORS,
    },
    Primitive {
        name: "restore_database",
        class: PrimitiveClass::Destructive,
        claim_budget: budget(240),
        run_budget: budget(235),
        summary: "replace the site's database with a backup run's",
        params: &[Param {
            name: "seq",
            kind: ParamKind::Integer {
                min: 1,
                max: 1 << 53,
            },
            required: true,
            summary: "the run to restore",
        }],
        issuer: Issuer::Service {
            domain: Domain::Backups,
            route: "POST /api/v1/nodes/{id}/backups/restore",
        },
    },
    Primitive {
        name: "restore_project",
        class: PrimitiveClass::Destructive,
        claim_budget: budget(240),
        run_budget: budget(235),
        summary: "replace the site's database and files with a backup run's",
        params: &[Param {
            name: "seq",
            kind: ParamKind::Integer {
                min: 1,
                max: 1 << 53,
            },
            required: true,
            summary: "the run to restore (the last full and every incremental up to it)",
        }],
        issuer: Issuer::Service {
            domain: Domain::Backups,
            route: "POST /api/v1/nodes/{id}/backups/restore",
        },
    },
    Primitive {
        name: "agent_converge",
        class: PrimitiveClass::Change,
        claim_budget: budget(5),
        run_budget: DEFAULT_RUN_BUDGET,
        summary: "write and enable the agent's own supervision (its systemd unit, or the cron keepalive); restarts nothing",
        params: &[],
        issuer: OPERATORS,
    },
];

impl Primitive {
    /// How long a node lets this word run before it stops it and reports it failed: the
    /// default run budget, but never so long that the plane gives up on the claim first (its
    /// claim budget less the report margin). Plane and node read the same number.
    pub fn run_budget(&self) -> Duration {
        self.run_budget
            .min(self.claim_budget.saturating_sub(REPORT_MARGIN))
    }
}

impl Primitive {
    /// The service that alone asks for this word, with the operator route that asks it; `None`
    /// for a word operators run through the generic jobs route.
    pub fn owner(&self) -> Option<(Domain, &'static str)> {
        match self.issuer {
            Issuer::Operators { .. } => None,
            Issuer::Service { domain, route } => Some((domain, route)),
        }
    }

    /// Why an operator may not ask for this word through the generic jobs route, naming the
    /// owning service's route; `None` when they may.
    pub fn operator_refusal(&self) -> Option<String> {
        let (domain, route) = self.owner()?;
        Some(format!(
            "primitive: {} is the {} service's word and is never made on the generic jobs route; ask for it with {route}",
            self.name,
            domain.service_name()
        ))
    }

    /// Whether `sender` may ask for this word with `request_job`: the word's owner, or a
    /// service the word names beside operators.
    pub fn requestable_by(&self, sender: Domain) -> bool {
        match self.issuer {
            Issuer::Operators { services } => services.contains(&sender),
            Issuer::Service { domain, .. } => domain == sender,
        }
    }
}

/// The word named `name`, if the plane knows it.
pub fn find(name: &str) -> Option<&'static Primitive> {
    CATALOG.iter().find(|primitive| primitive.name == name)
}

impl Primitive {
    /// Checks `params` against the declared shape: an object, nothing undeclared, every
    /// required parameter present, every value of its kind and within its bounds. The message
    /// names the parameter at fault.
    pub fn check_params(&self, params: &serde_json::Value) -> Result<(), String> {
        let empty = serde_json::Map::new();
        let object = match params {
            serde_json::Value::Object(object) => object,
            serde_json::Value::Null => &empty,
            _ => return Err("params must be a JSON object".into()),
        };
        for name in object.keys() {
            if !self.params.iter().any(|param| param.name == name) {
                return Err(format!("{} takes no parameter {name:?}", self.name));
            }
        }
        for param in self.params {
            let Some(value) = object.get(param.name) else {
                if param.required {
                    return Err(format!(
                        "{} needs the parameter {:?}",
                        self.name, param.name
                    ));
                }
                continue;
            };
            param.check(value)?;
        }
        Ok(())
    }
}

impl Param {
    fn check(&self, value: &serde_json::Value) -> Result<(), String> {
        let name = self.name;
        match &self.kind {
            ParamKind::Integer { min, max } => match value.as_i64() {
                Some(number) if (*min..=*max).contains(&number) => Ok(()),
                Some(number) => Err(format!("{name} is {number}, outside {min}..={max}")),
                None => Err(format!("{name} must be a whole number")),
            },
            ParamKind::Text { max_len } => match value.as_str() {
                Some(text) if text.len() <= *max_len && !text.chars().any(char::is_control) => {
                    Ok(())
                }
                Some(_) => Err(format!(
                    "{name} must be at most {max_len} characters, without control characters"
                )),
                None => Err(format!("{name} must be text")),
            },
            ParamKind::OneOf { values } => match value.as_str() {
                Some(text) if values.contains(&text) => Ok(()),
                _ => Err(format!("{name} must be one of {}", values.join(", "))),
            },
            ParamKind::Boolean => match value {
                serde_json::Value::Bool(_) => Ok(()),
                _ => Err(format!("{name} must be true or false")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Adding or reclassing a word is a decision: this list changes with it.
    #[test]
    fn the_catalog_is_exactly_these_words_and_classes() {
        let words: Vec<(&str, PrimitiveClass)> = CATALOG
            .iter()
            .map(|primitive| (primitive.name, primitive.class))
            .collect();
        use PrimitiveClass::*;
        assert_eq!(
            words,
            vec![
                ("check_status", Read),
                ("host_report", Read),
                ("disk_usage", Read),
                ("unit_journal", Read),
                ("restart_unit", Change),
                ("reset_failed_unit", Change),
                ("site_log", Read),
                ("file_head", Read),
                ("apply_update", Change),
                ("upgrade_preflight", Read),
                ("page_probe", Read),
                ("install_security_updates", Change),
                ("restart_container", Change),
                ("backup_run", Change),
                ("verify_backup", Read),
                ("list_backups", Read),
                ("restore_database", Destructive),
                ("restore_project", Destructive),
                ("agent_converge", Change),
            ]
        );
    }

    /// Issue 27: who asks for each word is a decision, pinned here with the catalog.
    #[test]
    fn the_backup_and_rollout_words_are_their_services_alone_and_the_monitor_asks_only_its_status_words(
    ) {
        let owned: Vec<(&str, Domain)> = CATALOG
            .iter()
            .filter_map(|primitive| Some((primitive.name, primitive.owner()?.0)))
            .collect();
        assert_eq!(
            owned,
            vec![
                ("apply_update", Domain::Rollouts),
                ("upgrade_preflight", Domain::Rollouts),
                ("page_probe", Domain::Rollouts),
                ("install_security_updates", Domain::Rollouts),
                ("backup_run", Domain::Backups),
                ("verify_backup", Domain::Backups),
                ("restore_database", Domain::Backups),
                ("restore_project", Domain::Backups),
            ]
        );
        let by = |sender: Domain| -> Vec<&str> {
            CATALOG
                .iter()
                .filter(|primitive| primitive.requestable_by(sender))
                .map(|primitive| primitive.name)
                .collect()
        };
        assert_eq!(by(Domain::Monitor), vec!["check_status", "host_report"]);
        assert_eq!(
            by(Domain::Backups),
            vec![
                "backup_run",
                "verify_backup",
                "restore_database",
                "restore_project"
            ]
        );
        assert_eq!(
            by(Domain::Rollouts),
            vec![
                "apply_update",
                "upgrade_preflight",
                "page_probe",
                "install_security_updates"
            ]
        );
        for sender in [
            Domain::Gateway,
            Domain::AgentChannel,
            Domain::Incidents,
            Domain::Provisioning,
            Domain::Dns,
            Domain::Billing,
        ] {
            assert!(
                by(sender).is_empty(),
                "{sender} may ask for {:?}",
                by(sender)
            );
        }
    }

    #[test]
    fn an_owned_word_refused_to_an_operator_names_its_services_route() {
        let verify = find("verify_backup").unwrap().operator_refusal().unwrap();
        assert!(verify.contains("backups service"), "{verify}");
        assert!(
            verify.contains("POST /api/v1/nodes/{id}/backups/verify"),
            "{verify}"
        );
        let apply = find("apply_update").unwrap().operator_refusal().unwrap();
        assert!(apply.contains("POST /api/v1/rollouts"), "{apply}");
        assert_eq!(find("restart_unit").unwrap().operator_refusal(), None);
        assert_eq!(find("check_status").unwrap().operator_refusal(), None);
    }

    #[test]
    fn no_claim_budget_exceeds_the_default_without_reason() {
        // AC-29: 15 minutes unless the word has its own budget; only an apply, a package run
        // and the backup words (a whole site's transfer, issue 14) need more.
        for primitive in CATALOG {
            if ![
                "apply_update",
                "install_security_updates",
                "backup_run",
                "verify_backup",
                "restore_database",
                "restore_project",
            ]
            .contains(&primitive.name)
            {
                assert!(
                    primitive.claim_budget <= DEFAULT_CLAIM_BUDGET,
                    "{}",
                    primitive.name
                );
            }
        }
    }

    #[test]
    fn every_run_budget_ends_before_its_claim_budget_with_room_to_report() {
        for primitive in CATALOG {
            let run = primitive.run_budget();
            assert!(run > Duration::ZERO, "{}", primitive.name);
            assert!(run <= primitive.run_budget, "{}", primitive.name);
            assert!(
                run + REPORT_MARGIN <= primitive.claim_budget,
                "{}",
                primitive.name
            );
        }
        assert_eq!(
            find("check_status").unwrap().run_budget(),
            Duration::from_secs(4 * 60)
        );
        assert_eq!(
            find("disk_usage").unwrap().run_budget(),
            Duration::from_secs(14 * 60)
        );
    }

    #[test]
    fn ag_21_each_word_has_its_own_run_budget_and_the_backup_words_run_for_hours() {
        // AG-21's 30 minutes is the default, not every word's: a backup of a large site, its
        // verify and its restore run up to their own budgets (issue 14).
        for word in [
            "backup_run",
            "verify_backup",
            "restore_database",
            "restore_project",
        ] {
            let primitive = find(word).unwrap();
            assert_eq!(
                primitive.claim_budget,
                Duration::from_secs(240 * 60),
                "{word}"
            );
            assert_eq!(
                primitive.run_budget(),
                Duration::from_secs(235 * 60),
                "{word}"
            );
            assert!(primitive.run_budget() > DEFAULT_RUN_BUDGET, "{word}");
        }
        assert_eq!(
            find("install_security_updates").unwrap().run_budget(),
            DEFAULT_RUN_BUDGET
        );
    }

    #[test]
    fn params_outside_the_declared_shape_are_refused_by_name() {
        let journal = find("unit_journal").unwrap();
        assert!(journal
            .check_params(&json!({"unit": "nginx", "lines": 50}))
            .is_ok());
        assert!(journal.check_params(&json!({"unit": "nginx"})).is_ok());
        let cases = [
            (json!({}), "needs the parameter \"unit\""),
            (json!({"unit": "sshd"}), "unit must be one of"),
            (
                json!({"unit": "nginx", "lines": 0}),
                "lines is 0, outside 1..=2000",
            ),
            (
                json!({"unit": "nginx", "lines": "ten"}),
                "lines must be a whole number",
            ),
            (
                json!({"unit": "nginx", "shell": "rm -rf /"}),
                "takes no parameter \"shell\"",
            ),
            (json!(["nginx"]), "params must be a JSON object"),
        ];
        for (params, expected) in cases {
            let error = journal.check_params(&params).unwrap_err();
            assert!(error.contains(expected), "{params}: {error}");
        }
        assert!(find("check_status")
            .unwrap()
            .check_params(&json!(null))
            .is_ok());
        assert!(find("apply_update")
            .unwrap()
            .check_params(&json!({"version": "1.2.3\n"}))
            .is_err());
    }
}
