//! Site releases on a node (issue 16; spec "Staged rollout", "Script trust"; RO-11, RO-19,
//! RO-21, RO-22, AG-33), as pure rules: what `site.json`'s `release` block says, which
//! versions are acceptable names, which old releases go when the last N are kept, what
//! `/proc/locks` says about the site's deploy lock, which of a page's assets a probe fetches,
//! and how many errors a probe saw. `site_release` (beside `words/`) does the I/O; the layout is
//! documented in `docs/site-releases.md`.
//!
//! The layout under the site root is Capistrano's:
//! ```text
//! <root>/releases/<version>/   one directory per release, exactly the signed archive's files
//!                              plus RELEASE_MANIFEST and RELEASE_MANIFEST.sig
//! <root>/shared/<name>         kept across releases; each top-level entry is linked into
//!                              every release as <release>/<name> -> ../../shared/<name>
//! <root>/current               a symlink to releases/<version>, switched by renaming a new
//!                              link over it
//! <root>/.deploy.lock          the site lock an apply holds (flock), read from /proc/locks
//! ```

use serde_json::Value;
use std::path::{Path, PathBuf};

refusal!(
    /// A site release's settings, version, link or probe path refused, the fault named.
    BadRelease
);

/// The releases kept on a node unless `site.json` says otherwise (the current one and the
/// one before it are never removed, whatever N is).
pub const DEFAULT_KEEP: usize = 5;
/// The fewest releases a site may keep: the current one and one to switch back to.
pub const MIN_KEEP: usize = 2;
/// The most a site may keep.
pub const MAX_KEEP: usize = 50;
/// The release's own deploy hook, relative to the release directory. It runs only after it
/// was verified against the release's signed manifest (AG-33).
pub const HOOK: &str = "deploy/hook";
/// The longest a deploy hook may run before it is stopped and the release switched back.
pub const HOOK_TIMEOUT_SECS: u64 = 600;
/// The site lock's file under the root.
pub const LOCK_FILE: &str = ".deploy.lock";
/// The directory of releases under the root.
pub const RELEASES_DIR: &str = "releases";
/// The directory of shared entries under the root.
pub const SHARED_DIR: &str = "shared";
/// The link to the live release under the root.
pub const CURRENT_LINK: &str = "current";
/// The error log a probe counts lines of, relative to the root, unless `site.json` says.
pub const DEFAULT_ERROR_LOG: &str = "shared/logs/error.log";
/// Room a release needs besides itself: at least this much free on the site's filesystem.
pub const MIN_FREE_BYTES: u64 = 64 * 1024 * 1024;
/// The most assets one probe fetches (the rest are not looked at).
pub const MAX_PROBE_ASSETS: usize = 20;
/// The most of a page a probe reads.
pub const MAX_PAGE_BYTES: usize = 2 * 1024 * 1024;
/// The most of one asset a probe reads before calling it loaded.
pub const MAX_ASSET_BYTES: usize = 8 * 1024 * 1024;
/// The longest a page or one asset may take to answer.
pub const PROBE_TIMEOUT_SECS: u64 = 20;
/// The longest a version name may be (the catalogue's `version` is at most 32 characters).
pub const MAX_VERSION_CHARS: usize = 32;

/// How this site's releases are deployed and probed: `site.json`'s `release` block.
///
/// ```json
/// {"release": {"base_url": "http://127.0.0.1:8080", "keep": 5,
///              "error_log": "shared/logs/error.log",
///              "viewer_header_file": "/etc/capstan-agent/viewer.header"}}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSettings {
    /// Where the site answers on this machine, for `page_probe` (http or https, no path
    /// beyond `/`).
    pub base_url: Option<url::Url>,
    /// How many releases are kept.
    pub keep: usize,
    /// The error log counted by a probe, relative to the root.
    pub error_log: PathBuf,
    /// A root-owned file holding one header line (`Cookie: ...` or `Authorization: ...`) that
    /// makes a request the configured viewer's; read on the node when a probe runs as `admin`.
    pub viewer_header_file: Option<PathBuf>,
}

impl Default for ReleaseSettings {
    fn default() -> ReleaseSettings {
        ReleaseSettings {
            base_url: None,
            keep: DEFAULT_KEEP,
            error_log: PathBuf::from(DEFAULT_ERROR_LOG),
            viewer_header_file: None,
        }
    }
}

impl ReleaseSettings {
    /// Reads `site.json`'s `release` value; the error names the field.
    pub fn parse(value: &Value) -> Result<ReleaseSettings, BadRelease> {
        let Value::Object(fields) = value else {
            return Err("site.json: release must be an object".into());
        };
        for key in fields.keys() {
            if !matches!(
                key.as_str(),
                "base_url" | "keep" | "error_log" | "viewer_header_file"
            ) {
                return Err(format!(
                    "site.json: release.{key} is not a field (base_url, keep, error_log, viewer_header_file)"
                ).into());
            }
        }
        let mut settings = ReleaseSettings::default();
        match fields.get("base_url") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                let url = url::Url::parse(text)
                    .map_err(|error| format!("site.json: release.base_url: {error}"))?;
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    return Err("site.json: release.base_url must be an http:// or https:// address with a host".into());
                }
                if !url.username().is_empty() || url.password().is_some() {
                    return Err("site.json: release.base_url must not hold credentials (use viewer_header_file)".into());
                }
                settings.base_url = Some(url);
            }
            Some(_) => return Err("site.json: release.base_url must be text".into()),
        }
        match fields.get("keep") {
            None | Some(Value::Null) => {}
            Some(value) => {
                let keep = value
                    .as_u64()
                    .filter(|keep| (MIN_KEEP as u64..=MAX_KEEP as u64).contains(keep))
                    .ok_or_else(|| {
                        format!("site.json: release.keep must be a whole number from {MIN_KEEP} to {MAX_KEEP}")
                    })?;
                settings.keep = keep as usize;
            }
        }
        match fields.get("error_log") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                settings.error_log = plain_relative(text).ok_or_else(|| {
                    "site.json: release.error_log must be a path inside the root, without .."
                        .to_string()
                })?;
            }
            Some(_) => return Err("site.json: release.error_log must be text".into()),
        }
        match fields.get("viewer_header_file") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) if Path::new(text).is_absolute() => {
                settings.viewer_header_file = Some(PathBuf::from(text));
            }
            Some(_) => {
                return Err("site.json: release.viewer_header_file must be an absolute path".into())
            }
        }
        Ok(settings)
    }
}

fn plain_relative(text: &str) -> Option<PathBuf> {
    capstan_signing::manifest::valid_path(text).then(|| PathBuf::from(text))
}

/// A release's version as a directory name: letters, digits, `.`, `-`, `_`, `+`, starting with
/// a letter or digit, at most [`MAX_VERSION_CHARS`]. Anything else is refused with why.
pub fn check_version(version: &str) -> Result<(), BadRelease> {
    let first_ok = version
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric());
    if !first_ok
        || version.chars().count() > MAX_VERSION_CHARS
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    {
        return Err(format!(
            "version {version:?} is not a release version (letters, digits, . - _ +, starting with a letter or digit, at most {MAX_VERSION_CHARS} characters)"
        ).into());
    }
    Ok(())
}

/// The version `current` names, from the link's target (`releases/<version>`), or why it names
/// none.
pub fn version_of_link(target: &Path) -> Result<String, BadRelease> {
    let mut parts = target.components();
    let (Some(first), Some(second), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!(
            "current points at {}, not at releases/<version>",
            target.display()
        )
        .into());
    };
    if first.as_os_str() != RELEASES_DIR {
        return Err(format!(
            "current points at {}, not at releases/<version>",
            target.display()
        )
        .into());
    }
    let version = second.as_os_str().to_string_lossy().into_owned();
    check_version(&version)?;
    Ok(version)
}

/// The link target `current` gets for `version`: relative, so the site root can move.
pub fn link_target(version: &str) -> PathBuf {
    Path::new(RELEASES_DIR).join(version)
}

/// Keep-N: of the releases on disk (name, when it was landed, oldest first or not), the ones
/// to remove so that `keep` remain, the oldest first. The current release and the one to
/// switch back to are never removed, and neither counts as removable.
pub fn releases_to_remove(
    releases: &[(String, i64)],
    current: Option<&str>,
    previous: Option<&str>,
    keep: usize,
) -> Vec<String> {
    let keep = keep.max(MIN_KEEP);
    let mut sorted: Vec<&(String, i64)> = releases.iter().collect();
    // Newest first; equal times by name so the choice never depends on the listing order.
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    let protected = |name: &str| Some(name) == current || Some(name) == previous;
    let mut kept = sorted.iter().filter(|(name, _)| protected(name)).count();
    let mut remove = Vec::new();
    for (name, _) in sorted {
        if protected(name) {
            continue;
        }
        if kept < keep {
            kept += 1;
        } else {
            remove.push(name.clone());
        }
    }
    remove.reverse();
    remove
}

/// What a deploy hook's exit came to (documented in `docs/site-releases.md`): exit 0 is the
/// deploy tier passing; any other exit, a signal or a timeout fails it, and `current` goes
/// back to the release before.
pub fn hook_passed(exit_code: Option<i32>) -> bool {
    exit_code == Some(0)
}

/// Whether `/proc/locks` shows a lock on the file with this device and inode (the site lock,
/// read without taking it, AG-39). Lines look like
/// `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF` (device in hex `major:minor`, the inode
/// in decimal); a `->` line is a waiter on a lock, which is held by someone else all the same.
pub fn lock_held(proc_locks: &str, major: u64, minor: u64, inode: u64) -> bool {
    proc_locks.lines().any(|line| {
        let fields: Vec<&str> = line
            .split_whitespace()
            .filter(|field| *field != "->")
            .collect();
        // id, kind, advisory, access, pid, dev:inode, start, end
        let Some(place) = fields.get(5) else {
            return false;
        };
        let mut parts = place.split(':');
        let (Some(found_major), Some(found_minor), Some(found_inode), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        u64::from_str_radix(found_major, 16).ok() == Some(major)
            && u64::from_str_radix(found_minor, 16).ok() == Some(minor)
            && found_inode.parse::<u64>().ok() == Some(inode)
    })
}

/// A probe's error count: the non-empty lines added to the site's error log while the page
/// was fetched (`before` is the log's length when the fetch began; a log that shrank was
/// rotated, and every line of the new one counts).
pub fn new_error_lines(before: u64, after: &[u8], after_len: u64) -> u32 {
    let added = if after_len >= before {
        let skip = usize::try_from(before).unwrap_or(usize::MAX);
        after.get(skip..).unwrap_or_default()
    } else {
        after
    };
    let lines = added
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .count();
    u32::try_from(lines).unwrap_or(u32::MAX)
}

/// The page's same-origin assets a probe fetches: every `src` attribute, and the `href` of
/// every `<link>` (stylesheets, icons), resolved against `page`; only those on the page's own
/// origin; each once, in the page's order, at most [`MAX_PROBE_ASSETS`]. A small scanner, not
/// an HTML parser: it reads tags and quoted or bare attribute values, and that is all a probe
/// needs.
pub fn page_assets(html: &str, page: &url::Url) -> Vec<url::Url> {
    let mut assets: Vec<url::Url> = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        if rest.starts_with("!--") {
            match rest.find("-->") {
                Some(end) => {
                    rest = &rest[end + 3..];
                    continue;
                }
                None => break,
            }
        }
        let end = tag_end(rest);
        let tag = &rest[..end];
        rest = &rest[end..];
        let name: String = tag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        for (attribute, value) in attributes(&tag[name.len()..]) {
            let wanted = attribute == "src" || (attribute == "href" && name == "link");
            if !wanted || value.is_empty() || value.starts_with("data:") {
                continue;
            }
            let Ok(asset) = page.join(&value) else {
                continue;
            };
            if asset.origin() != page.origin() || assets.contains(&asset) {
                continue;
            }
            assets.push(asset);
            if assets.len() == MAX_PROBE_ASSETS {
                return assets;
            }
        }
    }
    assets
}

/// Where the tag starting at `text` ends (its `>` outside quotes, or the end).
fn tag_end(text: &str) -> usize {
    let mut quote = None;
    for (index, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(open), c) if c == open => quote = None,
            (None, '>') => return index,
            _ => {}
        }
    }
    text.len()
}

/// A tag's attributes after its name: (lowercase name, value with quotes removed).
fn attributes(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        while index < chars.len() && (chars[index].is_whitespace() || chars[index] == '/') {
            index += 1;
        }
        let start = index;
        while index < chars.len()
            && !chars[index].is_whitespace()
            && chars[index] != '='
            && chars[index] != '/'
        {
            index += 1;
        }
        let name: String = chars[start..index]
            .iter()
            .collect::<String>()
            .to_ascii_lowercase();
        while index < chars.len() && chars[index].is_whitespace() {
            index += 1;
        }
        let mut value = String::new();
        if index < chars.len() && chars[index] == '=' {
            index += 1;
            while index < chars.len() && chars[index].is_whitespace() {
                index += 1;
            }
            if index < chars.len() && (chars[index] == '"' || chars[index] == '\'') {
                let quote = chars[index];
                index += 1;
                let start = index;
                while index < chars.len() && chars[index] != quote {
                    index += 1;
                }
                value = chars[start..index].iter().collect();
                index += 1;
            } else {
                let start = index;
                while index < chars.len() && !chars[index].is_whitespace() {
                    index += 1;
                }
                value = chars[start..index].iter().collect();
            }
        }
        if name.is_empty() {
            index += 1;
            continue;
        }
        found.push((name, value.trim().to_string()));
    }
    found
}

/// A probe's `path` parameter: from `/`, no spaces or control characters, no `//` that would
/// name another host, and no `..` segment. The error says why.
pub fn check_probe_path(path: &str) -> Result<(), BadRelease> {
    if !path.starts_with('/') || path.starts_with("//") {
        return Err(format!("path {path:?} must start with a single /").into());
    }
    if path
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '\\')
    {
        return Err(format!("path {path:?} must hold no spaces or control characters").into());
    }
    if path
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .split('/')
        .any(|segment| segment == "..")
    {
        return Err(format!("path {path:?} must not climb with ..").into());
    }
    Ok(())
}

/// One readiness check's answer, in the shape the plane's verdict reads (RO-19).
pub fn check(name: &str, pass: bool, reason: impl Into<String>) -> Value {
    serde_json::json!({"name": name, "pass": pass, "reason": reason.into()})
}

/// The room a release needs: twice the current release's size (the new one and slack),
/// at least [`MIN_FREE_BYTES`].
pub fn room_needed(current_release_bytes: u64) -> u64 {
    current_release_bytes.saturating_mul(2).max(MIN_FREE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_release_block_is_read_with_defaults_and_every_bad_field_is_named() {
        let settings = ReleaseSettings::parse(&json!({})).unwrap();
        assert_eq!(settings, ReleaseSettings::default());
        let settings = ReleaseSettings::parse(&json!({
            "base_url": "http://127.0.0.1:8080/", "keep": 3, "error_log": "logs/php.log",
            "viewer_header_file": "/etc/capstan-agent/viewer.header"
        }))
        .unwrap();
        assert_eq!(settings.keep, 3);
        assert_eq!(settings.error_log, PathBuf::from("logs/php.log"));
        assert_eq!(
            settings.base_url.unwrap().as_str(),
            "http://127.0.0.1:8080/"
        );
        for (bad, names) in [
            (json!({"keep": 1}), "release.keep"),
            (json!({"keep": "5"}), "release.keep"),
            (json!({"base_url": "ftp://x"}), "release.base_url"),
            (json!({"base_url": "http://u:p@x/"}), "credentials"),
            (json!({"error_log": "../etc/passwd"}), "release.error_log"),
            (
                json!({"viewer_header_file": "viewer"}),
                "viewer_header_file",
            ),
            (json!({"colour": "red"}), "release.colour"),
            (json!([]), "object"),
        ] {
            let error = ReleaseSettings::parse(&bad).unwrap_err();
            assert!(error.contains(names), "{bad}: {error}");
        }
    }

    #[test]
    fn a_version_is_a_plain_directory_name() {
        for good in ["1.2.3", "2026.12.02-1", "v7", "1.0.0+build_5"] {
            assert_eq!(check_version(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "1/2",
            "a b",
            "-rf",
            &"9".repeat(33),
            "é",
        ] {
            assert!(check_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_version_reported_is_read_from_where_current_points() {
        assert_eq!(
            version_of_link(Path::new("releases/1.2.3")),
            Ok("1.2.3".into())
        );
        assert!(version_of_link(Path::new("/tmp/elsewhere")).is_err());
        assert!(version_of_link(Path::new("releases/../x")).is_err());
        assert!(version_of_link(Path::new("releases/1/2")).is_err());
        assert_eq!(link_target("1.2.3"), PathBuf::from("releases/1.2.3"));
    }

    #[test]
    fn keep_n_removes_the_oldest_and_never_the_current_or_the_one_before() {
        let releases: Vec<(String, i64)> = (1..=7).map(|n| (format!("1.{n}"), n)).collect();
        // Seven on disk, keep five: the two oldest go.
        assert_eq!(
            releases_to_remove(&releases, Some("1.7"), Some("1.6"), 5),
            vec!["1.1".to_string(), "1.2".to_string()]
        );
        // A rolled-back node whose current is old keeps it and the one to switch back to.
        assert_eq!(
            releases_to_remove(&releases, Some("1.1"), Some("1.2"), 2),
            vec!["1.3", "1.4", "1.5", "1.6", "1.7"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        );
        // Keep is never below two.
        assert_eq!(releases_to_remove(&releases, Some("1.7"), None, 0).len(), 5);
        assert!(releases_to_remove(&releases, Some("1.7"), Some("1.6"), 50).is_empty());
    }

    #[test]
    fn only_a_hook_that_exits_zero_passes_the_deploy_tier() {
        assert!(hook_passed(Some(0)));
        assert!(!hook_passed(Some(1)));
        assert!(!hook_passed(None));
    }

    #[test]
    fn ag_39_the_site_lock_is_read_from_proc_locks_by_device_and_inode() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1835101 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 4243 fd:01:1835101 0 EOF\n\
                     2: POSIX  ADVISORY  READ 77 00:1a:99 0 EOF\n";
        assert!(lock_held(locks, 0xfd, 1, 1835101));
        assert!(lock_held(locks, 0, 0x1a, 99));
        assert!(!lock_held(locks, 0xfd, 1, 1835102));
        assert!(!lock_held(locks, 0xfd, 2, 1835101));
        assert!(!lock_held("", 0xfd, 1, 1835101));
        assert!(!lock_held("garbage line\n", 0xfd, 1, 1835101));
    }

    #[test]
    fn ro_22_the_error_count_is_the_lines_the_error_log_gained_during_the_fetch() {
        let before = b"old error\n";
        let mut after = before.to_vec();
        after.extend_from_slice(b"PHP Warning: one\n\nPHP Fatal: two\n");
        assert_eq!(
            new_error_lines(before.len() as u64, &after, after.len() as u64),
            2
        );
        assert_eq!(new_error_lines(10, before, 10), 0);
        // Rotated: the new log is shorter, every line of it is new.
        assert_eq!(new_error_lines(1000, b"a\nb\n", 4), 2);
    }

    #[test]
    fn ro_21_a_probe_fetches_the_pages_same_origin_src_and_link_assets_once_each() {
        let page = url::Url::parse("http://127.0.0.1:8080/shop/index.html").unwrap();
        let html = r#"<html><head>
            <link rel="stylesheet" href="/css/site.css">
            <link rel=icon href=favicon.ico>
            <script src='app.js'></script>
            <script src="https://cdn.example.com/lib.js"></script>
            <!-- <img src="/commented.png"> -->
            </head><body>
            <a href="/not-an-asset">link</a>
            <img alt="x > y" src="/img/logo.png"><img src="/img/logo.png">
            <img src="data:image/png;base64,AAAA">
            </body></html>"#;
        let assets: Vec<String> = page_assets(html, &page)
            .iter()
            .map(|asset| asset.path().to_string())
            .collect();
        assert_eq!(
            assets,
            vec![
                "/css/site.css",
                "/shop/favicon.ico",
                "/shop/app.js",
                "/img/logo.png"
            ]
        );
        let many: String = (0..100).map(|n| format!("<img src=/i{n}.png>")).collect();
        assert_eq!(page_assets(&many, &page).len(), MAX_PROBE_ASSETS);
        assert!(page_assets("<img src=\"/unterminated", &page).len() <= 1);
    }

    #[test]
    fn a_probe_path_stays_on_the_site() {
        assert_eq!(check_probe_path("/admin/users?tab=1"), Ok(()));
        for bad in ["admin", "//evil.example/x", "/a b", "/../etc", "/x\\y"] {
            assert!(check_probe_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ro_19_room_to_stage_is_twice_the_current_release_and_at_least_the_floor() {
        assert_eq!(room_needed(0), MIN_FREE_BYTES);
        assert_eq!(room_needed(100 * 1024 * 1024), 200 * 1024 * 1024);
    }
}
