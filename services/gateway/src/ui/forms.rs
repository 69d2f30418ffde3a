//! "Run a job": a form for each word of the catalog, drawn from the word's declared parameter
//! shape (a select for an enumeration, a number input with its bounds, a text input with its
//! length), and the form's fields read back into the word's parameters. The agent checks the
//! parameters again on the node; this only keeps an operator from sending what cannot pass.

use capstan_events::Word as _;
use capstan_events::{
    agent_channel::{
        primitives::{self, ParamKind, Primitive, CATALOG},
        rpc::NodeView,
    },
    rpc::Level,
};
use serde_json::{Map, Value};

/// The prefix of a parameter's form field: `p.unit`.
pub const PARAM_PREFIX: &str = "p.";

/// One input of a word's form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// `p.<param>`.
    pub name: String,
    /// `<primitive>-<param>`, for the label's `for`.
    pub id: String,
    pub label: String,
    pub summary: String,
    pub required: bool,
    pub input: Input,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Select { options: Vec<String> },
    Number { min: i64, max: i64 },
    Text { max_len: usize },
    Boolean,
}

impl Input {
    /// For the template: `select`, `number`, `text`, `boolean`.
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Select { .. } => "select",
            Input::Number { .. } => "number",
            Input::Text { .. } => "text",
            Input::Boolean => "boolean",
        }
    }

    pub fn options(&self) -> &[String] {
        match self {
            Input::Select { options } => options,
            _ => &[],
        }
    }

    pub fn min(&self) -> i64 {
        match self {
            Input::Number { min, .. } => *min,
            _ => 0,
        }
    }

    pub fn max(&self) -> i64 {
        match self {
            Input::Number { max, .. } => *max,
            _ => 0,
        }
    }

    pub fn max_len(&self) -> usize {
        match self {
            Input::Text { max_len } => *max_len,
            _ => 0,
        }
    }
}

/// What the Jobs tab offers for one word.
#[derive(Debug, Clone, PartialEq)]
pub struct WordForm {
    pub name: &'static str,
    pub class: &'static str,
    pub summary: &'static str,
    pub fields: Vec<Field>,
    /// The word is not in the node's vocabulary: the standard state instead of a form.
    pub missing: bool,
}

fn fields_of(primitive: &Primitive) -> Vec<Field> {
    primitive
        .params
        .iter()
        .map(|param| Field {
            name: format!("{PARAM_PREFIX}{}", param.name),
            id: format!("{}-{}", primitive.name, param.name),
            label: param.name.replace('_', " "),
            summary: param.summary.to_string(),
            required: param.required,
            input: match &param.kind {
                ParamKind::Integer { min, max } => Input::Number {
                    min: *min,
                    max: *max,
                },
                ParamKind::Text { max_len } => Input::Text { max_len: *max_len },
                ParamKind::OneOf { values } => Input::Select {
                    options: values.iter().map(|value| value.to_string()).collect(),
                },
                ParamKind::Boolean => Input::Boolean,
            },
        })
        .collect()
}

/// The words offered on `node` to an operator at `level`: every operator word (not a service's:
/// issue 27) the level allows by class, each a form, or (not in the node's vocabulary) the
/// standard "needs a newer agent" state. A node below the version floor is offered only
/// `apply_update`, which is the rollouts service's: so nothing here.
pub fn offered(node: &NodeView, level: Level) -> Vec<WordForm> {
    CATALOG
        .iter()
        .filter(|primitive| primitive.owner().is_none())
        .filter(|primitive| level >= primitive.class.needed_level())
        .filter(|primitive| !node.below_floor || primitive.name == primitives::UPDATE)
        .map(|primitive| WordForm {
            name: primitive.name,
            class: primitive.class.as_str(),
            summary: primitive.summary,
            fields: fields_of(primitive),
            missing: !node.below_floor
                && !node.vocabulary.iter().any(|word| word == primitive.name),
        })
        .collect()
}

/// How many catalog words the level does not allow (said, not hidden silently).
pub fn above_level(level: Level) -> usize {
    CATALOG
        .iter()
        .filter(|primitive| primitive.owner().is_none())
        .filter(|primitive| level < primitive.class.needed_level())
        .count()
}

/// Why a "Run" form is refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadJobForm {
    #[error("{0:?} is not a word of the plane")]
    UnknownWord(String),
    #[error("{word} takes no parameter {param:?}")]
    UnknownParam { word: &'static str, param: String },
    #[error("{0} was given twice")]
    Twice(&'static str),
    #[error("{0} must be a whole number")]
    NotANumber(&'static str),
    #[error("{0} must be yes or no")]
    NotYesOrNo(&'static str),
    /// The parameters do not fit the word's declared shape (the catalogue's own words).
    #[error("{0}")]
    Shape(String),
}

/// The word and parameters a "Run" form sent, checked against the word's declared shape; a
/// refusal says which field is wrong. Empty optional fields are left out.
pub fn read_job_form(
    fields: &[(String, String)],
) -> Result<(&'static Primitive, Value), BadJobForm> {
    let name = fields
        .iter()
        .find(|(key, _)| key == "primitive")
        .map(|(_, value)| value.as_str())
        .unwrap_or_default();
    let primitive =
        primitives::find(name).ok_or_else(|| BadJobForm::UnknownWord(name.to_string()))?;
    let mut params = Map::new();
    for (key, raw) in fields {
        let Some(param_name) = key.strip_prefix(PARAM_PREFIX) else {
            continue;
        };
        let param = primitive
            .params
            .iter()
            .find(|param| param.name == param_name)
            .ok_or_else(|| BadJobForm::UnknownParam {
                word: primitive.name,
                param: param_name.to_string(),
            })?;
        if params.contains_key(param.name) {
            return Err(BadJobForm::Twice(param.name));
        }
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let value = match &param.kind {
            ParamKind::Integer { .. } => raw
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| BadJobForm::NotANumber(param.name))?,
            ParamKind::Text { .. } | ParamKind::OneOf { .. } => Value::String(raw.to_string()),
            ParamKind::Boolean => match raw {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(BadJobForm::NotYesOrNo(param.name)),
            },
        };
        params.insert(param.name.to_string(), value);
    }
    let params = Value::Object(params);
    primitive.check_params(&params).map_err(BadJobForm::Shape)?;
    Ok((primitive, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::NodeId;
    use serde_json::json;

    fn node(vocabulary: &[&str], below_floor: bool) -> NodeView {
        NodeView {
            id: NodeId(5),
            name: "web-1".into(),
            fingerprint: None,
            agent_version: Some("1.50.0".into()),
            vocabulary: vocabulary.iter().map(|word| word.to_string()).collect(),
            addresses: vec![],
            site_root: None,
            container: None,
            connected_at: None,
            last_seen_at: None,
            left_at: None,
            online: true,
            below_floor,
            facts: json!({}),
            health: Default::default(),
            last_check: None,
            last_report: None,
            placement: Default::default(),
            install_state: None,
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_reader_is_offered_read_words_only_and_a_missing_word_is_marked() {
        let offered = offered(&node(&["check_status"], false), Level::Read);
        assert!(offered.iter().all(|word| word.class == "read"));
        let check = offered
            .iter()
            .find(|word| word.name == "check_status")
            .unwrap();
        assert!(!check.missing);
        let journal = offered
            .iter()
            .find(|word| word.name == "unit_journal")
            .unwrap();
        assert!(journal.missing);
        let beyond_read = capstan_events::agent_channel::primitives::CATALOG
            .iter()
            .filter(|word| word.owner().is_none())
            .filter(|word| word.class.needed_level() > Level::Read)
            .count();
        assert!(beyond_read > 0);
        assert_eq!(above_level(Level::Read), beyond_read);
        assert_eq!(above_level(Level::Admin), 0);
        let changer = super::offered(&node(&["restart_unit"], false), Level::Change);
        assert!(changer
            .iter()
            .any(|word| word.name == "restart_unit" && !word.missing));
    }

    #[test]
    fn below_the_floor_nothing_is_offered_here_since_its_update_is_a_rollouts() {
        assert!(offered(&node(&[], true), Level::Admin).is_empty());
    }

    #[test]
    fn issue_27_no_services_word_is_offered_on_the_generic_form() {
        let everything: Vec<&str> = CATALOG.iter().map(|primitive| primitive.name).collect();
        let offered = offered(&node(&everything, false), Level::Admin);
        for word in [
            "backup_run",
            "verify_backup",
            "restore_project",
            "apply_update",
        ] {
            assert!(!offered.iter().any(|form| form.name == word), "{word}");
        }
        assert!(offered.iter().any(|form| form.name == "restart_unit"));
        assert!(offered.iter().any(|form| form.name == "list_backups"));
    }

    #[test]
    fn forms_follow_the_declared_shapes() {
        let journal = offered(&node(&["unit_journal"], false), Level::Read)
            .into_iter()
            .find(|word| word.name == "unit_journal")
            .unwrap();
        assert_eq!(journal.fields[0].name, "p.unit");
        assert_eq!(journal.fields[0].input.kind(), "select");
        assert!(journal.fields[0]
            .input
            .options()
            .contains(&"nginx".to_string()));
        assert_eq!(journal.fields[1].input, Input::Number { min: 1, max: 2000 });
        assert!(!journal.fields[1].required);
    }

    #[test]
    fn a_job_form_is_read_back_into_checked_parameters() {
        let (primitive, params) = read_job_form(&pairs(&[
            ("csrf", "x"),
            ("primitive", "unit_journal"),
            ("p.unit", "nginx"),
            ("p.lines", " 50 "),
        ]))
        .unwrap();
        assert_eq!(primitive.name, "unit_journal");
        assert_eq!(params, json!({"unit": "nginx", "lines": 50}));
        let (_, params) = read_job_form(&pairs(&[
            ("primitive", "unit_journal"),
            ("p.unit", "nginx"),
            ("p.lines", ""),
        ]))
        .unwrap();
        assert_eq!(params, json!({"unit": "nginx"}));
        for (fields, expected) in [
            (vec![("primitive", "rm_rf")], "not a word"),
            (vec![("primitive", "unit_journal")], "needs the parameter"),
            (
                vec![("primitive", "unit_journal"), ("p.unit", "sshd")],
                "unit must be one of",
            ),
            (
                vec![
                    ("primitive", "unit_journal"),
                    ("p.unit", "nginx"),
                    ("p.lines", "ten"),
                ],
                "whole number",
            ),
            (
                vec![
                    ("primitive", "unit_journal"),
                    ("p.unit", "nginx"),
                    ("p.shell", "x"),
                ],
                "no parameter",
            ),
        ] {
            let error = read_job_form(&pairs(&fields)).unwrap_err().to_string();
            assert!(error.contains(expected), "{fields:?}: {error}");
        }
    }
}
