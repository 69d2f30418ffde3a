//! The NATS section: where the bus is and how a process proves itself to it.

use crate::{
    problem::{read_secret, Problem},
    section::Section,
};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsSettings {
    /// `nats://host:4222`, or `tls://host:4222` to require TLS.
    pub url: String,
    /// The service's NATS user (`agent_channel`, `gateway`, ... or `all` for `capstan all`),
    /// with `password` or `password_file`. With no credentials set the connection offers none,
    /// as a local server without authorization expects.
    pub user: Option<String>,
    /// A secret; `CAPSTAN__NATS__PASSWORD_FILE` reads it from a file instead.
    pub password: Option<SecretString>,
    pub password_file: Option<PathBuf>,
    /// An nkey seed (`SU...`), instead of a user and password; a secret, with a `_FILE` form.
    pub nkey_seed: Option<SecretString>,
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (user JWT and seed), for a server run in operator (JWT) mode.
    pub creds_file: Option<PathBuf>,
    /// PEM certificates the server's must chain to; setting it requires TLS.
    pub tls_ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for a server that verifies clients.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

impl Default for NatsSettings {
    fn default() -> NatsSettings {
        NatsSettings {
            url: "nats://127.0.0.1:4222".into(),
            user: None,
            password: None,
            password_file: None,
            nkey_seed: None,
            nkey_seed_file: None,
            creds_file: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// How a process proves itself to NATS, read from [`NatsSettings`].
#[derive(Debug, Clone, PartialEq)]
pub enum NatsCredentials<'a> {
    None,
    UserPassword { user: &'a str, password: &'a str },
    NkeySeed(&'a str),
    CredsFile(&'a Path),
}

impl NatsSettings {
    /// The credentials to offer; validated when the settings load, so at most one kind is set.
    pub fn credentials(&self) -> NatsCredentials<'_> {
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            return NatsCredentials::UserPassword {
                user,
                password: password.expose_secret(),
            };
        }
        if let Some(seed) = &self.nkey_seed {
            return NatsCredentials::NkeySeed(seed.expose_secret());
        }
        if let Some(path) = &self.creds_file {
            return NatsCredentials::CredsFile(path);
        }
        NatsCredentials::None
    }

    fn url_problems(&self) -> Vec<Problem> {
        if !(self.url.starts_with("nats://") || self.url.starts_with("tls://")) {
            return vec![Problem::new(
                "nats.url",
                "must start with nats:// or tls://",
            )];
        }
        // The URL is logged and shown in errors; a secret in it would be too.
        if self.url.contains('@') {
            return vec![Problem::new(
                "nats.url",
                "must not carry credentials: set nats.user and nats.password (or their _file)",
            )];
        }
        Vec::new()
    }

    fn credential_problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        match (&self.user, &self.password) {
            (Some(user), _) if user.trim().is_empty() => {
                problems.push(Problem::new("nats.user", "must not be empty"))
            }
            (Some(_), None) => {
                problems.push(Problem::new("nats.password", "is needed with nats.user"))
            }
            (None, Some(_)) => {
                problems.push(Problem::new("nats.user", "is needed with nats.password"))
            }
            _ => {}
        }
        let kinds = [
            self.user.is_some(),
            self.nkey_seed.is_some(),
            self.creds_file.is_some(),
        ];
        if kinds.into_iter().filter(|set| *set).count() > 1 {
            problems.push(Problem::new(
                "nats.user",
                "set one of nats.user with nats.password, nats.nkey_seed, nats.creds_file",
            ));
        }
        problems
    }

    fn file_problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            problems.push(Problem::new(
                "nats.tls_cert_file",
                "nats.tls_cert_file and nats.tls_key_file go together",
            ));
        }
        for (key, path) in [
            ("nats.creds_file", &self.creds_file),
            ("nats.tls_ca_file", &self.tls_ca_file),
            ("nats.tls_cert_file", &self.tls_cert_file),
            ("nats.tls_key_file", &self.tls_key_file),
        ] {
            if let Some(path) = path {
                if let Err(error) = std::fs::metadata(path) {
                    problems.push(Problem::new(
                        key,
                        format!("cannot read {}: {error}", path.display()),
                    ));
                }
            }
        }
        problems
    }
}

impl Section for NatsSettings {
    const KEY: &'static str = "nats";

    fn resolve_files(&mut self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if let Some(path) = &self.password_file {
            match read_secret("nats.password_file", path) {
                Ok(password) => self.password = Some(password),
                Err(problem) => problems.push(problem),
            }
        }
        if let Some(path) = &self.nkey_seed_file {
            match read_secret("nats.nkey_seed_file", path) {
                Ok(seed) => self.nkey_seed = Some(seed),
                Err(problem) => problems.push(problem),
            }
        }
        problems
    }

    fn validate(&self) -> Vec<Problem> {
        let mut problems = self.url_problems();
        problems.extend(self.credential_problems());
        problems.extend(self.file_problems());
        problems
    }
}
