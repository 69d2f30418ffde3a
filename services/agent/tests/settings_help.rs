//! Every setting the agent reads is in `capstan-agent --help`: the agent reads its environment
//! only through its command line's table (`cli::Cli`, each option with its `env`), so the help
//! printed from that table names them all; and every `CAPSTAN_AGENT_*` the docs and the
//! deploy files name is one of them, or a build-time setting (`option_env!`).

use capstan_agent::cli::Cli;
use clap::CommandFactory as _;
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

const AGENT: &str = env!("CARGO_BIN_EXE_capstan-agent");
const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// Every file under `dir` whose name ends in `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The `CAPSTAN_AGENT_*` names in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let pattern = regex::Regex::new(r"CAPSTAN_AGENT_[A-Z_]*[A-Z]").unwrap();
    pattern
        .find_iter(text)
        .map(|found| found.as_str().to_string())
        .collect()
}

fn help() -> String {
    let output = Command::new(AGENT).arg("--help").output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn every_setting_of_the_command_line_is_named_in_the_help() {
    let help = help();
    let mut settings = 0;
    for argument in Cli::command().get_arguments() {
        let id = argument.get_id().as_str();
        if ["help", "version"].contains(&id) {
            continue;
        }
        // The unit and the keepalive configure the agent through agent.env: every option
        // has a variable.
        let env = argument
            .get_env()
            .unwrap_or_else(|| panic!("--{id} has no environment variable"))
            .to_string_lossy()
            .into_owned();
        assert!(
            help.contains(&format!("[env: {env}=")),
            "--help does not name {env}"
        );
        settings += 1;
    }
    assert!(settings >= 19, "{settings}");
}

#[test]
fn the_agent_reads_its_environment_only_through_its_command_line() {
    // Any other read (std::env::var, var_os, a logger's from_env) would be a setting the
    // help does not name.
    let reads =
        regex::Regex::new(r"env::var(_os)?\(|\bvars(_os)?\(\)|from_env\(|try_from_env\(").unwrap();
    for file in files(&Path::new(CRATE).join("src"), ".rs") {
        let text = std::fs::read_to_string(&file).unwrap();
        // Test modules may read their own environment.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (number, line) in code.lines().enumerate() {
            assert!(
                !reads.is_match(line),
                "{}:{} reads the environment outside the command line: {line}",
                file.display(),
                number + 1
            );
        }
    }
}

#[test]
fn every_agent_setting_the_docs_and_deploy_files_name_is_in_the_help() {
    let workspace = Path::new(CRATE).join("../..");
    let built_at_build_time: BTreeSet<String> = files(&Path::new(CRATE).join("src"), ".rs")
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            regex::Regex::new(r#"option_env!\("(CAPSTAN_AGENT_[A-Z_]+)"\)"#)
                .unwrap()
                .captures_iter(&text)
                .map(|found| found[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(built_at_build_time.contains("CAPSTAN_AGENT_VERSION"));
    let help = help();
    let mut named = BTreeSet::new();
    for file in files(&workspace.join("docs"), ".md")
        .into_iter()
        .chain(files(&workspace.join("deploy"), ""))
    {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        named.extend(names_in(&text));
    }
    assert!(named.contains("CAPSTAN_AGENT_TRIAL_SECS"), "{named:?}");
    // Not a setting: the line deploy/agent/bootstrap.sh prints with the joining key's
    // fingerprint, which the provisioning service reads (AC-10).
    let not_settings: BTreeSet<String> = ["CAPSTAN_AGENT_KEY".to_string()].into();
    for name in named
        .difference(&built_at_build_time)
        .filter(|name| !not_settings.contains(*name))
    {
        assert!(
            help.contains(&format!("[env: {name}=")),
            "{name} is named in the docs or deploy files but not in --help"
        );
    }
}
