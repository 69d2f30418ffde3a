//! The unit words: `unit_journal` (state and latest journal lines), `restart_unit` and
//! `reset_failed_unit`. The unit is one of the catalog's compiled list (checked before the
//! word runs); `systemctl` and `journalctl` run with fixed arguments and no shell. Without
//! systemd, the unit's state is "unknown" and nothing is changed. Where the node's own
//! configuration names supervisord as its services' supervisor, `restart_unit` goes through
//! `supervisorctl` instead.

use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

use super::{
    find_program, run_program, systemd_running, Failed, Finished, ProgramError, Redaction,
};
use crate::{config::Config, domain::recipes::checks::UnitState};

const PROPERTIES: &str =
    "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus,ExecMainExitTimestamp";

fn unit_of(params: &Value) -> String {
    let unit = params["unit"].as_str().unwrap_or_default();
    format!("{unit}.service")
}

fn lines_of(params: &Value, default: u64) -> u64 {
    params
        .get("lines")
        .and_then(Value::as_u64)
        .unwrap_or(default)
}

/// Why the unit words cannot ask systemd, if they cannot.
fn systemctl() -> Result<PathBuf, ProgramError> {
    if !systemd_running() {
        return Err(ProgramError::Unavailable(
            "systemd is not running on this machine",
        ));
    }
    find_program("systemctl").ok_or(ProgramError::Unavailable("systemctl is not installed"))
}

/// The unit's state from `systemctl show`, as an object of the properties asked for.
async fn unit_state(systemctl: &std::path::Path, unit: &str) -> Result<Value, ProgramError> {
    let ran = run_program(systemctl, &["show", unit, PROPERTIES, "--no-pager"]).await?;
    if !ran.success {
        return Err(ProgramError::refused(
            format!("systemctl show {unit}"),
            &ran.stderr,
        ));
    }
    Ok(parse_show(&ran.stdout))
}

fn parse_show(text: &str) -> Value {
    let mut state = Map::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let field = match key {
            "LoadState" => "load_state",
            "ActiveState" => "state",
            "SubState" => "sub_state",
            "Result" => "result",
            "ExecMainStatus" => "exit_status",
            "ExecMainExitTimestamp" => "last_exit",
            _ => continue,
        };
        state.insert(field.into(), json!(value));
    }
    Value::Object(state)
}

fn unknown(unit: &str, why: &dyn std::fmt::Display) -> Value {
    json!({"unit": unit, "state": "unknown", "why": why.to_string()})
}

pub async fn unit_journal(params: &Value) -> Result<Finished, Failed> {
    let unit = unit_of(params);
    let lines = lines_of(params, 200);
    let systemctl = match systemctl() {
        Ok(systemctl) => systemctl,
        Err(why) => {
            let mut result = unknown(&unit, &why);
            result["lines"] = json!([]);
            return Ok(Finished {
                output: format!("{unit}: state unknown ({why})"),
                result,
                redaction: Redaction::Text,
            });
        }
    };
    let mut result = match unit_state(&systemctl, &unit).await {
        Ok(state) => state,
        Err(why) => unknown(&unit, &why),
    };
    result["unit"] = json!(unit);
    let journal = match find_program("journalctl") {
        None => Err("journalctl is not installed".to_string()),
        Some(journalctl) => {
            let count = lines.to_string();
            match run_program(
                &journalctl,
                &["-u", &unit, "-n", &count, "--no-pager", "-o", "short-iso"],
            )
            .await
            {
                Ok(ran) if ran.success => Ok(ran.stdout),
                Ok(ran) => Err(format!("journalctl: {}", ran.stderr.trim())),
                Err(why) => Err(why.to_string()),
            }
        }
    };
    let output = match journal {
        Ok(text) => {
            let kept: Vec<&str> = text.lines().collect();
            result["lines"] = json!(kept);
            text
        }
        Err(why) => {
            result["lines"] = json!([]);
            result["journal_why"] = json!(why);
            format!("journal unavailable: {why}")
        }
    };
    Ok(Finished {
        output,
        result,
        redaction: Redaction::Text,
    })
}

pub async fn restart_unit(config: &Config, params: &Value) -> Result<Finished, Failed> {
    if let Some(supervisorctl) = &config.services.supervisorctl {
        return supervised_restart(supervisorctl, params).await;
    }
    change_unit(params, "restart").await
}

/// `supervisorctl restart <unit>` where the node's own configuration says supervisord
/// supervises its services (no systemd), with the program's state before and after.
async fn supervised_restart(supervisorctl: &Path, params: &Value) -> Result<Finished, Failed> {
    let unit = params["unit"].as_str().unwrap_or_default().to_string();
    let before = supervised_state(supervisorctl, &unit).await;
    if before == UnitState::Absent {
        return Err(Failed::new(format!(
            "{unit} is not a program supervisord runs on this machine"
        )));
    }
    let ran = run_program(supervisorctl, &["restart", &unit])
        .await
        .map_err(Failed::new)?;
    let after = supervised_state(supervisorctl, &unit).await;
    let result = json!({"unit": unit, "supervisor": "supervisord",
                        "before": format!("{before:?}"), "after": format!("{after:?}"),
                        "accepted": ran.success, "exit_code": ran.code});
    let output = format!(
        "supervisorctl restart {unit}: {}\n{}{}",
        if ran.success { "accepted" } else { "failed" },
        ran.stdout.trim(),
        ran.stderr.trim()
    );
    if ran.success {
        Ok(Finished {
            output,
            result,
            redaction: Redaction::Text,
        })
    } else {
        Err(Failed {
            refused: false,
            reason: format!(
                "supervisorctl restart {unit} failed with exit code {}",
                ran.code
                    .map_or("unknown".to_string(), |code| code.to_string())
            ),
            output,
            result,
        })
    }
}

/// A program's state from `supervisorctl status <unit>`: exit 0 is running, 4 (or "no such
/// process") is not supervised here, anything else is down with what it said.
async fn supervised_state(supervisorctl: &Path, unit: &str) -> UnitState {
    match run_program(supervisorctl, &["status", unit]).await {
        Err(why) => UnitState::Unknown(why.to_string()),
        Ok(ran) => {
            let said = format!("{} {}", ran.stdout.trim(), ran.stderr.trim());
            if ran.success {
                UnitState::Running
            } else if ran.code == Some(4) || said.to_lowercase().contains("no such process") {
                UnitState::Absent
            } else {
                UnitState::Down(said.trim().chars().take(200).collect())
            }
        }
    }
}

/// A unit's state for the recipes: from supervisord when the node says it supervises its
/// services, else from systemd; unknown on a machine with neither.
pub async fn state_of(config: &Config, unit: &str) -> UnitState {
    if let Some(supervisorctl) = &config.services.supervisorctl {
        return supervised_state(supervisorctl, unit).await;
    }
    let systemctl = match systemctl() {
        Ok(systemctl) => systemctl,
        Err(why) => return UnitState::Unknown(why.to_string()),
    };
    match unit_state(&systemctl, &format!("{unit}.service")).await {
        Err(why) => UnitState::Unknown(why.to_string()),
        Ok(state) => match (state["load_state"].as_str(), state["state"].as_str()) {
            (Some("not-found"), _) => UnitState::Absent,
            (_, Some("active")) => UnitState::Running,
            (_, Some(active @ ("failed" | "inactive"))) => UnitState::Down(format!(
                "systemd says {active} ({})",
                state["result"].as_str().unwrap_or("no result")
            )),
            (_, other) => {
                UnitState::Unknown(format!("systemd says {}", other.unwrap_or("nothing")))
            }
        },
    }
}

pub async fn reset_failed_unit(params: &Value) -> Result<Finished, Failed> {
    change_unit(params, "reset-failed").await
}

/// Runs `systemctl <action> <unit>` and reports the unit's state before and after.
async fn change_unit(params: &Value, action: &str) -> Result<Finished, Failed> {
    let unit = unit_of(params);
    let systemctl = systemctl().map_err(|why| Failed {
        refused: false,
        reason: format!("{why}; {unit} was not touched"),
        output: String::new(),
        result: unknown(&unit, &why),
    })?;
    let before = unit_state(&systemctl, &unit)
        .await
        .unwrap_or_else(|why| unknown(&unit, &why));
    if before["load_state"] == "not-found" {
        return Err(Failed {
            refused: false,
            reason: format!("{unit} is not installed on this machine"),
            output: String::new(),
            result: json!({"unit": unit, "before": before}),
        });
    }
    let ran = run_program(&systemctl, &[action, &unit])
        .await
        .map_err(Failed::new)?;
    let after = unit_state(&systemctl, &unit)
        .await
        .unwrap_or_else(|why| unknown(&unit, &why));
    let result = json!({"unit": unit, "before": before, "after": after, "accepted": ran.success,
                        "exit_code": ran.code});
    let output = format!(
        "systemctl {action} {unit}: {}\nbefore: {before}\nafter: {after}\n{}",
        if ran.success { "accepted" } else { "failed" },
        ran.stderr.trim()
    );
    if ran.success {
        Ok(Finished {
            output,
            result,
            redaction: Redaction::Text,
        })
    } else {
        Err(Failed {
            refused: false,
            reason: format!(
                "systemctl {action} {unit} failed with exit code {}",
                ran.code
                    .map_or("unknown".to_string(), |code| code.to_string())
            ),
            output,
            result,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemctl_show_is_read_into_named_fields() {
        let text = "LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\nOther=x\n";
        assert_eq!(
            parse_show(text),
            json!({"load_state": "loaded", "state": "failed", "sub_state": "failed",
                   "result": "exit-code", "exit_status": "1"})
        );
    }

    #[test]
    fn the_unit_parameter_names_a_service() {
        assert_eq!(unit_of(&json!({"unit": "nginx"})), "nginx.service");
        assert_eq!(lines_of(&json!({"unit": "nginx"}), 200), 200);
        assert_eq!(lines_of(&json!({"lines": 5}), 200), 5);
    }
}
