//! The keys `capstan all` makes for itself on its first run (issue 27 for backups, issue 29 for
//! provisioning). A new single-machine plane could not add a backup target or a cloud account
//! until its operator found `CAPSTAN__BACKUPS__SEAL_KEY_FILE` and
//! `CAPSTAN__PROVISIONING__SEAL_KEY_FILE`; now, with no seal key set, `capstan all` makes one for
//! each service and keeps it where `deploy/local/up` keeps the generated NATS password
//! ([`OwnSealKey::generated_seal_key_file`]: `backups-seal.key`, `provisioning-seal.key`), with
//! the same care: a file of its own, mode 0600, in a directory only its owner may enter. Later
//! runs read the same files, so what was sealed keeps opening. A key set by the operator is
//! used as it is, and the services run alone (`capstan backups`) never make one: their replicas
//! must share it.

use anyhow::{bail, Context as _};
use capstan_seal::OwnSealKey;
use capstan_settings::NatsSettings;
use std::{
    fs::{DirBuilder, OpenOptions},
    io::{ErrorKind, Write as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::Path,
};
use tracing::{info, warn};

/// Gives `section` (backups', provisioning's) the seal key `capstan all` keeps for it, making
/// it on the first run (beside the NATS password file `nats` names, unless its directory is
/// set). A directory this process may not write leaves that service without a key, as before
/// (its pages and the log say so); a key file anyone else could read or change stops the start.
pub fn ensure_seal_key<S: OwnSealKey>(section: &mut S, nats: &NatsSettings) -> anyhow::Result<()> {
    let Some(file) = section.generated_seal_key_file(nats) else {
        return Ok(());
    };
    let service = S::KEY;
    let text = match read_key(&file)? {
        Some(text) => text,
        None => match make_key(&file) {
            Ok(text) => {
                info!(service, file = %file.display(), "made the seal key (back it up with the database)");
                text
            }
            Err(error) => {
                let variable = format!("CAPSTAN__{}__SEAL_KEY", service.to_uppercase());
                warn!(service, file = %file.display(), error = format!("{error:#}"),
                    dir_setting = format!("{variable}_DIR"), file_setting = format!("{variable}_FILE"),
                    "cannot make the seal key: set its SEAL_KEY_DIR to a directory this user may write, or its SEAL_KEY_FILE");
                return Ok(());
            }
        },
    };
    section
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
            "{} is not a regular file: a seal key must be a file of its own",
            file.display()
        );
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        bail!(
            "{} (a seal key) may be read or changed by others than its owner: chmod 600 it",
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
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let draft = dir.join(format!(
        ".{name}.{}.{:08x}",
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

    use capstan_backups::settings::BackupsSettings;
    use capstan_provisioning::settings::ProvisioningSettings;
    use capstan_settings::Settings;

    /// Each service `capstan all` makes a key for, with its seal key's bytes (the settings'
    /// own `seal_key()`); every test runs for each.
    fn for_each_service(mut test: impl FnMut(&dyn Fn(&Path) -> Checked)) {
        test(&|dir| checked::<BackupsSettings>(dir, BackupsSettings::seal_key));
        test(&|dir| checked::<ProvisioningSettings>(dir, ProvisioningSettings::seal_key));
    }

    /// One run of [`ensure_seal_key`] for a service, with `CAPSTAN__<SERVICE>__SEAL_KEY_DIR`
    /// set to the directory (and any extra variables).
    struct Checked {
        name: String,
        run: Run,
    }

    /// [`ensure_seal_key`] run with `CAPSTAN__<SERVICE>__<KEY>` variables besides the
    /// directory, answering the key the section is left with.
    type Run = Box<dyn Fn(&[(&str, &str)]) -> anyhow::Result<Option<[u8; 32]>>>;

    fn checked<S: OwnSealKey + 'static>(
        dir: &Path,
        seal_key: fn(&S) -> Option<[u8; 32]>,
    ) -> Checked {
        let dir = dir.to_path_buf();
        Checked {
            name: S::generated_seal_key_name(),
            run: Box::new(move |extra| {
                let prefix = format!("CAPSTAN__{}__", S::KEY.to_uppercase());
                let mut environment =
                    vec![(format!("{prefix}SEAL_KEY_DIR"), dir.display().to_string())];
                for (key, value) in extra {
                    environment.push((format!("{prefix}{key}"), value.to_string()));
                }
                let (settings, mut section): (Settings, S) =
                    capstan_settings::load_from::<S>(None, environment)?;
                ensure_seal_key(&mut section, &settings.nats)?;
                Ok(seal_key(&section))
            }),
        }
    }

    #[test]
    fn each_service_has_a_file_of_its_own() {
        let mut names = Vec::new();
        for_each_service(|service| names.push(service(Path::new("/x")).name));
        assert_eq!(names, ["backups-seal.key", "provisioning-seal.key"]);
    }

    #[test]
    fn the_first_run_makes_a_0600_key_and_later_runs_read_the_same_one() {
        for_each_service(|service| {
            let scratch = tempfile::tempdir().unwrap();
            let dir = scratch.path().join("state");
            let service = service(&dir);
            let key = (service.run)(&[]).unwrap().expect("a key is set");
            let file = dir.join(&service.name);
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", service.name);
            let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(dir_mode, 0o700);
            assert_eq!((service.run)(&[]).unwrap(), Some(key), "the same key");
            let left: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            assert_eq!(left, [service.name.as_str()], "only its own file");
        });
    }

    #[test]
    fn the_two_services_keys_sit_side_by_side_and_differ() {
        let scratch = tempfile::tempdir().unwrap();
        let mut keys = Vec::new();
        for_each_service(|service| {
            keys.push((service(scratch.path()).run)(&[]).unwrap().unwrap());
        });
        assert_eq!(keys.len(), 2);
        assert_ne!(keys[0], keys[1], "each service has a key of its own");
        let mut left: Vec<_> = std::fs::read_dir(scratch.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["backups-seal.key", "provisioning-seal.key"]);
    }

    /// Two replicas of `capstan all` started together on one state directory: each must end
    /// with the one key, never read a file the other is still writing (seen in the replicas
    /// e2e: "does not hold a seal key").
    #[test]
    fn replicas_making_the_key_at_once_all_read_the_same_whole_key() {
        for name in ["backups-seal.key", "provisioning-seal.key"] {
            for _ in 0..20 {
                let scratch = tempfile::tempdir().unwrap();
                let file = scratch.path().join("state").join(name);
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
                assert_eq!(left, [name], "no draft is left behind");
            }
        }
    }

    #[test]
    fn a_key_file_others_may_read_stops_the_start_naming_it() {
        for_each_service(|service| {
            let scratch = tempfile::tempdir().unwrap();
            let service = service(scratch.path());
            let file = scratch.path().join(&service.name);
            std::fs::write(&file, "ab".repeat(32)).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let error = format!("{:#}", (service.run)(&[]).unwrap_err());
            assert!(
                error.contains(&service.name) && error.contains("chmod 600"),
                "{error}"
            );
        });
    }

    #[test]
    fn a_key_file_that_holds_no_key_stops_the_start_naming_it_and_the_setting() {
        for_each_service(|service| {
            let scratch = tempfile::tempdir().unwrap();
            let service = service(scratch.path());
            let file = scratch.path().join(&service.name);
            std::fs::write(&file, "half a ke").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            let error = format!("{:#}", (service.run)(&[]).unwrap_err());
            assert!(
                error.contains(&service.name) && error.contains("seal_key_dir"),
                "{error}"
            );
            assert!(!error.contains("half a ke"), "{error}");
        });
    }

    #[test]
    fn a_key_the_operator_set_is_used_and_no_file_is_made() {
        for_each_service(|service| {
            let scratch = tempfile::tempdir().unwrap();
            let service = service(scratch.path());
            let key = (service.run)(&[("SEAL_KEY", &"cd".repeat(32))]).unwrap();
            assert_eq!(key, Some([0xcd; 32]));
            assert!(!scratch.path().join(&service.name).exists());
        });
    }
}
