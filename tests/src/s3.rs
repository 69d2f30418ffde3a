//! A real S3-compatible server of the test's own: the s3s project's file-system server
//! (`s3s-fs`, which `deploy/local/services.sh`'s `ensure_s3_server` builds once with cargo).
//! It checks every request's SigV4 signature, header or presigned URL, against the one access
//! key it is started with, refuses a bad one (`403 SignatureDoesNotMatch`), and honours
//! `If-None-Match: *` on PUT (`412 PreconditionFailed` when the key exists).
//!
//! ```ignore
//! let s3 = capstan_e2e::s3::S3Server::start().await;
//! // s3.endpoint() = "http://127.0.0.1:PORT", s3.bucket, s3.access_key, s3.secret_key, s3.region
//! // s3.object_path("folder/1/node-7/0000000001/manifest-1.json") is the object's file on disk
//! ```
//! Path-style addressing only (`http://127.0.0.1:PORT/BUCKET/KEY`); plain HTTP on loopback.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::wait_for;

/// The bucket every test server has.
pub const BUCKET: &str = "capstan-backups";
/// The region the server answers for (s3s-fs accepts any; signers need one).
pub const REGION: &str = "us-east-1";

/// One running server, stopped (and its data removed) when dropped.
pub struct S3Server {
    pub port: u16,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    /// The server's data directory: `<root>/<bucket>/<key>` is each object's file.
    pub root: tempfile::TempDir,
    child: Child,
}

/// The s3s-fs binary: `CAPSTAN_S3_SERVER`, else where `ensure_s3_server` installs it.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CAPSTAN_S3_SERVER") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/capstan/tools/s3s-fs/bin/s3s-fs")
}

impl S3Server {
    /// Starts a server on a free loopback port with the bucket [`BUCKET`] and fresh random keys,
    /// and waits until it accepts connections.
    pub async fn start() -> S3Server {
        let root = tempfile::tempdir().expect("a temporary directory for the S3 server");
        std::fs::create_dir(root.path().join(BUCKET)).expect("the bucket's directory");
        let access_key = format!("CAPSTANTEST{:016X}", rand_u64());
        let secret_key = format!("{:016x}{:016x}", rand_u64(), rand_u64());
        let binary = binary();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free loopback port")
                .port();
            let mut child = Command::new(&binary)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", &access_key, "--secret-key", &secret_key])
                .arg(root.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|error| {
                    panic!(
                        "cannot start the S3 server {} ({error}); deploy/local/test installs it \
                         (ensure_s3_server in deploy/local/services.sh)",
                        binary.display()
                    )
                });
            let listening = wait_for(
                "the S3 server to listen or exit",
                Duration::from_secs(30),
                || {
                    let exited = child.try_wait().ok().flatten().is_some();
                    async move {
                        if exited {
                            return Some(false);
                        }
                        tokio::net::TcpStream::connect(("127.0.0.1", port))
                            .await
                            .ok()
                            .map(|_| true)
                    }
                },
            )
            .await;
            if listening {
                return S3Server {
                    port,
                    bucket: BUCKET.to_string(),
                    region: REGION.to_string(),
                    access_key,
                    secret_key,
                    root,
                    child,
                };
            }
            // Another process took the port between our probe and the server's bind.
            let _ = child.wait().await;
        }
        panic!("the S3 server did not start on any of five free ports");
    }

    /// `http://127.0.0.1:PORT`, the endpoint a target names.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The file holding object `key` of the bucket (to damage it, or see it exists).
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root.path().join(&self.bucket).join(key)
    }

    /// Every object key in the bucket, sorted, read from the disk (not through S3).
    pub fn keys(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, base, out);
                } else if let Ok(relative) = path.strip_prefix(base) {
                    let key = relative.to_string_lossy().to_string();
                    // s3s-fs keeps its own bookkeeping beside the objects.
                    if !key.split('/').any(|part| part.starts_with(".s3s")) {
                        out.push(key);
                    }
                }
            }
        }
        let base = self.root.path().join(&self.bucket);
        let mut keys = Vec::new();
        walk(&base, &base, &mut keys);
        keys.sort();
        keys
    }

    /// Whether the server process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

fn rand_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}
