//! The backup words against a real site (a PostgreSQL database with rows and a directory of
//! files), real age (the crate on the node, Debian's `age` by hand) and an object store the
//! test runs: a small HTTP server that stores PUT bodies as files, refuses a second write of a
//! key (`If-None-Match: *`, BK-14) and serves GETs. The broker here is the test's: it hands out
//! URLs of that store, as the plane's broker hands out presigned ones.

use capstan_agent::{
    backups::{
        self, keys,
        transfer::{Broker, BrokerError},
        Backups,
    },
    domain::backup::Manifest,
    plane::{Objects, SignedUrl, UrlOp},
    state::{StateDir, SITE},
};
use capstan_e2e::s3::S3Server;
use capstan_signing::NodeKey;
use serde_json::{json, Value};
use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpListener,
};

/// Where the test's backups go: a plain HTTP store of the test's own, or a real S3 server
/// (s3s-fs, which checks every SigV4 signature) with URLs presigned by rusty-s3, as the
/// plane's broker presigns them.
// One of these per test: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Storage {
    Local {
        dir: tempfile::TempDir,
        port: u16,
    },
    S3 {
        server: S3Server,
        bucket: rusty_s3::Bucket,
        credentials: rusty_s3::Credentials,
    },
}

/// The object key the plane uses: `{folder}/{space}/node-{id}/{seq:010}/{name}`.
fn object_key(key: &str) -> String {
    let (seq, name) = key.split_once('/').unwrap();
    format!(
        "backups/1/node-7/{:010}/{name}",
        seq.parse::<u64>().unwrap()
    )
}

impl Storage {
    /// The file the store keeps the object of broker key `key` (`<seq>/<name>`) in.
    fn object_path(&self, key: &str) -> PathBuf {
        match self {
            Storage::Local { dir, .. } => dir.path().join(key),
            Storage::S3 { server, .. } => server.root.path().join(S3_BUCKET).join(object_key(key)),
        }
    }

    fn url(&self, op: UrlOp, key: &str) -> SignedUrl {
        let (url, headers) = match self {
            Storage::Local { port, .. } => (format!("http://127.0.0.1:{port}/{key}"), vec![]),
            Storage::S3 {
                bucket,
                credentials,
                ..
            } => {
                use rusty_s3::S3Action as _;
                let object = object_key(key);
                let expires = std::time::Duration::from_secs(600);
                match op {
                    UrlOp::Put => {
                        let mut action = bucket.put_object(Some(credentials), &object);
                        action.headers_mut().insert("if-none-match", "*");
                        (action.sign(expires).to_string(), vec![])
                    }
                    UrlOp::Get => (
                        bucket
                            .get_object(Some(credentials), &object)
                            .sign(expires)
                            .to_string(),
                        vec![],
                    ),
                }
            }
        };
        let mut headers: Vec<(String, String)> = headers;
        if op == UrlOp::Put {
            headers.push(("if-none-match".into(), "*".into()));
        }
        SignedUrl {
            key: key.to_string(),
            method: if op == UrlOp::Put { "PUT" } else { "GET" }.into(),
            url,
            headers,
        }
    }

    /// How many objects the store holds.
    fn objects(&self) -> usize {
        fn count(dir: &Path) -> usize {
            std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|entry| {
                            if entry.path().is_dir() {
                                count(&entry.path())
                            } else {
                                1
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        match self {
            Storage::Local { dir, .. } => count(dir.path()),
            Storage::S3 { server, .. } => count(&server.root.path().join(S3_BUCKET)),
        }
    }
}

struct TestBroker<'a> {
    storage: &'a Storage,
}

impl Broker for TestBroker<'_> {
    async fn urls(&self, op: UrlOp, keys: &[String]) -> Result<Vec<SignedUrl>, BrokerError> {
        Ok(keys.iter().map(|key| self.storage.url(op, key)).collect())
    }
}

/// The test's plain object store: keys are files under a directory; a second PUT of a key
/// with `If-None-Match: *` is refused (412), as a conditional write to S3 is.
async fn local_store() -> Storage {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let root = dir.path().to_path_buf();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let root = root.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut reader = BufReader::new(read);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or_default().to_string();
                    let path = parts.next().unwrap_or_default().to_string();
                    let mut length = 0usize;
                    let mut conditional = false;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).await.unwrap();
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap(),
                            "if-none-match" => conditional = value.trim() == "*",
                            _ => {}
                        }
                    }
                    let mut body = vec![0u8; length];
                    reader.read_exact(&mut body).await.unwrap();
                    let file = root.join(path.trim_start_matches('/'));
                    let (status, answer) = match method.as_str() {
                        "PUT" if file.exists() && conditional => {
                            ("412 Precondition Failed", Vec::new())
                        }
                        "PUT" => {
                            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                            std::fs::write(&file, &body).unwrap();
                            ("200 OK", Vec::new())
                        }
                        "GET" => match std::fs::read(&file) {
                            Ok(bytes) => ("200 OK", bytes),
                            Err(_) => ("404 Not Found", Vec::new()),
                        },
                        _ => ("405 Method Not Allowed", Vec::new()),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n",
                        answer.len()
                    );
                    if write.write_all(head.as_bytes()).await.is_err()
                        || write.write_all(&answer).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Storage::Local { dir, port }
}

const S3_BUCKET: &str = capstan_e2e::s3::BUCKET;

/// A real S3 server that checks signatures (s3s-fs, `ensure_s3_server`), started by the
/// workspace's test support.
async fn s3_store() -> Storage {
    let server = S3Server::start().await;
    let endpoint: url::Url = server.endpoint().parse().unwrap();
    let bucket = rusty_s3::Bucket::new(
        endpoint,
        rusty_s3::UrlStyle::Path,
        S3_BUCKET,
        server.region.clone(),
    )
    .unwrap();
    let credentials =
        rusty_s3::Credentials::new(server.access_key.clone(), server.secret_key.clone());
    Storage::S3 {
        server,
        bucket,
        credentials,
    }
}

fn database_url() -> String {
    std::env::var("CAPSTAN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1/postgres".into())
}

fn psql(dbname: &str, sql: &str) -> String {
    let base = url::Url::parse(&database_url()).unwrap();
    let mut url = base.clone();
    url.set_path(dbname);
    let output = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url.as_str(),
            "-c",
            sql,
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn db_url(dbname: &str) -> String {
    let mut url = url::Url::parse(&database_url()).unwrap();
    url.set_path(dbname);
    url.to_string()
}

/// A site: a database with two tables and rows, and a directory of files.
struct Site {
    _parent: tempfile::TempDir,
    root: PathBuf,
    dbname: String,
    state: StateDir,
    key: NodeKey,
    owner: age::x25519::Identity,
    owner_file: PathBuf,
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            psql(
                "postgres",
                &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.dbname),
            )
        });
    }
}

/// The tables `fill_realistic` adds beside `customers` and `orders`, and the rows of each.
const BULK_TABLES: u64 = 18;
const BULK_ROWS: u64 = 2_500;
/// What the site's database holds: its tables and rows (the large objects are not rows).
const SITE_TABLES: u64 = 2 + BULK_TABLES;
const SITE_ROWS: u64 = 250 + BULK_TABLES * BULK_ROWS;

/// Makes the site's database the size of a real one, so a dump is megabytes, not the few
/// kilobytes a `pg_restore --list` reads whole before it exits (issue 27: a dump of 80 KB
/// already outran it): 18 more tables of 2,500 rows with indexes and about 8 MB of text
/// that compresses as prose does, and four large objects of 256 KiB.
fn fill_realistic(dbname: &str) {
    let mut sql = String::new();
    for table in 1..=BULK_TABLES {
        sql.push_str(&format!(
            "CREATE TABLE bulk_{table} (id bigserial PRIMARY KEY, slug text NOT NULL, \
             body text NOT NULL, created timestamptz NOT NULL DEFAULT now());
             CREATE INDEX bulk_{table}_slug ON bulk_{table} (slug);
             INSERT INTO bulk_{table} (slug, body) SELECT md5('{table}-' || g), \
             repeat(md5(g::text) || ' lorem ipsum dolor sit amet ', 3 + g % 6) \
             FROM generate_series(1, {BULK_ROWS}) g;\n"
        ));
    }
    sql.push_str(
        "SELECT lo_from_bytea(0, decode(string_agg(md5(g::text || o::text), ''), 'hex')) \
         FROM generate_series(1, 4) o, generate_series(1, 16384) g GROUP BY o;",
    );
    psql(dbname, &sql);
    let size: u64 = psql(
        dbname,
        "SELECT sum(pg_total_relation_size(oid)) + (SELECT pg_total_relation_size('pg_largeobject')) \
         FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'",
    )
    .parse()
    .unwrap();
    assert!(size > 8_000_000, "the site's tables hold {size} bytes");
}

/// How many large objects `dbname` holds, and their bytes.
fn large_objects(dbname: &str) -> String {
    psql(
        dbname,
        "SELECT count(DISTINCT loid) || ' ' || coalesce(sum(length(data)), 0) FROM pg_largeobject",
    )
}

fn site() -> Site {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("www");
    std::fs::create_dir_all(root.join("uploads/2026")).unwrap();
    std::fs::create_dir_all(root.join("cache")).unwrap();
    std::fs::write(root.join("index.php"), "<?php echo 'v1';").unwrap();
    std::fs::write(root.join("config.php"), "db = shop").unwrap();
    std::fs::write(root.join("uploads/2026/photo.jpg"), vec![7u8; 300_000]).unwrap();
    std::fs::write(root.join("uploads/old.txt"), "to be removed").unwrap();
    std::fs::write(root.join("cache/page.html"), "cached").unwrap();
    std::os::unix::fs::symlink("index.php", root.join("home.php")).unwrap();
    let dbname = format!("bk_site_{:08x}", rand::random::<u32>());
    psql("postgres", &format!("CREATE DATABASE \"{dbname}\""));
    psql(
        &dbname,
        "CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL);
         CREATE TABLE orders (id serial PRIMARY KEY, customer int REFERENCES customers(id), total numeric);
         INSERT INTO customers (name) SELECT 'c' || g FROM generate_series(1, 50) g;
         INSERT INTO orders (customer, total) SELECT 1 + g % 50, g FROM generate_series(1, 200) g;",
    );
    fill_realistic(&dbname);
    let state = StateDir::open(&parent.path().join("state")).unwrap();
    let url_file = parent.path().join("db.url");
    std::fs::write(&url_file, db_url(&dbname)).unwrap();
    state
        .write(
            SITE,
            json!({"root": root, "database": {"url_file": url_file}, "exclude": ["cache"]})
                .to_string()
                .as_bytes(),
            0o600,
        )
        .unwrap();
    let owner = age::x25519::Identity::generate();
    let owner_file = parent.path().join("owner.key");
    {
        use age::secrecy::ExposeSecret;
        std::fs::write(
            &owner_file,
            format!("{}\n", owner.to_string().expose_secret()),
        )
        .unwrap();
        std::fs::set_permissions(&owner_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    Site {
        _parent: parent,
        root,
        dbname,
        state,
        key: NodeKey::generate(),
        owner,
        owner_file,
    }
}

fn age_program() -> &'static str {
    assert!(
        Path::new("/usr/bin/age").exists(),
        "Debian's age is needed (deploy/local/services.sh installs it: apt-get install age)"
    );
    "/usr/bin/age"
}

/// The owner sets and proves the recovery key with stock `age`.
fn prove_owner_key(site: &Site) {
    keys::set_recovery_key(&site.state, &site.owner.to_public().to_string()).unwrap();
    let output = Command::new(age_program())
        .args(["-d", "-i"])
        .arg(&site.owner_file)
        .arg(site.state.file(keys::RECOVERY_CHALLENGE))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    keys::prove_recovery_key(&site.state, &String::from_utf8_lossy(&output.stdout)).unwrap();
}

fn backups<'a>(site: &'a Site, storage: &'a Storage) -> Backups<'a, TestBroker<'a>> {
    Backups {
        state: &site.state,
        node_key: &site.key,
        broker: TestBroker { storage },
        objects: Objects::new(),
    }
}

async fn word(backups: &Backups<'_, TestBroker<'_>>, name: &str, params: Value) -> Value {
    match backups::run(backups, name, &params).await {
        Ok(finished) => finished.result,
        Err(failed) => panic!("{name} {params} failed: {}", failed.reason),
    }
}

fn manifest_of(result: &Value) -> Manifest {
    serde_json::from_value(result["manifest"].clone()).unwrap()
}

/// Issue 14 end to end on the node: a full and an incremental land (parts, signed manifests,
/// sealed to owner and site), verify levels 2 and 3 pass and fail on a flipped byte, and a
/// restore brings back the rows and files of the chosen run.
#[tokio::test]
async fn bk_a_full_and_an_incremental_land_verify_and_restore_the_chosen_run() {
    land_verify_and_restore(local_store().await).await;
}

/// The same against a real S3 server that checks every presigned URL's signature.
// Multi-threaded: s3s-fs is a child process, but psql runs blocking beside the transfers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bk_a_full_and_an_incremental_land_verify_and_restore_on_real_s3() {
    let storage = s3_store().await;
    // A URL presigned for a PUT cannot delete, and a tampered signature is refused.
    let put = storage.url(UrlOp::Put, "9/probe");
    let client = reqwest::Client::new();
    let deleted = client.delete(&put.url).send().await.unwrap();
    assert_eq!(deleted.status().as_u16(), 403);
    let at = put.url.find("X-Amz-Signature=").unwrap() + "X-Amz-Signature=".len();
    let flipped = if &put.url[at..at + 1] == "0" {
        "1"
    } else {
        "0"
    };
    let tampered = format!("{}{flipped}{}", &put.url[..at], &put.url[at + 1..]);
    let refused = client
        .put(&tampered)
        .header("if-none-match", "*")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    land_verify_and_restore(storage).await;
}

async fn land_verify_and_restore(storage: Storage) {
    let site = site();
    prove_owner_key(&site);
    let backups = backups(&site, &storage);

    let full = word(&backups, "backup_run", json!({"seq": 1, "kind": "full"})).await;
    let manifest = manifest_of(&full);
    assert_eq!(full["kind"], "full");
    assert_eq!(manifest.full_seq, 1);
    assert_eq!(
        manifest
            .recipients
            .iter()
            .map(|r| r.role.as_str())
            .collect::<Vec<_>>(),
        vec!["owner", "site"]
    );
    assert_eq!(manifest.database.unwrap().tables, SITE_TABLES);
    assert_eq!(manifest.database.unwrap().rows, SITE_ROWS);
    assert!(
        manifest.artifact("database").unwrap().bytes > 2_000_000,
        "a dump of realistic size"
    );
    // index.php, config.php, photo.jpg, old.txt, home.php (the link); cache/ is excluded.
    assert_eq!(manifest.files.count, 5);
    assert_eq!(manifest.files.total, 5);
    for artifact in &manifest.artifacts {
        for part in &artifact.parts {
            let stored = std::fs::read(storage.object_path(&part.key)).unwrap();
            assert_eq!(stored.len() as u64, part.bytes);
        }
    }
    // The manifest is signed by the node's key over its exact bytes, and written last.
    let bytes = std::fs::read(storage.object_path("1/manifest-1.json")).unwrap();
    let signature = std::fs::read_to_string(storage.object_path("1/manifest-1.json.sig")).unwrap();
    use base64::Engine as _;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .unwrap();
    site.key.public_key().verify(&bytes, &signature).unwrap();
    assert_eq!(
        serde_json::from_slice::<Manifest>(&bytes).unwrap(),
        manifest
    );
    // No secret of the site is in what leaves the node (BK-29).
    assert!(!full
        .to_string()
        .contains(&site.dbname.replace("bk_site_", "postgres://")));

    // Change the site: one file changed, one new, one removed, rows added.
    std::fs::write(site.root.join("index.php"), "<?php echo 'v2';").unwrap();
    std::fs::write(site.root.join("uploads/new.txt"), "new").unwrap();
    std::fs::remove_file(site.root.join("uploads/old.txt")).unwrap();
    psql(&site.dbname, "INSERT INTO customers (name) VALUES ('late')");
    let incremental = word(
        &backups,
        "backup_run",
        json!({"seq": 2, "kind": "incremental", "previous_seq": 1}),
    )
    .await;
    let second = manifest_of(&incremental);
    assert_eq!(incremental["kind"], "incremental");
    assert_eq!((second.full_seq, second.previous_seq), (1, Some(1)));
    assert_eq!(second.files.count, 2, "index.php changed and new.txt");
    assert_eq!(second.files.removed, 1, "old.txt");
    assert_eq!(second.files.total, 5);
    assert_eq!(second.database.unwrap().rows, SITE_ROWS + 1);

    // BK-14: no key is written twice; the store refuses a second PUT of a landed key. The
    // store answers 412 as soon as it has the head, and may close the connection while a large
    // part is still being sent, so the agent hears either the 412 or the connection ending; the
    // property is that the run fails and run 2's objects stay as they were.
    let landed = |manifest: &Manifest| -> Vec<Vec<u8>> {
        let mut keys = vec!["2/manifest-2.json".to_string()];
        keys.extend(
            manifest
                .artifacts
                .iter()
                .flat_map(|artifact| artifact.parts.iter().map(|part| part.key.clone())),
        );
        keys.iter()
            .map(|key| std::fs::read(storage.object_path(key)).unwrap())
            .collect()
    };
    let before = landed(&second);
    let again = backups::run(&backups, "backup_run", &json!({"seq": 2, "kind": "full"})).await;
    let again = again.expect_err("a second run 2 is refused").reason;
    assert!(
        again.contains("412") || again.contains("connection") || again.contains("pipe"),
        "{again}"
    );
    assert!(landed(&second) == before, "run 2's objects are unchanged");

    // Verify: level 2 reads everything of the chain up to 2; level 3 rehearses it.
    let verified = word(&backups, "verify_backup", json!({"seq": 2, "level": 2})).await;
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["checked"]["artifacts"], 4);
    assert_eq!(verified["checked"]["files"], 7);
    let rehearsed = word(&backups, "verify_backup", json!({"seq": 2, "level": 3})).await;
    assert_eq!(rehearsed["ok"], true, "{rehearsed}");
    assert_eq!(rehearsed["checked"]["tables"], SITE_TABLES);

    // A flipped byte in storage is found, by both levels, naming the part.
    let part = &manifest.artifact("files").unwrap().parts[0].key;
    let stored = storage.object_path(part);
    let original = std::fs::read(&stored).unwrap();
    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    std::fs::write(&stored, &flipped).unwrap();
    for level in [2, 3] {
        // Issue 27: a verify that found the backup wanting is a failed job, its verdict the
        // job's result (what the backups service records as the node's verify state).
        let failed = backups::run(
            &backups,
            "verify_backup",
            &json!({"seq": 2, "level": level}),
        )
        .await
        .expect_err("a verify that finds a flipped byte fails");
        assert!(failed.reason.contains(part.as_str()), "{}", failed.reason);
        assert!(
            failed
                .reason
                .starts_with(&format!("run 2 did not pass its level-{level} verify: ")),
            "{}",
            failed.reason
        );
        let failed = failed.result;
        assert_eq!(failed["ok"], false, "{failed}");
        assert_eq!(failed["level"], level, "{failed}");
        let problems = failed["problems"].to_string();
        assert!(problems.contains(part.as_str()), "{problems}");
    }
    // A restore tests the archive first and destroys nothing when it fails.
    std::fs::write(site.root.join("index.php"), "<?php echo 'v3';").unwrap();
    let refused = backups::run(&backups, "restore_project", &json!({"seq": 2})).await;
    assert!(refused.unwrap_err().reason.contains("nothing was restored"));
    assert_eq!(
        std::fs::read_to_string(site.root.join("index.php")).unwrap(),
        "<?php echo 'v3';"
    );
    std::fs::write(&stored, &original).unwrap();
    // The same for the database: a damaged dump is found before the schema is dropped.
    let dump_part = &second.artifact("database").unwrap().parts[0].key;
    let dump = storage.object_path(dump_part);
    let dump_bytes = std::fs::read(&dump).unwrap();
    let mut damaged = dump_bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x01;
    std::fs::write(&dump, &damaged).unwrap();
    psql(&site.dbname, "INSERT INTO customers (name) VALUES ('kept')");
    let refused = backups::run(&backups, "restore_database", &json!({"seq": 2})).await;
    assert!(refused.unwrap_err().reason.contains("nothing was restored"));
    assert_eq!(
        psql(
            &site.dbname,
            "SELECT count(*) FROM customers WHERE name = 'kept'"
        ),
        "1"
    );
    std::fs::write(&dump, &dump_bytes).unwrap();

    // Restore run 2 (the full and the incremental replayed): files and rows as they were then.
    psql(
        &site.dbname,
        "DELETE FROM orders; INSERT INTO customers (name) VALUES ('after')",
    );
    std::fs::write(site.root.join("uploads/later.txt"), "after the run").unwrap();
    let restored = word(&backups, "restore_project", json!({"seq": 2})).await;
    assert_eq!(restored["restored"]["files"], 5, "{restored}");
    assert_eq!(restored["restored"]["rows"], SITE_ROWS + 1, "{restored}");
    assert_eq!(
        std::fs::read_to_string(site.root.join("index.php")).unwrap(),
        "<?php echo 'v2';"
    );
    assert_eq!(
        std::fs::read_to_string(site.root.join("uploads/new.txt")).unwrap(),
        "new"
    );
    assert!(!site.root.join("uploads/old.txt").exists());
    assert!(!site.root.join("uploads/later.txt").exists());
    assert_eq!(
        std::fs::read_link(site.root.join("home.php")).unwrap(),
        Path::new("index.php")
    );
    assert_eq!(psql(&site.dbname, "SELECT count(*) FROM orders"), "200");
    assert_eq!(
        psql(
            &site.dbname,
            "SELECT count(*) FROM customers WHERE name = 'after'"
        ),
        "0"
    );
    assert_eq!(large_objects(&site.dbname), "4 1048576");
    // The safety snapshots hold what was replaced.
    let snapshots = restored["safety_snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 2, "{restored}");
    let kept_files = PathBuf::from(snapshots[1].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(kept_files.join("uploads/later.txt")).unwrap(),
        "after the run"
    );
    assert!(Path::new(snapshots[0].as_str().unwrap()).is_file());

    // restore_database of run 1 brings back its rows only.
    let restored = word(&backups, "restore_database", json!({"seq": 1})).await;
    assert_eq!(restored["restored"]["rows"], SITE_ROWS, "{restored}");
    assert_eq!(
        psql(
            &site.dbname,
            "SELECT count(*) FROM customers WHERE name = 'late'"
        ),
        "0"
    );

    // The node's own record.
    let listed = word(&backups, "list_backups", json!({})).await;
    assert_eq!(listed["site"], true);
    assert_eq!(listed["chain"][0]["seq"], 2);
    assert_eq!(listed["recovery_key"]["state"], "already");
    // Two runs of two artifacts, each with its manifest, signature and the node's key.
    assert_eq!(storage.objects(), 10);
}

/// An incremental on a run the node holds no index of becomes a full, and says so; a
/// siteless node has no backups.
#[tokio::test]
async fn bk_an_incremental_without_its_index_is_a_full_and_a_siteless_node_has_no_backups() {
    let storage = local_store().await;
    let site = site();
    // 17 MiB that does not compress: the files artifact is cut into two parts.
    let mut noise = vec![0u8; 17 * 1024 * 1024];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut noise);
    std::fs::write(site.root.join("uploads/video.bin"), &noise).unwrap();
    drop(noise);
    let backups = backups(&site, &storage);
    let result = word(
        &backups,
        "backup_run",
        json!({"seq": 5, "kind": "incremental", "previous_seq": 4}),
    )
    .await;
    assert_eq!(result["kind"], "full");
    assert!(result["note"]
        .as_str()
        .unwrap()
        .contains("no index of run 4"));
    // Without a proven recovery key the run is sealed to the site key only.
    let manifest = manifest_of(&result);
    assert_eq!(manifest.recipients.len(), 1);
    let files = manifest.artifact("files").unwrap();
    assert_eq!(files.parts.len(), 2);
    for part in &files.parts {
        assert!(part.bytes <= 16 * 1024 * 1024);
        let stored = std::fs::metadata(storage.object_path(&part.key)).unwrap();
        assert_eq!(stored.len(), part.bytes);
    }
    let sum: u64 = files.parts.iter().map(|part| part.bytes).sum();
    assert_eq!(sum, files.bytes);
    let verified = word(&backups, "verify_backup", json!({"seq": 5, "level": 2})).await;
    assert_eq!(verified["ok"], true, "{verified}");

    site.state.remove(SITE).unwrap();
    let failed = backups::run(&backups, "backup_run", &json!({"seq": 6, "kind": "full"})).await;
    assert!(failed.unwrap_err().reason.contains("siteless"));
    let listed = word(&backups, "list_backups", json!({})).await;
    assert_eq!(listed["site"], false);
}

/// README "Disaster recovery by hand", with no plane and no agent: the objects are fetched
/// with a plain HTTP client (curl), opened with Debian's `age` and the owner's recovery key,
/// decompressed with `zstd`, and restored with `pg_restore` and `tar`.
// Multi-threaded: curl and bash run as blocking programs while the store answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bk_disaster_recovery_by_hand_with_stock_tools() {
    recover_by_hand(local_store().await).await;
}

/// The same, the objects fetched from a real S3 server with curl on presigned GET URLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bk_disaster_recovery_by_hand_from_real_s3() {
    recover_by_hand(s3_store().await).await;
}

/// The shell block of docs/backups.md that follows the line `<!-- tested: {name}`, as written.
fn doc_block(name: &str) -> String {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/backups.md"
    ))
    .unwrap();
    let marker = format!("<!-- tested: {name}");
    let after = &docs[docs
        .find(&marker)
        .unwrap_or_else(|| panic!("{marker} in the docs"))..];
    let body = &after[after.find("```sh\n").unwrap() + "```sh\n".len()..];
    body[..body.find("```").unwrap()].to_string()
}

async fn recover_by_hand(storage: Storage) {
    let site = site();
    prove_owner_key(&site);
    // The site's web user planted a removal list of its own and a link out of the site.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim"), "not the site's").unwrap();
    std::fs::create_dir(site.root.join(".capstan")).unwrap();
    std::fs::write(site.root.join(".capstan/removed"), "pwn/victim\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), site.root.join("pwn")).unwrap();
    let backups = backups(&site, &storage);
    word(&backups, "backup_run", json!({"seq": 1, "kind": "full"})).await;
    std::fs::write(site.root.join("index.php"), "<?php echo 'v2';").unwrap();
    std::fs::remove_file(site.root.join("uploads/old.txt")).unwrap();
    word(
        &backups,
        "backup_run",
        json!({"seq": 2, "kind": "incremental", "previous_seq": 1}),
    )
    .await;

    // A new machine: nothing but the recovery key and the stored objects, one directory a run.
    let work = tempfile::tempdir().unwrap();
    for seq in [1, 2] {
        let run = work.path().join(format!("run-{seq}"));
        std::fs::create_dir(&run).unwrap();
        let manifest_key = format!("{seq}/manifest-{seq}.json");
        let manifest: Manifest =
            serde_json::from_slice(&std::fs::read(storage.object_path(&manifest_key)).unwrap())
                .unwrap();
        let mut keys = vec![
            manifest_key.clone(),
            format!("{manifest_key}.sig"),
            format!("{seq}/node-key.pem"),
        ];
        for artifact in &manifest.artifacts {
            keys.extend(artifact.parts.iter().map(|part| part.key.clone()));
        }
        for key in keys {
            let out = run.join(key.split_once('/').unwrap().1);
            let status = Command::new("curl")
                .args(["-sf", "-o"])
                .arg(&out)
                .arg(storage.url(UrlOp::Get, &key).url)
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
    // Issue 27: the signature checks with stock openssl from the bucket alone, and the key it
    // checks with has the node's fingerprint.
    let check = |seq: u64| {
        let output = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -euo pipefail\ncd {}\nseq={seq}\n{}",
                work.path().display(),
                doc_block("check-signature")
            ))
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).to_string(),
        )
    };
    for seq in [1, 2] {
        let (passed, said) = check(seq);
        assert!(passed, "{said}");
        assert_eq!(
            said,
            format!(
                "Signature Verified Successfully\n{}\n",
                site.key.public_key().fingerprint()
            )
        );
    }
    let manifest = work.path().join("run-2/manifest-2.json");
    let signed = std::fs::read(&manifest).unwrap();
    let mut changed = signed.clone();
    let at = changed.iter().position(|byte| *byte == b'2').unwrap();
    changed[at] = b'3';
    std::fs::write(&manifest, &changed).unwrap();
    let (passed, said) = check(2);
    assert!(!passed, "a changed manifest is refused: {said}");
    std::fs::write(&manifest, &signed).unwrap();

    let newdb = format!("{}_rebuilt", site.dbname);
    psql("postgres", &format!("CREATE DATABASE \"{newdb}\""));
    let cleanup = newdb.clone();
    let dropped = scopeguard(move || {
        psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS \"{cleanup}\" WITH (FORCE)"),
        );
    });
    let restored = work.path().join("www");
    std::fs::create_dir(&restored).unwrap();
    let script = format!(
        "set -euo pipefail\ncd {work}\nsite={restored}\nkey={key}\ndatabase='{newurl}'\n{remove}\n\
         for seq in 1 2; do\n{apply}done\nseq=2\n{database}",
        work = work.path().display(),
        restored = restored.display(),
        key = site.owner_file.display(),
        newurl = db_url(&newdb),
        remove = doc_block("remove-listed"),
        apply = doc_block("apply-run"),
        database = doc_block("restore-database"),
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(restored.join("index.php")).unwrap(),
        "<?php echo 'v2';"
    );
    assert_eq!(
        std::fs::read(restored.join("uploads/2026/photo.jpg"))
            .unwrap()
            .len(),
        300_000
    );
    assert!(
        !restored.join("uploads/old.txt").exists(),
        "removed by run 2"
    );
    assert!(!restored.join("cache").exists(), "excluded");
    // The site's own `.capstan/removed` is a file of the site, not a list.
    assert_eq!(
        std::fs::read_to_string(restored.join(".capstan/removed")).unwrap(),
        "pwn/victim\n"
    );
    assert_eq!(psql(&newdb, "SELECT count(*) FROM orders"), "200");
    assert_eq!(large_objects(&newdb), "4 1048576");

    // The documented removal refuses what no walk writes and follows no link.
    let climbing = format!(
        "../{}",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    let list = format!(
        "pwn/victim\n{}/victim\n../victim\n{climbing}/victim\nuploads//new\nindex.php\n",
        outside.path().display()
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -eu\n{}\ncapstan_remove_listed {} <<'LIST'\n{list}LIST",
            doc_block("remove-listed"),
            restored.display()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("victim")).unwrap(),
        "not the site's"
    );
    assert!(
        said.contains("left alone (a link on its way): pwn/victim"),
        "{said}"
    );
    assert_eq!(said.matches("refused:").count(), 4, "{said}");
    assert!(
        !restored.join("index.php").exists(),
        "a plain path is removed"
    );
    drop(dropped);
}

struct Guard<F: FnMut()>(F);
impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}
fn scopeguard<F: FnMut()>(f: F) -> Guard<F> {
    Guard(f)
}

/// Issue 27: restores and level-3 rehearsals of a site with a planted `.capstan/removed` and a
/// link out of the site delete nothing outside the scratch directory or the site. The site's
/// web user plants a removal list of its own (`pwn/victim`, where `pwn` links out of the site)
/// in the full, and between the full and an incremental turns a directory holding `victim`
/// into a link out of the site, so the incremental's genuine list names `swap/victim` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_and_rehearsals_of_a_site_with_a_planted_removal_list_and_a_link_out_delete_nothing_outside(
) {
    let storage = local_store().await;
    let site = site();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "not the site's").unwrap();
    std::fs::create_dir(site.root.join(".capstan")).unwrap();
    std::fs::write(site.root.join(".capstan/removed"), "pwn/victim\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), site.root.join("pwn")).unwrap();
    std::fs::create_dir(site.root.join("swap")).unwrap();
    std::fs::write(site.root.join("swap/victim"), "the site's").unwrap();
    let backups = backups(&site, &storage);
    let survives = |when: &str| {
        assert_eq!(
            std::fs::read_to_string(&victim).ok().as_deref(),
            Some("not the site's"),
            "the file outside the site after {when}"
        );
    };

    let full = manifest_of(&word(&backups, "backup_run", json!({"seq": 1, "kind": "full"})).await);
    assert_eq!(full.removed_list, None, "a full has no removal list");
    let rehearsed = word(&backups, "verify_backup", json!({"seq": 1, "level": 3})).await;
    survives("the rehearsal of the full");
    assert_eq!(rehearsed["ok"], true, "{rehearsed}");

    std::fs::remove_dir_all(site.root.join("swap")).unwrap();
    std::os::unix::fs::symlink(outside.path(), site.root.join("swap")).unwrap();
    std::fs::write(
        site.root.join(".capstan/removed"),
        "pwn/victim\nswap/victim\n",
    )
    .unwrap();
    let second = manifest_of(
        &word(
            &backups,
            "backup_run",
            json!({"seq": 2, "kind": "incremental", "previous_seq": 1}),
        )
        .await,
    );
    let list = second
        .removed_list
        .clone()
        .expect("the incremental names its list");
    assert_eq!((list.member.as_str(), list.paths), ("/.capstan/removed", 1));
    let rehearsed = word(&backups, "verify_backup", json!({"seq": 2, "level": 3})).await;
    survives("the rehearsal of the incremental");
    assert_eq!(rehearsed["ok"], true, "{rehearsed}");

    for seq in [1, 2] {
        let restored = word(&backups, "restore_project", json!({"seq": seq})).await;
        survives(&format!("the restore of run {seq}"));
        assert_eq!(restored["seq"], seq, "{restored}");
        assert_eq!(
            std::fs::read_link(site.root.join("pwn")).unwrap(),
            outside.path()
        );
    }
    // The site's own `.capstan/removed` is restored as the ordinary file it is.
    assert_eq!(
        std::fs::read_to_string(site.root.join(".capstan/removed")).unwrap(),
        "pwn/victim\nswap/victim\n"
    );
    assert_eq!(
        std::fs::read_link(site.root.join("swap")).unwrap(),
        outside.path()
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
}
