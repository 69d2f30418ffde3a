//! The loader and the shared sections, as a process sees them; each service's own section is
//! tested in its crate.

use super::*;
use serde::Deserialize;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// A service's section as a service crate writes one (the key `gateway` is one the shared
/// loader accepts, so a process that does not read it leaves it to its owner).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Sample {
    listen: std::net::SocketAddr,
    limit: u32,
}

impl Default for Sample {
    fn default() -> Sample {
        Sample {
            listen: "127.0.0.1:8080".parse().unwrap(),
            limit: 10,
        }
    }
}

impl Section for Sample {
    const KEY: &'static str = "gateway";

    fn validate(&self) -> Vec<Problem> {
        within("gateway.limit", u64::from(self.limit), 1, 100)
            .into_iter()
            .collect()
    }
}

#[test]
fn private_targets_are_refused_unless_outbound_allow_private_is_set() {
    let settings = Settings::load_from(None, env(&[])).unwrap();
    assert!(!settings.outbound.allow_private);
    let lab =
        Settings::load_from(None, env(&[("CAPSTAN__OUTBOUND__ALLOW_PRIVATE", "true")])).unwrap();
    assert!(lab.outbound.allow_private);
    let error =
        Settings::load_from(None, env(&[("CAPSTAN__OUTBOUND__ALLOW_PRIVAT", "true")])).unwrap_err();
    assert!(error.to_string().contains("allow_privat"), "{error}");
}

#[test]
fn with_nothing_set_the_plane_talks_to_the_local_servers() {
    let settings = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(settings.database.url(), "postgres://localhost/capstan");
    assert_eq!(settings.database.max_connections, 5);
    assert_eq!(settings.nats.url, "nats://127.0.0.1:4222");
    assert_eq!(settings.telemetry.otlp_endpoint, None);
    assert_eq!(settings.telemetry.log_format, LogFormat::Pretty);
    assert_eq!(settings.telemetry.log_level, "info");
    assert_eq!(
        (
            settings.bus.max_deliver,
            settings.bus.ack_wait_secs,
            settings.bus.rpc_timeout_secs
        ),
        (5, 30, 5)
    );
    assert_eq!(
        (settings.outbox.batch_size, settings.outbox.poll_interval_ms),
        (256, 1000)
    );
}

#[test]
fn environment_variables_override_defaults_with_double_underscores() {
    let (settings, sample) = load_from::<Sample>(
        None,
        env(&[
            ("CAPSTAN__DATABASE__URL", "postgres://db/other"),
            ("CAPSTAN__GATEWAY__LISTEN", "0.0.0.0:9000"),
            ("CAPSTAN__BUS__MAX_DELIVER", "3"),
            ("UNRELATED", "x"),
        ]),
    )
    .unwrap();
    assert_eq!(settings.database.url(), "postgres://db/other");
    assert_eq!(sample.listen.port(), 9000);
    assert_eq!(sample.limit, 10, "a key not set keeps its default");
    assert_eq!(settings.bus.max_deliver, 3);
}

#[test]
fn an_unknown_key_is_refused_by_name() {
    let error = load_from::<Sample>(None, env(&[("CAPSTAN__GATEWAY__LISTN", "x")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("listn"), "{error}");
    let error = Settings::load_from(None, env(&[("CAPSTAN__BUS__MAX_DELIVR", "3")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("max_delivr"), "{error}");
}

#[test]
fn an_unknown_section_is_refused_and_another_services_section_is_left_to_it() {
    let error = Settings::load_from(None, env(&[("CAPSTAN__GATWAY__LISTEN", "x")]))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("gatway") && error.contains("not a section"),
        "{error}"
    );
    // A process that does not read the gateway's section does not judge it; the gateway does.
    let settings = Settings::load_from(None, env(&[("CAPSTAN__GATEWAY__LIMIT", "0")]));
    assert!(settings.is_ok());
    let error = load_from::<Sample>(None, env(&[("CAPSTAN__GATEWAY__LIMIT", "0")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("gateway.limit"), "{error}");
}

#[test]
fn a_bad_value_names_its_key() {
    let error = Settings::load_from(None, env(&[("CAPSTAN__NATS__URL", "http://x")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("nats.url"), "{error}");
    assert!(error.contains("CAPSTAN__NATS__URL"), "{error}");
    let error = load_from::<Sample>(None, env(&[("CAPSTAN__GATEWAY__LISTEN", "nowhere")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("gateway.listen"), "{error}");
}

#[test]
fn every_problem_of_every_section_is_named_at_once() {
    let error = load_from::<Sample>(
        None,
        env(&[
            ("CAPSTAN__NATS__URL", "http://x"),
            ("CAPSTAN__BUS__MAX_DELIVER", "0"),
            ("CAPSTAN__OUTBOX__BATCH_SIZE", "0"),
            ("CAPSTAN__DATABASE__MAX_CONNECTIONS", "0"),
            ("CAPSTAN__GATEWAY__LIMIT", "1000"),
        ]),
    )
    .unwrap_err();
    let SettingsError::Problems(problems) = &error else {
        panic!("{error}");
    };
    let keys: Vec<&str> = problems
        .iter()
        .map(|problem| problem.key.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "database.max_connections",
            "nats.url",
            "bus.max_deliver",
            "outbox.batch_size",
            "gateway.limit"
        ]
    );
    let text = error.to_string();
    assert!(text.starts_with("5 configuration problems"), "{text}");
    for variable in [
        "CAPSTAN__NATS__URL",
        "CAPSTAN__BUS__MAX_DELIVER",
        "CAPSTAN__OUTBOX__BATCH_SIZE",
        "CAPSTAN__DATABASE__MAX_CONNECTIONS",
        "CAPSTAN__GATEWAY__LIMIT",
    ] {
        assert!(text.contains(variable), "{text}");
    }
}

#[test]
fn the_database_url_can_come_from_a_file_and_never_shows_in_debug_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("url");
    std::fs::write(&path, "postgres://capstan:hunter2@db/capstan\n").unwrap();
    let settings = Settings::load_from(
        None,
        env(&[("CAPSTAN__DATABASE__URL_FILE", path.to_str().unwrap())]),
    )
    .unwrap();
    assert_eq!(
        settings.database.url(),
        "postgres://capstan:hunter2@db/capstan"
    );
    assert!(!format!("{settings:?}").contains("hunter2"));
    let error = Settings::load_from(
        None,
        env(&[("CAPSTAN__DATABASE__URL_FILE", "/nonexistent/capstan-url")]),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("database.url_file"), "{error}");
}

#[test]
fn with_no_nats_credentials_set_the_connection_offers_none() {
    let settings = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(settings.nats.credentials(), NatsCredentials::None);
    assert_eq!(settings.nats.tls_ca_file, None);
}

#[test]
fn nats_credentials_come_from_the_environment_or_a_file_and_never_show_in_debug_output() {
    let settings = Settings::load_from(
        None,
        env(&[
            ("CAPSTAN__NATS__USER", "gateway"),
            ("CAPSTAN__NATS__PASSWORD", "s3cret-in-env"),
        ]),
    )
    .unwrap();
    assert_eq!(
        settings.nats.credentials(),
        NatsCredentials::UserPassword {
            user: "gateway",
            password: "s3cret-in-env"
        }
    );
    assert!(!format!("{settings:?}").contains("s3cret"));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("password");
    std::fs::write(&path, "s3cret-in-file\n").unwrap();
    let settings = Settings::load_from(
        None,
        env(&[
            ("CAPSTAN__NATS__USER", "all"),
            ("CAPSTAN__NATS__PASSWORD_FILE", path.to_str().unwrap()),
        ]),
    )
    .unwrap();
    assert_eq!(
        settings.nats.credentials(),
        NatsCredentials::UserPassword {
            user: "all",
            password: "s3cret-in-file"
        }
    );
    assert!(!format!("{settings:?}").contains("s3cret"));
}

#[test]
fn half_or_doubled_nats_credentials_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("plane.creds");
    std::fs::write(&creds, "x").unwrap();
    let creds = creds.to_str().unwrap();
    for (pairs, named) in [
        (vec![("CAPSTAN__NATS__USER", "gateway")], "nats.password"),
        (vec![("CAPSTAN__NATS__PASSWORD", "x")], "nats.user"),
        (
            vec![
                ("CAPSTAN__NATS__USER", "gateway"),
                ("CAPSTAN__NATS__PASSWORD", "x"),
                ("CAPSTAN__NATS__CREDS_FILE", creds),
            ],
            "nats.user",
        ),
        (
            vec![("CAPSTAN__NATS__PASSWORD_FILE", "/nonexistent/capstan")],
            "nats.password_file",
        ),
        (
            vec![("CAPSTAN__NATS__TLS_CA_FILE", "/nonexistent/ca.pem")],
            "nats.tls_ca_file",
        ),
        (
            vec![("CAPSTAN__NATS__TLS_CERT_FILE", creds)],
            "nats.tls_cert_file",
        ),
        (
            vec![("CAPSTAN__NATS__URL", "nats://gateway:hunter2@nats:4222")],
            "nats.url",
        ),
    ] {
        let error = Settings::load_from(None, env(&pairs))
            .unwrap_err()
            .to_string();
        assert!(error.contains(named), "{pairs:?}: {error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}

#[test]
fn a_file_layer_sits_between_defaults_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capstan.toml");
    std::fs::write(
        &path,
        "[nats]\nurl = \"nats://file:4222\"\n[gateway]\nlisten = \"127.0.0.1:1\"\nlimit = 7\n",
    )
    .unwrap();
    let (settings, sample) = load_from::<Sample>(
        Some(path.to_str().unwrap()),
        env(&[("CAPSTAN__GATEWAY__LISTEN", "127.0.0.1:2")]),
    )
    .unwrap();
    assert_eq!(settings.nats.url, "nats://file:4222");
    assert_eq!(sample.listen.port(), 2);
    assert_eq!(sample.limit, 7);
    let error = Settings::load_from(Some("/nonexistent/capstan.toml"), env(&[])).unwrap_err();
    assert!(matches!(error, SettingsError::Invalid(_)), "{error}");
}

#[test]
fn the_plane_name_is_read_from_the_gateways_section_by_whoever_needs_it() {
    let (_, name) = load_from::<PlaneName>(None, env(&[])).unwrap();
    assert_eq!(name.text(), "Capstan");
    let (_, name) =
        load_from::<PlaneName>(None, env(&[("CAPSTAN__GATEWAY__PLANE_NAME", "Harbour")])).unwrap();
    assert_eq!(name.text(), "Harbour");
    let error = load_from::<PlaneName>(None, env(&[("CAPSTAN__GATEWAY__PLANE_NAME", " ")]))
        .unwrap_err()
        .to_string();
    assert!(error.contains("gateway.plane_name"), "{error}");
}

// Issue 28: a key of the wrong type no longer hides its section's other problems; each bad
// key is named, the type error as such and the rest as `validate` finds them.
#[test]
fn a_type_error_in_a_section_does_not_hide_its_other_problems() {
    let error = load_from::<Sample>(
        None,
        env(&[
            ("CAPSTAN__GATEWAY__LISTEN", "nowhere"),
            ("CAPSTAN__GATEWAY__LIMIT", "1000"),
        ]),
    )
    .unwrap_err();
    let SettingsError::Problems(problems) = &error else {
        panic!("{error}");
    };
    let keys: Vec<&str> = problems
        .iter()
        .map(|problem| problem.key.as_str())
        .collect();
    assert_eq!(keys, ["gateway.listen", "gateway.limit"], "{error}");
    let text = error.to_string();
    for variable in ["CAPSTAN__GATEWAY__LISTEN", "CAPSTAN__GATEWAY__LIMIT"] {
        assert!(text.contains(variable), "{text}");
    }
}

#[test]
fn a_string_where_a_number_goes_an_unknown_key_and_a_bad_value_are_all_named() {
    let error = load_from::<Sample>(
        None,
        env(&[
            ("CAPSTAN__GATEWAY__LIMIT", "many"),
            ("CAPSTAN__GATEWAY__LISTN", "x"),
            ("CAPSTAN__GATEWAY__LISTEN", "nowhere"),
            ("CAPSTAN__BUS__ACK_WAIT_SECS", "some"),
            ("CAPSTAN__BUS__MAX_DELIVER", "0"),
        ]),
    )
    .unwrap_err();
    let SettingsError::Problems(problems) = &error else {
        panic!("{error}");
    };
    let mut keys: Vec<&str> = problems
        .iter()
        .map(|problem| problem.key.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "bus.ack_wait_secs",
            "bus.max_deliver",
            "gateway.limit",
            "gateway.listen",
            "gateway.listn"
        ],
        "{error}"
    );
    let limit = problems
        .iter()
        .find(|problem| problem.key == "gateway.limit")
        .unwrap();
    assert!(
        limit.reason.contains("many") || limit.reason.contains("string"),
        "{limit}"
    );
    let unknown = problems
        .iter()
        .find(|problem| problem.key == "gateway.listn")
        .unwrap();
    assert!(unknown.reason.contains("listn"), "{unknown}");
}
