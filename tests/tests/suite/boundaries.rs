//! The crate graph runs one way (CONVENTIONS.md rule 2): contracts → libraries → services →
//! the all-in-one binary. A service never depends on another service; `sqlx` is used only by
//! the store and services (and, as an optional feature that maps `NodeId` to a column, by the
//! contracts), `async-nats` only by the bus, `axum` only by the gateway. This reads
//! `cargo metadata`, so a new crate or dependency that breaks the rule fails the build.

use serde_json::Value;
use std::{path::Path, process::Command};

/// Crates allowed to use each guarded dependency directly, besides service crates where said.
struct Rule {
    dependency: &'static str,
    allowed: &'static [&'static str],
    /// Crates that may name it only as an optional dependency (a feature their users turn on).
    optional_for: &'static [&'static str],
    services_allowed: bool,
}

const RULES: &[Rule] = &[
    Rule {
        dependency: "sqlx",
        allowed: &["capstan-store", "capstan-e2e"],
        // `capstan-events/sqlx`: `NodeId` as a BIGINT, a type mapping and no I/O.
        optional_for: &["capstan-events"],
        services_allowed: true,
    },
    Rule {
        dependency: "async-nats",
        allowed: &["capstan-bus"],
        optional_for: &[],
        services_allowed: false,
    },
    Rule {
        dependency: "axum",
        allowed: &["capstan-gateway"],
        optional_for: &[],
        services_allowed: false,
    },
];

/// The all-in-one binary composes every service; the test harness reaches into everything.
const COMPOSERS: &[&str] = &["capstan", "capstan-e2e"];

fn is_service(package: &Value) -> bool {
    package["manifest_path"]
        .as_str()
        .is_some_and(|path| path.contains("/services/"))
}

/// Every broken rule in `metadata` (the JSON of `cargo metadata --no-deps`), in words.
fn violations(metadata: &Value) -> Vec<String> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let services: Vec<&str> = packages
        .iter()
        .filter(|package| is_service(package))
        .filter_map(|package| package["name"].as_str())
        .collect();
    let mut broken = Vec::new();
    for package in &packages {
        let name = package["name"].as_str().unwrap_or_default();
        for dependency in package["dependencies"].as_array().into_iter().flatten() {
            if dependency["kind"].as_str() == Some("dev") {
                continue;
            }
            let dependency_name = dependency["name"].as_str().unwrap_or_default();
            if services.contains(&dependency_name) && !COMPOSERS.contains(&name) {
                broken.push(format!(
                    "{name} depends on the service crate {dependency_name}"
                ));
            }
            if name == "capstan-events" && dependency_name.starts_with("capstan-") {
                broken.push(format!(
                    "capstan-events (the contracts) depends on {dependency_name}"
                ));
            }
            for rule in RULES {
                let optional = dependency["optional"].as_bool() == Some(true);
                let allowed = rule.allowed.contains(&name)
                    || (optional && rule.optional_for.contains(&name))
                    || (rule.services_allowed && services.contains(&name));
                if dependency_name == rule.dependency && !allowed {
                    broken.push(format!("{name} uses {} directly", rule.dependency));
                }
            }
        }
    }
    broken
}

#[test]
fn the_crate_graph_runs_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let count = metadata["packages"].as_array().map_or(0, Vec::len);
    assert!(count >= 17, "the workspace lists its crates ({count})");
    let broken = violations(&metadata);
    assert!(broken.is_empty(), "crate boundaries broken: {broken:#?}");
}

#[test]
fn the_boundary_check_notices_each_kind_of_break() {
    // A dependency written `name?` is optional.
    let package = |name: &str, path: &str, dependencies: &[&str]| {
        serde_json::json!({
            "name": name,
            "manifest_path": format!("/w/{path}/Cargo.toml"),
            "dependencies": dependencies.iter().map(|d| serde_json::json!({
                "name": d.trim_end_matches('?'),
                "kind": null,
                "optional": d.ends_with('?'),
            })).collect::<Vec<_>>(),
        })
    };
    let metadata = serde_json::json!({"packages": [
        package("capstan-dns", "services/dns", &["capstan-billing", "sqlx", "axum"]),
        package("capstan-billing", "services/billing", &["async-nats"]),
        package("capstan-runtime", "libs/runtime", &["sqlx"]),
        package("capstan-events", "libs/events", &["capstan-bus", "sqlx?"]),
        package("capstan-signing", "libs/signing", &["sqlx?"]),
        package("capstan", "services/capstan", &["capstan-dns", "capstan-billing"]),
    ]});
    let broken = violations(&metadata);
    assert_eq!(
        broken,
        vec![
            "capstan-dns depends on the service crate capstan-billing",
            "capstan-dns uses axum directly",
            "capstan-billing uses async-nats directly",
            "capstan-runtime uses sqlx directly",
            "capstan-events (the contracts) depends on capstan-bus",
            "capstan-signing uses sqlx directly",
        ]
    );
}
