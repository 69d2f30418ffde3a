//! What the agent is told about its machine, from flags or the environment (the unit reads
//! `/etc/capstan-agent/agent.env`): where the site lives, where certificates are, where
//! PostgreSQL listens.

use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Config {
    /// The site's root; `None` on a machine with no site (machine posture, AG-04).
    pub site_root: Option<PathBuf>,
    /// Where certificate lineages live (`<dir>/<name>/cert.pem`).
    pub letsencrypt_dir: PathBuf,
    /// `host:port` where PostgreSQL should answer.
    pub postgres: String,
}
