//! A node's site as its web server would serve it, for `page_probe` (issue 16): a plain HTTP
//! server that answers each `GET` from the files under `<root>/current/public/` (so what it
//! serves is whatever release `current` points at), `/` as `index.html`, 404 for a file that
//! is not there. A page that holds the marker [`ERROR_MARKER`] makes the "application" write a
//! line to the site's error log (`<root>/shared/logs/error.log`) as it is served, as a PHP page
//! raising a warning would. A request carrying `Cookie: viewer=<secret>` is the viewer's, and a
//! path under `/admin/` answers 403 to anyone else.

use std::{
    io::Write as _,
    net::SocketAddr,
    path::{Component, Path, PathBuf},
    sync::{Arc, Mutex},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    task::JoinHandle,
};

/// A page holding this writes one line to the error log each time it is served.
pub const ERROR_MARKER: &str = "<!--raise-error-->";
/// The viewer's cookie the server accepts for `/admin/` pages.
pub const VIEWER_COOKIE: &str = "viewer=open-sesame";

pub struct Pages {
    pub address: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Pages {
    /// Serves the site at `root` on 127.0.0.1, on a port of its own.
    pub async fn start(root: &Path) -> Pages {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let root = root.to_path_buf();
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (root, seen) = (root.clone(), seen.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, &root, &seen).await;
                });
            }
        });
        Pages {
            address,
            requests,
            task,
        }
    }

    /// `http://127.0.0.1:<port>/`.
    pub fn base_url(&self) -> String {
        format!("http://{}/", self.address)
    }

    /// The paths asked so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn file_for(root: &Path, path: &str) -> Option<PathBuf> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let relative = path.trim_start_matches('/');
    let relative = if relative.is_empty() || relative.ends_with('/') {
        format!("{relative}index.html")
    } else {
        relative.to_string()
    };
    let relative = Path::new(&relative);
    if relative
        .components()
        .any(|component| !matches!(component, Component::Normal(_)))
    {
        return None;
    }
    Some(root.join("current/public").join(relative))
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    root: &Path,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = stream.read(&mut buffer).await?;
        if read == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_string();
    seen.lock().unwrap().push(path.clone());
    let viewer = text.lines().any(|line| {
        line.to_ascii_lowercase().starts_with("cookie:") && line.contains(VIEWER_COOKIE)
    });
    let (status, body) = if path.starts_with("/admin/") && !viewer {
        (403, b"forbidden".to_vec())
    } else {
        match file_for(root, &path).map(std::fs::read) {
            Some(Ok(bytes)) => {
                if String::from_utf8_lossy(&bytes).contains(ERROR_MARKER) {
                    let log = root.join("shared/logs/error.log");
                    let _ = std::fs::create_dir_all(log.parent().unwrap());
                    if let Ok(mut file) = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log)
                    {
                        let _ = writeln!(file, "PHP Warning: something went wrong serving {path}");
                    }
                }
                (200, bytes)
            }
            _ => (404, b"not found".to_vec()),
        }
    };
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        _ => "Not Found",
    };
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(answer.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}
