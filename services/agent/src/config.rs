//! What the agent is told about its machine, from flags or the environment (the unit reads
//! `/etc/capstan-agent/agent.env`): where the site lives, where certificates are, where
//! PostgreSQL listens, which units serve the site and how they are supervised, and the recipe
//! loop's tick. These are the node's own facts; nothing here ever comes from the plane.

use std::{net::IpAddr, path::PathBuf, time::Duration};

use crate::domain::recipes::DEFAULT_TICK;

#[derive(Debug, Clone)]
pub struct Config {
    /// The site's root; `None` on a machine with no site (machine posture, AG-04).
    pub site_root: Option<PathBuf>,
    /// Where certificate lineages live (`<dir>/<name>/cert.pem`).
    pub letsencrypt_dir: PathBuf,
    /// `host:port` where PostgreSQL should answer.
    pub postgres: String,
    /// The units that serve the site, for `service_health` (AG-53).
    pub services: Services,
    /// How often the recipe loop ticks (AG-41: ten minutes).
    pub recipe_tick: Duration,
    /// How often the site release's manifest clock ticks: manifest recovery (AG-34) and the
    /// deployment files' settling (AG-37); ten minutes.
    pub manifest_tick: Duration,
    /// Where the web server's enabled sites are read for the names its TLS vhosts serve
    /// (`certificate_expiry`, AG-56): the compiled set, [`NGINX_SITE_DIRS`], unless a test
    /// points the agent elsewhere.
    pub nginx_dirs: Vec<PathBuf>,
    /// The port the machine's own web server serves TLS on (443; a test's own port).
    pub tls_port: u16,
    /// The Docker engine's API socket (`container_health`, `restart_container`, AG-54).
    pub docker_socket: PathBuf,
    /// Where a site container's hold mark lives: `<dir>/<site>/held` (the state directory's
    /// `sites/`).
    pub container_holds: PathBuf,
    /// The agent's state directory (agent_supervision asks whether the keepalive keeps this
    /// agent, AG-51).
    pub state_dir: PathBuf,
    /// The data root: the mount point the site's data lives on (AG-55); `None` when the site's
    /// data is not on a filesystem of its own.
    pub data_root: Option<PathBuf>,
    /// Where a machine with no site unpacks its support bundle (AG-32), the tree its scripts
    /// run from (AG-33).
    pub bundle_dir: PathBuf,
    /// The local address connections to the plane are made from (`CAPSTAN_AGENT_LOCAL_ADDRESS`);
    /// `None`: the system's choice.
    pub local_address: Option<IpAddr>,
}

/// The directories nginx reads enabled sites from on the distributions we install on.
pub const NGINX_SITE_DIRS: &[&str] = &["/etc/nginx/sites-enabled", "/etc/nginx/conf.d"];

/// The site's services as this node runs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Services {
    /// The web server's unit (one of the compiled units: `nginx` or `apache2`).
    pub web_unit: String,
    /// The app server's unit (`php-fpm`), or `None` for a site with none.
    pub app_unit: Option<String>,
    /// Where the web server answers for the site on this machine (`http://host[:port]/path`;
    /// the host is sent as the site's name).
    pub site_url: String,
    /// When set, units are supervised by supervisord through this `supervisorctl` rather
    /// than by systemd (a machine or container without systemd).
    pub supervisorctl: Option<PathBuf>,
}

impl Default for Services {
    fn default() -> Services {
        Services {
            web_unit: "nginx".into(),
            app_unit: Some("php-fpm".into()),
            site_url: "http://127.0.0.1/".into(),
            supervisorctl: None,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            site_root: None,
            letsencrypt_dir: "/etc/letsencrypt/live".into(),
            postgres: "127.0.0.1:5432".into(),
            services: Services::default(),
            recipe_tick: DEFAULT_TICK,
            manifest_tick: crate::domain::release_files::DEFAULT_MANIFEST_TICK,
            nginx_dirs: NGINX_SITE_DIRS.iter().map(PathBuf::from).collect(),
            tls_port: 443,
            docker_socket: "/var/run/docker.sock".into(),
            container_holds: "/etc/capstan-agent/sites".into(),
            state_dir: "/etc/capstan-agent".into(),
            data_root: None,
            bundle_dir: crate::domain::script_trust::DEFAULT_BUNDLE_DIR.into(),
            local_address: None,
        }
    }
}
