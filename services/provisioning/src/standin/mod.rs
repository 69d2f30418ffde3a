//! Stand-ins of the two providers for tests (issue 29, CONVENTIONS 15): HTTP servers on
//! loopback that answer in each API's published shapes — Linode API v4 (`linode.rs`) and
//! Hetzner Cloud (`hetzner.rs`) — with their paths, pagination and error bodies, checking the
//! bearer token, and a switch to misbehave: a queue of faults the next requests meet (429 with
//! `Retry-After`, 500, a 500 after the create was made, an answer slower than the client
//! waits, JSON that does not parse) and instances that never come up.
//!
//! An instance the stand-in makes gets an IPv4 loopback address of its own (`127.0.x.y`,
//! from `127.0.1.1` for Linode and `127.0.101.1` for Hetzner), so a test can run a real sshd there for the bootstrap
//! ([`StandIn::start_machines`], `sshd.rs`). Behind the `testsuite` feature; never built into
//! the service.

mod hetzner;
mod linode;
pub mod sshd;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use self::sshd::Machine;

/// Which API the stand-in speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Linode,
    Hetzner,
}

/// What the next request meets instead of a plain answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 429 with `Retry-After: <seconds>`, nothing done.
    RateLimited { retry_after_secs: u64 },
    /// 500, nothing done.
    ServerError,
    /// The request is carried out, then answered 500 (a create that happened but seemed not to).
    ServerErrorAfterActing,
    /// The answer comes after this long.
    Slow(Duration),
    /// 200 with a body that is not JSON.
    BadJson,
}

/// A server the stand-in made.
#[derive(Debug, Clone)]
pub struct Server {
    pub id: u64,
    pub label: String,
    pub region: String,
    pub size: String,
    pub image: String,
    pub ipv4: Ipv4Addr,
    pub ipv6: Ipv6Addr,
    pub tags: Vec<String>,
    pub created: DateTime<Utc>,
    /// The root password the machine has (given, or made here for Hetzner).
    pub root_password: String,
    pub powered: bool,
    /// How many times it was looked at since it was made (it runs after `boot_polls`).
    pub polls: u32,
    pub rdns: Option<String>,
    pub disk_encryption: Option<String>,
    pub swap_size: Option<u64>,
    /// False while its machine (a real sshd, [`StandIn::start_machines`]) is starting: until
    /// then the server does not report running, as a real one does not before its sshd is up.
    pub machine_ready: bool,
}

/// A volume in the stand-in's account.
#[derive(Debug, Clone)]
pub struct Volume {
    pub id: u64,
    pub label: String,
    pub attached_to: Option<u64>,
    pub tags: Vec<String>,
    pub created: DateTime<Utc>,
}

/// Everything the stand-in holds; tests read and set it through [`StandIn::world`].
#[derive(Debug)]
pub struct World {
    pub token: String,
    pub company: String,
    /// Region → the sizes it sells.
    pub regions: Vec<(String, Vec<String>)>,
    pub images: Vec<String>,
    pub servers: Vec<Server>,
    pub volumes: Vec<Volume>,
    pub faults: VecDeque<Fault>,
    /// Looks an instance takes before it reports running.
    pub boot_polls: u32,
    /// The switch: instances never come up.
    pub never_running: bool,
    /// The most rows a page holds, whatever was asked (tests set it low to see pages turn).
    pub page_cap: usize,
    /// Every request, `METHOD /path?query`, in order.
    pub requests: Vec<String>,
    /// Whether each server made gets a machine (set by [`StandIn::start_machines`]).
    machines_on: bool,
    /// Told when a server is made (the machines' keeper waits on it).
    made: Arc<Notify>,
    next_id: u64,
    /// The third octet instances' addresses start at (`127.0.<block>.1`): Linode's from 1,
    /// Hetzner's from 101, so a test's two stand-ins never hand out the same address.
    pub address_block: u8,
    /// Addresses handed out so far (never reused: a deleted server's address stays its own).
    addresses_made: u32,
}

impl World {
    fn new(flavor: Flavor) -> World {
        let (regions, images) = match flavor {
            Flavor::Linode => (
                vec![
                    (
                        "us-east".to_string(),
                        vec!["g6-nanode-1".to_string(), "g6-standard-2".to_string()],
                    ),
                    ("eu-west".to_string(), vec!["g6-nanode-1".to_string()]),
                ],
                vec![
                    "linode/debian12".to_string(),
                    "linode/ubuntu24.04".to_string(),
                ],
            ),
            Flavor::Hetzner => (
                vec![
                    (
                        "fsn1".to_string(),
                        vec!["cx22".to_string(), "cx32".to_string()],
                    ),
                    ("hel1".to_string(), vec!["cx22".to_string()]),
                ],
                vec!["debian-12".to_string(), "ubuntu-24.04".to_string()],
            ),
        };
        World {
            token: "standin-token".into(),
            company: String::new(),
            regions,
            images,
            servers: Vec::new(),
            volumes: Vec::new(),
            faults: VecDeque::new(),
            boot_polls: 1,
            never_running: false,
            page_cap: 500,
            requests: Vec::new(),
            machines_on: false,
            made: Arc::new(Notify::new()),
            next_id: 1000,
            address_block: match flavor {
                Flavor::Linode => 1,
                Flavor::Hetzner => 101,
            },
            addresses_made: 0,
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Makes a server; its IPv4 is a loopback address of its own.
    fn make(
        &mut self,
        label: &str,
        region: &str,
        size: &str,
        image: &str,
        tags: Vec<String>,
        root_password: String,
    ) -> Server {
        let id = self.next_id();
        self.addresses_made += 1;
        let index = self.addresses_made;
        let block = u32::from(self.address_block);
        let server = Server {
            id,
            label: label.to_string(),
            region: region.to_string(),
            size: size.to_string(),
            image: image.to_string(),
            ipv4: Ipv4Addr::new(127, 0, (block + index / 250) as u8, (1 + index % 250) as u8),
            ipv6: Ipv6Addr::new(0x2001, 0xdb8, 0, index as u16, 0, 0, 0, 1),
            tags,
            created: Utc::now(),
            root_password,
            powered: true,
            polls: 0,
            rdns: None,
            disk_encryption: None,
            swap_size: None,
            machine_ready: !self.machines_on,
        };
        self.servers.push(server.clone());
        self.made.notify_one();
        server
    }

    /// Whether the server reports running now (and counts this look).
    fn look(&mut self, id: u64) -> Option<(Server, bool)> {
        let (boot_polls, never) = (self.boot_polls, self.never_running);
        let server = self.servers.iter_mut().find(|server| server.id == id)?;
        server.polls += 1;
        let running = server.powered && !never && server.machine_ready && server.polls > boot_polls;
        Some((server.clone(), running))
    }

    fn sells(&self, region: &str, size: &str) -> bool {
        self.regions
            .iter()
            .any(|(name, sizes)| name == region && sizes.iter().any(|sold| sold == size))
    }
}

/// A password like a provider makes (24 hex characters).
pub fn random_password() -> String {
    let mut bytes = [0u8; 12];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's randomness");
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A request as the stand-in reads it.
pub struct Asked {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub token: Option<String>,
    pub body: Value,
}

impl Asked {
    pub fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// The path's segments after the API's prefix.
    pub fn segments(&self) -> Vec<&str> {
        self.path
            .split('/')
            .filter(|part| !part.is_empty())
            .skip(1)
            .collect()
    }
}

/// An answer: status and JSON body.
pub type Answer = (u16, Value);

/// A running stand-in.
pub struct StandIn {
    pub flavor: Flavor,
    pub address: SocketAddr,
    world: Arc<Mutex<World>>,
    task: JoinHandle<()>,
    /// Server id → its machine (a real sshd), once started.
    machines: Arc<Mutex<HashMap<u64, Arc<Machine>>>>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(keeper) = self.keeper.lock().ok().and_then(|mut keeper| keeper.take()) {
            keeper.abort();
        }
        // The machines stop as their last holder lets go (Machine's Drop).
        if let Ok(mut machines) = self.machines.lock() {
            machines.clear();
        }
    }
}

impl StandIn {
    pub async fn start(flavor: Flavor) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        let world = Arc::new(Mutex::new(World::new(flavor)));
        let task = tokio::spawn(accept(listener, flavor, world.clone()));
        StandIn {
            flavor,
            address,
            world,
            task,
            machines: Arc::new(Mutex::new(HashMap::new())),
            keeper: Mutex::new(None),
        }
    }

    /// From now on every server the stand-in makes gets a [`Machine`]: a real sshd on the
    /// server's own address and `port` ([`sshd::DEFAULT_SSH_PORT`] unless a test needs
    /// another), taking the server's root password, with `environment` set in every session
    /// (`{address}` in a value stands for the server's address, e.g.
    /// `("CAPSTAN_AGENT_LOCAL_ADDRESS", "{address}")`). A server reports running only once its
    /// machine listens. Needs root and openssh-server; a machine that cannot start panics the
    /// keeper's task with the reason, and its server never runs.
    pub fn start_machines(&self, port: u16, environment: Vec<(String, String)>) {
        let made = {
            let mut world = self.world();
            world.machines_on = true;
            world.made.clone()
        };
        let keeper = tokio::spawn(keep_machines(
            self.world.clone(),
            self.machines.clone(),
            made,
            port,
            environment,
        ));
        if let Some(old) = self
            .keeper
            .lock()
            .expect("the machines' keeper")
            .replace(keeper)
        {
            old.abort();
        }
    }

    /// The machine of server `id`, once it listens.
    pub fn machine(&self, id: u64) -> Option<Arc<Machine>> {
        self.machines
            .lock()
            .expect("the machines")
            .get(&id)
            .cloned()
    }

    /// The machine at `address` (a server's IPv4), once it listens.
    pub fn machine_at(&self, address: Ipv4Addr) -> Option<Arc<Machine>> {
        self.machines
            .lock()
            .expect("the machines")
            .values()
            .find(|machine| machine.address == address)
            .cloned()
    }

    /// The base URL the driver is given (`http://127.0.0.1:port/v4` or `/v1`).
    pub fn base_url(&self) -> String {
        let version = match self.flavor {
            Flavor::Linode => "v4",
            Flavor::Hetzner => "v1",
        };
        format!("http://{}/{version}", self.address)
    }

    /// The stand-in's state, to read or to set.
    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().expect("the stand-in's state")
    }

    /// Queues faults for the next requests, in order.
    pub fn misbehave(&self, faults: impl IntoIterator<Item = Fault>) {
        self.world().faults.extend(faults);
    }

    /// How many requests matched `method` and a path starting with `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        let prefix = format!("{method} {path}");
        self.world()
            .requests
            .iter()
            .filter(|request| {
                request
                    .strip_prefix(&prefix)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
            })
            .count()
    }

    /// Adds a volume (created `age` ago).
    pub fn add_volume(
        &self,
        label: &str,
        attached_to: Option<u64>,
        tags: &[&str],
        age: chrono::Duration,
    ) -> u64 {
        let mut world = self.world();
        let id = world.next_id();
        world.volumes.push(Volume {
            id,
            label: label.into(),
            attached_to,
            tags: tags.iter().map(|tag| tag.to_string()).collect(),
            created: Utc::now() - age,
        });
        id
    }
}

/// Starts a machine for every server made without one, as servers are made.
async fn keep_machines(
    world: Arc<Mutex<World>>,
    machines: Arc<Mutex<HashMap<u64, Arc<Machine>>>>,
    made: Arc<Notify>,
    port: u16,
    environment: Vec<(String, String)>,
) {
    let mut starting = HashSet::new();
    loop {
        let waiting: Vec<Server> = world
            .lock()
            .expect("the stand-in's state")
            .servers
            .iter()
            .filter(|server| !server.machine_ready && !starting.contains(&server.id))
            .cloned()
            .collect();
        for server in waiting {
            starting.insert(server.id);
            let address = server.ipv4.to_string();
            let environment: Vec<(String, String)> = environment
                .iter()
                .map(|(name, value)| (name.clone(), value.replace("{address}", &address)))
                .collect();
            let (world, machines) = (world.clone(), machines.clone());
            tokio::spawn(async move {
                let machine =
                    Machine::start(server.ipv4, port, &server.root_password, &environment).await;
                machines
                    .lock()
                    .expect("the machines")
                    .insert(server.id, Arc::new(machine));
                let mut world = world.lock().expect("the stand-in's state");
                if let Some(made) = world.servers.iter_mut().find(|made| made.id == server.id) {
                    made.machine_ready = true;
                }
            });
        }
        made.notified().await;
    }
}

async fn accept(listener: TcpListener, flavor: Flavor, world: Arc<Mutex<World>>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, flavor, world.clone()));
    }
}

/// Reads one request (head and `Content-Length` body), or `None` on a closed or broken stream.
async fn read_request(stream: &mut TcpStream) -> Option<Asked> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_len, method, target, headers) = loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut slots);
        if let httparse::Status::Complete(length) = request.parse(&buffer).ok()? {
            let headers: Vec<(String, String)> = request
                .headers
                .iter()
                .map(|header| {
                    (
                        header.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(header.value).to_string(),
                    )
                })
                .collect();
            break (
                length,
                request.method?.to_string(),
                request.path?.to_string(),
                headers,
            );
        }
        if buffer.len() > 1 << 20 {
            return None;
        }
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let length: usize = header("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_len + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = &buffer[head_len..head_len + length];
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    Some(Asked {
        method,
        path: path.to_string(),
        query: url::form_urlencoded::parse(query.as_bytes())
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        token: header("authorization")
            .and_then(|value| value.strip_prefix("Bearer ").map(str::to_string)),
        body: if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body).unwrap_or(Value::Null)
        },
    })
}

async fn serve(mut stream: TcpStream, flavor: Flavor, world: Arc<Mutex<World>>) {
    let Some(asked) = read_request(&mut stream).await else {
        return;
    };
    let fault = {
        let mut world = world.lock().expect("the stand-in's state");
        let query = if asked.query.is_empty() {
            String::new()
        } else {
            let pairs: Vec<String> = asked
                .query
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            format!("?{}", pairs.join("&"))
        };
        world
            .requests
            .push(format!("{} {}{query}", asked.method, asked.path));
        world.faults.pop_front()
    };
    let mut extra_headers = String::new();
    let (status, body) = match fault {
        Some(Fault::RateLimited { retry_after_secs }) => {
            extra_headers = format!("Retry-After: {retry_after_secs}\r\n");
            let body = error(flavor, 429, "Too many requests");
            (429, body.to_string())
        }
        Some(Fault::ServerError) => (500, error(flavor, 500, "Internal server error").to_string()),
        Some(Fault::BadJson) => (200, "{\"data\": [".to_string()),
        Some(Fault::ServerErrorAfterActing) => {
            let _ = answer(flavor, &asked, &world);
            (500, error(flavor, 500, "Internal server error").to_string())
        }
        Some(Fault::Slow(wait)) => {
            tokio::time::sleep(wait).await;
            let (status, body) = answer(flavor, &asked, &world);
            (status, body.to_string())
        }
        None => {
            let (status, body) = answer(flavor, &asked, &world);
            (status, body.to_string())
        }
    };
    let reason = match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        _ => "Internal Server Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The provider's error body.
fn error(flavor: Flavor, status: u16, reason: &str) -> Value {
    match flavor {
        Flavor::Linode => linode::error(reason),
        Flavor::Hetzner => hetzner::error(status, reason),
    }
}

fn answer(flavor: Flavor, asked: &Asked, world: &Arc<Mutex<World>>) -> Answer {
    let mut world = world.lock().expect("the stand-in's state");
    if asked.token.as_deref() != Some(world.token.as_str()) {
        return (401, error(flavor, 401, "Invalid Token"));
    }
    match flavor {
        Flavor::Linode => linode::answer(asked, &mut world),
        Flavor::Hetzner => hetzner::answer(asked, &mut world),
    }
}

/// One page of `rows` (1-based `page`, `size` rows each) and the number of pages.
pub fn page_of(rows: Vec<Value>, page: usize, size: usize) -> (Vec<Value>, usize) {
    let size = size.max(1);
    let pages = rows.len().div_ceil(size).max(1);
    let start = (page.max(1) - 1) * size;
    (rows.into_iter().skip(start).take(size).collect(), pages)
}

/// An address as a JSON string.
pub fn ip(address: impl Into<IpAddr>) -> Value {
    Value::String(address.into().to_string())
}
