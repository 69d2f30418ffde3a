//! A service of the workspace run as a process of its own beside a [`Plane`] (which was started
//! without it), so a test can kill it with SIGKILL mid-work and start it again: what a crash of
//! one container does in a real deployment.

use std::{path::PathBuf, process::Stdio, time::Duration};

use capstan_events::Domain;

use tokio::process::{Child, Command};

use crate::{plane::Plane, wait_for};

/// The binary `cargo build` (or `cargo nextest run --workspace`) left beside the running test
/// binary's directory, `target/<profile>/<name>`.
pub fn binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary has a path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary sits in target/<profile>/deps");
    let binary = profile_dir.join(name);
    assert!(
        binary.is_file(),
        "{} is missing: build it with `cargo build --workspace` (deploy/local/test builds every \
         binary of the workspace before it tests)",
        binary.display()
    );
    binary
}

/// One service's process.
pub struct ServiceProcess {
    domain: Domain,
    child: Option<Child>,
}

impl ServiceProcess {
    /// Starts `capstan-<service>` on the plane's database and NATS server and waits until it
    /// answers its health over the bus.
    pub async fn start(plane: &Plane, domain: Domain) -> ServiceProcess {
        let name = format!("capstan-{}", domain.service_name());
        let child = Command::new(binary(&name))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CAPSTAN__DATABASE__URL", plane.database.url())
            .env("CAPSTAN__NATS__URL", plane.nats_url())
            .env("CAPSTAN__DATABASE__MAX_CONNECTIONS", "4")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("{name} starts: {error}"));
        let process = ServiceProcess {
            domain,
            child: Some(child),
        };
        process.wait_healthy(plane).await;
        process
    }

    async fn wait_healthy(&self, plane: &Plane) {
        let domain = self.domain;
        wait_for(
            &format!("the {domain} process to answer its health"),
            Duration::from_secs(60),
            || {
                let bus = plane.bus.clone();
                async move { bus.health(domain, Duration::from_millis(500)).await.ok() }
            },
        )
        .await;
    }

    /// SIGKILL: no stop, no flush, whatever it was doing is cut off.
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("the service runs");
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}
