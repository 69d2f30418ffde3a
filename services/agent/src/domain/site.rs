//! The site a node holds (issue 14, "The site a node holds"): `site.json` in the state
//! directory names the site's root, how to reach its PostgreSQL database, and what to leave
//! out of its backups. The database's connection string is read on the node when a word runs
//! and never leaves it (BK-29): it is not in any result, log line or manifest. A node without
//! the file is siteless: it has no backups, and says so.
//!
//! ```json
//! {"root": "/var/www/site",
//!  "database": {"url_file": "/etc/capstan-agent/site-db.url"},
//!  "exclude": ["cache", "tmp/sessions"]}
//! ```
//! `database` is `{"url": "postgres://..."}`, `{"url_file": "/path"}` (a root-owned file
//! holding the URL), or absent for a site without a database. `exclude` holds paths relative to
//! the root; each leaves out that file or directory and everything under it.

use serde_json::Value;
use std::path::{Component, Path, PathBuf};
use url::Url;

refusal!(
    /// `site.json` refused whole, the fault named.
    BadSite
);
refusal!(
    /// The site's database URL refused; the message never repeats the URL (it may hold a
    /// password).
    BadConnection
);

/// The most exclusions one site may name.
pub const MAX_EXCLUDES: usize = 256;

/// Where the site's database connection string comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseSource {
    /// Written in `site.json` itself (which is then a secret: 0600).
    Url(String),
    /// A file holding the URL, read when a word runs.
    UrlFile(PathBuf),
}

/// Never shows the connection string.
impl std::fmt::Debug for DatabaseSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseSource::Url(_) => formatter.write_str("Url([redacted])"),
            DatabaseSource::UrlFile(path) => write!(formatter, "UrlFile({})", path.display()),
        }
    }
}

/// The site as `site.json` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub root: PathBuf,
    pub database: Option<DatabaseSource>,
    /// Relative paths (normalised, no `..`, no leading `/`) left out of backups.
    pub exclude: Vec<PathBuf>,
    /// How its releases are laid out and probed (`release`, issue 16; defaults when absent).
    pub release: super::site_release::ReleaseSettings,
}

impl Site {
    /// Reads `site.json`, refusing it whole with the fault named: a site half understood is
    /// not one to back up or restore.
    pub fn parse(bytes: &[u8]) -> Result<Site, BadSite> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| format!("site.json is not valid JSON: {error}"))?;
        let Value::Object(fields) = value else {
            return Err("site.json must be a JSON object".into());
        };
        for key in fields.keys() {
            if !matches!(key.as_str(), "root" | "database" | "exclude" | "release") {
                return Err(format!(
                    "site.json: {key:?} is not a field (root, database, exclude, release)"
                )
                .into());
            }
        }
        let root = match fields.get("root") {
            Some(Value::String(root)) => PathBuf::from(root),
            Some(_) => return Err("site.json: root must be text (an absolute path)".into()),
            None => return Err("site.json needs root (the site's directory)".into()),
        };
        if !root.is_absolute() || root.components().any(|c| c == Component::ParentDir) {
            return Err("site.json: root must be an absolute path without ..".into());
        }
        if root == Path::new("/") {
            return Err("site.json: root must not be / itself".into());
        }
        let database = database_of(fields.get("database"))?;
        let exclude = exclude_of(fields.get("exclude"))?;
        let release = match fields.get("release") {
            None | Some(Value::Null) => super::site_release::ReleaseSettings::default(),
            Some(value) => super::site_release::ReleaseSettings::parse(value)
                .map_err(|refused| BadSite(refused.0))?,
        };
        Ok(Site {
            root,
            database,
            exclude,
            release,
        })
    }

    /// Whether `relative` (a path under the root) is left out, itself or by a parent.
    pub fn excluded(&self, relative: &Path) -> bool {
        self.exclude
            .iter()
            .any(|excluded| relative.starts_with(excluded))
    }
}

/// `text` as a normalised relative path (no leading `/`, `.` dropped), or `None` when it is
/// empty or climbs out with `..`.
fn relative_path(text: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for component in Path::new(text.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!path.as_os_str().is_empty()).then_some(path)
}

/// A PostgreSQL connection string taken apart into libpq's environment variables, so that no
/// part of it is ever on a command line where `ps` would show it (BK-29).
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionFacts {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub dbname: String,
    /// Query parameters libpq understands as environment variables (`sslmode` and the like).
    pub options: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for ConnectionFacts {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ConnectionFacts")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .finish_non_exhaustive()
    }
}

/// Query parameters of a connection URL and the libpq variable each becomes.
const OPTIONS: &[(&str, &str)] = &[
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("application_name", "PGAPPNAME"),
    ("host", "PGHOST"),
    ("port", "PGPORT"),
];

impl ConnectionFacts {
    /// Reads `postgres://user:password@host:port/dbname?sslmode=...`. The error never repeats
    /// the string (it may hold a password).
    pub fn parse(text: &str) -> Result<ConnectionFacts, BadConnection> {
        let url = Url::parse(text.trim()).map_err(|error| {
            format!("the site's database URL is not a URL ({error}); expected postgres://user:password@host:port/dbname")
        })?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(
                "the site's database URL must start with postgres:// or postgresql://".into(),
            );
        }
        let decode = |text: &str| {
            url::form_urlencoded::parse(format!("x={text}").as_bytes())
                .next()
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default()
        };
        let dbname = decode(url.path().trim_start_matches('/'));
        if dbname.is_empty() || dbname.contains('/') {
            return Err(
                "the site's database URL must name one database (postgres://host/dbname)".into(),
            );
        }
        let mut facts = ConnectionFacts {
            host: url.host_str().filter(|host| !host.is_empty()).map(|host| {
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string()
            }),
            port: url.port(),
            user: (!url.username().is_empty()).then(|| decode(url.username())),
            password: url.password().map(decode),
            dbname,
            options: Vec::new(),
        };
        for (key, value) in url.query_pairs() {
            let Some((_, variable)) = OPTIONS.iter().find(|(name, _)| *name == key) else {
                return Err(format!(
                    "the site's database URL has the parameter {key:?}, which the agent does not pass on"
                ).into());
            };
            match *variable {
                "PGHOST" => facts.host = Some(value.into_owned()),
                "PGPORT" => {
                    facts.port = Some(value.parse().map_err(|_| {
                        "the site's database URL has a port that is not a number".to_string()
                    })?)
                }
                _ => facts.options.push((variable, value.into_owned())),
            }
        }
        Ok(facts)
    }

    /// The environment a PostgreSQL program gets, for the site's database or `dbname`.
    pub fn env(&self, dbname: Option<&str>) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        if let Some(host) = &self.host {
            env.push(("PGHOST", host.clone()));
        }
        if let Some(port) = self.port {
            env.push(("PGPORT", port.to_string()));
        }
        if let Some(user) = &self.user {
            env.push(("PGUSER", user.clone()));
        }
        if let Some(password) = &self.password {
            env.push(("PGPASSWORD", password.clone()));
        }
        env.push(("PGDATABASE", dbname.unwrap_or(&self.dbname).to_string()));
        env.extend(self.options.iter().cloned());
        env
    }
}

/// site.json's `database`: none, a connection URL (checked) or an absolute file holding one.
fn database_of(field: Option<&Value>) -> Result<Option<DatabaseSource>, BadSite> {
    Ok(match field {
        None | Some(Value::Null) => None,
        Some(Value::Object(database)) => {
            let url = database.get("url");
            let url_file = database.get("url_file");
            if database.keys().any(|key| key != "url" && key != "url_file") {
                return Err("site.json: database takes only url or url_file".into());
            }
            match (url, url_file) {
                (Some(Value::String(url)), None) => {
                    ConnectionFacts::parse(url).map_err(|refused| BadSite(refused.0))?;
                    Some(DatabaseSource::Url(url.clone()))
                }
                (None, Some(Value::String(path))) => {
                    let path = PathBuf::from(path);
                    if !path.is_absolute() {
                        return Err("site.json: database.url_file must be an absolute path".into());
                    }
                    Some(DatabaseSource::UrlFile(path))
                }
                (Some(_), Some(_)) => {
                    return Err("site.json: database takes url or url_file, not both".into())
                }
                _ => {
                    return Err(
                        "site.json: database must be {\"url\": \"postgres://...\"} or {\"url_file\": \"/path\"}"
                            .into(),
                    )
                }
            }
        }
        Some(_) => return Err("site.json: database must be an object".into()),
    })
}

/// site.json's `exclude`: at most `MAX_EXCLUDES` paths inside the root, without `..`.
fn exclude_of(field: Option<&Value>) -> Result<Vec<PathBuf>, BadSite> {
    Ok(match field {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if items.len() > MAX_EXCLUDES {
                return Err(
                    format!("site.json: exclude names more than {MAX_EXCLUDES} paths").into(),
                );
            }
            let mut exclude = Vec::new();
            for item in items {
                let Some(text) = item.as_str() else {
                    return Err("site.json: every exclude entry must be text".into());
                };
                exclude.push(relative_path(text).ok_or_else(|| {
                    format!("site.json: exclude entry {text:?} must be a path inside the root, without ..")
                })?);
            }
            exclude
        }
        Some(_) => return Err("site.json: exclude must be a list of paths".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bk_29_a_site_names_its_root_database_and_exclusions() {
        let site = Site::parse(
            br#"{"root": "/var/www/site", "database": {"url_file": "/etc/capstan-agent/db.url"},
                 "exclude": ["cache", "./tmp/sessions/", "/logs"]}"#,
        )
        .unwrap();
        assert_eq!(site.root, PathBuf::from("/var/www/site"));
        assert_eq!(
            site.database,
            Some(DatabaseSource::UrlFile("/etc/capstan-agent/db.url".into()))
        );
        assert!(site.excluded(Path::new("cache")));
        assert!(site.excluded(Path::new("cache/a/b")));
        assert!(site.excluded(Path::new("tmp/sessions/x")));
        assert!(site.excluded(Path::new("logs")));
        assert!(!site.excluded(Path::new("tmp")));
        assert!(!site.excluded(Path::new("cached")));
        let files_only = Site::parse(br#"{"root": "/srv/x"}"#).unwrap();
        assert_eq!(files_only.database, None);
    }

    #[test]
    fn bk_29_the_connection_string_is_never_shown() {
        let site = Site::parse(
            br#"{"root": "/srv/x", "database": {"url": "postgres://app:s3cret@db:5433/shop"}}"#,
        )
        .unwrap();
        let shown = format!("{site:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let facts = ConnectionFacts::parse("postgres://app:s3cret@db:5433/shop").unwrap();
        assert!(!format!("{facts:?}").contains("s3cret"));
        // A URL that does not parse is refused without repeating it.
        let error = ConnectionFacts::parse("postgres://app:s3cret@db:notaport/shop").unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
    }

    #[test]
    fn bk_29_the_connection_goes_to_the_environment_not_the_command_line() {
        let facts = ConnectionFacts::parse(
            "postgresql://app%40x:p%2Fw@127.0.0.1:5433/shop%20db?sslmode=require",
        )
        .unwrap();
        let env = facts.env(None);
        assert!(env.contains(&("PGHOST", "127.0.0.1".into())));
        assert!(env.contains(&("PGPORT", "5433".into())));
        assert!(env.contains(&("PGUSER", "app@x".into())));
        assert!(env.contains(&("PGPASSWORD", "p/w".into())));
        assert!(env.contains(&("PGDATABASE", "shop db".into())));
        assert!(env.contains(&("PGSSLMODE", "require".into())));
        assert!(facts
            .env(Some("scratch"))
            .contains(&("PGDATABASE", "scratch".into())));
        let socket = ConnectionFacts::parse("postgres:///shop?host=/run/postgresql").unwrap();
        assert_eq!(socket.host.as_deref(), Some("/run/postgresql"));
    }

    #[test]
    fn a_site_file_half_understood_is_refused_whole_naming_the_fault() {
        let cases: [(&[u8], &str); 12] = [
            (b"nope", "not valid JSON"),
            (b"[]", "must be a JSON object"),
            (br#"{}"#, "needs root"),
            (br#"{"root": "www"}"#, "absolute path"),
            (br#"{"root": "/"}"#, "must not be /"),
            (br#"{"root": "/a/../b"}"#, "without .."),
            (br#"{"root": "/a", "db": {}}"#, "\"db\" is not a field"),
            (
                br#"{"root": "/a", "database": {"url": "mysql://x/y"}}"#,
                "postgres://",
            ),
            (
                br#"{"root": "/a", "database": {"url": "postgres://h/"}}"#,
                "name one database",
            ),
            (
                br#"{"root": "/a", "database": {"url_file": "rel"}}"#,
                "absolute path",
            ),
            (
                br#"{"root": "/a", "exclude": ["../etc"]}"#,
                "inside the root",
            ),
            (br#"{"root": "/a", "exclude": "cache"}"#, "list of paths"),
        ];
        for (bytes, expected) in cases {
            let error = Site::parse(bytes).unwrap_err();
            assert!(
                error.contains(expected),
                "{}: {error}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
