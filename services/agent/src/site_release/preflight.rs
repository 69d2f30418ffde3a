//! `upgrade_preflight` (RO-19): each check pass or fail with a reason; nothing changed.

use super::*;

/// The sum of a manifest's file sizes.
fn release_size(manifest: &FileManifest) -> u64 {
    manifest.files.values().map(|entry| entry.size).sum()
}

/// `upgrade_preflight`: would an apply stop before it started? Each check passes or fails with a
/// reason, in the shape the plane's verdict reads (RO-19); nothing is changed.
pub async fn preflight(site: &Site, trusted: &[PublicKey]) -> Finished {
    let root = site.root.clone();
    let trusted = trusted.to_vec();
    let (checks, version) = tokio::task::spawn_blocking(move || preflight_checks(&root, &trusted))
        .await
        .unwrap_or_else(|error| {
            (
                vec![check(
                    "site",
                    false,
                    format!("the checks stopped unexpectedly: {error}"),
                )],
                None,
            )
        });
    let lines: Vec<String> = checks
        .iter()
        .map(|check| {
            format!(
                "{}: {} ({})",
                check["name"].as_str().unwrap_or_default(),
                if check["pass"] == Value::Bool(true) {
                    "pass"
                } else {
                    "fail"
                },
                check["reason"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Finished {
        output: lines.join("\n"),
        result: json!({"checks": checks, "version": version}),
        redaction: Redaction::Text,
    }
}

fn preflight_checks(root: &Path, trusted: &[PublicKey]) -> (Vec<Value>, Option<String>) {
    let mut checks = Vec::new();
    if !root.is_dir() {
        checks.push(check(
            "site",
            false,
            format!("the site root {} is not a directory", root.display()),
        ));
        return (checks, None);
    }
    checks.push(check(
        "site",
        true,
        format!("the site root {} is there", root.display()),
    ));
    checks.push(lock_check(root));
    let (version, version_check) = match current_version(root) {
        Ok(Some(version)) => (
            Some(version.clone()),
            check("version", true, format!("{version} is current")),
        ),
        Ok(None) => (None, check("version", true, "no release is installed yet")),
        Err(why) => (None, check("version", false, why.to_string())),
    };
    let size = match &version {
        None => {
            checks.push(check(
                "manifest",
                true,
                "no release is installed yet, so there is no manifest to check",
            ));
            checks.push(check("files", true, "no release is installed yet"));
            0
        }
        Some(version) => installed_checks(root, trusted, version, &mut checks),
    };
    checks.push(room_check(root, size));
    checks.push(version_check);
    (checks, version)
}

/// The site lock, read from /proc/locks and never taken (AG-39).
fn lock_check(root: &Path) -> Value {
    match super::keep::site_lock_held(root) {
        Err(why) => check("lock", false, why.to_string()),
        Ok(true) => check(
            "lock",
            false,
            "the site lock is held: another deploy is running",
        ),
        Ok(false) => check("lock", true, "no one holds the site lock"),
    }
}

/// The installed release's manifest and files, checked into `checks`; the release's size in
/// bytes (0 when its manifest cannot be used).
fn installed_checks(
    root: &Path,
    trusted: &[PublicKey],
    version: &str,
    checks: &mut Vec<Value>,
) -> u64 {
    let release_dir = root.join(RELEASES_DIR).join(version);
    match tree::open_root(&release_dir)
        .map_err(|error| {
            manifest::ManifestError::Unreadable(format!("releases/{version}: {error}"))
        })
        .and_then(|fd| tree::load_manifest(&fd, trusted).map(|manifest| (fd, manifest)))
    {
        Err(error) => {
            checks.push(check(
                "manifest",
                false,
                format!("the manifest of {version} cannot be used: {error}"),
            ));
            checks.push(check(
                "files",
                false,
                "the files cannot be judged without a usable manifest",
            ));
            0
        }
        Ok((fd, manifest)) => {
            checks.push(check(
                "manifest",
                true,
                format!("the manifest of {version} verifies"),
            ));
            checks.push(files_check(&fd, &manifest, version));
            release_size(&manifest)
        }
    }
}

/// Whether every file of the installed release still matches its signed manifest.
fn files_check(fd: &std::os::fd::OwnedFd, manifest: &FileManifest, version: &str) -> Value {
    let paths: Vec<&str> = manifest.files.keys().map(String::as_str).collect();
    match tree::observe_listed(fd, paths) {
        Err(error) => check(
            "files",
            false,
            format!("the files of {version} cannot be read: {error}"),
        ),
        Ok(seen) => {
            let differences = manifest.compare(&seen, false, &[]);
            if differences.is_empty() {
                check(
                    "files",
                    true,
                    format!("every file of {version} matches its manifest"),
                )
            } else {
                check(
                    "files",
                    false,
                    format!(
                        "these files no longer match the signed release: {}",
                        differences
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            }
        }
    }
}

/// Whether the site's file system has the room staging a release of `size` bytes needs.
fn room_check(root: &Path, size: u64) -> Value {
    let needed = room_needed(size);
    match crate::words::filesystem_space(root) {
        Err(why) => check(
            "room",
            false,
            format!("the free space cannot be read: {why}"),
        ),
        Ok((_, available)) if available >= needed => check(
            "room",
            true,
            format!("{available} bytes free, {needed} needed to stage"),
        ),
        Ok((_, available)) => check(
            "room",
            false,
            format!("only {available} bytes free; staging needs {needed}"),
        ),
    }
}
