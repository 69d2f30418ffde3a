//! From the request to the node online, for both providers and each kind; a provider that
//! misbehaves still provisions once; an instance that never runs and an install that fails
//! each end `install_failed` with their reason, and Retry finishes them.

use std::time::Duration;

use capstan_e2e::wait_for;
use capstan_provisioning::standin::Fault;
use serde_json::Value;

use super::{drop_site_database, unique, World};

fn steps(provision: &Value) -> Vec<String> {
    provision["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["step"].as_str().unwrap().to_string())
        .collect()
}

async fn provisioned(world: &World, provider: &str, kind: &str, name: &str) -> (i64, Value) {
    let account = world
        .account(provider, &format!("{provider} main"), "main")
        .await;
    let asked = world.ask(account, kind, name, provider).await;
    assert_eq!(asked["step"], "requested");
    let id = asked["id"].as_i64().unwrap();
    let (node, view) = world.online(id).await;
    let provision = world.provision(id).await;
    assert_eq!(
        steps(&provision),
        ["requested", "creating", "booting", "installing", "done"],
        "{provision}"
    );
    assert_eq!(provision["password_retired"], true);
    let key = provision["expected_key"].as_str().unwrap();
    assert!(key.starts_with("SHA256:"), "{provision}");
    assert_eq!(
        view["fingerprint"].as_str(),
        Some(key),
        "the node's key is the install's"
    );
    assert!(view["install_state"].is_null(), "operational: {view}");
    // The agent joined from the instance's own address (AC-08 (1)).
    let address = provision["ipv4"][0].as_str().unwrap();
    assert_eq!(provision["approval"]["reasons"], serde_json::json!([]));
    let join = world
        .plane
        .join_of(key)
        .await
        .expect("the join of the install's key");
    assert_eq!(join["source_address"], address, "{join}");
    assert_eq!(join["state"], "approved", "{join}");
    assert_eq!(provision["approval"]["join_id"], join["id"], "{provision}");
    (node, provision)
}

#[tokio::test]
async fn a_linode_site_is_made_bootstrapped_joined_and_online() {
    let world = World::start().await;
    let name = unique("shop");
    let (_, provision) = provisioned(&world, "linode", "site", &name).await;
    let server = world.linode.world().servers[0].clone();
    let machine = world.linode.machine(server.id).expect("its machine");
    // The site is laid out for site releases, and site.json says where, as backups read it.
    let site_json = std::fs::read_to_string(machine.path("/etc/capstan-agent/site.json"))
        .unwrap_or_else(|error| panic!("no site.json ({error}): {provision}"));
    let site: Value = serde_json::from_str(&site_json).unwrap();
    assert_eq!(site["root"], format!("/var/www/{name}"));
    assert!(machine.path(&format!("/var/www/{name}/releases")).is_dir());
    assert_eq!(world.linode.world().servers.len(), 1);
    drop_site_database(&name).await;
}

#[tokio::test]
async fn a_linode_agent_joins_siteless() {
    let world = World::start().await;
    let (_, provision) = provisioned(&world, "linode", "agent", "worker").await;
    assert_eq!(provision["kind"], "agent");
}

#[tokio::test]
async fn a_hetzner_docker_host_joins_as_its_host_agent() {
    let world = World::start().await;
    let (node, provision) = provisioned(&world, "hetzner", "docker-host", "dock").await;
    assert_eq!(provision["kind"], "docker-host");
    let view = world.plane.node(node).await;
    assert_eq!(view["name"], "dock-host", "{view}");
}

#[tokio::test]
async fn a_hetzner_site_is_made_with_the_providers_own_password() {
    let world = World::start().await;
    let name = unique("blog");
    provisioned(&world, "hetzner", "site", &name).await;
    drop_site_database(&name).await;
}

#[tokio::test]
async fn a_provider_answering_429_then_500_still_provisions_once() {
    let world = World::start().await;
    let account = world.account("linode", "ours", "main").await;
    {
        let mut standin = world.linode.world();
        standin.faults.push_back(Fault::RateLimited {
            retry_after_secs: 1,
        });
        standin.faults.push_back(Fault::ServerErrorAfterActing);
    }
    let id = world.ask(account, "agent", "once", "linode").await["id"]
        .as_i64()
        .unwrap();
    world.online(id).await;
    assert_eq!(world.linode.world().servers.len(), 1, "one server made");
}

#[tokio::test]
async fn an_instance_that_never_runs_fails_with_its_reason_and_retry_finishes_it() {
    let world = World::start_with(&[("CAPSTAN__PROVISIONING__BOOT_TIMEOUT_SECS", "3")]).await;
    let account = world.account("hetzner", "ours", "main").await;
    world.hetzner.world().never_running = true;
    let id = world.ask(account, "agent", "sleepy", "hetzner").await["id"]
        .as_i64()
        .unwrap();
    let failed = world.until_step(id, "install_failed").await;
    let reason = failed["failure"].as_str().unwrap();
    assert!(reason.contains("did not report running"), "{reason}");
    world.hetzner.world().never_running = false;
    let (status, body) = world
        .plane
        .api(
            &world.plane.admin,
            "POST",
            &format!("/api/v1/provisioning/provisions/{id}/retry"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    world.online(id).await;
    assert_eq!(
        world.hetzner.world().servers.len(),
        1,
        "the retry made no second server"
    );
    assert_eq!(world.provision(id).await["retries"], 1);
}

#[tokio::test]
async fn an_install_that_fails_ends_install_failed_with_its_reason_and_retry_works_once_cleaned() {
    let world = World::start().await;
    let account = world.account("linode", "ours", "main").await;
    // The site is already there on the machine: the install refuses it (PV-02).
    // Slow to boot (polls 100 ms apart), so the test lays the site there first.
    world.linode.world().boot_polls = 40;
    let name = unique("taken");
    let id = world.ask(account, "site", &name, "linode").await["id"]
        .as_i64()
        .unwrap();
    let server_id = wait_for("the server", Duration::from_secs(30), || async {
        world.linode.world().servers.first().map(|server| server.id)
    })
    .await;
    let machine = wait_for("its machine", Duration::from_secs(30), || async {
        world.linode.machine(server_id)
    })
    .await;
    let site = machine.path(&format!("/var/www/{name}"));
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "someone else's").unwrap();
    let failed = world.until_step(id, "install_failed").await;
    let reason = failed["failure"].as_str().unwrap().to_string();
    assert!(reason.starts_with("the install exited"), "{reason}");
    assert!(!failed["install_log"].as_str().unwrap().is_empty());

    std::fs::remove_dir_all(&site).unwrap();
    let (status, _) = world
        .plane
        .api(
            &world.plane.admin,
            "POST",
            &format!("/api/v1/provisioning/provisions/{id}/retry"),
            None,
        )
        .await;
    assert!(status.is_success());
    world.online(id).await;
    drop_site_database(&name).await;
}
