//! For tests: a local HTTP server on a unix socket that speaks the Docker Engine API's
//! documented shapes for the calls the agent makes (`GET /_ping`, `GET /containers/json` with
//! `all` and a `label` filter, `GET /containers/{id}/json`, `POST /containers/{id}/restart`,
//! `404 {"message"}` for a container it does not have), over containers the test sets up. A
//! restart of a container marks it running and counts, unless the test makes its restarts fail.
//! Each container may publish a web port: a real HTTP server on 127.0.0.1 that answers while
//! the container runs.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, UnixListener},
    task::JoinHandle,
};

#[derive(Debug, Clone)]
pub struct Fake {
    pub id: String,
    pub name: String,
    pub labels: Value,
    pub state: String,
    pub port: Option<u16>,
}

#[derive(Debug, Default)]
struct Inner {
    containers: Vec<Fake>,
    restarts: HashMap<String, usize>,
    restart_fails: bool,
    /// Containers that run and whose site answers 502 (PHP hung) until restarted.
    mute: Vec<String>,
}

pub struct Engine {
    pub socket: PathBuf,
    inner: Arc<Mutex<Inner>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Engine {
    pub async fn start(dir: &Path) -> Engine {
        let socket = dir.join("docker.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let inner = Arc::new(Mutex::new(Inner::default()));
        let shared = inner.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&shared, request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Engine {
            socket,
            inner,
            tasks: vec![task],
        }
    }

    /// A container serving `site`; with `web`, its web port is published on a real HTTP server
    /// that answers 200 while the container runs (502 while it is mute) and hangs up while it
    /// is stopped.
    pub async fn add(&mut self, name: &str, site: Option<&str>, state: &str, web: bool) {
        let port = if web {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let inner = self.inner.clone();
            let id = format!("id-{name}");
            self.tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        return;
                    };
                    let (running, mute) = {
                        let inner = inner.lock().unwrap();
                        (
                            inner
                                .containers
                                .iter()
                                .any(|c| c.id == id && c.state == "running"),
                            inner.mute.contains(&id),
                        )
                    };
                    if !running {
                        // Nothing listens inside a stopped container: the proxy hangs up.
                        drop(socket);
                        continue;
                    }
                    let mut buffer = [0u8; 2048];
                    let _ = socket.read(&mut buffer).await;
                    let reply: &[u8] = if mute {
                        b"HTTP/1.0 502 Bad Gateway\r\n\r\n"
                    } else {
                        b"HTTP/1.0 200 OK\r\n\r\nthe site"
                    };
                    let _ = socket.write_all(reply).await;
                }
            }));
            Some(port)
        } else {
            None
        };
        let labels = match site {
            Some(site) => json!({"capstan.site": site, "maintainer": "test"}),
            None => json!({}),
        };
        self.inner.lock().unwrap().containers.push(Fake {
            id: format!("id-{name}"),
            name: name.into(),
            labels,
            state: state.into(),
            port,
        });
    }

    pub fn set_state(&self, name: &str, state: &str) {
        let mut inner = self.inner.lock().unwrap();
        let container = inner
            .containers
            .iter_mut()
            .find(|c| c.name == name)
            .unwrap();
        container.state = state.into();
    }

    /// The container runs and its site answers 502 until it is restarted.
    pub fn mute(&self, name: &str) {
        self.inner.lock().unwrap().mute.push(format!("id-{name}"));
    }

    pub fn state(&self, name: &str) -> String {
        let inner = self.inner.lock().unwrap();
        inner
            .containers
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .state
            .clone()
    }

    pub fn restarts(&self, name: &str) -> usize {
        let inner = self.inner.lock().unwrap();
        inner
            .restarts
            .get(&format!("id-{name}"))
            .copied()
            .unwrap_or(0)
    }

    pub fn set_restart_fails(&self, fails: bool) {
        self.inner.lock().unwrap().restart_fails = fails;
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn reply(status: u16, body: Value) -> Response<Full<Bytes>> {
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("api-version", "1.43")
        .body(Full::new(body))
        .unwrap()
}

fn summary(container: &Fake) -> Value {
    let ports: Vec<Value> = container
        .port
        .iter()
        .map(|port| json!({"IP": "0.0.0.0", "PrivatePort": 80, "PublicPort": port, "Type": "tcp"}))
        .collect();
    json!({
        "Id": container.id,
        "Names": [format!("/{}", container.name)],
        "Image": "site:latest",
        "State": container.state,
        "Status": if container.state == "running" { "Up 2 hours" } else { "Exited (1) 5 minutes ago" },
        "Labels": container.labels,
        "Ports": ports,
    })
}

fn answer(shared: &Mutex<Inner>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let mut inner = shared.lock().unwrap();
    let path = request.uri().path().to_string();
    let query: HashMap<String, String> = request
        .uri()
        .query()
        .map(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let not_found = |id: &str| reply(404, json!({"message": format!("No such container: {id}")}));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (request.method().as_str(), parts.as_slice()) {
        ("GET", ["_ping"]) => Response::builder()
            .status(200)
            .body(Full::new(Bytes::from_static(b"OK")))
            .unwrap(),
        ("GET", ["containers", "json"]) => list_containers(&inner, &query),
        ("GET", ["containers", id, "json"]) => {
            match inner
                .containers
                .iter()
                .find(|c| c.id == *id || c.name == *id)
            {
                Some(container) => reply(
                    200,
                    json!({"Id": container.id, "Name": format!("/{}", container.name),
                           "State": {"Status": container.state,
                                     "Running": container.state == "running"}}),
                ),
                None => not_found(id),
            }
        }
        ("POST", ["containers", id, "restart"]) => restart(&mut inner, id),
        _ => reply(404, json!({"message": format!("page not found: {path}")})),
    }
}

/// `GET /containers/json`: the running containers (or all, with `all=true`), filtered by the
/// labels the `filters` query names.
fn list_containers(inner: &Inner, query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let all = query
        .get("all")
        .is_some_and(|all| all == "true" || all == "1");
    let labels: Vec<String> = match query.get("filters") {
        None => Vec::new(),
        Some(filters) => match serde_json::from_str::<Value>(filters) {
            Ok(filters) => filters["label"]
                .as_array()
                .map(|labels| {
                    labels
                        .iter()
                        .filter_map(|label| label.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => {
                return reply(400, json!({"message": "invalid filter"}));
            }
        },
    };
    let list: Vec<Value> = inner
        .containers
        .iter()
        .filter(|c| all || c.state == "running")
        .filter(|c| labels.iter().all(|label| c.labels.get(label).is_some()))
        .map(summary)
        .collect();
    reply(200, Value::Array(list))
}

/// `POST /containers/{id}/restart`: running again, or exited with a 500 when restarts are set
/// to fail; counted either way.
fn restart(inner: &mut Inner, id: &str) -> Response<Full<Bytes>> {
    let not_found = |id: &str| reply(404, json!({"message": format!("No such container: {id}")}));
    let fails = inner.restart_fails;
    let Some(container) = inner
        .containers
        .iter_mut()
        .find(|c| c.id == *id || c.name == *id)
    else {
        return not_found(id);
    };
    let id = container.id.clone();
    inner.mute.retain(|muted| *muted != id);
    let container = inner.containers.iter_mut().find(|c| c.id == id).unwrap();
    if fails {
        container.state = "exited".into();
    } else {
        container.state = "running".into();
    }
    *inner.restarts.entry(id.clone()).or_default() += 1;
    if fails {
        reply(
            500,
            json!({"message": format!("Cannot restart container {id}: the site's image failed to start")}),
        )
    } else {
        reply(204, Value::Null)
    }
}
