//! RO-29: a patch run's apply judged from what the agent answered.

use serde_json::Value;

use crate::domain::verdict::{self, Finished, Judgement};

/// RO-29: how a patch run's `install_security_updates` is judged. An updater failure stops the
/// run, naming the node; "nothing to install" and "another package run in the way" are
/// recorded and pass. The agent's answer (its `words::patching`): `outcome` is `installed`
/// (with `installed`, the packages), `nothing_to_install`, `busy` (with `lock`, the lock apt
/// could not get) or `failed` (with `detail`, apt's reason; the job itself ends failed);
/// `held_back` counts fixes that need a package from outside the security origin.
pub fn patch_verdict(finished: &Finished) -> (Judgement, Option<String>) {
    let result = finished.result.as_ref();
    let text = |name: &str| result.and_then(|r| r.get(name)).and_then(Value::as_str);
    if finished.outcome != verdict::Outcome::Completed {
        let why = finished
            .reason
            .clone()
            .filter(|reason| !reason.trim().is_empty())
            .or_else(|| text("detail").map(|detail| format!("the updater failed: {detail}")))
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        return (
            Judgement::Miss(format!(
                "install_security_updates {}{why}",
                finished.outcome.as_str()
            )),
            None,
        );
    }
    let held_back = result
        .and_then(|r| r.get("held_back"))
        .and_then(Value::as_u64)
        .filter(|held| *held > 0)
        .map(|held| {
            format!(" ({held} held back: they need packages from outside the security origin)")
        })
        .unwrap_or_default();
    match text("outcome") {
        Some("installed") => {
            let packages: Vec<&str> = result
                .and_then(|r| r.get("installed"))
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (
                Judgement::Pass,
                Some(format!(
                    "installed {} packages{}{held_back}",
                    packages.len(),
                    if packages.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", packages.join(", "))
                    }
                )),
            )
        }
        Some("nothing_to_install") => (
            Judgement::Pass,
            Some(format!("nothing to install{held_back}")),
        ),
        Some("busy") => (
            Judgement::Pass,
            Some(match text("lock") {
                Some(lock) => format!("another package run was in the way (it holds {lock})"),
                None => "another package run was in the way".into(),
            }),
        ),
        Some("failed") => (
            Judgement::Miss(format!(
                "the updater failed: {}",
                text("detail").unwrap_or("no detail")
            )),
            None,
        ),
        _ => (
            Judgement::Miss("install_security_updates sent no outcome to judge".into()),
            None,
        ),
    }
}
