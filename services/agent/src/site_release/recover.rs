//! AG-34 for site releases: manifest recovery on the manifest clock. When the installed
//! release's signed manifest cannot be used (absent, unparseable, or not signed by a key this
//! agent trusts), the agent reads the installed version (where `current` points), asks the plane
//! for that release's manifest (`artifact` kind `release_manifest`), verifies it against its own
//! release keys and writes the pair into the release's directory. A manifest that does not
//! verify is refused and not asked for again until the offer changes (another release
//! installed, another key trusted). A manifest that loads is never replaced, whatever its files
//! say: a hash mismatch is evidence, not something to recover from. The rule is
//! `domain::release_files::recovery`.

use super::*;
use crate::domain::release_files::{recovery, Offer, Recovery};

/// What one recovery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// Nothing to do: the manifest is usable, no release is installed, or the offer was refused
    /// before.
    Nothing(Recovery),
    /// The plane's manifest verified and was written into `releases/<version>/`.
    Wrote { version: String },
    /// The plane's manifest did not verify: refused, and not asked for again until the offer
    /// changes.
    Refused { offer: Offer, why: String },
    /// The plane could not be asked, or the pair could not be written: tried again next tick.
    NotDone(String),
}

/// The trusted keys as an offer's key list.
fn offer_for(trusted: &[PublicKey]) -> impl FnOnce(&str) -> Offer + '_ {
    move |version: &str| {
        Offer::new(
            version,
            trusted.iter().map(|key| key.fingerprint().to_string()),
        )
    }
}

/// One manifest recovery (AG-34) of the site at `root`; `refused` is the offer refused before.
pub async fn recover(
    root: &Path,
    trusted: &[PublicKey],
    source: &impl ReleaseSource,
    refused: Option<&Offer>,
) -> Recovered {
    let version = current_version(root).map_err(|error| error.to_string());
    let release_dir = |version: &str| root.join(RELEASES_DIR).join(version);
    let loaded = match &version {
        Ok(Some(version)) => tree::open_root(&release_dir(version))
            .map_err(|error| {
                manifest::ManifestError::Unreadable(format!("releases/{version}: {error}"))
            })
            .and_then(|fd| tree::load_manifest(&fd, trusted))
            .map(|_| ()),
        _ => Ok(()),
    };
    let decision = recovery(
        version
            .as_ref()
            .map(Option::as_deref)
            .map_err(String::as_str),
        loaded.as_ref().map(|_| ()),
        offer_for(trusted),
        refused,
    );
    let (offer, why) = match decision {
        Recovery::Fetch { offer, why } => (offer, why),
        other => return Recovered::Nothing(other),
    };
    let version = offer.version.clone();
    info!(%version, %why, "the installed release's manifest cannot be used; asking the management node for it");
    let (manifest_bytes, signature_bytes) = match source.manifest(&version).await {
        Ok(pair) => pair,
        Err(why) => {
            warn!(%version, %why, "the release manifest could not be fetched; asked again at the next tick");
            return Recovered::NotDone(why.to_string());
        }
    };
    if let Err(error) = manifest::verify(&manifest_bytes, &signature_bytes, trusted) {
        let why = format!(
            "the management node's manifest of {version} does not verify against this agent's release keys: {error}"
        );
        warn!(%version, %why, "manifest refused; not asked for again until the offer changes");
        return Recovered::Refused { offer, why };
    }
    let dir = release_dir(&version);
    let written = tokio::task::spawn_blocking(move || -> Result<(), SiteError> {
        let fd = tree::open_root(&dir).map_err(SiteError::disk(format!(
            "{} cannot be opened",
            dir.display()
        )))?;
        tree::replace_file(&fd, MANIFEST_FILE, &manifest_bytes, 0o644, None)
            .and_then(|()| tree::replace_file(&fd, SIGNATURE_FILE, &signature_bytes, 0o644, None))
            .map_err(SiteError::disk("the recovered manifest cannot be written"))
    })
    .await
    .unwrap_or_else(|error| Err(SiteError::Stopped(error)));
    match written {
        Ok(()) => {
            info!(%version, "the release's signed manifest was recovered from the management node");
            Recovered::Wrote { version }
        }
        Err(why) => {
            warn!(%version, %why, "the recovered manifest could not be written; tried again at the next tick");
            Recovered::NotDone(why.to_string())
        }
    }
}

/// The manifest clock (AG-34, AG-37): every `every` (ten minutes unless configured), between
/// jobs, it recovers an unusable manifest of the installed release and settles its deployment
/// files. It remembers the offer it refused.
pub struct ManifestClock {
    every: Duration,
    next: Option<tokio::time::Instant>,
    refused: Option<Offer>,
}

impl ManifestClock {
    pub fn new(every: Duration) -> ManifestClock {
        ManifestClock {
            every,
            next: None,
            refused: None,
        }
    }

    /// One tick when due: recovery first (settling needs a usable manifest), then settling.
    pub async fn between_jobs(&mut self, state: &StateDir, plane: &Plane, key: &NodeKey) {
        let now = tokio::time::Instant::now();
        if self.next.is_some_and(|next| now < next) {
            return;
        }
        self.next = Some(now + self.every);
        let site = match state.site() {
            Ok(Some(site)) => site,
            Ok(None) => return,
            Err(why) => {
                warn!(%why, "the manifest clock cannot read site.json");
                return;
            }
        };
        let trusted = trusted_keys(state);
        let source = PlaneSource {
            plane,
            key,
            patient: false,
        };
        match recover(&site.root, &trusted, &source, self.refused.as_ref()).await {
            Recovered::Refused { offer, .. } => self.refused = Some(offer),
            Recovered::Wrote { .. } => self.refused = None,
            Recovered::Nothing(_) | Recovered::NotDone(_) => {}
        }
        let root = site.root.clone();
        let state_dir = state.path().to_path_buf();
        let settled =
            tokio::task::spawn_blocking(move || super::keep::settle(&root, &state_dir, &trusted))
                .await;
        match settled {
            Ok(settled) => {
                for line in settled.lines() {
                    info!("{line}");
                }
            }
            Err(error) => warn!(%error, "settling the deployment files stopped unexpectedly"),
        }
    }
}
