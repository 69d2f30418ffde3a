//! The backups benchmark's two halves (README "Performance", `deploy/bench/backups.sh`):
//! `store DIR PORT` is a plain object store (PUT writes a file, GET reads it) in a process of
//! its own, so its buffers do not count against the agent; `run STATE_DIR PORT SEQ` runs
//! `backup_run` (a full) of the site `STATE_DIR/site.json` names into it, the same code as the
//! agent's word, and prints the seconds it took and the process's peak RSS (VmHWM).
//! Built only with `--features bench`.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    time::Instant,
};

use capstan_agent::{
    backups::{
        transfer::{Broker, BrokerError},
        Backups,
    },
    plane::{Objects, SignedUrl, UrlOp},
    state::StateDir,
};

struct LocalBroker {
    port: u16,
}

impl Broker for LocalBroker {
    async fn urls(&self, _op: UrlOp, keys: &[String]) -> Result<Vec<SignedUrl>, BrokerError> {
        Ok(keys
            .iter()
            .map(|key| SignedUrl {
                key: key.clone(),
                method: String::new(),
                url: format!("http://127.0.0.1:{}/{key}", self.port),
                headers: vec![],
            })
            .collect())
    }
}

fn serve(stream: TcpStream, root: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut length = 0u64;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let file = root.join(path.trim_start_matches('/'));
        let (status, body) = match method.as_str() {
            "PUT" => {
                std::fs::create_dir_all(file.parent().unwrap_or(root))?;
                let mut out = std::fs::File::create(&file)?;
                std::io::copy(&mut (&mut reader).take(length), &mut out)?;
                ("200 OK", Vec::new())
            }
            "GET" => match std::fs::read(&file) {
                Ok(bytes) => ("200 OK", bytes),
                Err(_) => ("404 Not Found", Vec::new()),
            },
            _ => ("405 Method Not Allowed", Vec::new()),
        };
        write!(
            writer,
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )?;
        writer.write_all(&body)?;
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmHWM:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("store") if args.len() == 4 => {
            let root = PathBuf::from(&args[2]);
            let listener = TcpListener::bind(("127.0.0.1", args[3].parse::<u16>().unwrap()))
                .expect("the store's port");
            for stream in listener.incoming().flatten() {
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &root);
                });
            }
        }
        Some("run") if args.len() == 5 => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let state = StateDir::open(Path::new(&args[2])).expect("the state directory");
            let key = capstan_signing::NodeKey::generate();
            let backups = Backups {
                state: &state,
                node_key: &key,
                broker: LocalBroker {
                    port: args[3].parse().unwrap(),
                },
                objects: Objects::new(),
            };
            let seq: u64 = args[4].parse().unwrap();
            let started = Instant::now();
            let result = runtime
                .block_on(backups.backup_run(&serde_json::json!({"seq": seq, "kind": "full"})));
            let seconds = started.elapsed().as_secs_f64();
            match result {
                Ok(result) => {
                    let manifest = &result["manifest"];
                    let stored: u64 = manifest["artifacts"]
                        .as_array()
                        .map(|artifacts| artifacts.iter().filter_map(|a| a["bytes"].as_u64()).sum())
                        .unwrap_or(0);
                    println!(
                        "seconds={seconds:.2} peak_rss_kib={} files={} file_bytes={} stored_bytes={stored} rows={}",
                        peak_rss_kib(),
                        manifest["files"]["count"],
                        manifest["files"]["bytes"],
                        manifest["database"]["rows"],
                    );
                }
                Err(error) => {
                    eprintln!("backup_run failed: {error}");
                    std::process::exit(1);
                }
            }
        }
        _ => {
            eprintln!("usage: capstan-backup-bench store DIR PORT | run STATE_DIR PORT SEQ");
            std::process::exit(2);
        }
    }
}
