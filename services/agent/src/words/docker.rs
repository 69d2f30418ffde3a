//! The Docker engine, asked over its API's unix socket (Docker Engine API: `GET /_ping`,
//! `GET /containers/json`, `GET /containers/{id}/json`, `POST /containers/{id}/restart`), and
//! the `restart_container` word (AG-54). A site container is one the engine lists with a
//! `capstan.site` label naming its site; `restart_container` restarts only such a container,
//! named as the engine names it, and never one held stopped (`<state dir>/sites/<site>/held`).

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::{
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    time::Duration,
};

use super::{Failed, Finished, Redaction};
use crate::config::Config;

/// The label that makes a container a site container; its value is the site's name.
pub const SITE_LABEL: &str = "capstan.site";

/// How long one request to the engine may take (a restart waits up to `RESTART_WAIT_S` for
/// the container to stop, then starts it).
const ENGINE_TIMEOUT: Duration = Duration::from_secs(60);
/// Seconds the engine gives a container to stop before it kills it, on restart.
const RESTART_WAIT_S: u32 = 10;
/// The most of an engine answer read.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A site container as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    /// Its name without Docker's leading `/`.
    pub name: String,
    /// Its site (the `capstan.site` label).
    pub site: String,
    /// The engine's `State` (`running`, `exited`, `restarting`, ...).
    pub state: String,
    /// Where its web port is published on this machine: (address, port).
    pub published: Option<(String, u16)>,
}

/// Whether `site` can name a directory under the holds directory and a site: a host name.
fn valid_site(site: &str) -> bool {
    crate::domain::nginx::is_host_name(site)
}

/// Whether `name` is a container name as Docker allows them (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`).
pub fn valid_name(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// What went wrong speaking to the Docker engine: it could not be reached, did not answer in
/// time, refused, or answered something unreadable.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("cannot reach the Docker engine at {}: {source}", socket.display())]
    Unreachable {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", socket.display())]
    Socket {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the Docker engine at {} did not answer {method} {path} within {} seconds", socket.display(), ENGINE_TIMEOUT.as_secs())]
    Timeout {
        socket: PathBuf,
        method: String,
        path: String,
    },
    #[error("the Docker engine: {0}")]
    Http(#[source] hyper::Error),
    #[error("{0}")]
    BadRequest(#[source] hyper::http::Error),
    #[error("the Docker engine answered {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("{} answered /_ping with {code}", socket.display())]
    PingRefused { socket: PathBuf, code: String },
    #[error("{} answered something that is not HTTP", socket.display())]
    NotHttp { socket: PathBuf },
    #[error("the Docker engine's answer: {0}")]
    AnswerUnreadable(String),
    #[error("the engine's {what} is not JSON: {source}")]
    NotJson {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the engine's container list is not a JSON array")]
    NotAList,
    #[error("the engine's container has no State.Status")]
    NoStatus,
}

/// The site containers in an answer of `GET /containers/json`, in the engine's order. A
/// container whose label is no site name, or whose name is not a Docker name, is not one.
pub fn site_containers_of(answer: &Value) -> Result<Vec<Container>, DockerError> {
    let list = answer.as_array().ok_or(DockerError::NotAList)?;
    let mut containers = Vec::new();
    for entry in list {
        let Some(site) = entry["Labels"][SITE_LABEL].as_str() else {
            continue;
        };
        let name = entry["Names"]
            .as_array()
            .and_then(|names| names.first())
            .and_then(Value::as_str)
            .map(|name| name.trim_start_matches('/').to_string())
            .unwrap_or_default();
        let id = entry["Id"].as_str().unwrap_or_default().to_string();
        if !valid_site(site) || !valid_name(&name) || id.is_empty() {
            continue;
        }
        // The web port: the TCP mapping of 80 inside, else of 443, else the first published.
        let ports: Vec<&Value> = entry["Ports"]
            .as_array()
            .map(|ports| {
                ports
                    .iter()
                    .filter(|port| {
                        port["PublicPort"].as_u64().is_some()
                            && port["Type"].as_str().unwrap_or("tcp") == "tcp"
                    })
                    .collect()
            })
            .unwrap_or_default();
        let web = [80, 443]
            .iter()
            .find_map(|inside| {
                ports
                    .iter()
                    .find(|port| port["PrivatePort"].as_u64() == Some(*inside))
            })
            .or(ports.first())
            .and_then(|port| {
                let public = u16::try_from(port["PublicPort"].as_u64()?).ok()?;
                let ip = match port["IP"].as_str().unwrap_or_default() {
                    "" | "0.0.0.0" => "127.0.0.1".to_string(),
                    "::" => "::1".to_string(),
                    ip => ip.to_string(),
                };
                Some((ip, public))
            });
        containers.push(Container {
            id,
            name,
            site: site.to_string(),
            state: entry["State"].as_str().unwrap_or("unknown").to_string(),
            published: web,
        });
    }
    Ok(containers)
}

/// Whether an engine answers `GET /_ping` on `socket`, asked without the async runtime (where
/// the recipes decide what applies); why not, when it does not.
pub fn engine_answers(socket: &Path) -> Result<(), DockerError> {
    let at_socket = |source| DockerError::Socket {
        socket: socket.to_path_buf(),
        source,
    };
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(at_socket)?;
    let limit = Some(Duration::from_secs(5));
    stream
        .set_read_timeout(limit)
        .and_then(|()| stream.set_write_timeout(limit))
        .and_then(|()| stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"))
        .map_err(at_socket)?;
    let mut head = Vec::new();
    stream
        .take(4096)
        .read_to_end(&mut head)
        .map_err(at_socket)?;
    let text = String::from_utf8_lossy(&head);
    let status = text
        .strip_prefix("HTTP/")
        .and_then(|rest| rest.split_whitespace().nth(1));
    match status {
        Some("200") => Ok(()),
        Some(code) => Err(DockerError::PingRefused {
            socket: socket.to_path_buf(),
            code: code.to_string(),
        }),
        None => Err(DockerError::NotHttp {
            socket: socket.to_path_buf(),
        }),
    }
}

/// One request to the engine: its status and body.
async fn request(socket: &Path, method: &str, path: &str) -> Result<(u16, Bytes), DockerError> {
    let exchange = async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|source| DockerError::Unreachable {
                socket: socket.to_path_buf(),
                source,
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(DockerError::Http)?;
        let driver = tokio::spawn(connection);
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "docker")
            .body(Empty::<Bytes>::new())
            .map_err(DockerError::BadRequest)?;
        let answer = sender
            .send_request(request)
            .await
            .map_err(DockerError::Http)?;
        let status = answer.status().as_u16();
        let body = Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|error| DockerError::AnswerUnreadable(error.to_string()))?
            .to_bytes();
        driver.abort();
        Ok::<_, DockerError>((status, body))
    };
    tokio::time::timeout(ENGINE_TIMEOUT, exchange)
        .await
        .map_err(|_| DockerError::Timeout {
            socket: socket.to_path_buf(),
            method: method.to_string(),
            path: path.to_string(),
        })?
}

/// The engine's own words for a refusal (`{"message": ...}`), or the status.
fn engine_error(status: u16, body: &[u8]) -> DockerError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| value["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    DockerError::Refused {
        status,
        message: message.trim().to_string(),
    }
}

/// The engine's site containers, stopped ones too.
pub async fn site_containers(socket: &Path) -> Result<Vec<Container>, DockerError> {
    let filters = json!({"label": [SITE_LABEL]}).to_string();
    let path = format!(
        "/containers/json?all=true&filters={}",
        url::form_urlencoded::byte_serialize(filters.as_bytes()).collect::<String>()
    );
    let (status, body) = request(socket, "GET", &path).await?;
    if status != 200 {
        return Err(engine_error(status, &body));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|source| DockerError::NotJson {
        what: "container list",
        source,
    })?;
    site_containers_of(&answer)
}

/// A container's state as `GET /containers/{id}/json` says (`State.Status`).
pub async fn inspect_state(socket: &Path, id: &str) -> Result<String, DockerError> {
    let (status, body) = request(socket, "GET", &format!("/containers/{id}/json")).await?;
    if status != 200 {
        return Err(engine_error(status, &body));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|source| DockerError::NotJson {
        what: "container",
        source,
    })?;
    answer["State"]["Status"]
        .as_str()
        .map(str::to_string)
        .ok_or(DockerError::NoStatus)
}

/// `POST /containers/{id}/restart`: 204 is done.
pub async fn restart(socket: &Path, id: &str) -> Result<(), DockerError> {
    let (status, body) = request(
        socket,
        "POST",
        &format!("/containers/{id}/restart?t={RESTART_WAIT_S}"),
    )
    .await?;
    match status {
        204 | 200 => Ok(()),
        _ => Err(engine_error(status, &body)),
    }
}

/// Where a site's hold mark lives.
pub fn hold_mark(holds: &Path, site: &str) -> PathBuf {
    holds.join(site).join("held")
}

/// `restart_container {container}`: the name is re-validated against the engine's own site
/// containers (AG-49: whatever the caller passed), a held one is refused, and the restart is
/// followed by the engine's state of it.
pub async fn restart_container(config: &Config, params: &Value) -> Result<Finished, Failed> {
    let name = params["container"].as_str().unwrap_or_default();
    if !valid_name(name) {
        return Err(Failed::new(format!(
            "{:?} is not a container name",
            name.chars().take(64).collect::<String>()
        )));
    }
    let containers = site_containers(&config.docker_socket)
        .await
        .map_err(Failed::new)?;
    let Some(container) = containers.iter().find(|container| container.name == name) else {
        let known: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
        return Err(Failed::new(format!(
            "{name} is not one of this node's site containers ({})",
            if known.is_empty() {
                "there are none".to_string()
            } else {
                known.join(", ")
            }
        )));
    };
    let mark = hold_mark(&config.container_holds, &container.site);
    if mark.exists() {
        return Err(Failed::new(format!(
            "{name} is held stopped ({}); restart_container leaves it alone",
            mark.display()
        )));
    }
    let before = container.state.clone();
    restart(&config.docker_socket, &container.id)
        .await
        .map_err(|why| Failed {
            refused: false,
            reason: format!("restarting {name} failed: {why}"),
            output: String::new(),
            result: json!({"container": name, "before": before}),
        })?;
    let after = inspect_state(&config.docker_socket, &container.id)
        .await
        .unwrap_or_else(|why| format!("unknown ({why})"));
    Ok(Finished {
        output: format!(
            "restarted {name} (site {}): {before} -> {after}",
            container.site
        ),
        result: json!({"container": name, "site": container.site, "before": before, "after": after}),
        redaction: Redaction::Text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ag_54_site_containers_are_read_from_the_engine_list() {
        let answer = json!([
            {"Id": "aaa", "Names": ["/site-a"], "State": "running",
             "Labels": {"capstan.site": "a.example.test"},
             "Ports": [{"PrivatePort": 9000, "Type": "tcp"},
                       {"IP": "0.0.0.0", "PrivatePort": 80, "PublicPort": 8081, "Type": "tcp"},
                       {"IP": "::", "PrivatePort": 80, "PublicPort": 8081, "Type": "tcp"}]},
            {"Id": "bbb", "Names": ["/db"], "State": "running", "Labels": {}, "Ports": []},
            {"Id": "ccc", "Names": ["/site-c"], "State": "exited",
             "Labels": {"capstan.site": "../etc"}, "Ports": []},
            {"Id": "ddd", "Names": ["/site-d"], "State": "exited",
             "Labels": {"capstan.site": "d.example.test"}, "Ports": []}
        ]);
        let containers = site_containers_of(&answer).unwrap();
        assert_eq!(
            containers,
            [
                Container {
                    id: "aaa".into(),
                    name: "site-a".into(),
                    site: "a.example.test".into(),
                    state: "running".into(),
                    published: Some(("127.0.0.1".into(), 8081)),
                },
                Container {
                    id: "ddd".into(),
                    name: "site-d".into(),
                    site: "d.example.test".into(),
                    state: "exited".into(),
                    published: None,
                },
            ]
        );
        assert!(site_containers_of(&json!({"message": "x"}))
            .unwrap_err()
            .to_string()
            .contains("not a JSON array"));
    }

    #[test]
    fn ag_49_container_names_are_docker_names() {
        assert!(valid_name("site-a_1.x"));
        for bad in ["", "/a", "-a", "a b", "a/../b", &"a".repeat(129)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
