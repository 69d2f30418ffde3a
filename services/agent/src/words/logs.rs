//! The owner-gated words (AG-63): `site_log` (the latest lines of the site's access or error
//! log) and `file_head` (the first lines of a host configuration file). Both are refused
//! before they run while log access is off. Neither follows a link an unprivileged user could
//! have planted: the site tree belongs to the web user, so a site log is opened directory by
//! directory without following any link and must be a regular file with one name; a host
//! file is read only when every directory and link on its way is root's (or the agent's) and
//! writable by nobody else. Both open the file itself without waiting and read it only when
//! it is a regular file: a named pipe planted where a log should be would hold an ordinary open
//! until some writer came, and the word with it.

use rustix::fs::{fcntl_getfl, fcntl_setfl, fstat, openat, FileType, Mode, OFlags, CWD};
use serde_json::{json, Value};
use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    os::{fd::OwnedFd, unix::fs::MetadataExt},
    path::{Component, Path, PathBuf},
};

use super::{Failed, Finished, Redaction};
use crate::{config::Config, state::agent_uid};

/// Why a log or a host file is not read: it could not be opened or read, or it is not a file
/// the agent trusts.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Errno(#[from] rustix::io::Errno),
    #[error("the site root cannot be opened: {0}")]
    NoRoot(#[source] rustix::io::Errno),
    #[error("the path has a component that is not a plain name")]
    NotPlain,
    #[error("{name} is a link, which the agent does not follow")]
    Link { name: String },
    #[error("it has more than one name (a hard link), so it may be another file")]
    HardLink,
    #[error("{} could have been written by another user, so it is not read", path.display())]
    Untrusted { path: PathBuf },
    #[error("it is {what}, not a regular file, so it is not read")]
    NotRegular { what: &'static str },
}

/// The most of a log's end that is read to find its last lines.
const TAIL_WINDOW: u64 = 8 * 1024 * 1024;
/// The most of a configuration file's start that is read.
const HEAD_WINDOW: u64 = 1024 * 1024;

pub async fn site_log(config: &Config, params: &Value) -> Result<Finished, Failed> {
    let Some(site_root) = config.site_root.clone() else {
        return Err(Failed::new("this machine has no site"));
    };
    let log = params["log"].as_str().unwrap_or_default().to_string();
    let lines = params.get("lines").and_then(Value::as_u64).unwrap_or(200) as usize;
    let relative = PathBuf::from("logs").join(format!("{log}.log"));
    let shown = site_root.join(&relative).display().to_string();
    let text = tokio::task::spawn_blocking(move || {
        let mut file = open_beneath(&site_root, &relative)?;
        Ok::<String, ReadError>(tail(&mut file, TAIL_WINDOW)?)
    })
    .await
    .map_err(|error| Failed::new(error.to_string()))?
    .map_err(|why| Failed::new(format!("{shown}: {why}")))?;
    let kept = crate::domain::output::last_lines(&text, lines);
    Ok(Finished {
        output: kept.join("\n"),
        result: json!({"log": log, "path": shown, "line_count": kept.len(), "lines": kept}),
        redaction: Redaction::Text,
    })
}

pub async fn file_head(params: &Value) -> Result<Finished, Failed> {
    let path = PathBuf::from(params["file"].as_str().unwrap_or_default());
    let lines = params.get("lines").and_then(Value::as_u64).unwrap_or(50) as usize;
    let shown = path.display().to_string();
    let text = tokio::task::spawn_blocking(move || {
        let mut file = open_trusted(&path)?;
        let mut bytes = Vec::new();
        file.by_ref().take(HEAD_WINDOW).read_to_end(&mut bytes)?;
        Ok::<String, ReadError>(String::from_utf8_lossy(&bytes).into_owned())
    })
    .await
    .map_err(|error| Failed::new(error.to_string()))?
    .map_err(|why| Failed::new(format!("{shown}: {why}")))?;
    let kept: Vec<&str> = text.lines().take(lines).collect();
    let name = Path::new(&shown)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Finished {
        output: kept.join("\n"),
        result: json!({"name": name, "path": shown, "line_count": kept.len(), "lines": kept}),
        redaction: Redaction::Config,
    })
}

/// Opens `relative` beneath `root`, one directory at a time, refusing any link on the way, and
/// requires a regular file with a single name (a hard link to another file is refused).
fn open_beneath(root: &Path, relative: &Path) -> Result<File, ReadError> {
    let mut directory = openat(
        CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(ReadError::NoRoot)?;
    let parts: Vec<_> = relative.components().collect();
    for (index, part) in parts.iter().enumerate() {
        let Component::Normal(name) = part else {
            return Err(ReadError::NotPlain);
        };
        let last = index + 1 == parts.len();
        let flags = if last {
            FINAL_OPEN
        } else {
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::DIRECTORY
        };
        directory = openat(&directory, *name, flags, Mode::empty()).map_err(|error| {
            if error == rustix::io::Errno::LOOP || error == rustix::io::Errno::NOTDIR {
                ReadError::Link {
                    name: name.to_string_lossy().into_owned(),
                }
            } else {
                error.into()
            }
        })?;
    }
    let file = regular_only(directory)?;
    let metadata = file.metadata()?;
    if metadata.nlink() > 1 {
        return Err(ReadError::HardLink);
    }
    Ok(file)
}

/// Whether a directory or file owned by `uid` with `mode` could only have been put there by
/// root or the agent.
fn trusted(uid: u32, mode: u32, is_link: bool) -> bool {
    (uid == 0 || uid == agent_uid()) && (is_link || mode & 0o022 == 0)
}

/// Opens a host file whose every directory and link on the way, before and after links are
/// resolved, belongs to root or the agent and is writable by nobody else.
fn open_trusted(path: &Path) -> Result<File, ReadError> {
    let check_prefixes = |path: &Path| -> Result<(), ReadError> {
        let mut prefix = PathBuf::new();
        for part in path.components() {
            prefix.push(part);
            let metadata = std::fs::symlink_metadata(&prefix)?;
            let is_link = metadata.file_type().is_symlink();
            if !trusted(metadata.uid(), metadata.mode() & 0o7777, is_link) {
                return Err(ReadError::Untrusted { path: prefix });
            }
        }
        Ok(())
    };
    check_prefixes(path)?;
    let resolved = std::fs::canonicalize(path)?;
    check_prefixes(&resolved)?;
    let opened = rustix::fs::open(resolved.as_path(), FINAL_OPEN, Mode::empty())?;
    regular_only(opened)
}

/// How the file a word reads is itself opened: never through a link, and without waiting, so
/// that a named pipe (or a device) answers the open at once and [`regular_only`] refuses it.
const FINAL_OPEN: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// The file opened with [`FINAL_OPEN`], when `fstat` says it is a regular file; anything else
/// is refused, naming what it is, before a byte is read.
fn regular_only(opened: OwnedFd) -> Result<File, ReadError> {
    let kind = FileType::from_raw_mode(fstat(&opened)?.st_mode);
    let what = match kind {
        FileType::RegularFile => {
            // Reads of a regular file never wait; the flag goes so they behave as usual.
            let flags = fcntl_getfl(&opened)?;
            fcntl_setfl(&opened, flags - OFlags::NONBLOCK)?;
            return Ok(File::from(opened));
        }
        FileType::Fifo => "a named pipe",
        FileType::Directory => "a directory",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "something else",
    };
    Err(ReadError::NotRegular { what })
}

/// The last `window` bytes of a file as text (from the first whole line when cut).
fn tail(file: &mut File, window: u64) -> std::io::Result<String> {
    let length = file.metadata()?.len();
    let start = length.saturating_sub(window);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(window).read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        if let Some(newline) = text.find('\n') {
            text.drain(..=newline);
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{mknodat, FileType};
    use std::{os::unix::fs::symlink, time::Duration};

    /// Not a speed claim: how long a test lets a word run before taking it for hung (the old
    /// code waited on a named pipe forever).
    const HANG_GUARD: Duration = Duration::from_secs(10);

    fn make_fifo(path: &Path) {
        mknodat(CWD, path, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
    }

    /// Runs a word that must not wait on the named pipe at `fifo`. Should it hang, a writer
    /// opens the pipe, so the blocked reader returns and the test fails instead of hanging.
    async fn without_hanging<T>(fifo: &Path, word: impl std::future::Future<Output = T>) -> T {
        match tokio::time::timeout(HANG_GUARD, word).await {
            Ok(ended) => ended,
            Err(_) => {
                let _writer = rustix::fs::open(
                    fifo,
                    OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                panic!("the word waited on the named pipe {}", fifo.display());
            }
        }
    }

    #[tokio::test]
    async fn a_named_pipe_as_the_site_log_is_refused_without_blocking() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir(site.path().join("logs")).unwrap();
        let fifo = site.path().join("logs/access.log");
        make_fifo(&fifo);
        let config = Config {
            site_root: Some(site.path().to_path_buf()),
            letsencrypt_dir: "/nonexistent".into(),
            postgres: "127.0.0.1:1".into(),
            ..Config::default()
        };
        let failed = without_hanging(&fifo, site_log(&config, &json!({"log": "access"})))
            .await
            .unwrap_err();
        assert!(
            failed.reason.contains("a named pipe, not a regular file"),
            "{}",
            failed.reason
        );
    }

    #[tokio::test]
    async fn a_named_pipe_as_a_host_file_is_refused_without_blocking() {
        // Every directory on the way must be the agent's and closed to others, as a host
        // file's are; the test binary's own directory is (a shared /tmp is not).
        let exe = std::env::current_exe().unwrap();
        let trusted = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        let fifo = trusted.path().join("hosts");
        make_fifo(&fifo);
        let failed = without_hanging(
            &fifo,
            file_head(&json!({"file": fifo.display().to_string()})),
        )
        .await
        .unwrap_err();
        assert!(
            failed.reason.contains("a named pipe, not a regular file"),
            "{}",
            failed.reason
        );
    }

    #[test]
    fn a_site_log_is_opened_beneath_the_site_root() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir(site.path().join("logs")).unwrap();
        std::fs::write(site.path().join("logs/access.log"), "one\ntwo\n").unwrap();
        let mut file = open_beneath(site.path(), Path::new("logs/access.log")).unwrap();
        assert_eq!(tail(&mut file, 1024).unwrap(), "one\ntwo\n");
    }

    #[test]
    fn a_link_planted_in_the_site_tree_is_not_followed() {
        let site = tempfile::tempdir().unwrap();
        let secret = site.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        std::fs::create_dir(site.path().join("logs")).unwrap();
        symlink(&secret, site.path().join("logs/access.log")).unwrap();
        let error = open_beneath(site.path(), Path::new("logs/access.log"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("is a link"), "{error}");
        // A linked directory on the way is refused too.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("error.log"), "x").unwrap();
        symlink(other.path(), site.path().join("elsewhere")).unwrap();
        let error = open_beneath(site.path(), Path::new("elsewhere/error.log"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("is a link"), "{error}");
    }

    #[test]
    fn a_hard_linked_log_is_refused() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir(site.path().join("logs")).unwrap();
        std::fs::write(site.path().join("other"), "x").unwrap();
        std::fs::hard_link(
            site.path().join("other"),
            site.path().join("logs/error.log"),
        )
        .unwrap();
        let error = open_beneath(site.path(), Path::new("logs/error.log"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than one name"), "{error}");
    }

    #[test]
    fn the_tail_of_a_long_log_starts_at_a_whole_line() {
        let site = tempfile::tempdir().unwrap();
        let path = site.path().join("log");
        std::fs::write(&path, "first line\nsecond\nthird\n").unwrap();
        let mut file = File::open(&path).unwrap();
        assert_eq!(tail(&mut file, 12).unwrap(), "third\n");
    }

    #[test]
    fn a_host_file_in_a_directory_others_can_write_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf");
        std::fs::write(&path, "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = open_trusted(&path).unwrap_err().to_string();
        assert!(
            error.contains("could have been written by another user"),
            "{error}"
        );
    }
}
