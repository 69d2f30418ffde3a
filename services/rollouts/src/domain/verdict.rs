//! Judging one node's step of a rollout from what its jobs answered (RO-11, RO-19..RO-22):
//! the readiness check before the apply, the pages before and after, and the apply itself.
//! Every judgement is a [`Judgement`]: go on, or miss with a reason a person can act on.
//!
//! The answers come from agents, so each is read field by field and anything missing or of
//! the wrong shape is a miss that says so — an answer that cannot be judged is not a pass.

use capstan_events::rpc::InvalidInput;
use serde_json::Value;

/// RO-21: a rollout names at most this many pages to check.
pub const MAX_PROBE_PAGES: usize = 5;
/// The longest path a probe page may have.
pub const MAX_PROBE_PATH_CHARS: usize = 512;

/// What a step's check or apply came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// The node missed: the reason names what and, where one can, what to do.
    Miss(String),
}

impl Judgement {
    pub fn passed(&self) -> bool {
        matches!(self, Judgement::Pass)
    }
}

/// How a job ended, as the agent channel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Failed,
    Refused,
    Lost,
    Withdrawn,
}

impl Outcome {
    pub fn parse(word: &str) -> Option<Outcome> {
        Some(match word {
            "completed" => Outcome::Completed,
            "failed" => Outcome::Failed,
            "refused" => Outcome::Refused,
            "lost" => Outcome::Lost,
            "withdrawn" => Outcome::Withdrawn,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Lost => "lost",
            Outcome::Withdrawn => "withdrawn",
        }
    }
}

/// A finished job: its outcome, the structured result and the reason the node gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub outcome: Outcome,
    pub result: Option<Value>,
    pub reason: Option<String>,
}

fn not_completed(word: &str, finished: &Finished) -> String {
    let why = finished
        .reason
        .as_deref()
        .filter(|reason| !reason.trim().is_empty())
        .map(|reason| format!(": {reason}"))
        .unwrap_or_default();
    match finished.outcome {
        Outcome::Lost => {
            format!("{word} was lost: the node never reported, so what it did is unknown{why}")
        }
        outcome => format!("{word} {}{why}", outcome.as_str()),
    }
}

/// RO-20: the reason a node refused a script because it no longer matches the signed release.
/// The agent's refusal names `script_trust` and the files.
fn script_refusal(finished: &Finished) -> Option<String> {
    if finished.outcome != Outcome::Refused {
        return None;
    }
    let reason = finished.reason.as_deref().unwrap_or_default();
    if !reason.contains("script_trust") {
        return None;
    }
    let files = finished
        .result
        .as_ref()
        .and_then(|result| result.get("files"))
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|files| !files.is_empty());
    Some(match files {
        Some(files) => format!(
            "the node refused the apply: {files} no longer matches the signed release; another release will not repair it (put the signed files back first)"
        ),
        None => format!(
            "the node refused the apply ({reason}); another release will not repair it (put the signed files back first)"
        ),
    })
}

/// RO-11: a step passes only when all four hold — the apply job completed, the deploy tier
/// passed, the release's version is reported, and nothing rolled back. An apply with no
/// structured result halts: an apply that cannot be judged is not a pass. RO-20: a refusal
/// because a script no longer matches names the file and says another release will not help.
pub fn apply(finished: &Finished, version: &str) -> Judgement {
    if let Some(reason) = script_refusal(finished) {
        return Judgement::Miss(reason);
    }
    if finished.outcome != Outcome::Completed {
        return Judgement::Miss(not_completed("the apply", finished));
    }
    let Some(result) = finished.result.as_ref().filter(|result| result.is_object()) else {
        return Judgement::Miss(
            "the apply sent no structured result, and an apply that cannot be judged is not a pass"
                .into(),
        );
    };
    let flag = |name: &str| result.get(name).and_then(Value::as_bool);
    match flag("completed") {
        Some(true) => {}
        Some(false) => return Judgement::Miss("the apply says it did not complete".into()),
        None => return Judgement::Miss("the apply's result has no \"completed\"".into()),
    }
    match flag("deploy_tier_passed") {
        Some(true) => {}
        Some(false) => return Judgement::Miss("the deploy tier did not pass".into()),
        None => return Judgement::Miss("the apply's result has no \"deploy_tier_passed\"".into()),
    }
    match result.get("version").and_then(Value::as_str) {
        Some(reported) if reported == version => {}
        Some(reported) => {
            return Judgement::Miss(format!(
                "the node reports version {reported}, not {version}"
            ))
        }
        None => return Judgement::Miss("the apply's result reports no version".into()),
    }
    match flag("rolled_back") {
        Some(false) => Judgement::Pass,
        Some(true) => Judgement::Miss("the apply rolled back".into()),
        None => Judgement::Miss("the apply's result has no \"rolled_back\"".into()),
    }
}

/// RO-19: the readiness check before an apply. Each check answers pass or fail with a short
/// reason; the first that fails is the miss, and nothing was changed on the node.
pub fn preflight(finished: &Finished) -> Judgement {
    if finished.outcome != Outcome::Completed {
        return Judgement::Miss(not_completed("the readiness check", finished));
    }
    let Some(checks) = finished
        .result
        .as_ref()
        .and_then(|result| result.get("checks"))
        .and_then(Value::as_array)
    else {
        return Judgement::Miss("the readiness check sent no checks to judge".into());
    };
    if checks.is_empty() {
        return Judgement::Miss("the readiness check sent no checks to judge".into());
    }
    for check in checks {
        let name = check
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("a check");
        match check.get("pass").and_then(Value::as_bool) {
            Some(true) => {}
            Some(false) => {
                let reason = check
                    .get("reason")
                    .and_then(Value::as_str)
                    .filter(|reason| !reason.trim().is_empty())
                    .unwrap_or("no reason given");
                return Judgement::Miss(format!(
                    "readiness check {name} failed: {reason} (nothing was changed on the node)"
                ));
            }
            None => {
                return Judgement::Miss(format!(
                    "readiness check {name} answered neither pass nor fail"
                ))
            }
        }
    }
    Judgement::Pass
}

/// Who a probe page is rendered as (RO-21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer {
    Anonymous,
    Admin,
}

impl Viewer {
    pub fn as_str(self) -> &'static str {
        match self {
            Viewer::Anonymous => "anonymous",
            Viewer::Admin => "admin",
        }
    }

    pub fn parse(word: &str) -> Option<Viewer> {
        match word {
            "anonymous" => Some(Viewer::Anonymous),
            "admin" => Some(Viewer::Admin),
            _ => None,
        }
    }
}

/// One page a rollout checks on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePage {
    pub viewer: Viewer,
    pub path: String,
}

/// RO-21: the pages, one a line, `<viewer> <path>` or just `<path>` (anonymous); at most
/// [`MAX_PROBE_PAGES`]; blank lines are skipped. The error names `pages` and the line.
pub fn probe_pages(text: &str) -> Result<Vec<ProbePage>, InvalidInput> {
    let refused = |reason: String| InvalidInput::new("pages", reason);
    let mut pages = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (viewer, path) = match line.split_once(char::is_whitespace) {
            Some((viewer, path)) => {
                let viewer = Viewer::parse(viewer).ok_or_else(|| {
                    refused(format!(
                        "probe page line {}: the viewer must be admin or anonymous, not {viewer:?}",
                        number + 1
                    ))
                })?;
                (viewer, path.trim())
            }
            None => (Viewer::Anonymous, line),
        };
        if !path.starts_with('/')
            || path.chars().count() > MAX_PROBE_PATH_CHARS
            || path.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(refused(format!(
                "probe page line {}: the path must start with / and hold no spaces (at most {MAX_PROBE_PATH_CHARS} characters)",
                number + 1
            )));
        }
        pages.push(ProbePage {
            viewer,
            path: path.to_string(),
        });
    }
    if pages.len() > MAX_PROBE_PAGES {
        return Err(refused(format!(
            "a rollout checks at most {MAX_PROBE_PAGES} pages, not {}",
            pages.len()
        )));
    }
    Ok(pages)
}

/// What one page_probe answered (the word's structured result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The HTTP status, or none when the page did not answer.
    pub status: Option<u16>,
    pub errors: u32,
    pub failed_assets: Vec<String>,
}

impl Probe {
    /// Reads a page_probe result; `None` when it is not one.
    pub fn read(result: &Value) -> Option<Probe> {
        let status = match result.get("status")? {
            Value::Null => None,
            value => Some(u16::try_from(value.as_u64()?).ok()?),
        };
        let errors = u32::try_from(result.get("errors")?.as_u64()?).ok()?;
        let failed_assets = result
            .get("failed_assets")?
            .as_array()?
            .iter()
            .map(|asset| asset.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()?;
        Some(Probe {
            status,
            errors,
            failed_assets,
        })
    }

    /// An error status: 400 or more, or none at all.
    fn errored(&self) -> bool {
        self.status.is_none_or(|status| status >= 400)
    }

    fn describe_status(&self) -> String {
        self.status
            .map(|status| status.to_string())
            .unwrap_or_else(|| "no answer".into())
    }
}

/// RO-22: whether a page got worse with the apply. It halts when, after the apply, the page
/// answers an error status it did not answer before, raises more errors than before, or fails
/// to load an asset it loaded; and when its check after the apply did not run. A page with
/// no check before is held to being clean after.
pub fn probe(page: &ProbePage, before: Option<&Probe>, after: Option<&Probe>) -> Judgement {
    let name = format!("{} {}", page.viewer.as_str(), page.path);
    let Some(after) = after else {
        return Judgement::Miss(format!(
            "page {name}: its check after the apply did not run"
        ));
    };
    match before {
        Some(before) => {
            if after.errored() && !before.errored() {
                return Judgement::Miss(format!(
                    "page {name} answered {} after the apply, {} before",
                    after.describe_status(),
                    before.describe_status()
                ));
            }
            if after.errors > before.errors {
                return Judgement::Miss(format!(
                    "page {name} raised {} errors after the apply, {} before",
                    after.errors, before.errors
                ));
            }
            if let Some(asset) = after
                .failed_assets
                .iter()
                .find(|asset| !before.failed_assets.contains(asset))
            {
                return Judgement::Miss(format!(
                    "page {name} failed to load {asset} after the apply, which it loaded before"
                ));
            }
            Judgement::Pass
        }
        None => {
            if after.errored() {
                return Judgement::Miss(format!(
                    "page {name} answered {} after the apply (it had no check before, so it must be clean)",
                    after.describe_status()
                ));
            }
            if after.errors > 0 {
                return Judgement::Miss(format!(
                    "page {name} raised {} errors after the apply (it had no check before, so it must be clean)",
                    after.errors
                ));
            }
            if let Some(asset) = after.failed_assets.first() {
                return Judgement::Miss(format!(
                    "page {name} failed to load {asset} after the apply (it had no check before, so it must be clean)"
                ));
            }
            Judgement::Pass
        }
    }
}

/// A page_probe job's answer read for the verdict: a completed job with a readable result is
/// a probe; anything else is a check that did not run.
pub fn probe_answer(finished: &Finished) -> Option<Probe> {
    if finished.outcome != Outcome::Completed {
        return None;
    }
    finished.result.as_ref().and_then(Probe::read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn completed(result: Value) -> Finished {
        Finished {
            outcome: Outcome::Completed,
            result: Some(result),
            reason: None,
        }
    }

    fn good_apply() -> Value {
        json!({"completed": true, "deploy_tier_passed": true, "version": "2.1.0", "rolled_back": false})
    }

    #[test]
    fn ro_11_a_step_passes_only_when_all_four_hold() {
        assert_eq!(apply(&completed(good_apply()), "2.1.0"), Judgement::Pass);
        for (field, value, words) in [
            ("completed", json!(false), "did not complete"),
            (
                "deploy_tier_passed",
                json!(false),
                "deploy tier did not pass",
            ),
            (
                "version",
                json!("2.0.9"),
                "reports version 2.0.9, not 2.1.0",
            ),
            ("rolled_back", json!(true), "rolled back"),
        ] {
            let mut result = good_apply();
            result[field] = value;
            let Judgement::Miss(reason) = apply(&completed(result), "2.1.0") else {
                panic!("{field} wrong must miss");
            };
            assert!(reason.contains(words), "{field}: {reason}");
        }
    }

    #[test]
    fn ro_11_an_apply_with_no_structured_result_halts() {
        for result in [None, Some(json!("ok")), Some(json!(null))] {
            let finished = Finished {
                outcome: Outcome::Completed,
                result,
                reason: None,
            };
            let Judgement::Miss(reason) = apply(&finished, "2.1.0") else {
                panic!("no structured result must miss");
            };
            assert!(reason.contains("cannot be judged"), "{reason}");
        }
        let mut result = good_apply();
        result.as_object_mut().unwrap().remove("rolled_back");
        assert!(!apply(&completed(result), "2.1.0").passed());
    }

    #[test]
    fn ro_11_an_apply_that_did_not_complete_misses_and_a_lost_one_says_what_it_did_is_unknown() {
        let failed = Finished {
            outcome: Outcome::Failed,
            result: Some(good_apply()),
            reason: Some("deploy hook exited 3".into()),
        };
        assert_eq!(
            apply(&failed, "2.1.0"),
            Judgement::Miss("the apply failed: deploy hook exited 3".into())
        );
        let lost = Finished {
            outcome: Outcome::Lost,
            result: None,
            reason: None,
        };
        let Judgement::Miss(reason) = apply(&lost, "2.1.0") else {
            panic!()
        };
        assert!(reason.contains("unknown"), "{reason}");
    }

    #[test]
    fn ro_20_a_script_refusal_names_the_file_and_says_another_release_will_not_repair_it() {
        let refused = Finished {
            outcome: Outcome::Refused,
            result: Some(json!({"files": ["hooks/deploy"]})),
            reason: Some("script_trust: untrusted_file".into()),
        };
        let Judgement::Miss(reason) = apply(&refused, "2.1.0") else {
            panic!()
        };
        assert!(reason.contains("hooks/deploy"), "{reason}");
        assert!(
            reason.contains("another release will not repair it"),
            "{reason}"
        );
    }

    #[test]
    fn ro_19_the_first_failing_readiness_check_is_the_reason_and_nothing_changed() {
        let answer = completed(json!({"checks": [
            {"name": "manifest", "pass": true, "reason": "signed by a held key"},
            {"name": "staging_room", "pass": false, "reason": "120 MiB free, 800 MiB needed"},
            {"name": "lock", "pass": false, "reason": "held"},
        ]}));
        assert_eq!(
            preflight(&answer),
            Judgement::Miss(
                "readiness check staging_room failed: 120 MiB free, 800 MiB needed (nothing was changed on the node)"
                    .into()
            )
        );
        let all_good = completed(json!({"checks": [{"name": "manifest", "pass": true}]}));
        assert_eq!(preflight(&all_good), Judgement::Pass);
    }

    #[test]
    fn ro_19_a_readiness_check_with_nothing_to_judge_or_not_completed_misses() {
        assert!(!preflight(&completed(json!({"checks": []}))).passed());
        assert!(!preflight(&completed(json!({}))).passed());
        assert!(!preflight(&completed(json!({"checks": [{"name": "lock"}]}))).passed());
        let failed = Finished {
            outcome: Outcome::Failed,
            result: None,
            reason: Some("no site".into()),
        };
        assert_eq!(
            preflight(&failed),
            Judgement::Miss("the readiness check failed: no site".into())
        );
    }

    #[test]
    fn ro_21_probe_pages_are_one_a_line_with_their_viewer_and_at_most_five() {
        let pages = probe_pages("admin /admin/admin_users\n\n/\nanonymous /shop?page=2\n").unwrap();
        assert_eq!(
            pages,
            vec![
                ProbePage {
                    viewer: Viewer::Admin,
                    path: "/admin/admin_users".into()
                },
                ProbePage {
                    viewer: Viewer::Anonymous,
                    path: "/".into()
                },
                ProbePage {
                    viewer: Viewer::Anonymous,
                    path: "/shop?page=2".into()
                },
            ]
        );
        let six = "/a\n/b\n/c\n/d\n/e\n/f";
        assert!(probe_pages(six).unwrap_err().reason.contains("at most 5"));
        assert!(probe_pages("root /x")
            .unwrap_err()
            .reason
            .contains("line 1"));
        assert!(probe_pages("/ok\nadmin nopath")
            .unwrap_err()
            .reason
            .contains("line 2"));
    }

    fn page() -> ProbePage {
        ProbePage {
            viewer: Viewer::Anonymous,
            path: "/".into(),
        }
    }

    fn seen(status: Option<u16>, errors: u32, failed: &[&str]) -> Probe {
        Probe {
            status,
            errors,
            failed_assets: failed.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn ro_22_a_page_that_answers_an_error_it_did_not_answer_before_halts() {
        let before = seen(Some(200), 0, &[]);
        assert!(!probe(&page(), Some(&before), Some(&seen(Some(500), 0, &[]))).passed());
        assert!(!probe(&page(), Some(&before), Some(&seen(None, 0, &[]))).passed());
        // An error it already answered before is not worse.
        let broken = seen(Some(404), 0, &[]);
        assert!(probe(&page(), Some(&broken), Some(&seen(Some(404), 0, &[]))).passed());
        assert!(probe(&page(), Some(&before), Some(&seen(Some(302), 0, &[]))).passed());
    }

    #[test]
    fn ro_22_more_errors_or_a_newly_failed_asset_halts() {
        let before = seen(Some(200), 1, &["/a.css"]);
        assert!(!probe(
            &page(),
            Some(&before),
            Some(&seen(Some(200), 2, &["/a.css"]))
        )
        .passed());
        assert!(probe(
            &page(),
            Some(&before),
            Some(&seen(Some(200), 1, &["/a.css"]))
        )
        .passed());
        let Judgement::Miss(reason) = probe(
            &page(),
            Some(&before),
            Some(&seen(Some(200), 0, &["/a.css", "/b.js"])),
        ) else {
            panic!()
        };
        assert!(reason.contains("/b.js"), "{reason}");
    }

    #[test]
    fn ro_22_a_missing_after_check_halts_and_a_page_without_a_before_check_must_be_clean() {
        assert!(!probe(&page(), Some(&seen(Some(200), 0, &[])), None).passed());
        assert!(probe(&page(), None, Some(&seen(Some(200), 0, &[]))).passed());
        assert!(!probe(&page(), None, Some(&seen(Some(200), 1, &[]))).passed());
        assert!(!probe(&page(), None, Some(&seen(Some(200), 0, &["/x.png"]))).passed());
        assert!(!probe(&page(), None, Some(&seen(Some(503), 0, &[]))).passed());
    }

    #[test]
    fn a_probe_answer_is_read_field_by_field_and_a_bad_one_is_a_check_that_did_not_run() {
        let good = completed(json!({"status": 200, "errors": 0, "failed_assets": []}));
        assert_eq!(probe_answer(&good), Some(seen(Some(200), 0, &[])));
        let no_answer = completed(json!({"status": null, "errors": 0, "failed_assets": []}));
        assert_eq!(probe_answer(&no_answer), Some(seen(None, 0, &[])));
        for bad in [
            json!({"status": "200", "errors": 0, "failed_assets": []}),
            json!({"status": 200, "errors": -1, "failed_assets": []}),
            json!({"status": 70000, "errors": 0, "failed_assets": []}),
            json!({"status": 200, "failed_assets": []}),
            json!({"status": 200, "errors": 0, "failed_assets": [1]}),
        ] {
            assert_eq!(probe_answer(&completed(bad.clone())), None, "{bad}");
        }
        let failed = Finished {
            outcome: Outcome::Failed,
            result: Some(json!({"status": 200, "errors": 0, "failed_assets": []})),
            reason: None,
        };
        assert_eq!(probe_answer(&failed), None);
    }
}
