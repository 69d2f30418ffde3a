//! What goes wrong on the machine during a site-release word, each failure its own variant.
//! The texts are the ones operators already read: they reach the plane in the job's result
//! (and the tests) unchanged, so a variant's message keeps its words exactly.

use std::{io, path::PathBuf};

use crate::{
    domain::site_release::{BadRelease, LOCK_FILE, PROBE_TIMEOUT_SECS},
    plane::PlaneError,
};

/// A failure with the site's files: the site root, `current`, `shared/`, the kept copies.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    /// A file or directory could not be read, opened, made, written or switched; `what` names
    /// it and what was being done to it.
    #[error("{what}: {source}")]
    Disk { what: String, source: io::Error },
    /// Another process holds the site lock (a deploy is running).
    #[error("the site lock {LOCK_FILE} is held by another process: another deploy is running")]
    LockHeld,
    /// `current` points somewhere no release is laid out.
    #[error("{0}")]
    BadCurrent(#[from] BadRelease),
    /// A directory that was just made is not there to open.
    #[error("{0} cannot be made")]
    NotMade(String),
    /// The blocking work stopped before it answered.
    #[error("the write stopped unexpectedly: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

impl SiteError {
    /// The I/O failure of doing `what`, for `map_err`.
    pub fn disk(what: impl Into<String>) -> impl FnOnce(io::Error) -> SiteError {
        let what = what.into();
        move |source| SiteError::Disk { what, source }
    }
}

/// Why a release's manifest or archive could not be had from its source.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The plane did not give it: unreachable, asking to wait, refusing, or answering
    /// unreadably ([`PlaneError`] tells which).
    #[error("the release {artifact} of {version} could not be fetched: {source}")]
    Plane {
        artifact: Artifact,
        version: String,
        source: PlaneError,
    },
    /// The plane answered without a part the manifest needs.
    #[error("the plane's release manifest of {version} has no {field}")]
    Incomplete {
        version: String,
        field: &'static str,
    },
    /// The source holds no such release.
    #[error("not published")]
    NotPublished,
}

/// The two things a release source gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Artifact {
    Manifest,
    Archive,
}

/// Why the viewer's credential file cannot be used (`page_probe` as admin). The credential's
/// value never appears: only the file's path.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("the viewer's credential {} cannot be read: {source}", .path.display())]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("the viewer's credential {} is not a regular file", .path.display())]
    NotAFile { path: PathBuf },
    #[error("the viewer's credential {} must be this agent's own and readable by no one else (mode 0600)", .path.display())]
    Exposed { path: PathBuf },
    #[error("the viewer's credential {} is too large", .path.display())]
    TooLarge { path: PathBuf },
    #[error("the viewer's credential {} must be one header line, Cookie: ... or Authorization: ...", .path.display())]
    NotOneHeader { path: PathBuf },
    #[error("the viewer's credential {} must be a Cookie or Authorization header", .path.display())]
    WrongHeader { path: PathBuf },
}

/// Why one GET of `page_probe` had no answer: the request could not be made, the site did not
/// answer, or not in time.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("the request cannot be made: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("no answer: {0}")]
    NoAnswer(#[from] hyper_util::client::legacy::Error),
    #[error("no answer within {PROBE_TIMEOUT_SECS} seconds")]
    Timeout,
}
