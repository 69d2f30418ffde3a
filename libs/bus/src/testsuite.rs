//! A `nats-server -js` of a test's own: a free port, a temporary store directory, stopped and
//! removed when dropped. Restartable on the same port and store, to test what survives.

use crate::{
    access::{authorization_with, generate_password, Auth, BusUser, Subscriber},
    ConnectOptions, Credentials,
};
use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A private NATS server with JetStream.
pub struct NatsServer {
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
    /// With the generated authorization: each user's password, given to the server through
    /// its environment as the generated configuration expects.
    passwords: Vec<(BusUser, String)>,
    /// How the users prove themselves (what `passwords` holds: passwords or public nkeys).
    auth: Auth,
    /// A certificate and its key (PEM) the server serves TLS with, requiring it of clients.
    tls: Option<(PathBuf, PathBuf)>,
    /// Read-only subscribers of the events, each with its password.
    subscribers: Vec<(Subscriber, String)>,
}

fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return path.into();
    }
    for candidate in [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ] {
        if std::path::Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    "nats-server".into()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("the loopback interface gives out a free port")
}

impl NatsServer {
    /// Starts a server and waits until it accepts connections.
    pub fn start() -> NatsServer {
        let mut server = NatsServer {
            port: free_port(),
            store: tempfile::tempdir().expect("a temporary directory for the JetStream store"),
            child: None,
            passwords: Vec::new(),
            auth: Auth::Password,
            tls: None,
            subscribers: Vec::new(),
        };
        server.spawn();
        server
    }

    /// Starts a server with the authorization `capstan admin nats-config` generates (every
    /// service's user and `all`, each with a fresh password), logging to a file of its own.
    pub fn start_secured() -> NatsServer {
        let passwords = BusUser::every()
            .into_iter()
            .map(|user| (user, generate_password()))
            .collect();
        NatsServer::start_configured(Auth::Password, passwords, None)
    }

    /// As [`NatsServer::start_secured`], with the read-only event subscribers `names` too
    /// (`capstan admin nats-config --subscriber NAME`), each with a generated password.
    pub fn start_with_subscribers(names: &[&str]) -> NatsServer {
        let mut server = NatsServer {
            port: free_port(),
            store: tempfile::tempdir().expect("a temporary directory for the JetStream store"),
            child: None,
            passwords: BusUser::every()
                .into_iter()
                .map(|user| (user, generate_password()))
                .collect(),
            auth: Auth::Password,
            tls: None,
            subscribers: names
                .iter()
                .map(|name| {
                    let subscriber = Subscriber::new(name).expect("a valid subscriber name");
                    (subscriber, generate_password())
                })
                .collect(),
        };
        server.spawn();
        server
    }

    /// The password of the subscriber `name` on a server from
    /// [`NatsServer::start_with_subscribers`].
    pub fn subscriber_password(&self, name: &str) -> String {
        self.subscribers
            .iter()
            .find(|(subscriber, _)| subscriber.name() == name)
            .map(|(_, password)| password.clone())
            .expect("a subscriber the server was started with")
    }

    /// Starts a server with the generated authorization of kind `auth`, each user's secret
    /// (a password, or a public nkey) as given, and TLS with `tls` (certificate, key) if set.
    pub fn start_configured(
        auth: Auth,
        secrets: Vec<(BusUser, String)>,
        tls: Option<(PathBuf, PathBuf)>,
    ) -> NatsServer {
        let mut server = NatsServer {
            port: free_port(),
            store: tempfile::tempdir().expect("a temporary directory for the JetStream store"),
            child: None,
            passwords: secrets,
            auth,
            tls,
            subscribers: Vec::new(),
        };
        server.spawn();
        server
    }

    /// Whether the server runs the generated authorization ([`NatsServer::start_secured`]).
    pub fn is_secured(&self) -> bool {
        !self.passwords.is_empty()
    }

    /// The password of `user` on a server from [`NatsServer::start_secured`].
    pub fn password(&self, user: BusUser) -> String {
        self.passwords
            .iter()
            .find(|(known, _)| *known == user)
            .map(|(_, password)| password.clone())
            .expect("a server started with start_secured")
    }

    /// How `user` connects: its password, and the reply prefix of its domain (`all` takes the
    /// gateway's, one of the prefixes it holds).
    pub fn options(&self, user: BusUser) -> ConnectOptions {
        let domain = match user {
            BusUser::Service(domain) => domain,
            BusUser::AllInOne => capstan_events::Domain::Gateway,
        };
        let mut options = ConnectOptions::new(&self.url(), &format!("test-{}", user.name()));
        options.inbox_prefix = Some(domain.inbox_prefix());
        options.credentials = Credentials::UserPassword {
            user: user.name().to_string(),
            password: self.password(user).into(),
        };
        options
    }

    /// Connects as `user` (see [`NatsServer::options`]).
    pub async fn connect_as(&self, user: BusUser) -> crate::Bus {
        crate::Bus::connect_with(&self.options(user))
            .await
            .expect("a client starts")
    }

    /// What the server has logged so far (a server from [`NatsServer::start_secured`]): where
    /// a permissions violation shows.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.path().join("nats-server.log")).unwrap_or_default()
    }

    /// Waits (ten seconds at most) until the server has logged a line naming all of `words`,
    /// and returns it: a permissions violation shows only there, some time after the client
    /// that caused it has flushed.
    pub async fn logged(&self, words: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self
                .log()
                .lines()
                .find(|line| words.iter().all(|word| line.contains(word)))
            {
                return line.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server never logged {words:?}; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The lines of [`NatsServer::log`] that report something refused for lack of permission.
    pub fn violations(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| line.contains("Violation"))
            .map(str::to_string)
            .collect()
    }

    /// `nats://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let mut command = Command::new(binary());
        command
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !self.passwords.is_empty() {
            let config = self.store.path().join("nats-server.conf");
            let subscribers: Vec<Subscriber> = self
                .subscribers
                .iter()
                .map(|(subscriber, _)| subscriber.clone())
                .collect();
            let mut text = authorization_with(self.auth, &subscribers);
            if let Some((certificate, key)) = &self.tls {
                text.push_str(&format!(
                    "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n}}\n",
                    certificate.display().to_string(),
                    key.display().to_string()
                ));
            }
            std::fs::write(&config, text).expect("the configuration is written");
            command
                .arg("-c")
                .arg(&config)
                .arg("-l")
                .arg(self.store.path().join("nats-server.log"));
            for (user, password) in &self.passwords {
                command.env(user.secret_variable(self.auth), password);
            }
            for (subscriber, password) in &self.subscribers {
                command.env(subscriber.secret_variable(self.auth), password);
            }
        }
        let child = command
            .spawn()
            .expect("nats-server is installed (apt-get install nats-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server the way an operator would (SIGTERM, so JetStream flushes its store).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A message as JetStream keeps it, for tests that read a stream back.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub subject: String,
    pub headers: std::collections::HashMap<String, String>,
    pub payload: bytes::Bytes,
}

/// Every message currently in `stream`, in order (at most `limit`).
pub async fn read_stream(bus: &crate::Bus, stream: &str, limit: usize) -> Vec<StoredMessage> {
    let mut stream = bus
        .jetstream()
        .get_stream(stream)
        .await
        .expect("the stream exists");
    let state = stream.info().await.expect("stream info").state.clone();
    let mut messages = Vec::new();
    if state.messages == 0 {
        return messages;
    }
    for sequence in state.first_sequence..=state.last_sequence {
        if messages.len() >= limit {
            break;
        }
        let Ok(message) = stream.get_raw_message(sequence).await else {
            continue;
        };
        let mut headers = std::collections::HashMap::new();
        for (name, values) in message.headers.iter() {
            if let Some(value) = values.first() {
                headers.insert(name.to_string(), value.to_string());
            }
        }
        messages.push(StoredMessage {
            subject: message.subject.to_string(),
            headers,
            payload: message.payload,
        });
    }
    messages
}

/// How many bodies wait in the rpc body store (none when the bucket was never made): what a
/// test checks to see that a receiver collected what was checked in for it.
pub async fn stored_bodies(bus: &crate::Bus) -> usize {
    use futures::StreamExt;
    let Ok(bucket) = bus
        .jetstream()
        .get_object_store(crate::bodies::BODY_BUCKET)
        .await
    else {
        return 0;
    };
    let mut objects = bucket.list().await.expect("the body bucket lists");
    let mut count = 0;
    while let Some(object) = objects.next().await {
        object.expect("an object's info reads");
        count += 1;
    }
    count
}

/// A plain subscriber beside the real ones, to see messages as they travel (headers and
/// payload): which bodies went inline and which through the body store.
pub struct Spy {
    subscriber: async_nats::Subscriber,
}

/// Starts watching `subject` (wildcards allowed; replies travel on `_INBOX.>`).
pub async fn spy(bus: &crate::Bus, subject: &str) -> Spy {
    let subscriber = bus
        .client()
        .subscribe(subject.to_string())
        .await
        .expect("the spy subscribes");
    bus.client()
        .flush()
        .await
        .expect("the subscription reaches the server");
    Spy { subscriber }
}

impl Spy {
    /// The next message seen, or `None` after `within`.
    pub async fn next(&mut self, within: Duration) -> Option<StoredMessage> {
        use futures::StreamExt;
        let message = tokio::time::timeout(within, self.subscriber.next())
            .await
            .ok()??;
        let mut headers = std::collections::HashMap::new();
        for (name, values) in message.headers.iter().flat_map(|headers| headers.iter()) {
            if let Some(value) = values.first() {
                headers.insert(name.to_string(), value.to_string());
            }
        }
        Some(StoredMessage {
            subject: message.subject.to_string(),
            headers,
            payload: message.payload,
        })
    }
}

/// Whether the durable consumer `durable` of `stream` has been handed every message the stream
/// holds and acknowledged each one: nothing is left to deliver or to deliver again. A test that
/// checks something happened only once waits for this instead of sleeping.
pub async fn consumer_settled(bus: &crate::Bus, stream: &str, durable: &str) -> bool {
    let Ok(stream) = bus.jetstream().get_stream(stream).await else {
        return false;
    };
    match stream.consumer_info(durable).await {
        Ok(info) => info.num_pending == 0 && info.num_ack_pending == 0,
        Err(_) => false,
    }
}
