//! Site releases rolled out to real agents (issue 16): the release is made and published by the
//! real `capstan release site`, the rollouts service runs as a process of its own (so it can be
//! killed with SIGKILL), and every node is a real `capstan-agent` with a site directory the test
//! creates and a web server of the test's own serving that site's `current` release, which its
//! `page_probe` fetches. What each node did is read back from its disk (`current`, the hook's
//! log) and from the operator API's job listing.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_e2e::{
    agent::Agent,
    pages::{Pages, ERROR_MARKER},
    plane::Plane,
    process::ServiceProcess,
    wait_for,
};
use capstan_events::Domain;
use capstan_signing::NodeKey;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::rollouts::{ask_start, projected, rollout, start_rollout, wait_state};

/// The test's site release key: its secret never leaves the test.
const KEY_SEED: [u8; 32] = [11; 32];

fn release_key() -> NodeKey {
    NodeKey::from_secret_bytes(&KEY_SEED).unwrap()
}

/// The deploy hook every test release carries: it logs each deploy to the shared directory,
/// and fails (exit 3) on a node whose shared directory holds `fail-deploy`. While the shared
/// directory holds `hold-deploy` it waits (having said so in `deploying`), so a test can act
/// while an apply is under way on a node.
const HOOK: &str = "#!/bin/sh\n\
echo \"$CAPSTAN_RELEASE_VERSION\" > \"$CAPSTAN_SHARED_DIR/deploying\"\n\
while [ -e \"$CAPSTAN_SHARED_DIR/hold-deploy\" ]; do sleep 0.2; done\n\
if [ -e \"$CAPSTAN_SHARED_DIR/fail-deploy\" ]; then echo \"refusing on this node\"; exit 3; fi\n\
echo \"$CAPSTAN_RELEASE_VERSION from ${CAPSTAN_PREVIOUS_VERSION:-none}\" >> \"$CAPSTAN_SHARED_DIR/deploys.log\"\n";

/// One managed machine: a real agent, its site and the web server in front of it.
struct Node {
    agent: Agent,
    pages: Pages,
    id: i64,
}

impl Node {
    fn root(&self) -> PathBuf {
        self.agent.site()
    }

    /// The version `current` points at.
    fn current(&self) -> Option<String> {
        std::fs::read_link(self.root().join("current"))
            .ok()
            .map(|target| target.file_name().unwrap().to_string_lossy().into_owned())
    }

    fn deploys(&self) -> String {
        std::fs::read_to_string(self.root().join("shared/deploys.log")).unwrap_or_default()
    }
}

/// Starts an agent whose site is laid out for releases and served by its own web server, held
/// keys trusting the test's release key, and pairs it with `plane`.
async fn node(plane: &Plane, name: &str) -> Node {
    node_with(plane, name, &[]).await
}

/// [`node`], the agent started with `env` besides.
async fn node_with(plane: &Plane, name: &str, env: &[(&str, &str)]) -> Node {
    node_set_up(plane, name, env, JoinedWith::SiteRoot).await
}

/// How a test node's agent is told where its site is.
#[derive(Clone, Copy, PartialEq)]
enum JoinedWith {
    /// `--site-root` at its join and every command, besides `site.json`.
    SiteRoot,
    /// Only `site.json` names the root, as docs/site-releases.md sets a node up.
    SiteJsonAlone,
}

async fn node_set_up(plane: &Plane, name: &str, env: &[(&str, &str)], joined: JoinedWith) -> Node {
    let mut agent = Agent::new(capstan_e2e::agent::binary());
    if joined == JoinedWith::SiteJsonAlone {
        agent.set_siteless();
    }
    for (key, value) in env {
        agent.set_env(key, value);
    }
    let root = agent.site();
    std::fs::create_dir_all(root.join("shared/logs")).unwrap();
    std::fs::write(root.join("shared/logs/error.log"), "").unwrap();
    let pages = Pages::start(&root).await;
    agent
        .ok(&[
            "join",
            &format!("--management-node={}", plane.base),
            &format!("--name={name}"),
            "--no-wait",
        ])
        .await;
    let state = agent.state_dir();
    let site = json!({"root": root, "release": {"base_url": pages.base_url(), "keep": 3}});
    std::fs::write(state.join("site.json"), site.to_string()).unwrap();
    std::fs::set_permissions(
        state.join("site.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(
        state.join("release_keys"),
        format!("{}\n", release_key().public_key().to_base64()),
    )
    .unwrap();
    std::fs::set_permissions(
        state.join("release_keys"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    agent.ok(&["enable"]).await;
    let id = plane.approve(&agent.fingerprint()).await;
    agent.start();
    plane.wait_online(id).await;
    Node { agent, pages, id }
}

async fn fleet(plane: &Plane, count: usize) -> Vec<Node> {
    let mut nodes = Vec::new();
    for index in 0..count {
        nodes.push(node(plane, &format!("web-{index}")).await);
    }
    let ids: Vec<i64> = nodes.iter().map(|node| node.id).collect();
    projected(plane, &ids).await;
    nodes
}

/// The `capstan` binary beside the test binary (built with the workspace).
fn capstan_binary() -> PathBuf {
    let capstan = capstan_e2e::agent::binary().with_file_name("capstan");
    assert!(
        capstan.is_file(),
        "{} is missing: build it with `cargo build -p capstan`",
        capstan.display()
    );
    capstan
}

/// A site directory: its page (with whatever `index` holds), the assets it names and the hook.
fn site_dir(dir: &Path, index: &str, assets: &[&str]) {
    std::fs::create_dir_all(dir.join("public")).unwrap();
    std::fs::create_dir_all(dir.join("deploy")).unwrap();
    std::fs::write(dir.join("public/index.html"), index).unwrap();
    for asset in assets {
        std::fs::write(dir.join("public").join(asset), format!("/* {asset} */")).unwrap();
    }
    std::fs::write(dir.join("deploy/hook"), HOOK).unwrap();
    std::fs::set_permissions(
        dir.join("deploy/hook"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

/// A page that loads `/app.js`.
fn page_with_script(body: &str) -> String {
    format!("<html><head><script src=\"/app.js\"></script></head><body>{body}</body></html>")
}

/// Makes and publishes a site release with the real `capstan release site`.
fn publish(plane: &Plane, work: &Path, version: &str, index: &str, assets: &[&str]) {
    let output = publish_with(plane, work, version, index, assets, &[]);
    assert!(
        output.status.success(),
        "capstan release site: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `capstan release site` with `extra` arguments; what it said.
fn publish_with(
    plane: &Plane,
    work: &Path,
    version: &str,
    index: &str,
    assets: &[&str],
    extra: &[&str],
) -> std::process::Output {
    let dir = work.join(format!("site-{version}"));
    site_dir(&dir, index, assets);
    let key = work.join("release.key");
    std::fs::write(&key, format!("{}\n", STANDARD.encode(KEY_SEED))).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = work.join("admin.token");
    std::fs::write(&token, &plane.admin).unwrap();
    std::process::Command::new(capstan_binary())
        .args(["release", "site"])
        .arg(format!("--key={}", key.display()))
        .arg(format!("--version={version}"))
        .arg(format!("--dir={}", dir.display()))
        .arg(format!(
            "--out={}",
            work.join(format!("out-{version}")).display()
        ))
        .arg(format!("--plane={}", plane.base))
        .arg(format!("--token-file={}", token.display()))
        .args(extra)
        .output()
        .unwrap()
}

/// RO-11, RO-12, RO-13 and the durable-workflow decision, with real agents: a published site
/// release goes to five nodes in two stages, probing each node's page before and after; the
/// rollouts service is killed with SIGKILL while the second stage is out on its nodes and
/// started again; the rollout finishes, every node's `current` points at the release and its
/// hook ran once, and the jobs table shows each node applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_11_ro_12_five_real_agents_take_a_published_site_release_in_two_stages_through_a_kill_9()
{
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let mut service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let nodes = fleet(&plane, 5).await;
    let work = tempfile::tempdir().unwrap();
    publish(
        &plane,
        work.path(),
        "2.0.0",
        &page_with_script("two"),
        &["app.js"],
    );
    let (status, listed) = plane
        .api(&plane.reader, "GET", "/api/v1/site-releases", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["releases"][0]["version"], "2.0.0", "{listed}");

    let ids: Vec<i64> = nodes.iter().map(|node| node.id).collect();
    let id = start_rollout(
        &plane,
        json!({"version": "2.0.0", "pages": "anonymous /",
               "stages": [{"nodes": [ids[0]]}, {"nodes": ids[1..]}]}),
    )
    .await;
    // Kill the service once the second stage's applies are out on their nodes.
    wait_for(
        "the second stage's applies to be queued",
        Duration::from_secs(120),
        || async {
            let applies = plane.jobs_per_node("apply_update").await;
            (applies.len() >= 3).then_some(())
        },
    )
    .await;
    service.kill9().await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;

    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(
        (done["passed"].clone(), done["failed"].clone()),
        (json!(5), json!(0)),
        "{done}"
    );
    for node in &nodes {
        assert_eq!(node.current().as_deref(), Some("2.0.0"), "node {}", node.id);
        assert_eq!(node.deploys(), "2.0.0 from none\n", "node {}", node.id);
        assert!(node.pages.requests().iter().any(|path| path == "/app.js"));
    }
    let once: Vec<(i64, i64)> = ids.iter().map(|node| (*node, 1)).collect();
    assert_eq!(plane.jobs_per_node("apply_update").await, once);
    // Probed before and after on each node.
    let twice: Vec<(i64, i64)> = ids.iter().map(|node| (*node, 2)).collect();
    assert_eq!(plane.jobs_per_node("page_probe").await, twice);
}

/// RO-11, RO-14 with real agents: a node whose deploy hook fails switches its `current` back
/// and the rollout halts naming it, the node after it never started; with a budget of one the
/// same miss is held and the stage carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_14_a_real_deploy_hook_that_fails_halts_naming_the_node_and_a_budget_of_one_carries_on()
{
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let nodes = fleet(&plane, 3).await;
    let work = tempfile::tempdir().unwrap();
    publish(&plane, work.path(), "3.0.0", "<p>three</p>", &[]);
    std::fs::write(nodes[1].root().join("shared/fail-deploy"), "").unwrap();
    let ids: Vec<i64> = nodes.iter().map(|node| node.id).collect();

    let one_a_stage: Vec<Value> = ids.iter().map(|id| json!({"nodes": [id]})).collect();
    let id = start_rollout(&plane, json!({"version": "3.0.0", "stages": one_a_stage})).await;
    let halted = wait_state(&plane, id, "halted").await;
    assert_eq!(halted["halted_at_node"], ids[1], "{halted}");
    let reason = halted["halt_reason"].as_str().unwrap();
    assert!(
        reason.contains("deploy hook") && reason.contains("exit 3"),
        "{reason}"
    );
    assert_eq!(nodes[0].current().as_deref(), Some("3.0.0"));
    assert_eq!(
        nodes[1].current(),
        None,
        "the failed node was switched back"
    );
    assert_eq!(
        nodes[2].current(),
        None,
        "the node after the miss was never started"
    );
    assert!(plane
        .jobs_per_node("upgrade_preflight")
        .await
        .iter()
        .all(|(node, _)| *node != ids[2]));

    let id = start_rollout(
        &plane,
        json!({"version": "3.0.0", "stages": [{"nodes": ids[1..], "max_failed": 1}]}),
    )
    .await;
    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(
        (done["passed"].clone(), done["failed"].clone()),
        (json!(1), json!(1)),
        "{done}"
    );
    assert_eq!(nodes[1].current(), None);
    assert_eq!(nodes[2].current().as_deref(), Some("3.0.0"));
}

/// RO-21, RO-22 with a real agent and web server: a release whose page raises an error and no
/// longer loads an asset it loaded before halts the rollout through the probe rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_22_a_page_that_breaks_after_the_apply_halts_through_the_probe_rule() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let nodes = fleet(&plane, 1).await;
    let work = tempfile::tempdir().unwrap();
    let ids = vec![nodes[0].id];
    publish(
        &plane,
        work.path(),
        "4.0.0",
        &page_with_script("four"),
        &["app.js"],
    );
    let id = start_rollout(
        &plane,
        json!({"version": "4.0.0", "pages": "anonymous /", "stages": [{"nodes": ids}]}),
    )
    .await;
    wait_state(&plane, id, "finished").await;

    // 4.1.0 forgets app.js and its page raises an error as it is served.
    publish(
        &plane,
        work.path(),
        "4.1.0",
        &page_with_script(ERROR_MARKER),
        &[],
    );
    let id = start_rollout(
        &plane,
        json!({"version": "4.1.0", "pages": "anonymous /", "stages": [{"nodes": ids}]}),
    )
    .await;
    let halted = wait_state(&plane, id, "halted").await;
    assert_eq!(halted["halted_at_node"], nodes[0].id, "{halted}");
    let reason = halted["halt_reason"].as_str().unwrap();
    assert!(
        reason.contains("page anonymous / raised 1 errors after the apply, 0 before"),
        "{reason}"
    );
    // The apply itself passed: the probe rule is what halted it.
    assert_eq!(nodes[0].current().as_deref(), Some("4.1.0"));
}

/// RO-23, RO-24 with real agents: a publish that asks for the deploy to all starts the rollout
/// to every node at once, records it on the release, and the rollout puts the release on every
/// node. A version is published once: publishing it again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_23_ro_24_a_publish_with_deploy_all_rolls_the_release_out_to_every_node() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let nodes = fleet(&plane, 2).await;
    let work = tempfile::tempdir().unwrap();
    let output = publish_with(
        &plane,
        work.path(),
        "5.0.0",
        "<p>five</p>",
        &[],
        &["--deploy-all"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, listed) = plane
        .api(&plane.reader, "GET", "/api/v1/site-releases", None)
        .await;
    let release = &listed["releases"][0];
    assert_eq!(release["deploy_all_outcome"], "started", "{listed}");
    let id = release["deploy_all_rollout"].as_i64().unwrap();
    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(done["passed"], 2, "{done}");
    for node in &nodes {
        assert_eq!(node.current().as_deref(), Some("5.0.0"), "node {}", node.id);
    }
    let again = publish_with(&plane, work.path(), "5.0.0", "<p>other</p>", &[], &[]);
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("409") && said.contains("already published"),
        "{said}"
    );
}

/// Issue 27: a node set up as docs/site-releases.md says (no `--site-root` at its join, its root
/// named only by `site.json`) reports that root with its claims; the plane takes it, and a
/// rollout of a site release reaches the node instead of refusing it as hosting no site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joined_without_a_site_root_but_with_a_site_json_takes_a_site_release() {
    let plane = Plane::start().await;
    let node = node_set_up(&plane, "web-0", &[], JoinedWith::SiteJsonAlone).await;
    let root = node.root().display().to_string();
    wait_for(
        "the plane to know the site root site.json names",
        Duration::from_secs(60),
        || async { (plane.node(node.id).await["site_root"] == root).then_some(()) },
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    publish(&plane, work.path(), "6.0.0", "<p>six</p>", &[]);
    // A refused start changes nothing, so it is asked again until the rollouts service has
    // heard of the node's words and its site; any refusal but those fails the test.
    let body = json!({"version": "6.0.0", "stages": [{"nodes": [node.id]}]});
    let id = wait_for(
        "the rollouts service to take the node as hosting a site",
        Duration::from_secs(60),
        || async {
            let (status, answer) = ask_start(&plane, body.clone()).await;
            if status == StatusCode::OK {
                return answer["id"].as_i64();
            }
            let said = answer.to_string();
            assert!(
                said.contains("hosts no site") || said.contains("does not report"),
                "{status}: {said}"
            );
            None
        },
    )
    .await;
    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(done["passed"], 1, "{done}");
    assert_eq!(node.current().as_deref(), Some("6.0.0"));
    assert_eq!(node.deploys(), "6.0.0 from none\n");
}

async fn act(plane: &Plane, id: i64, act: &str) -> Value {
    let (status, view) = plane
        .api(
            &plane.changer,
            "POST",
            &format!("/api/v1/rollouts/{id}/{act}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{act}: {view}");
    view
}

/// The step of `node` in a rollout's view.
fn step_of(view: &Value, node: i64) -> Value {
    view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["node_id"] == node)
        .cloned()
        .unwrap_or_else(|| panic!("no step for node {node}: {view}"))
}

impl Node {
    /// Holds this node's next deploy hook until [`Node::release`].
    fn hold(&self) {
        let _ = std::fs::remove_file(self.root().join("shared/deploying"));
        std::fs::write(self.root().join("shared/hold-deploy"), "").unwrap();
    }

    fn release(&self) {
        std::fs::remove_file(self.root().join("shared/hold-deploy")).unwrap();
    }

    /// Waits until this node's hook for `version` is running (held).
    async fn wait_deploying(&self, version: &str) {
        let file = self.root().join("shared/deploying");
        wait_for(
            &format!("node {}'s deploy hook of {version} to run", self.id),
            Duration::from_secs(120),
            || {
                let file = file.clone();
                async move {
                    (std::fs::read_to_string(&file).unwrap_or_default().trim() == version)
                        .then_some(())
                }
            },
        )
        .await;
    }
}

/// RO-15 and pause/resume with real agents: a rollout paused while the first stage's node is in
/// the middle of its apply lets that apply finish (the node is on the release, its step passed)
/// but starts nothing new — the next stage's nodes are asked for nothing, readiness check nor
/// apply — until it is resumed, and then it carries on to finished. A second rollout stopped
/// while its first node applies ends at once (`stopped`): the apply under way finishes on its
/// node, and the remaining nodes are never applied, as the jobs table shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_15_pause_resume_and_stop_with_real_agents() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let nodes = fleet(&plane, 3).await;
    let ids: Vec<i64> = nodes.iter().map(|node| node.id).collect();
    let work = tempfile::tempdir().unwrap();
    publish(&plane, work.path(), "6.0.0", "<p>six</p>", &[]);
    let stages = json!([{"nodes": [ids[0]]}, {"nodes": ids[1..]}]);

    // Pause while the first node's hook runs.
    nodes[0].hold();
    let id = start_rollout(&plane, json!({"version": "6.0.0", "stages": stages})).await;
    nodes[0].wait_deploying("6.0.0").await;
    let paused = act(&plane, id, "pause").await;
    assert_eq!(paused["state"], "paused", "{paused}");
    nodes[0].release();
    // The apply under way finishes and is judged...
    let judged = wait_for(
        "the first node's apply to be judged while paused",
        Duration::from_secs(120),
        || async {
            let view = rollout(&plane, id).await;
            (step_of(&view, ids[0])["verdict"] == "passed").then_some(view)
        },
    )
    .await;
    assert_eq!(judged["state"], "paused", "{judged}");
    assert_eq!(nodes[0].current().as_deref(), Some("6.0.0"));
    // ...and nothing new starts: the second stage's nodes are asked for nothing while paused
    // (their agents poll all along).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held = rollout(&plane, id).await;
    assert_eq!(held["state"], "paused", "{held}");
    for node in &nodes[1..] {
        assert_eq!(step_of(&held, node.id)["phase"], "waiting", "{held}");
        assert_eq!(node.current(), None, "node {}", node.id);
    }
    assert_eq!(
        plane.jobs_per_node("upgrade_preflight").await,
        vec![(ids[0], 1)]
    );
    assert_eq!(plane.jobs_per_node("apply_update").await, vec![(ids[0], 1)]);
    // Resume: it carries on to finished, every node applied once.
    let resumed = act(&plane, id, "resume").await;
    assert_eq!(resumed["state"], "running", "{resumed}");
    let done = wait_state(&plane, id, "finished").await;
    assert_eq!(
        (done["passed"].clone(), done["failed"].clone()),
        (json!(3), json!(0)),
        "{done}"
    );
    for node in &nodes {
        assert_eq!(node.current().as_deref(), Some("6.0.0"), "node {}", node.id);
    }
    let once: Vec<(i64, i64)> = ids.iter().map(|node| (*node, 1)).collect();
    assert_eq!(plane.jobs_per_node("apply_update").await, once);

    // Stop while the first node applies 6.1.0: the rollout ends at once.
    publish(&plane, work.path(), "6.1.0", "<p>six one</p>", &[]);
    nodes[0].hold();
    let id = start_rollout(&plane, json!({"version": "6.1.0", "stages": stages})).await;
    nodes[0].wait_deploying("6.1.0").await;
    let stopped = act(&plane, id, "stop").await;
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    for node in &nodes[1..] {
        let step = step_of(&stopped, node.id);
        assert_eq!(step["verdict"], "skipped", "{stopped}");
        assert!(
            step["reason"].as_str().unwrap().contains("stopped"),
            "{stopped}"
        );
    }
    // The apply already running finishes on its node and is recorded on its step.
    nodes[0].release();
    let recorded = wait_for(
        "the running apply to be recorded after the stop",
        Duration::from_secs(120),
        || async {
            let view = rollout(&plane, id).await;
            (step_of(&view, ids[0])["verdict"] == "passed").then_some(view)
        },
    )
    .await;
    assert_eq!(recorded["state"], "stopped", "{recorded}");
    assert_eq!(nodes[0].current().as_deref(), Some("6.1.0"));
    // The remaining nodes were never applied: still on 6.0.0, one apply each in the jobs
    // table (6.0.0's), the first node two.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for node in &nodes[1..] {
        assert_eq!(node.current().as_deref(), Some("6.0.0"), "node {}", node.id);
    }
    assert_eq!(
        plane.jobs_per_node("apply_update").await,
        vec![(ids[0], 2), (ids[1], 1), (ids[2], 1)]
    );
    assert_eq!(
        plane.jobs_per_node("upgrade_preflight").await,
        vec![(ids[0], 2), (ids[1], 1), (ids[2], 1)]
    );
}

/// AG-34 and AG-37 with a real agent on a one-second manifest clock: after a rollout installed
/// a release, its deploy hook edited on the node is written back from the copy the agent kept,
/// and its signed manifest, deleted, is fetched again from the plane, verified and written back
/// into the release — byte for byte what was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_34_ag_37_the_manifest_clock_recovers_a_lost_manifest_and_writes_back_an_edited_hook() {
    let plane = Plane::start_without(&[Domain::Rollouts], &[]).await;
    let _service = ServiceProcess::start(&plane, Domain::Rollouts).await;
    let node = node_with(
        &plane,
        "web-0",
        &[("CAPSTAN_AGENT_MANIFEST_TICK_SECS", "1")],
    )
    .await;
    projected(&plane, &[node.id]).await;
    let work = tempfile::tempdir().unwrap();
    publish(&plane, work.path(), "7.0.0", "<p>seven</p>", &[]);
    let id = start_rollout(
        &plane,
        json!({"version": "7.0.0", "stages": [{"nodes": [node.id]}]}),
    )
    .await;
    wait_state(&plane, id, "finished").await;
    let release = node.root().join("releases/7.0.0");
    let out = work.path().join("out-7.0.0");

    // AG-37: an edited deployment file goes back to the signed bytes.
    std::fs::write(release.join("deploy/hook"), "#!/bin/sh\necho edited\n").unwrap();
    wait_for(
        "the edited hook to be written back from the kept copy",
        Duration::from_secs(120),
        || async {
            (std::fs::read_to_string(release.join("deploy/hook")).unwrap_or_default() == HOOK)
                .then_some(())
        },
    )
    .await;

    // AG-34: a manifest gone from the release is recovered from the plane.
    std::fs::remove_file(release.join("RELEASE_MANIFEST")).unwrap();
    wait_for(
        "the manifest to be recovered from the plane",
        Duration::from_secs(120),
        || async { release.join("RELEASE_MANIFEST").is_file().then_some(()) },
    )
    .await;
    assert_eq!(
        std::fs::read(release.join("RELEASE_MANIFEST")).unwrap(),
        std::fs::read(out.join("RELEASE_MANIFEST")).unwrap()
    );
    assert_eq!(
        std::fs::read(release.join("RELEASE_MANIFEST.sig")).unwrap(),
        std::fs::read(out.join("RELEASE_MANIFEST.sig")).unwrap()
    );
}
