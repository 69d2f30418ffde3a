//! The keys `capstan all` makes for itself on its first run (issue 27). A new single-machine
//! plane could not add a backup target until its operator found `CAPSTAN__BACKUPS__SEAL_KEY_FILE`;
//! now, with no seal key set, `capstan all` makes one and keeps it where `deploy/local/up` keeps
//! the generated NATS password (`BackupsSettings::generated_seal_key_file`), with the same care: a file
//! of its own, mode 0600, in a directory only its owner may enter. Later runs read the same file,
//! so the targets' sealed credentials keep opening. A key set by the operator is used as it is,
//! and the services run alone (`capstan backups`) never make one: their replicas must share it.

use anyhow::{bail, Context as _};
use capstan_backups::settings::BackupsSettings;
use capstan_settings::NatsSettings;
use std::{
    fs::{DirBuilder, OpenOptions},
    io::{ErrorKind, Write as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::Path,
};
use tracing::{info, warn};

/// Gives `backups` the seal key `capstan all` keeps, making it on the first run (beside the
/// NATS password file `nats` names, unless a directory is set). A directory
/// this process may not write leaves the plane without a key, as before (the Targets page and
/// the log say so); a key file anyone else could read or change stops the start.
pub fn ensure_seal_key(backups: &mut BackupsSettings, nats: &NatsSettings) -> anyhow::Result<()> {
    let Some(file) = backups.generated_seal_key_file(nats) else {
        return Ok(());
    };
    let text = match read_key(&file)? {
        Some(text) => text,
        None => match make_key(&file) {
            Ok(text) => {
                info!(file = %file.display(), "made the backups seal key (back it up with the database)");
                text
            }
            Err(error) => {
                warn!(file = %file.display(), error = format!("{error:#}"),
                    "cannot make the backups seal key: set CAPSTAN__BACKUPS__SEAL_KEY_DIR to a directory this user may write, or CAPSTAN__BACKUPS__SEAL_KEY_FILE");
                return Ok(());
            }
        },
    };
    backups
        .use_generated_key(file, &text)
        .map_err(anyhow::Error::from)
}

/// The key kept in `file`, `None` when there is none yet.
fn read_key(file: &Path) -> anyhow::Result<Option<String>> {
    let metadata = match std::fs::symlink_metadata(file) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", file.display())),
    };
    if !metadata.file_type().is_file() {
        bail!(
            "{} is not a regular file: the backups seal key must be a file of its own",
            file.display()
        );
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        bail!(
            "{} (the backups seal key) may be read or changed by others than its owner: chmod 600 it",
            file.display()
        );
    }
    std::fs::read_to_string(file)
        .map(Some)
        .with_context(|| format!("reading {}", file.display()))
}

/// Makes a new key in `file` (its directory made 0700 when missing); a key another process
/// made first is read instead. The key is written whole into a file of its own first, then
/// linked in under its name, which fails when the name exists: a replica starting beside
/// this one never reads a key file half written.
fn make_key(file: &Path) -> anyhow::Result<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("making {}", dir.display()))?;
    let key: [u8; 32] = rand::random();
    let text: String = key.iter().map(|byte| format!("{byte:02x}")).collect();
    let draft = dir.join(format!(
        ".backups-seal.key.{}.{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&draft)
        .and_then(|mut handle| {
            handle.write_all(format!("{text}\n").as_bytes())?;
            handle.sync_all()
        })
        .with_context(|| format!("writing {}", draft.display()));
    let linked = written.and_then(|()| match std::fs::hard_link(&draft, file) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error).with_context(|| format!("creating {}", file.display())),
    });
    let _ = std::fs::remove_file(&draft);
    if linked? {
        Ok(text)
    } else {
        read_key(file)?.context("the seal key file vanished")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use capstan_settings::Settings;

    fn settings_with_dir(dir: &Path) -> (Settings, BackupsSettings) {
        capstan_settings::load_from::<BackupsSettings>(
            None,
            [(
                "CAPSTAN__BACKUPS__SEAL_KEY_DIR".to_string(),
                dir.display().to_string(),
            )],
        )
        .unwrap()
    }

    #[test]
    fn the_first_run_makes_a_0600_key_and_later_runs_read_the_same_one() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("state");
        let (settings, mut first) = settings_with_dir(&dir);
        ensure_seal_key(&mut first, &settings.nats).unwrap();
        let file = dir.join("backups-seal.key");
        assert_eq!(first.seal_key_file.as_deref(), Some(file.as_path()));
        let key = first.seal_key().expect("a key is set");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let (settings, mut again) = settings_with_dir(&dir);
        ensure_seal_key(&mut again, &settings.nats).unwrap();
        assert_eq!(again.seal_key(), Some(key), "the same key");
    }

    /// Two replicas of `capstan all` started together on one state directory: each must end
    /// with the one key, never read a file the other is still writing (seen in the replicas
    /// e2e: "does not hold a seal key").
    #[test]
    fn replicas_making_the_key_at_once_all_read_the_same_whole_key() {
        for _ in 0..20 {
            let scratch = tempfile::tempdir().unwrap();
            let file = scratch.path().join("state").join("backups-seal.key");
            let keys: Vec<String> = std::thread::scope(|scope| {
                let makers: Vec<_> = (0..8)
                    .map(|_| scope.spawn(|| make_key(&file).unwrap()))
                    .collect();
                makers
                    .into_iter()
                    .map(|maker| maker.join().unwrap())
                    .collect()
            });
            assert!(keys.iter().all(|key| key.trim().len() == 64), "{keys:?}");
            assert!(
                keys.iter().all(|key| key.trim() == keys[0].trim()),
                "{keys:?}"
            );
            let left: Vec<_> = std::fs::read_dir(file.parent().unwrap())
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            assert_eq!(left, ["backups-seal.key"], "no draft is left behind");
        }
    }

    #[test]
    fn a_key_file_others_may_read_stops_the_start_naming_it() {
        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("backups-seal.key");
        std::fs::write(&file, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (settings, mut backups) = settings_with_dir(scratch.path());
        let error = format!(
            "{:#}",
            ensure_seal_key(&mut backups, &settings.nats).unwrap_err()
        );
        assert!(
            error.contains("backups-seal.key") && error.contains("chmod 600"),
            "{error}"
        );
        assert!(backups.seal_key().is_none());
    }

    #[test]
    fn a_key_the_operator_set_is_used_and_no_file_is_made() {
        let scratch = tempfile::tempdir().unwrap();
        let (settings, mut backups) = capstan_settings::load_from::<BackupsSettings>(
            None,
            [
                (
                    "CAPSTAN__BACKUPS__SEAL_KEY_DIR".to_string(),
                    scratch.path().display().to_string(),
                ),
                ("CAPSTAN__BACKUPS__SEAL_KEY".to_string(), "cd".repeat(32)),
            ],
        )
        .unwrap();
        ensure_seal_key(&mut backups, &settings.nats).unwrap();
        assert_eq!(backups.seal_key(), Some([0xcd; 32]));
        assert!(!scratch.path().join("backups-seal.key").exists());
    }
}
