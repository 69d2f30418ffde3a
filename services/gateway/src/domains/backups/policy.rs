//! The fleet backup policy page (`/ui/backups/policy`): read at level 7, saved at level 10
//! (BK-05..BK-08). The form is the whole policy; a refusal, the gateway's reading of a field or
//! the backups service's range check, is drawn back on the form with the field it names marked
//! and what the operator typed kept.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::{
    backups::rpc::{BackupMode, FleetPolicy, FleetPolicyView, GetPolicy, PolicyFields, SetPolicy},
    rpc::Level,
};

use super::ask;
use crate::{
    error::{AnsweredError, ApiError},
    identity::AuditDetail,
    state::AppState,
    ui::{
        format::{ago, Ago},
        guard::FormFields,
        redirect_with, refusal_sentence, render, Chrome, Flash, UiError, UiSession,
    },
};
use capstan_events::Word as _;

/// One number of the form.
struct NumberField {
    name: &'static str,
    label: &'static str,
    hint: &'static str,
    min: u32,
    max: u32,
    value: String,
    error: Option<String>,
}

/// The numbers of the policy, in the form's order, with their ranges (the service checks them
/// again).
const NUMBERS: [(&str, &str, &str, u32, u32); 9] = [
    (
        "every_minutes",
        "Frequency (minutes)",
        "A run is due this long after the last run started.",
        1,
        10_080,
    ),
    (
        "window_start_hour",
        "Window opens (UTC hour)",
        "From this hour a run may start...",
        0,
        23,
    ),
    (
        "window_hours",
        "Window length (hours)",
        "...for this many hours; 24 is any time.",
        1,
        24,
    ),
    (
        "keep_days",
        "Keep (days)",
        "The floor of the days kept; never fewer than 1.",
        1,
        3650,
    ),
    (
        "full_every_days",
        "Full every (days)",
        "A new chain starts with a full once the chain's full is this old.",
        1,
        365,
    ),
    (
        "verify_every_days",
        "Verify every (days)",
        "Days between scheduled open-and-read verifies; 0 is never.",
        0,
        365,
    ),
    (
        "keep_daily",
        "Also keep daily (days)",
        "The newest chain of each of this many recent days stays on top of the window; 0 is none.",
        0,
        3650,
    ),
    (
        "keep_weekly",
        "Also keep weekly (weeks)",
        "The newest chain of each of this many recent ISO weeks; 0 is none.",
        0,
        520,
    ),
    (
        "keep_monthly",
        "Also keep monthly (months)",
        "The newest chain of each of this many recent months; 0 is none.",
        0,
        120,
    ),
];

#[derive(Template)]
#[template(path = "backups_policy.html")]
struct PolicyPage {
    chrome: Chrome,
    can_edit: bool,
    enabled: bool,
    mode: String,
    numbers: Vec<NumberField>,
    /// The refusal's sentence, and the field it named (`enabled`, `mode` or a number's name).
    problem: Option<String>,
    bad_field: String,
    changed: Option<(String, Ago)>,
}

fn number_of(fields: &PolicyFields, name: &str) -> u32 {
    match name {
        "every_minutes" => fields.every_minutes,
        "window_start_hour" => u32::from(fields.window_start_hour),
        "window_hours" => u32::from(fields.window_hours),
        "keep_days" => fields.keep_days,
        "full_every_days" => fields.full_every_days,
        "keep_daily" => fields.keep_daily,
        "keep_weekly" => fields.keep_weekly,
        "keep_monthly" => fields.keep_monthly,
        _ => fields.verify_every_days,
    }
}

fn numbers(
    values: impl Fn(&str) -> String,
    bad_field: &str,
    problem: Option<&str>,
) -> Vec<NumberField> {
    NUMBERS
        .iter()
        .map(|(name, label, hint, min, max)| NumberField {
            name,
            label,
            hint,
            min: *min,
            max: *max,
            value: values(name),
            error: (*name == bad_field).then(|| problem.unwrap_or_default().to_string()),
        })
        .collect()
}

async fn current(state: &AppState, session: &UiSession) -> Result<FleetPolicyView, ApiError> {
    ask(
        state,
        &GetPolicy {
            actor: session.actor(),
        },
    )
    .await
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let view = current(&state, &session)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let fields = &view.policy.fields;
    let page = PolicyPage {
        chrome: Chrome::signed_in(&session, &headers, "Backup policy", "backup-policy"),
        can_edit: session.level >= Level::Admin,
        enabled: view.policy.enabled,
        mode: fields.mode.as_str().to_string(),
        numbers: numbers(|name| number_of(fields, name).to_string(), "", None),
        problem: None,
        bad_field: String::new(),
        changed: view.changed_by.clone().zip(view.changed_at.map(ago)),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// The policy the form sent; a refusal names the first field that cannot be read.
fn read(fields: &FormFields) -> Result<FleetPolicy, ApiError> {
    let enabled = match fields.get("enabled").map(str::trim) {
        Some("on") => true,
        Some("off") => false,
        _ => return Err(ApiError::invalid("enabled", "must be on or off")),
    };
    let mode = fields
        .get("mode")
        .map(str::trim)
        .and_then(BackupMode::parse)
        .ok_or_else(|| ApiError::invalid("mode", "must be chain or full_only"))?;
    let number = |name: &'static str| -> Result<u32, ApiError> {
        fields
            .get(name)
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .ok_or_else(|| ApiError::invalid(name, "is required"))?
            .parse::<u32>()
            .map_err(|_| ApiError::invalid(name, "must be a whole number"))
    };
    let hour = |name: &'static str| -> Result<u8, ApiError> {
        u8::try_from(number(name)?).map_err(|_| ApiError::invalid(name, "is out of range"))
    };
    Ok(FleetPolicy {
        enabled,
        fields: PolicyFields {
            every_minutes: number("every_minutes")?,
            window_start_hour: hour("window_start_hour")?,
            window_hours: hour("window_hours")?,
            mode,
            keep_days: number("keep_days")?,
            full_every_days: number("full_every_days")?,
            verify_every_days: number("verify_every_days")?,
            keep_daily: number("keep_daily")?,
            keep_weekly: number("keep_weekly")?,
            keep_monthly: number("keep_monthly")?,
        },
    })
}

/// The field a refusal names (`field: problem`), when it is one of the form's.
fn named_field(message: &str) -> String {
    let Some((field, _)) = message.split_once(':') else {
        return String::new();
    };
    let field = field.trim();
    let known =
        field == "enabled" || field == "mode" || NUMBERS.iter().any(|(name, ..)| *name == field);
    if known {
        field.to_string()
    } else {
        String::new()
    }
}

pub async fn save(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    fields: FormFields,
) -> Response {
    let answer = match read(&fields) {
        Ok(policy) => {
            let request = SetPolicy {
                actor: session.actor(),
                policy: policy.clone(),
            };
            ask(&state, &request).await.map(|view| (view, policy))
        }
        Err(refusal) => Err(refusal),
    };
    match answer {
        Ok((view, policy)) => {
            let mut response = redirect_with(
                "/ui/backups/policy",
                Flash {
                    ok: true,
                    text: format!(
                        "Fleet backup policy saved: backups {}.",
                        if view.policy.enabled { "on" } else { "off" }
                    ),
                },
            );
            response.extensions_mut().insert(AuditDetail(
                serde_json::to_value(&policy).unwrap_or_default(),
            ));
            response
        }
        Err(refusal) => {
            let bad_field = named_field(&refusal.message);
            let sentence = refusal_sentence(&refusal);
            let typed = |name: &str| fields.get(name).unwrap_or_default().to_string();
            let page = PolicyPage {
                chrome: Chrome::signed_in(&session, &headers, "Backup policy", "backup-policy"),
                can_edit: true,
                enabled: fields.get("enabled") != Some("off"),
                mode: typed("mode"),
                numbers: numbers(typed, &bad_field, Some(&refusal.message)),
                problem: Some(sentence),
                bad_field,
                changed: None,
            };
            let status = if refusal.status.is_client_error() {
                StatusCode::BAD_REQUEST
            } else {
                refusal.status
            };
            let mut response = render(status, &page.chrome, &page);
            response.extensions_mut().insert(AnsweredError {
                code: refusal.code,
                message: refusal.message,
            });
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> FormFields {
        FormFields::of(pairs)
    }

    const GOOD: [(&str, &str); 11] = [
        ("enabled", "on"),
        ("mode", "chain"),
        ("every_minutes", "720"),
        ("window_start_hour", "1"),
        ("window_hours", "6"),
        ("keep_days", "14"),
        ("full_every_days", "7"),
        ("verify_every_days", "0"),
        ("keep_daily", "7"),
        ("keep_weekly", "4"),
        ("keep_monthly", "0"),
    ];

    #[test]
    fn the_form_reads_into_the_whole_policy() {
        let policy = read(&form(&GOOD)).unwrap();
        assert!(policy.enabled);
        assert_eq!(policy.fields.every_minutes, 720);
        assert_eq!(policy.fields.window_hours, 6);
        assert_eq!(policy.fields.keep_days, 14);
        assert_eq!(policy.fields.verify_every_days, 0);
        assert_eq!(
            (
                policy.fields.keep_daily,
                policy.fields.keep_weekly,
                policy.fields.keep_monthly
            ),
            (7, 4, 0)
        );
    }

    #[test]
    fn a_bad_field_is_named_and_marked() {
        for (field, bad) in [
            ("keep_days", "two weeks"),
            ("window_start_hour", "300"),
            ("mode", "sometimes"),
            ("enabled", "maybe"),
            ("every_minutes", ""),
            ("keep_weekly", "-1"),
        ] {
            let pairs: Vec<(&str, &str)> = GOOD
                .iter()
                .map(|(name, value)| (*name, if *name == field { bad } else { *value }))
                .collect();
            let refusal = read(&form(&pairs)).unwrap_err();
            assert_eq!(named_field(&refusal.message), field, "{}", refusal.message);
        }
        assert_eq!(named_field("keep_days: 0 is outside 1..=3650"), "keep_days");
        assert_eq!(named_field("somewhere: else"), "");
        assert_eq!(named_field("no field at all"), "");
    }
}
