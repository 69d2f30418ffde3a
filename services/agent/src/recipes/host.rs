//! The compiled checks and repairs as they run on a Linux machine (AG-52, AG-53): each
//! measures the host (units, answers, the filesystem), hands the facts to the pure rule in
//! `domain::recipes::checks`, and a repair runs the recipe's word with the value the node
//! derived for itself, re-validated by the word against its compiled set (AG-49).

use serde_json::json;
use std::{path::PathBuf, time::Duration};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    config::Config,
    domain::{
        nginx,
        recipes::{
            bounded,
            checks::{self, Answer, Served, Service, SiteContainer},
            data_root,
            fail2ban::{self, Jails},
            registry::Recipe,
            supervision, Check,
        },
        vocabulary::{self, OWN_UNIT},
    },
    words::{
        self, docker, filesystem_space, find_program, run_program, status::postgres_answers, units,
    },
};

use super::served;

/// The largest nginx site file read.
const MAX_SITE_FILE_BYTES: usize = 1024 * 1024;

/// How long the web server has to answer the site's own request.
const WEB_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `recipe`'s check.
pub async fn check(recipe: &Recipe, config: &Config) -> Check {
    let check = match recipe.name {
        "disk_headroom" => disk_headroom(config).await,
        "service_health" => service_health(config).await,
        "certificate_expiry" => certificate_expiry(config).await,
        "container_health" => container_health(config).await,
        "fail2ban" => fail2ban(config).await,
        "agent_supervision" => agent_supervision(config).await,
        other => Check::unknown(format!("{other} has no check in this build")),
    };
    // AG-55: service_health and container_health repair nothing while the data root is
    // stopped.
    if data_root::GATED.contains(&recipe.name) {
        return data_root::gate(recipe.name, check, &words::host::data_root(config));
    }
    check
}

/// AG-46: whether a recipe whose scope fits applies on this machine, or why not: fail2ban
/// where it is installed.
pub fn applies(recipe: &Recipe) -> Result<(), crate::domain::recipes::registry::NotApplicable> {
    match recipe.name {
        "fail2ban" => {
            let unit = format!("{}.service", fail2ban::UNIT);
            let unit_installed = supervision::UNIT_DIRS
                .iter()
                .any(|dir| std::path::Path::new("/").join(dir).join(&unit).exists());
            fail2ban::applies(find_program("fail2ban-client").is_some(), unit_installed)
        }
        _ => Ok(()),
    }
}

/// AG-50: the unit's state beside the server's own answer (`fail2ban-client status`).
async fn fail2ban(config: &Config) -> Check {
    let state = units::state_of(config, fail2ban::UNIT).await;
    let jails = match find_program("fail2ban-client") {
        None => Jails::Unknown("fail2ban-client is not installed".into()),
        Some(client) => match run_program(&client, &["status"]).await {
            Err(why) => Jails::Unknown(why.to_string()),
            Ok(ran) => {
                let said = bounded(
                    format!("{} {}", ran.stdout.trim(), ran.stderr.trim()).trim(),
                    300,
                );
                match (ran.success, fail2ban::parse_status(&ran.stdout)) {
                    (true, Some(jails)) => Jails::Listed(jails),
                    (true, None) => {
                        Jails::NoAnswer(format!("fail2ban-client status answered: {said}"))
                    }
                    (false, _) => Jails::NoAnswer(format!("fail2ban-client status: {said}")),
                }
            }
        },
    };
    fail2ban::judge(&state, &jails)
}

/// AG-51: this process's supervision, read from files.
async fn agent_supervision(config: &Config) -> Check {
    let state_dir = config.state_dir.clone();
    let in_container = crate::recipes::placement(config).in_container;
    match tokio::task::spawn_blocking(move || {
        supervision::judge(&words::supervision::facts_here(&state_dir, in_container))
    })
    .await
    {
        Ok(check) => check,
        Err(error) => Check::unknown(format!("the supervision could not be read: {error}")),
    }
}

/// AG-52: the site filesystem's space (the root filesystem on a machine with no site), as
/// host_report measures it.
async fn disk_headroom(config: &Config) -> Check {
    let path = config.site_root.clone().unwrap_or_else(|| "/".into());
    match tokio::task::spawn_blocking(move || filesystem_space(&path)).await {
        Ok(Ok((total, avail))) => checks::disk_headroom(Some(avail), Some(total)),
        Ok(Err(why)) => checks::disk_headroom(None, None).with_detail(why.to_string()),
        Err(error) => checks::disk_headroom(None, None).with_detail(error.to_string()),
    }
}

/// AG-53: PostgreSQL answers `SSLRequest`, the web server answers a request for the site's own
/// name, and a gateway error means the app server behind it does not; beside each unit's state.
async fn service_health(config: &Config) -> Check {
    let services = &config.services;
    let postgres_unit = "postgresql";
    let postgres_state = units::state_of(config, postgres_unit).await;
    let postgres_answer = match postgres_answers(&config.postgres).await {
        Ok(true) => Answer::Yes,
        Ok(false) => Answer::No("something listens but does not answer as PostgreSQL".into()),
        Err(why) => Answer::No(why.to_string()),
    };
    let (web_answer, app_answer) = checks::web_answer(ask_site(&services.site_url).await);
    let mut list = vec![Service {
        role: "PostgreSQL",
        unit: postgres_unit.into(),
        state: postgres_state,
        answers: postgres_answer,
    }];
    if let Some(app) = &services.app_unit {
        list.push(Service {
            role: "the app server",
            unit: app.clone(),
            state: units::state_of(config, app).await,
            answers: app_answer,
        });
    }
    list.push(Service {
        role: "the web server",
        unit: services.web_unit.clone(),
        state: units::state_of(config, &services.web_unit).await,
        answers: web_answer,
    });
    checks::service_health(&list)
}

/// AG-56: the names the web server's enabled sites serve over TLS, from the node's own nginx
/// files, each asked for its certificate on this machine's TLS port.
async fn certificate_expiry(config: &Config) -> Check {
    let (names, unreadable) = vhost_names(&config.nginx_dirs);
    if names.is_empty() && !unreadable.is_empty() {
        return Check::unknown(format!(
            "the web server's site files could not be read: {}",
            unreadable.join("; ")
        ));
    }
    let now = chrono::Utc::now();
    let mut served = Vec::new();
    for name in names {
        let days_left = served::served_days_left(&name, config.tls_port, now).await;
        served.push(Served { name, days_left });
    }
    let check = checks::certificate_expiry(&served);
    if unreadable.is_empty() {
        check
    } else {
        let detail = format!("{}; not read: {}", check.detail, unreadable.join("; "));
        check.with_detail(detail)
    }
}

/// The TLS names every nginx site file in `dirs` serves (each once, files in name order), and
/// the files that could not be read, with why. A directory that does not exist has no sites.
pub fn vhost_names(dirs: &[PathBuf]) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = Vec::new();
    let mut unreadable = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                unreadable.push(format!("{}: {error}", dir.display()));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                let hidden = path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .is_none_or(|name| name.starts_with('.'));
                // conf.d reads only *.conf; sites-enabled reads every file.
                let conf_d = dir.file_name().is_some_and(|name| name == "conf.d");
                !hidden
                    && path.is_file()
                    && (!conf_d || path.extension().is_some_and(|ext| ext == "conf"))
            })
            .collect();
        files.sort();
        for file in files {
            let text = match std::fs::read(&file) {
                Ok(bytes) if bytes.len() <= MAX_SITE_FILE_BYTES => {
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                Ok(_) => {
                    unreadable.push(format!("{}: larger than 1 MiB", file.display()));
                    continue;
                }
                Err(error) => {
                    unreadable.push(format!("{}: {error}", file.display()));
                    continue;
                }
            };
            match nginx::tls_server_names(&text) {
                Ok(found) => {
                    for name in found {
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
                Err(why) => unreadable.push(format!("{}: {why}", file.display())),
            }
        }
    }
    (names, unreadable)
}

/// AG-54: each site container the Docker engine lists runs and its site answers on its
/// published port (asked with the site's name as the host); a held one is left alone.
async fn container_health(config: &Config) -> Check {
    let listed = match docker::site_containers(&config.docker_socket).await {
        Ok(listed) => listed,
        Err(why) => return Check::unknown(format!("the site containers cannot be listed: {why}")),
    };
    let mut containers = Vec::new();
    for container in listed {
        let held = docker::hold_mark(&config.container_holds, &container.site).exists();
        let answers = match (&container.published, container.state.as_str()) {
            (_, state) if state != "running" => Answer::No(format!("it is {state}")),
            (None, _) => Answer::Unknown("it publishes no web port to ask".into()),
            (Some((ip, port)), _) => match ask(ip, *port, &container.site, "/").await {
                Ok(code) if code < 500 => Answer::Yes,
                Ok(code) => Answer::No(format!("its site answered {code}")),
                Err(why) => Answer::No(why.0),
            },
        };
        containers.push(SiteContainer {
            name: container.name,
            site: container.site,
            state: container.state,
            held,
            answers,
        });
    }
    checks::container_health(&containers)
}

/// A plain HTTP/1.0 `GET` of the site's own address on this machine, its host sent as the
/// site's name: the status code, or why there was none.
pub async fn ask_site(site_url: &str) -> Result<u16, crate::domain::recipes::checks::Unanswered> {
    let url = url::Url::parse(site_url).map_err(|error| format!("{site_url}: {error}"))?;
    if url.scheme() != "http" {
        return Err(format!("{site_url}: only http:// is asked on the machine itself").into());
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("{site_url} has no host"))?
        .to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    ask(&host, port, &host, &path).await
}

/// A plain HTTP/1.0 `GET` of `path` at `address:port`, with `host` as the `Host`.
async fn ask(
    address: &str,
    port: u16,
    host: &str,
    path: &str,
) -> Result<u16, crate::domain::recipes::checks::Unanswered> {
    let site_url = format!("http://{host}{path} at {address}:{port}");
    let exchange = async {
        let mut stream = TcpStream::connect((address, port)).await?;
        let request = format!(
            "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: capstan-agent service_health\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut head = vec![0u8; 512];
        let mut read = 0;
        while read < 12 {
            let got = stream.read(&mut head[read..]).await?;
            if got == 0 {
                break;
            }
            read += got;
        }
        Ok::<Vec<u8>, std::io::Error>(head[..read].to_vec())
    };
    let head = match tokio::time::timeout(WEB_TIMEOUT, exchange).await {
        Err(_) => {
            return Err(format!(
                "no answer from {site_url} within {} seconds",
                WEB_TIMEOUT.as_secs()
            )
            .into())
        }
        Ok(Err(error)) => return Err(format!("no answer from {site_url}: {error}").into()),
        Ok(Ok(head)) => head,
    };
    let text = String::from_utf8_lossy(&head);
    text.strip_prefix("HTTP/")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("{site_url} answered something that is not HTTP").into())
}

/// Runs `recipe`'s repair with the target the check derived: the word is the compiled one and
/// the value is checked against its declared shape (the compiled unit list) before it runs;
/// the agent's own unit is refused. Ok with what it did, or why it failed.
pub async fn repair(
    recipe: &Recipe,
    target: Option<&str>,
    config: &Config,
) -> Result<String, String> {
    let Some(name) = recipe.repair_word else {
        return Err(format!("{} has no repair", recipe.name));
    };
    let word = vocabulary::find(name).ok_or_else(|| format!("{name} is not compiled in"))?;
    // The word's one parameter, named as the catalog names it (`unit`, `container`).
    let param = word
        .primitive
        .params
        .first()
        .map_or("unit", |param| param.name);
    let params = match (recipe.node_derived, target) {
        (true, Some(target)) => json!({ param: target }),
        (true, None) => return Err("the check named nothing to repair".into()),
        (false, _) => json!({}),
    };
    word.primitive.check_params(&params)?;
    if params["unit"].as_str() == Some(OWN_UNIT) {
        return Err(format!("{OWN_UNIT} is never restarted by a recipe"));
    }
    match tokio::time::timeout(
        word.primitive.run_budget(),
        words::run(word, &params, config),
    )
    .await
    {
        Err(_) => Err(format!("{name} ran past its budget and was stopped")),
        Ok(Ok(finished)) => Ok(finished.output),
        Ok(Err(failed)) => Err(format!("{}: {}", failed.reason, failed.output)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::Verdict;

    #[tokio::test]
    async fn ag_53_the_site_is_asked_over_http_and_its_status_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let read = socket.read(&mut buffer).await.unwrap();
            let request = String::from_utf8_lossy(&buffer[..read]).to_string();
            assert!(request.contains("Host: 127.0.0.1"));
            socket
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                .await
                .unwrap();
        });
        assert_eq!(
            ask_site(&format!("http://127.0.0.1:{port}/")).await,
            Ok(502)
        );
        drop(TcpStream::connect(("127.0.0.1", port)).await);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        assert!(ask_site(&format!("http://127.0.0.1:{closed_port}/"))
            .await
            .is_err());
    }

    /// AG-55 on a real check: a web server its supervisor reports stopped fails
    /// service_health, targeting it; with the configured data root not mounted the same check
    /// is unknown and targets nothing.
    #[tokio::test]
    async fn ag_55_service_health_repairs_nothing_while_the_data_root_is_stopped() {
        use crate::domain::recipes::Verdict;
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        let supervisorctl = scratch.path().join("supervisorctl");
        std::fs::write(
            &supervisorctl,
            "#!/bin/sh\n[ \"$2\" = nginx ] || { echo \"$2: ERROR (no such process)\"; exit 4; }\necho 'nginx STOPPED'; exit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&supervisorctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let mut config = Config {
            site_root: Some(scratch.path().to_path_buf()),
            postgres: format!("127.0.0.1:{port}"),
            ..Config::default()
        };
        config.services.app_unit = None;
        config.services.site_url = format!("http://127.0.0.1:{port}/");
        config.services.supervisorctl = Some(supervisorctl);
        let recipe = crate::domain::recipes::registry::find("service_health").unwrap();
        let check = super::check(recipe, &config).await;
        assert_eq!(check.verdict, Verdict::Fail, "{}", check.detail);
        assert_eq!(check.target.as_deref(), Some("nginx"));

        let data = scratch.path().join("data");
        std::fs::create_dir(&data).unwrap();
        config.data_root = Some(data);
        let check = super::check(recipe, &config).await;
        assert_eq!(check.verdict, Verdict::Unknown, "{}", check.detail);
        assert_eq!(check.target, None);
        assert!(
            check.detail.contains("is stopped (not mounted)"),
            "{}",
            check.detail
        );
        // A data root that is mounted (here: /) gates nothing.
        config.data_root = Some("/".into());
        assert_eq!(super::check(recipe, &config).await.verdict, Verdict::Fail);
    }

    #[tokio::test]
    async fn ag_49_a_repair_target_outside_the_compiled_units_or_the_agent_itself_is_refused() {
        let recipe = crate::domain::recipes::registry::find("service_health").unwrap();
        let config = Config::default();
        let refused = repair(recipe, Some("sshd"), &config).await.unwrap_err();
        assert!(refused.contains("must be one of"), "{refused}");
        let refused = repair(recipe, Some(OWN_UNIT), &config).await.unwrap_err();
        assert!(refused.contains("never restarted"), "{refused}");
        assert!(repair(recipe, None, &config).await.is_err());
    }

    const SITE: &str = "
server {
    listen 80;
    server_name plain.example.test near.example.test;
    return 301 https://$host$request_uri;
}
server {
    listen 443 ssl;
    server_name near.example.test www.example.test;
}
";

    /// AG-56: the names come from the node's own nginx files and each certificate is read with
    /// SNI over the machine's own connection: a served certificate with fewer than 14 days
    /// fails naming it; once it is replaced by a renewed one the check passes; a web server
    /// that does not answer is unknown.
    #[tokio::test]
    async fn ag_56_a_served_certificate_near_expiry_fails_and_a_renewed_one_passes() {
        let server = capstan_e2e::tls::SniServer::start().await;
        server.serve("near.example.test", 5);
        server.serve("www.example.test", 90);
        let dir = tempfile::tempdir().unwrap();
        let sites = dir.path().join("sites-enabled");
        std::fs::create_dir(&sites).unwrap();
        std::fs::write(sites.join("example"), SITE).unwrap();
        std::fs::write(
            sites.join(".example.swp"),
            "server { listen 443 ssl; server_name hidden.test; }",
        )
        .unwrap();
        let config = Config {
            site_root: Some(dir.path().into()),
            nginx_dirs: vec![sites.clone(), dir.path().join("absent")],
            tls_port: server.port(),
            ..Config::default()
        };
        let recipe = crate::domain::recipes::registry::find("certificate_expiry").unwrap();
        let found = check(recipe, &config).await;
        assert_eq!(found.verdict, Verdict::Fail, "{}", found.detail);
        assert!(
            found
                .detail
                .starts_with("near.example.test's certificate has 4 days left"),
            "{}",
            found.detail
        );
        assert!(
            found.detail.contains("www.example.test: 89 days left"),
            "{}",
            found.detail
        );

        server.serve("near.example.test", 90);
        let renewed = check(recipe, &config).await;
        assert_eq!(renewed.verdict, Verdict::Pass, "{}", renewed.detail);

        std::fs::write(sites.join("broken"), "server { listen 443 ssl;").unwrap();
        let partly = check(recipe, &config).await;
        assert_eq!(partly.verdict, Verdict::Pass);
        assert!(partly.detail.contains("never closed"), "{}", partly.detail);

        drop(server);
        let down = check(recipe, &config).await;
        assert_eq!(down.verdict, Verdict::Unknown, "{}", down.detail);
    }

    /// AG-54, AG-49: the site containers come from the engine's own list over its socket; the
    /// first that does not run or answer is the target, restart_container restarts it through
    /// the engine and the check passes again; a held container is left alone and refused; a
    /// name that is not one of the node's site containers is refused.
    // Two threads: `placement` asks the engine without the runtime, as the loop's start does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ag_54_container_health_restarts_the_first_site_container_that_does_not_answer() {
        use crate::words::test_engine::Engine;
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::start(dir.path()).await;
        engine
            .add("site-a", Some("a.example.test"), "running", true)
            .await;
        engine.add("db", None, "exited", false).await;
        engine
            .add("site-b", Some("b.example.test"), "running", true)
            .await;
        let config = Config {
            docker_socket: engine.socket.clone(),
            container_holds: dir.path().join("sites"),
            ..Config::default()
        };
        assert!(crate::recipes::placement(&config).docker_engine);
        let elsewhere = Config {
            docker_socket: dir.path().join("no.sock"),
            ..config.clone()
        };
        assert!(!crate::recipes::placement(&elsewhere).docker_engine);
        assert!(docker::engine_answers(&elsewhere.docker_socket).is_err());

        let recipe = crate::domain::recipes::registry::find("container_health").unwrap();
        let fine = check(recipe, &config).await;
        assert_eq!(fine.verdict, Verdict::Pass, "{}", fine.detail);

        engine.mute("site-b");
        let mute = check(recipe, &config).await;
        assert_eq!(mute.verdict, Verdict::Fail, "{}", mute.detail);
        assert_eq!(mute.target.as_deref(), Some("site-b"));
        assert!(mute.detail.contains("answered 502"), "{}", mute.detail);
        let did = repair(recipe, mute.target.as_deref(), &config)
            .await
            .unwrap();
        assert!(did.contains("restarted site-b"), "{did}");
        assert_eq!(engine.restarts("site-b"), 1);
        assert_eq!(check(recipe, &config).await.verdict, Verdict::Pass);

        engine.set_state("site-a", "exited");
        let stopped = check(recipe, &config).await;
        assert_eq!(
            stopped.target.as_deref(),
            Some("site-a"),
            "{}",
            stopped.detail
        );

        // Held stopped on purpose: left alone by the check and refused by the word.
        let mark = dir.path().join("sites/a.example.test");
        std::fs::create_dir_all(&mark).unwrap();
        std::fs::write(mark.join("held"), b"").unwrap();
        let held = check(recipe, &config).await;
        assert_eq!(held.verdict, Verdict::Pass, "{}", held.detail);
        let refused = repair(recipe, Some("site-a"), &config).await.unwrap_err();
        assert!(refused.contains("held stopped"), "{refused}");
        assert_eq!(engine.restarts("site-a"), 0);
        assert_eq!(engine.state("site-a"), "exited");

        // Only the node's own site containers, whatever the caller passes.
        let refused = repair(recipe, Some("db"), &config).await.unwrap_err();
        assert!(
            refused.contains("not one of this node's site containers"),
            "{refused}"
        );
        let refused = repair(recipe, Some("../site-a"), &config)
            .await
            .unwrap_err();
        assert!(refused.contains("not a container name"), "{refused}");
        assert_eq!(engine.restarts("db"), 0);

        // The engine's refusal is the repair's failure, in its words.
        std::fs::remove_file(mark.join("held")).unwrap();
        engine.set_restart_fails(true);
        let failed = repair(recipe, Some("site-a"), &config).await.unwrap_err();
        assert!(failed.contains("Cannot restart container"), "{failed}");
    }
}
