//! `capstan release`: run where the release signing key lives, never on the plane (issue 15).
//!
//! * `keygen --out FILE` makes a signing key (the secret, base64, mode 0600) and prints its
//!   public half, which agents are built with (`CAPSTAN_RELEASE_KEY`).
//! * `sign` writes a release directory: `release.json` (the signed metadata) and a copy of
//!   each artifact under the name the metadata gives it. The same inputs give byte-identical
//!   files (RO-05): Ed25519 is deterministic and the metadata canonical.
//! * `upload` sends a release directory to the plane (`POST /api/v1/releases`, level 10):
//!   signing can happen on a machine that never talks to the plane. A `RELEASE_STATEMENT`
//!   beside the metadata (the public log's proof, AG-27) goes with it; uploading the same
//!   directory again once the statement is there adds it to the release.
//! * `publish` is `sign` then `upload`.
//! * `site` (issue 16) makes a site release from a site directory: a deterministic tar of its
//!   files (same files, same bytes) and its signed file manifest (`RELEASE_MANIFEST` and
//!   `RELEASE_MANIFEST.sig`), written to `--out` and, with `--plane`, uploaded
//!   (`POST /api/v1/site-releases`, level 10). `docs/site-releases.md` says what a release holds.

use std::{
    collections::BTreeMap,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use anyhow::{bail, ensure, Context as _};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_gateway::domains::rollouts::releases_api::{ReleaseBody, SiteReleaseBody};
use capstan_signing::{
    manifest::{write_archive, FileManifest},
    release::{Artifact, Release, SignedRelease, SupportBundle, ARCHES},
    tree, NodeKey, PublicKey,
};
use clap::{Args, Subcommand};

/// The metadata's file name in a release directory.
pub const METADATA_FILE: &str = "release.json";

#[derive(Subcommand)]
pub enum ReleaseCommand {
    /// Make a release signing key: the secret goes to FILE (mode 0600, never to the plane),
    /// the public half is printed for building agents (CAPSTAN_RELEASE_KEY).
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
    /// Sign a release into a directory (release.json and the artifacts), to upload later,
    /// from here or from another machine.
    Sign {
        #[command(flatten)]
        release: SignArgs,
        /// The directory to write (created if absent).
        #[arg(long)]
        out: PathBuf,
    },
    /// Upload a signed release directory to the plane (needs a level 10 token).
    Upload {
        #[arg(long)]
        dir: PathBuf,
        #[command(flatten)]
        plane: PlaneArgs,
    },
    /// Sign, then upload.
    Publish {
        #[command(flatten)]
        release: SignArgs,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        plane: PlaneArgs,
    },
    /// Make a site release from a site directory (a deterministic tar and its signed
    /// manifest) into --out, and with --plane upload it (needs a level 10 token).
    Site(SiteArgs),
}

#[derive(Args)]
pub struct SiteArgs {
    /// The signing key file `keygen` wrote (must not be readable by group or others).
    #[arg(long)]
    key: PathBuf,
    /// The release's version (a digit first; letters, digits, . + -; at most 32).
    #[arg(long)]
    version: String,
    /// The site directory: every regular file in it is the release (a link is refused).
    #[arg(long)]
    dir: PathBuf,
    /// Where RELEASE_MANIFEST, RELEASE_MANIFEST.sig and site-<version>.tar are written.
    #[arg(long)]
    out: PathBuf,
    /// The plane to upload to, e.g. https://plane.example.com (none: only write --out).
    #[arg(long)]
    plane: Option<String>,
    /// A file holding a level 10 API token (else CAPSTAN_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Start the deploy to every node once published (RO-23).
    #[arg(long)]
    deploy_all: bool,
}

#[derive(Args)]
pub struct SignArgs {
    /// The signing key file `keygen` wrote (must not be readable by group or others).
    #[arg(long)]
    key: PathBuf,
    /// The version the binaries answer `--version` with.
    #[arg(long)]
    version: String,
    /// Higher than every release before it (agents refuse a lower one).
    #[arg(long)]
    sequence: u64,
    /// When agents stop accepting this metadata, RFC 3339 (e.g. 2027-01-31T00:00:00Z). Given,
    /// not computed from the clock, so signing again gives the same bytes.
    #[arg(long)]
    expires_at: chrono::DateTime<chrono::Utc>,
    /// A binary: ARCH=PATH (linux-amd64 or linux-arm64); repeat for each.
    #[arg(long = "binary", value_parser = parse_binary, required = true)]
    binaries: Vec<(String, PathBuf)>,
    /// A directory whose files are the support bundle (AG-32): every regular file in it is
    /// listed in the signed manifest (path, size, sha256, mode) and packed into the bundle's
    /// archive with that manifest as RELEASE_MANIFEST and its RELEASE_MANIFEST.sig. A link or
    /// any other kind of file in it is refused.
    #[arg(long)]
    support_bundle_dir: Option<PathBuf>,
    /// The key that will sign the next releases (standard base64 public key), vouched for by
    /// this release's signature.
    #[arg(long)]
    next_key: Option<String>,
}

#[derive(Args)]
pub struct PlaneArgs {
    /// The plane's address, e.g. https://plane.example.com.
    #[arg(long)]
    plane: String,
    /// A file holding a level 10 API token (else CAPSTAN_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

fn parse_binary(text: &str) -> Result<(String, PathBuf), String> {
    let (arch, path) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not ARCH=PATH"))?;
    if !ARCHES.contains(&arch) {
        return Err(format!("{arch:?} is not one of {}", ARCHES.join(", ")));
    }
    Ok((arch.to_string(), PathBuf::from(path)))
}

pub async fn run(command: ReleaseCommand) -> anyhow::Result<()> {
    match command {
        ReleaseCommand::Keygen { out } => keygen(&out),
        ReleaseCommand::Sign { release, out } => sign(&release, &out).map(|_| ()),
        ReleaseCommand::Upload { dir, plane } => upload(&dir, &plane).await,
        ReleaseCommand::Publish {
            release,
            out,
            plane,
        } => {
            sign(&release, &out)?;
            upload(&out, &plane).await
        }
        ReleaseCommand::Site(args) => site(&args).await,
    }
}

/// A site release: the manifest file, its signature file and the archive of the files.
pub struct SiteRelease {
    pub manifest: Vec<u8>,
    pub signatures: Vec<u8>,
    pub archive: Vec<u8>,
}

/// The site release of `dir`, signed by `key`. Modes are normalised to 0755 (any execute bit)
/// or 0644 and the tar is written sorted, owned by root, at the epoch, so the same files give
/// the same bytes wherever they are signed.
pub fn site_release(dir: &Path, key: &NodeKey) -> anyhow::Result<SiteRelease> {
    let contents = regular_files(dir, "a site release")?;
    let files = || {
        contents
            .iter()
            .map(|(path, mode, bytes)| (path.as_str(), *mode, bytes.as_slice()))
    };
    let manifest = FileManifest::describe(files())
        .map_err(|error| anyhow::anyhow!("the site release in {}: {error}", dir.display()))?;
    manifest
        .check_shape()
        .map_err(|error| anyhow::anyhow!("the site release in {}: {error}", dir.display()))?;
    Ok(SiteRelease {
        manifest: manifest.to_bytes(),
        signatures: manifest.sign(key),
        archive: write_archive(files()),
    })
}

/// The upload's body for a site release.
pub fn site_body(
    version: &str,
    release: &SiteRelease,
    deploy_all: bool,
) -> anyhow::Result<SiteReleaseBody> {
    Ok(SiteReleaseBody {
        version: version.to_string(),
        manifest: String::from_utf8(release.manifest.clone())
            .context("the manifest is not UTF-8")?,
        signatures: String::from_utf8(release.signatures.clone())
            .context("the signature file is not UTF-8")?,
        archive: STANDARD.encode(&release.archive),
        deploy_all,
    })
}

async fn site(args: &SiteArgs) -> anyhow::Result<()> {
    let key = read_key(&args.key)?;
    let release = site_release(&args.dir, &key)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    use capstan_signing::manifest::{MANIFEST_FILE, SIGNATURE_FILE};
    let archive_name = format!("site-{}.tar", args.version);
    for (name, bytes) in [
        (MANIFEST_FILE, &release.manifest),
        (SIGNATURE_FILE, &release.signatures),
        (archive_name.as_str(), &release.archive),
    ] {
        let path = args.out.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "site release {} written to {} (archive sha256 {})",
        args.version,
        args.out.display(),
        capstan_signing::release::sha256_hex(&release.archive)
    );
    let Some(plane) = &args.plane else {
        return Ok(());
    };
    let plane = PlaneArgs {
        plane: plane.clone(),
        token_file: args.token_file.clone(),
    };
    let body = serde_json::to_vec(&site_body(&args.version, &release, args.deploy_all)?)?;
    let token = token(&plane)?;
    let url = format!("{}/api/v1/site-releases", plane.plane.trim_end_matches('/'));
    let (status, answer) = crate::http::post_json(&url, &token, body).await?;
    let text = String::from_utf8_lossy(&answer);
    if !(200..300).contains(&status) {
        bail!("the plane refused the site release ({status}): {text}");
    }
    println!("published: {text}");
    Ok(())
}

/// Every regular file under `dir` (path, normalised mode, bytes); a link or any other kind of
/// file, or a file named like the manifest, is refused naming it.
fn regular_files(dir: &Path, what: &str) -> anyhow::Result<Vec<(String, u32, Vec<u8>)>> {
    use capstan_signing::manifest::{Seen, MANIFEST_FILE, SIGNATURE_FILE};
    let root = tree::open_root(dir).with_context(|| format!("opening {}", dir.display()))?;
    let seen = tree::observe(&root).with_context(|| format!("reading {}", dir.display()))?;
    let mut contents = Vec::new();
    for (path, found) in &seen {
        ensure!(
            matches!(found, Seen::File { .. }),
            "{}/{path} is not a regular file: {what} holds only files",
            dir.display()
        );
        ensure!(
            path != MANIFEST_FILE && path != SIGNATURE_FILE,
            "{}/{path}: the manifest is written by `capstan release`, not taken from the directory",
            dir.display()
        );
        let Some(tree::Found::File(bytes, mode)) = tree::read_file(&root, path)? else {
            bail!("{}/{path} changed while it was read", dir.display());
        };
        let mode = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
        contents.push((path.clone(), mode, bytes));
    }
    ensure!(!contents.is_empty(), "{} holds no files", dir.display());
    Ok(contents)
}

fn keygen(out: &Path) -> anyhow::Result<()> {
    let key = NodeKey::generate();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| {
            format!(
                "creating {} (an existing key is never overwritten)",
                out.display()
            )
        })?;
    use std::io::Write as _;
    writeln!(file, "{}", STANDARD.encode(key.secret_bytes()))?;
    file.sync_all()?;
    println!("public key: {}", key.public_key().to_base64());
    println!("fingerprint: {}", key.public_key().fingerprint());
    Ok(())
}

/// Reads the signing key, refusing a file others could read.
pub fn read_key(path: &Path) -> anyhow::Result<NodeKey> {
    let metadata = std::fs::metadata(path)
        .with_context(|| format!("reading the signing key {}", path.display()))?;
    ensure!(
        metadata.permissions().mode() & 0o077 == 0,
        "{} has mode {:o}: a signing key must be readable by its owner only (chmod 600)",
        path.display(),
        metadata.permissions().mode() & 0o777
    );
    ensure!(
        metadata.uid() == rustix::process::geteuid().as_raw(),
        "{} belongs to another user",
        path.display()
    );
    let text = std::fs::read_to_string(path)?;
    let secret = STANDARD
        .decode(text.trim())
        .context("the signing key file is not base64")?;
    NodeKey::from_secret_bytes(&secret).map_err(|error| anyhow::anyhow!("the signing key: {error}"))
}

fn artifact_name(version: &str, arch: &str) -> String {
    format!("capstan-agent-{version}-{arch}")
}

/// Signs the release into `out`; returns the metadata document.
pub fn sign(args: &SignArgs, out: &Path) -> anyhow::Result<SignedRelease> {
    let key = read_key(&args.key)?;
    if let Some(next) = &args.next_key {
        PublicKey::from_base64(next).map_err(|error| anyhow::anyhow!("--next-key: {error}"))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut binaries = BTreeMap::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (arch, path) in &args.binaries {
        ensure!(!binaries.contains_key(arch), "--binary names {arch} twice");
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = artifact_name(&args.version, arch);
        binaries.insert(arch.clone(), Artifact::describe(&name, &bytes, &key));
        files.push((name, bytes));
    }
    let support_bundle = match &args.support_bundle_dir {
        Some(dir) => {
            let (manifest, archive) = bundle(dir, &key)?;
            let name = format!("support_bundle-{}.tar", args.version);
            let described = Artifact::describe(&name, &archive, &key);
            files.push((name, archive));
            Some(SupportBundle {
                archive: described,
                manifest,
            })
        }
        None => None,
    };
    let document = Release {
        version: args.version.clone(),
        sequence: args.sequence,
        expires_at: args.expires_at.timestamp(),
        binaries,
        support_bundle,
        next_key: args.next_key.clone(),
    }
    .sign(&key)
    .map_err(|error| anyhow::anyhow!("{error}"))?;
    for (name, bytes) in &files {
        std::fs::write(out.join(name), bytes)?;
    }
    std::fs::write(out.join(METADATA_FILE), document.to_bytes())?;
    println!(
        "signed {} (sequence {}) by {} into {}",
        args.version,
        args.sequence,
        key.public_key().fingerprint(),
        out.display()
    );
    Ok(document)
}

/// The support bundle of `dir`: its manifest, and the archive of its files with the signed
/// manifest beside them. Modes are normalised to 0755 (any execute bit) or 0644, so the same
/// files give the same bytes wherever they are signed (RO-05).
pub fn bundle(dir: &Path, key: &NodeKey) -> anyhow::Result<(FileManifest, Vec<u8>)> {
    use capstan_signing::manifest::{MANIFEST_FILE, SIGNATURE_FILE};
    let contents = regular_files(dir, "a support bundle")?;
    let manifest = FileManifest::describe(
        contents
            .iter()
            .map(|(path, mode, bytes)| (path.as_str(), *mode, bytes.as_slice())),
    )
    .map_err(|error| anyhow::anyhow!("the support bundle in {}: {error}", dir.display()))?;
    let manifest_bytes = manifest.to_bytes();
    let signature = manifest.sign(key);
    let archive = write_archive(
        contents
            .iter()
            .map(|(path, mode, bytes)| (path.as_str(), *mode, bytes.as_slice()))
            .chain([
                (MANIFEST_FILE, 0o644, manifest_bytes.as_slice()),
                (SIGNATURE_FILE, 0o644, signature.as_slice()),
            ]),
    );
    Ok((manifest, archive))
}

fn token(plane: &PlaneArgs) -> anyhow::Result<String> {
    let token = match &plane.token_file {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => std::env::var("CAPSTAN_TOKEN")
            .context("give --token-file or set CAPSTAN_TOKEN to a level 10 API token")?,
    };
    Ok(token.trim().to_string())
}

/// The upload's body, read from a release directory: the metadata as signed, and each
/// artifact it names, checked against the metadata before anything is sent.
pub fn upload_body(dir: &Path) -> anyhow::Result<ReleaseBody> {
    let metadata = std::fs::read(dir.join(METADATA_FILE))
        .with_context(|| format!("reading {}", dir.join(METADATA_FILE).display()))?;
    let document = SignedRelease::parse(&metadata).map_err(|error| anyhow::anyhow!("{error}"))?;
    let read = |artifact: &Artifact| -> anyhow::Result<String> {
        let path = dir.join(&artifact.filename);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let sha256 = capstan_signing::release::sha256_hex(&bytes);
        if sha256 != artifact.sha256 {
            bail!(
                "{} has sha256 {sha256}, the metadata says {}",
                path.display(),
                artifact.sha256
            );
        }
        Ok(STANDARD.encode(bytes))
    };
    let mut binaries = BTreeMap::new();
    for (arch, artifact) in &document.signed.binaries {
        binaries.insert(arch.clone(), read(artifact)?);
    }
    let support_bundle = match &document.signed.support_bundle {
        Some(bundle) => Some(read(&bundle.archive)?),
        None => None,
    };
    // The release's statement for the public log, once the log's tooling has written it
    // beside the release (RO-07: it may come after a first upload; uploading again adds it).
    let statement_path = dir.join(capstan_signing::statement::STATEMENT_FILE);
    let statement = match std::fs::read(&statement_path) {
        Ok(bytes) => {
            let claimed = capstan_signing::statement::claimed(&bytes)
                .map_err(|error| anyhow::anyhow!("{}: {error}", statement_path.display()))?;
            ensure!(
                claimed.version == document.signed.version,
                "{} is for version {}, the metadata is {}",
                statement_path.display(),
                claimed.version,
                document.signed.version
            );
            Some(String::from_utf8(bytes).context("the release statement is not UTF-8")?)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", statement_path.display()))
        }
    };
    Ok(ReleaseBody {
        metadata: String::from_utf8(metadata).context("the metadata is not UTF-8")?,
        binaries,
        support_bundle,
        statement,
    })
}

async fn upload(dir: &Path, plane: &PlaneArgs) -> anyhow::Result<()> {
    let body = serde_json::to_vec(&upload_body(dir)?)?;
    let token = token(plane)?;
    let base = plane.plane.trim_end_matches('/');
    let url = format!("{base}/api/v1/releases");
    let (status, answer) = crate::http::post_json(&url, &token, body).await?;
    let text = String::from_utf8_lossy(&answer);
    if !(200..300).contains(&status) {
        bail!("the plane refused the release ({status}): {text}");
    }
    println!("published: {text}");
    Ok(())
}

#[cfg(test)]
mod site_tests {
    use super::*;

    fn site(dir: &Path) {
        std::fs::create_dir_all(dir.join("public/css")).unwrap();
        std::fs::create_dir_all(dir.join("deploy")).unwrap();
        std::fs::write(dir.join("public/index.html"), "<p>hi</p>").unwrap();
        std::fs::write(dir.join("public/css/site.css"), "body{}").unwrap();
        std::fs::write(dir.join("deploy/hook"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(
            dir.join("deploy/hook"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
    }

    #[test]
    fn the_same_site_directory_gives_the_same_release_bytes_and_a_manifest_that_verifies() {
        let key = NodeKey::from_secret_bytes(&[4; 32]).unwrap();
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        site(one.path());
        site(two.path());
        // Another mode and time on one copy changes nothing but what the manifest normalises.
        std::fs::set_permissions(
            two.path().join("public/index.html"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let first = site_release(one.path(), &key).unwrap();
        let second = site_release(two.path(), &key).unwrap();
        assert_eq!(first.archive, second.archive);
        assert_eq!(first.manifest, second.manifest);
        assert_eq!(first.signatures, second.signatures);
        let (manifest, _) = capstan_signing::manifest::verify(
            &first.manifest,
            &first.signatures,
            &[key.public_key()],
        )
        .unwrap();
        assert_eq!(manifest.files["deploy/hook"].mode, 0o755);
        assert_eq!(manifest.files["public/index.html"].mode, 0o644);
        capstan_signing::manifest::read_archive(&first.archive, &manifest, &[]).unwrap();
    }

    #[test]
    fn a_site_directory_with_a_link_or_a_manifest_of_its_own_is_refused_naming_it() {
        let key = NodeKey::from_secret_bytes(&[4; 32]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        site(dir.path());
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("public/passwd")).unwrap();
        let error = site_release(dir.path(), &key).err().unwrap().to_string();
        assert!(error.contains("public/passwd"), "{error}");
        std::fs::remove_file(dir.path().join("public/passwd")).unwrap();
        std::fs::write(dir.path().join("RELEASE_MANIFEST"), "{}").unwrap();
        let error = site_release(dir.path(), &key).err().unwrap().to_string();
        assert!(error.contains("RELEASE_MANIFEST"), "{error}");
    }
}
