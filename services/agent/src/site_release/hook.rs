//! The deploy hook (RO-11, AG-33): its verified bytes written afresh where only root reaches,
//! run from the release directory with a fixed environment, stopped after
//! [`HOOK_TIMEOUT_SECS`], its output kept to the last [`MAX_HOOK_OUTPUT`] bytes.

use super::*;

/// How the deploy hook ran.
pub(super) struct HookRun {
    pub(super) exit_code: Option<i32>,
    pub(super) output: String,
}

/// Runs the verified hook bytes (never the file again by its path): written afresh into a
/// directory only root reaches, run from the release directory with a fixed environment,
/// stopped after [`HOOK_TIMEOUT_SECS`].
pub(super) async fn run_hook(
    state_dir: &Path,
    bytes: &[u8],
    root: &Path,
    version: &str,
    previous: Option<&str>,
) -> HookRun {
    let path = state_dir.join(format!("deploy-hook-{:016x}", rand::random::<u64>()));
    if let Err(error) = write_hook(&path, bytes) {
        let _ = fs::remove_file(&path);
        return HookRun {
            exit_code: None,
            output: format!("the deploy hook could not be put in place to run: {error}"),
        };
    }
    let ran = match hook_command(&path, root, version, previous).spawn() {
        Err(error) => HookRun {
            exit_code: None,
            output: format!("the deploy hook could not start: {error}"),
        },
        Ok(child) => wait_for_hook(child).await,
    };
    let _ = fs::remove_file(&path);
    ran
}

/// Writes the hook's verified bytes to a new file at `path`, executable by root alone.
fn write_hook(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.set_permissions(fs::Permissions::from_mode(0o700))?;
            file.sync_all()
        })
}

/// The hook at `path`, to run from the release directory with the fixed environment
/// (docs/site-releases.md names each variable).
fn hook_command(
    path: &Path,
    root: &Path,
    version: &str,
    previous: Option<&str>,
) -> tokio::process::Command {
    let release_dir = root.join(RELEASES_DIR).join(version);
    let mut command = tokio::process::Command::new(path);
    command
        .current_dir(&release_dir)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LANG", "C.UTF-8")
        .env("CAPSTAN_RELEASE_VERSION", version)
        .env("CAPSTAN_RELEASE_DIR", &release_dir)
        .env("CAPSTAN_SITE_ROOT", root)
        .env("CAPSTAN_SHARED_DIR", root.join(SHARED_DIR))
        .env("CAPSTAN_PREVIOUS_VERSION", previous.unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The hook's exit and the last [`MAX_HOOK_OUTPUT`] bytes of what it printed, or why it has
/// none: stopped after [`HOOK_TIMEOUT_SECS`], or not waited for.
async fn wait_for_hook(child: tokio::process::Child) -> HookRun {
    match tokio::time::timeout(
        Duration::from_secs(HOOK_TIMEOUT_SECS),
        child.wait_with_output(),
    )
    .await
    {
        Err(_) => HookRun {
            exit_code: None,
            output: format!(
                "the deploy hook ran longer than {HOOK_TIMEOUT_SECS} seconds and was stopped"
            ),
        },
        Ok(Err(error)) => HookRun {
            exit_code: None,
            output: format!("the deploy hook could not be waited for: {error}"),
        },
        Ok(Ok(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            if text.len() > MAX_HOOK_OUTPUT {
                let mut cut = text.len() - MAX_HOOK_OUTPUT;
                while !text.is_char_boundary(cut) {
                    cut += 1;
                }
                text = text[cut..].to_string();
            }
            HookRun {
                exit_code: output.status.code(),
                output: text,
            }
        }
    }
}
