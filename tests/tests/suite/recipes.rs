//! Recipes end to end (issue 13): the real agent binary, on a one-second recipe tick, beside a
//! real HTTP server standing in for the site's web server, supervised by a stand-in for
//! supervisord's `supervisorctl` that the test controls (a small shell script that starts,
//! stops and reports the server), against the real plane.
//!
//! * AG-42, AG-53: the web server stops answering; `service_health` restarts it through the
//!   supervisor only after two consecutive failing ticks, and the repair is verified.
//! * AG-43, AG-44, AG-59, AG-60, AC-47, IN-11: a web server the supervisor cannot restart spends
//!   the three attempts, the escalation is a case on the next claim and an incident on the
//!   plane; when it answers again the check passes, the case closes and the incident clears.
//! * AG-45: under `hold/service_health` (a directory only root may write) the failing check is
//!   ledgered `held` on every tick and repairs nothing; it spends no attempt, so it never
//!   reaches the escalation and opens no case (AG-45 says held and repairs nothing; AG-44's
//!   case is the fourth attempt's) while the plane sees the recipe failing. Opened to its
//!   group, the hold directory is ignored (`hold_ignored`) and the repair runs.

use capstan_e2e::heard::published;
use capstan_e2e::{agent::Agent, plane::Plane, wait_for};
use capstan_events::agent_channel::NodeReported;
use capstan_events::NodeId;
use serde_json::Value;
use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use crate::incidents::{incidents_of, plane_with, wait_incident, PATIENCE};

/// The stand-in supervisor: `status <program>` and `restart <program>` for the one program it
/// runs, `nginx` (a Python HTTP server on the given port); any other program is not supervised
/// here (exit 4, as supervisorctl says "no such process"). While the file `broken` exists a
/// restart fails, as a web server whose configuration no longer loads would.
fn supervisor_script(dir: &Path, port: u16) -> String {
    let dir = dir.display();
    format!(
        r#"#!/bin/sh
DIR={dir}
running() {{ [ -f "$DIR/pid" ] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; }}
[ "$2" = nginx ] || {{ echo "$2: ERROR (no such process)"; exit 4; }}
case "$1" in
status)
    if running; then echo "nginx RUNNING pid $(cat "$DIR/pid")"; exit 0; fi
    echo "nginx STOPPED"; exit 3 ;;
restart)
    echo restart >> "$DIR/restarts"
    if running; then kill "$(cat "$DIR/pid")"; fi
    if [ -f "$DIR/broken" ]; then echo "nginx: ERROR (spawn error)"; exit 7; fi
    /usr/bin/python3 -m http.server --bind 127.0.0.1 --directory "$DIR/www" {port} >/dev/null 2>&1 &
    echo $! > "$DIR/pid"
    echo "nginx: started"; exit 0 ;;
esac
echo "unknown action $1"; exit 2
"#
    )
}

/// The supervised web server, stopped when the test ends.
struct WebServer {
    dir: PathBuf,
    port: u16,
}

impl WebServer {
    fn new(under: &Path) -> WebServer {
        let dir = under.join("supervisor");
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/index.html"), "the site\n").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = dir.join("supervisorctl");
        std::fs::write(&script, supervisor_script(&dir, port)).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        WebServer { dir, port }
    }

    fn supervisorctl(&self) -> PathBuf {
        self.dir.join("supervisorctl")
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// What the test does by hand: start (or restart) the server through the supervisor.
    fn restart_by_hand(&self) {
        let status = std::process::Command::new(self.supervisorctl())
            .args(["restart", "nginx"])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn pid(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("pid"))
            .ok()
            .map(|pid| pid.trim().to_string())
    }

    /// Stops the server behind the supervisor's back (it crashed).
    fn crash(&self) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill").arg(&pid).status();
        }
    }

    fn restarts(&self) -> usize {
        std::fs::read_to_string(self.dir.join("restarts"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    fn set_broken(&self, broken: bool) {
        let flag = self.dir.join("broken");
        if broken {
            std::fs::write(flag, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    async fn answers(&self) -> bool {
        reqwest::get(self.url())
            .await
            .is_ok_and(|answer| answer.status().is_success())
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.crash();
    }
}

/// A real agent whose `service_health` watches `web` (no app server; PostgreSQL is the test
/// database's, not supervised here) on a one-second tick, paired with `plane`.
async fn agent_beside(plane: &Plane, web: &WebServer, name: &str) -> (Agent, i64) {
    let mut agent = Agent::new(capstan_e2e::agent::binary());
    agent.set_env("CAPSTAN_AGENT_RECIPE_TICK_SECS", "1");
    // The fake supervisorctl starts the web server and keeps its pid in its own directory.
    agent.set_stand_in_dir(&web.dir);
    agent.set_env(
        "CAPSTAN_AGENT_SUPERVISORCTL",
        &web.supervisorctl().display().to_string(),
    );
    agent.set_env("CAPSTAN_AGENT_SITE_URL", &web.url());
    agent.set_env("CAPSTAN_AGENT_WEB_UNIT", "nginx");
    agent.set_env("CAPSTAN_AGENT_APP_UNIT", "none");
    // postgres://user@host[:port]/database: where the test's PostgreSQL answers.
    let url = plane.database.url().to_string();
    let address = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap();
    let address = if address.contains(':') {
        address.to_string()
    } else {
        format!("{address}:5432")
    };
    agent.set_env("CAPSTAN_AGENT_POSTGRES", &address);
    let node = agent.paired(plane, name).await;
    (agent, node)
}

/// The recipe's root-only ledger, line by line.
fn ledger(agent: &Agent, recipe: &str) -> Vec<Value> {
    std::fs::read_to_string(agent.file(&format!("ledger/{recipe}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn event(line: &Value) -> String {
    let name = line["event"].as_str().unwrap_or_default();
    match (line["verdict"].as_str(), line["outcome"].as_str()) {
        (Some(verdict), _) => format!("{name}:{verdict}"),
        (_, Some(outcome)) => format!("{name}:{outcome}"),
        _ => name.to_string(),
    }
}

async fn wait_ledger(agent: &Agent, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
    wait_for(what, PATIENCE, || async {
        let events: Vec<String> = ledger(agent, "service_health").iter().map(event).collect();
        check(&events).then_some(events)
    })
    .await
}

/// AG-42, AG-53, AG-47: a web server that stops answering is restarted by `service_health`
/// through its supervisor after two failing ticks, and the repair is verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_53_a_web_server_that_stops_answering_is_restarted_after_two_failing_ticks() {
    let plane = plane_with(&[]).await;
    let scratch = tempfile::tempdir().unwrap();
    let web = WebServer::new(scratch.path());
    web.restart_by_hand();
    wait_for("the web server to answer", PATIENCE, || async {
        web.answers().await.then_some(())
    })
    .await;
    let (agent, _node) = agent_beside(&plane, &web, "web-recipes-repair").await;
    wait_ledger(&agent, "service_health to pass", |events| {
        events.iter().any(|e| e == "check:pass")
    })
    .await;
    let restarts_before = web.restarts();

    web.crash();
    let events = wait_ledger(&agent, "the repair to be verified", |events| {
        events.iter().any(|e| e == "outcome:repaired")
    })
    .await;
    // After the pass: exactly two failing ticks, then the attempt, then its verified outcome.
    let since_pass: Vec<&str> = events
        .iter()
        .skip_while(|e| *e != "check:pass")
        .skip(1)
        .take(4)
        .map(String::as_str)
        .collect();
    assert_eq!(
        since_pass,
        ["check:fail", "check:fail", "attempt", "outcome:repaired"],
        "{events:?}"
    );
    assert_eq!(web.restarts(), restarts_before + 1, "one restart");
    assert!(web.answers().await, "the web server answers again");
    let attempt = ledger(&agent, "service_health")
        .into_iter()
        .find(|line| line["event"] == "attempt")
        .unwrap();
    assert_eq!(attempt["word"], "restart_unit");
    assert_eq!(attempt["target"], "nginx", "the unit the check derived");
    // The outward copy holds the same lines.
    let outward =
        std::fs::read_to_string(agent.site().join("cache/recipes/service_health.jsonl")).unwrap();
    assert!(outward.contains("\"outcome\":\"repaired\""));
    let shown = agent.ok(&["recipes"]).await;
    assert!(shown.contains("service_health: armed (repairs)"), "{shown}");
}

/// AG-43, AG-44, AG-59, AG-60, AC-47, IN-11: a web server the supervisor cannot restart spends
/// the budget; the escalation rides the next claim as a case and becomes an incident; when the
/// server answers again the case closes and the incident clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_44_a_repair_that_cannot_work_becomes_a_case_an_incident_and_clears_when_it_passes() {
    let plane = plane_with(&[]).await;
    let scratch = tempfile::tempdir().unwrap();
    let web = WebServer::new(scratch.path());
    web.restart_by_hand();
    let (agent, node) = agent_beside(&plane, &web, "web-recipes-case").await;
    wait_ledger(&agent, "service_health to pass", |events| {
        events.iter().any(|e| e == "check:pass")
    })
    .await;

    web.set_broken(true);
    web.crash();
    let events = wait_ledger(&agent, "the escalation", |events| {
        events.iter().any(|e| e == "escalation")
    })
    .await;
    let attempts = events.iter().filter(|e| *e == "attempt").count();
    assert_eq!(
        attempts, 3,
        "three attempts, then the escalation: {events:?}"
    );
    let shown = agent.ok(&["recipes"]).await;
    assert!(shown.contains("open case: 1 since"), "{shown}");

    let opened = wait_incident(
        &plane,
        node,
        "agent:service_health",
        "the case's incident",
        |incident| incident["status"] == "open",
    )
    .await;
    assert_eq!(opened["severity"], "warning");
    assert!(
        opened["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("the web server (nginx)"),
        "{opened}"
    );
    // The body rode with it: the attempts that spent the budget, and a fresh host report.
    // (Read from the claim's `node_reported`, the event the incidents service took it from.)
    let reported = published::<NodeReported>(&plane.bus, "the case's body", |reported| {
        reported.node_id == NodeId(node)
            && reported.facts["cases"]["recipe:service_health"]["body"].is_object()
    })
    .await;
    let body = reported.data.facts["cases"]["recipe:service_health"]["body"].clone();
    assert_eq!(body["mode"], "armed");
    assert_eq!(body["attempts"].as_array().unwrap().len(), 3, "{body}");
    assert_eq!(body["attempts"][0]["word"], "restart_unit");
    assert_eq!(body["attempts"][0]["outcome"], "failed");
    assert!(body["host_report"]["kernel"].is_string(), "{body}");

    // A person mends the web server; the check passes and the node closes its case.
    web.set_broken(false);
    web.restart_by_hand();
    wait_ledger(&agent, "the case to close", |events| {
        events.iter().any(|e| e == "escalation_closed")
    })
    .await;
    let cleared = wait_incident(
        &plane,
        node,
        "agent:service_health",
        "the incident to clear",
        |incident| incident["status"] == "closed",
    )
    .await;
    assert_eq!(cleared["id"], opened["id"]);
}

/// AG-45: a held recipe's failing check is ledgered `held` on every failing tick, repairs
/// nothing and opens no case (the plane sees it failing, with no case and no incident); a hold
/// directory its group may write is ignored (`hold_ignored`) and the repair runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_45_a_held_recipe_repairs_nothing_and_a_hold_directory_others_may_write_is_ignored() {
    use std::os::unix::fs::DirBuilderExt;
    let plane = plane_with(&[]).await;
    let scratch = tempfile::tempdir().unwrap();
    let web = WebServer::new(scratch.path());
    web.restart_by_hand();
    let (agent, node) = agent_beside(&plane, &web, "web-recipes-hold").await;
    wait_ledger(&agent, "service_health to pass", |events| {
        events.iter().any(|e| e == "check:pass")
    })
    .await;

    // The hold, as an operator sets it: root's directory (this test and the agent run as
    // root), writable by root alone.
    let hold = agent.file("hold");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&hold)
        .unwrap();
    std::fs::write(hold.join("service_health"), b"").unwrap();
    let restarts_before = web.restarts();
    web.crash();
    let since_pass = |events: &[String]| -> Vec<String> {
        events
            .iter()
            .skip_while(|e| *e != "check:pass")
            .skip(1)
            .cloned()
            .collect()
    };
    let events = wait_ledger(&agent, "five held failing ticks", |events| {
        since_pass(events).iter().filter(|e| *e == "held").count() >= 5
    })
    .await;
    let held = since_pass(&events);
    assert!(
        held.iter().all(|e| e == "check:fail" || e == "held"),
        "held, and nothing else: {held:?}"
    );
    assert_eq!(&held[..4], ["check:fail", "held", "check:fail", "held"]);
    assert_eq!(web.restarts(), restarts_before, "nothing was restarted");
    assert!(!web.answers().await);
    let shown = agent.ok(&["recipes"]).await;
    assert!(shown.contains("hold: held"), "{shown}");
    assert!(shown.contains("attempts in this run: 0 of 3"), "{shown}");

    // The plane sees the recipe failing, and no case rides: no incident.
    let facts = wait_for(
        "the plane to see service_health failing",
        PATIENCE,
        || async {
            let view = plane.node(node).await;
            // Issue 27: and hears of the hold, so its Recipes tab can say why nothing repairs.
            let failing = view["facts"]["recipes"].as_array()?.iter().any(|r| {
                r["name"] == "service_health" && r["verdict"] == "fail" && r["hold"] == "held"
            });
            failing.then_some(view["facts"].clone())
        },
    )
    .await;
    assert!(
        facts["cases"].get("recipe:service_health").is_none(),
        "a held recipe opens no case: {facts}"
    );
    assert!(incidents_of(&plane, node, "agent:service_health")
        .await
        .is_empty());

    // Its group may write the hold directory now: the marker is ignored and the repair runs
    // at once (the held ticks counted toward the two-tick gate).
    std::fs::set_permissions(&hold, std::fs::Permissions::from_mode(0o770)).unwrap();
    let events = wait_ledger(&agent, "the repair once the hold is ignored", |events| {
        events.iter().any(|e| e == "outcome:repaired")
    })
    .await;
    let after: Vec<&str> = events
        .iter()
        .skip_while(|e| *e != "hold_ignored")
        .take(3)
        .map(String::as_str)
        .collect();
    assert_eq!(
        after,
        ["hold_ignored", "attempt", "outcome:repaired"],
        "{events:?}"
    );
    let ignored = ledger(&agent, "service_health")
        .into_iter()
        .find(|line| line["event"] == "hold_ignored")
        .unwrap();
    assert!(
        ignored["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("mode 770"),
        "{ignored}"
    );
    assert_eq!(web.restarts(), restarts_before + 1, "one restart");
    assert!(web.answers().await);
    assert!(incidents_of(&plane, node, "agent:service_health")
        .await
        .is_empty());
    let ignored = wait_for(
        "the plane to hear the hold is ignored",
        PATIENCE,
        || async {
            let view = plane.node(node).await;
            view["facts"]["recipes"]
                .as_array()?
                .iter()
                .find(|r| r["name"] == "service_health" && r["hold"] == "ignored")
                .cloned()
        },
    )
    .await;
    assert!(
        ignored["hold_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("mode 770"),
        "{ignored}"
    );
}
