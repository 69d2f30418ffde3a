//! The plane's SSH client for bootstrap installs (PV-05, PV-06), over `russh`: log in to a new
//! machine with the root password its provider gave, write the files the install needs, run the
//! install's fixed command and stream its output; and, after the install retired the password,
//! prove that a login with it is refused (PV-06: "the refusal is the proof").
//!
//! The password lives in memory only (PV-05: "never in argv"): no `ssh` or `sshpass` process is
//! started, so it is in no process's arguments or environment; it is masked as `********`
//! wherever it appears in the output, and no error of this module holds it.
//!
//! Host keys are trusted on first use: the first contact records the key the machine showed
//! (its SHA-256 fingerprint, as `ssh-keygen -l` prints it), every later contact must meet the
//! same key or is refused before the password is sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use russh::client;
use russh::keys::{HashAlg, PublicKey};
use russh::{ChannelMsg, Disconnect, Sig};
use secrecy::{ExposeSecret, SecretString};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

/// What replaces the password wherever it appears in an install's output (the bootstrap's
/// own word, so the log the workflow stores and the lines streamed here agree).
pub use crate::domain::bootstrap::MASK;

/// The most output an [`SshRun`] keeps (every line is still streamed to `on_line`).
pub const OUTPUT_CAP: usize = 1 << 20;

/// How long the output may stay open after the command's exit status came: a process the
/// command left running with the session's output still open (a daemon started without
/// redirecting it) would otherwise hold the session until its bound.
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// A line longer than this is handed on in pieces (a stream without line breaks must not grow
/// without bound).
const LINE_CAP: usize = 64 * 1024;

/// Where to log in, as whom, with which password.
pub struct SshTarget {
    pub address: SocketAddr,
    pub user: String,
    pub password: SecretString,
}

/// The time bounds of a session.
#[derive(Clone, Debug)]
pub struct SshLimits {
    /// The TCP connection, the key exchange and the login together.
    pub connect: Duration,
    /// The uploads and the command together, after the login.
    pub session: Duration,
}

impl Default for SshLimits {
    fn default() -> SshLimits {
        SshLimits {
            connect: Duration::from_secs(20),
            session: Duration::from_secs(30 * 60),
        }
    }
}

/// A file to write on the machine before the command runs.
pub struct Upload {
    /// Absolute, on the machine; its parent directories are made when missing.
    pub path: String,
    /// Its permission bits (`0o600`, `0o755`...).
    pub mode: u32,
    pub bytes: Bytes,
}

/// What a session did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshRun {
    /// The machine's host key, `SHA256:...` (recorded on first contact).
    pub host_key: String,
    /// The command's exit status (128 + the signal's number when a signal ended it).
    pub exit_status: u32,
    /// Standard output and error, line by line as they came, the password masked.
    pub output: String,
}

/// What went wrong in a session. Never holds the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshError {
    /// No TCP connection could be made, or it broke before the login.
    #[error("the machine could not be reached at {address}: {why}")]
    Unreachable { address: SocketAddr, why: String },
    /// The connection, key exchange or login took longer than `SshLimits::connect`.
    #[error("no answer in time: {0}")]
    Timeout(String),
    /// The uploads and the command took longer than `SshLimits::session` (the command may
    /// have done part of its work).
    #[error("the session ran out of time: {0}")]
    SessionTimeout(String),
    /// The machine refused the password for this user.
    #[error("the machine refused the login of {user} with the password")]
    AuthRefused { user: String },
    /// The machine showed another host key than the one recorded at first contact.
    #[error("the machine's host key changed: expected {expected}, got {got}")]
    HostKeyChanged { expected: String, got: String },
    /// The SSH conversation failed (no common algorithm, a broken packet, a refused channel).
    #[error("the ssh session failed: {0}")]
    Protocol(String),
    /// A file could not be written.
    #[error("the upload of {path} failed: {why}")]
    Upload { path: String, why: String },
    /// The session cannot be made as asked (an empty user, a relative upload path...).
    #[error("{0}")]
    Unusable(String),
}

impl SshError {
    /// Whether nothing was done on the machine and another try may meet it ready: no
    /// connection, or no login in time (a machine its provider reports running may not have
    /// started its sshd yet). Everything after the login is not retried blindly.
    pub fn before_login(&self) -> bool {
        matches!(self, SshError::Unreachable { .. } | SshError::Timeout(_))
    }
}

/// Logs in with the password, writes `uploads` (creating parent dirs), then runs `command`
/// (a fixed text; the plane never composes it from input) and waits for its exit, streaming
/// output lines to `on_line` (masked) as they come. `expected_host_key`: None = first contact
/// (trust on first use, returned in SshRun.host_key); Some = refuse a different key.
pub async fn run(
    target: &SshTarget,
    limits: &SshLimits,
    expected_host_key: Option<&str>,
    uploads: &[Upload],
    command: &str,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<SshRun, SshError> {
    let secret = usable_password(target)?;
    let upload_commands = uploads
        .iter()
        .map(upload_command)
        .collect::<Result<Vec<_>, _>>()?;
    let (handle, host_key) = login(target, limits, expected_host_key).await?;
    let work = async {
        for (upload, upload_command) in uploads.iter().zip(&upload_commands) {
            let mut errors = Lines::new(secret);
            let status = exec(
                &handle,
                upload_command,
                &upload.bytes,
                &mut errors,
                &mut |_| {},
            )
            .await?;
            if status != 0 {
                let why = errors.output.trim_end().to_string();
                return Err(SshError::Upload {
                    path: upload.path.clone(),
                    why: if why.is_empty() {
                        format!("the write exited with status {status}")
                    } else {
                        why
                    },
                });
            }
        }
        let mut lines = Lines::new(secret);
        let exit_status = exec(&handle, command, &[], &mut lines, on_line).await?;
        Ok(SshRun {
            host_key: host_key.clone(),
            exit_status,
            output: lines.output,
        })
    };
    let outcome = match timeout(limits.session, work).await {
        Ok(outcome) => outcome,
        Err(_) => Err(SshError::SessionTimeout(format!(
            "the session on {} ran over {:?}",
            target.address, limits.session
        ))),
    };
    say_goodbye(&handle).await;
    outcome
}

/// PV-06: true when a password login is refused now (the proof the password is retired).
pub async fn password_refused(
    target: &SshTarget,
    limits: &SshLimits,
    expected_host_key: Option<&str>,
) -> Result<bool, SshError> {
    usable_password(target)?;
    match login(target, limits, expected_host_key).await {
        Ok((handle, _)) => {
            say_goodbye(&handle).await;
            Ok(false)
        }
        Err(SshError::AuthRefused { .. }) => Ok(true),
        Err(other) => Err(other),
    }
}

/// Ends the connection politely, briefly: a machine that no longer answers is simply dropped.
async fn say_goodbye(handle: &client::Handle<Checker>) {
    let goodbye = handle.disconnect(Disconnect::ByApplication, "", "en");
    let _ = timeout(Duration::from_secs(2), goodbye).await;
}

/// The host key's fingerprint as OpenSSH prints it (`SHA256:` and unpadded base64).
pub fn host_key_fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Trust on first use: with no key recorded any key is taken (and recorded by the caller);
/// with one recorded only that key is.
pub fn host_key_accepted(expected: Option<&str>, shown: &str) -> bool {
    expected.is_none_or(|expected| expected == shown)
}

/// `text` with every occurrence of `secret` replaced by [`MASK`] (the bootstrap's rule).
pub fn mask(text: &str, secret: &str) -> String {
    crate::domain::bootstrap::mask(text, &[secret])
}

/// The password, when it can be used and masked: not empty, and without a line break (output
/// is masked line by line, so a password split over two lines could not be found).
fn usable_password(target: &SshTarget) -> Result<&str, SshError> {
    if target.user.is_empty() {
        return Err(SshError::Unusable("the login user is empty".into()));
    }
    let secret = target.password.expose_secret();
    if secret.is_empty() {
        return Err(SshError::Unusable("the password is empty".into()));
    }
    if secret.contains(['\n', '\r']) {
        return Err(SshError::Unusable(
            "the password holds a line break, so it could not be masked in the output".into(),
        ));
    }
    Ok(secret)
}

/// The command that writes one upload: its stdin to a temporary file beside the target, which
/// then takes its mode and its name (so a reader never sees half a file). The path is checked
/// to hold only characters that need no quoting, so nothing in it can reach the shell.
fn upload_command(upload: &Upload) -> Result<String, SshError> {
    let path = &upload.path;
    let refuse = |why: &str| SshError::Upload {
        path: path.clone(),
        why: why.to_string(),
    };
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(refuse("the path must be absolute and name a file"));
    }
    let plain = |character: char| {
        character.is_ascii_alphanumeric() || matches!(character, '/' | '.' | '_' | '-' | '+' | '@')
    };
    if !path.chars().all(plain) {
        return Err(refuse(
            "the path may hold only letters, digits and / . _ - + @",
        ));
    }
    if path
        .split('/')
        .skip(1)
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(refuse("the path must not hold empty, . or .. parts"));
    }
    if upload.mode > 0o7777 {
        return Err(refuse("the mode must be at most 0o7777"));
    }
    let parent = match path.rfind('/') {
        Some(0) | None => "/",
        Some(end) => &path[..end],
    };
    let part = format!("{path}.capstan-upload");
    Ok(format!(
        "umask 077 && mkdir -p {parent} && cat > {part} && chmod {mode:04o} {part} && mv -f {part} {path}",
        mode = upload.mode
    ))
}

/// Host-key checking for russh: records what the machine showed, accepts it by the rule.
struct Checker {
    expected: Option<String>,
    shown: Arc<Mutex<Option<String>>>,
}

impl client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKey) -> Result<bool, Self::Error> {
        let shown = host_key_fingerprint(key);
        let accepted = host_key_accepted(self.expected.as_deref(), &shown);
        *self.shown.lock().expect("the shown key") = Some(shown);
        Ok(accepted)
    }
}

/// Connects, checks the host key and logs in with the password, within `limits.connect`.
async fn login(
    target: &SshTarget,
    limits: &SshLimits,
    expected_host_key: Option<&str>,
) -> Result<(client::Handle<Checker>, String), SshError> {
    let address = target.address;
    let deadline = Instant::now() + limits.connect;
    let late = |step: &str| {
        SshError::Timeout(format!(
            "{step} with {address} took over {:?}",
            limits.connect
        ))
    };
    let stream = match timeout_at(deadline, TcpStream::connect(address)).await {
        Err(_) => return Err(late("connecting")),
        Ok(Err(error)) => {
            return Err(SshError::Unreachable {
                address,
                why: error.to_string(),
            })
        }
        Ok(Ok(stream)) => stream,
    };
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(limits.session),
        keepalive_interval: Some(Duration::from_secs(15)),
        nodelay: true,
        ..client::Config::default()
    });
    let shown = Arc::new(Mutex::new(None));
    let checker = Checker {
        expected: expected_host_key.map(str::to_string),
        shown: shown.clone(),
    };
    let shown_key = || shown.lock().expect("the shown key").clone();
    let mut handle =
        match timeout_at(deadline, client::connect_stream(config, stream, checker)).await {
            Err(_) => return Err(late("the key exchange")),
            Ok(Err(russh::Error::UnknownKey)) => {
                return Err(SshError::HostKeyChanged {
                    expected: expected_host_key.unwrap_or_default().to_string(),
                    got: shown_key().unwrap_or_default(),
                })
            }
            Ok(Err(error)) => return Err(session_error(address, error)),
            Ok(Ok(handle)) => handle,
        };
    let host_key =
        shown_key().ok_or_else(|| SshError::Protocol("the machine showed no host key".into()))?;
    let password = target.password.expose_secret();
    let answer = match timeout_at(
        deadline,
        handle.authenticate_password(target.user.as_str(), password),
    )
    .await
    {
        Err(_) => return Err(late("the login")),
        Ok(answer) => answer.map_err(|error| session_error(address, error))?,
    };
    if !answer.success() {
        return Err(SshError::AuthRefused {
            user: target.user.clone(),
        });
    }
    Ok((handle, host_key))
}

fn session_error(address: SocketAddr, error: russh::Error) -> SshError {
    match error {
        russh::Error::IO(error) => SshError::Unreachable {
            address,
            why: error.to_string(),
        },
        russh::Error::Disconnect | russh::Error::HUP => SshError::Unreachable {
            address,
            why: "the machine closed the connection".into(),
        },
        russh::Error::InactivityTimeout => {
            SshError::Timeout(format!("the machine at {address} went silent"))
        }
        other => SshError::Protocol(other.to_string()),
    }
}

/// Runs `command` in a session channel with `stdin` as its input, feeding its output to
/// `lines`; answers its exit status. Input is written while output is read, so neither side
/// waits on the other (russh queues window adjustments among the channel's messages).
async fn exec(
    handle: &client::Handle<Checker>,
    command: &str,
    stdin: &[u8],
    lines: &mut Lines<'_>,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<u32, SshError> {
    let channel = handle
        .channel_open_session()
        .await
        .map_err(|error| SshError::Protocol(format!("no session channel: {error}")))?;
    let (mut reader, writer) = channel.split();
    writer
        .exec(true, command)
        .await
        .map_err(|error| SshError::Protocol(format!("the command was not sent: {error}")))?;
    let write = async {
        // A command that exits without reading its input closes the channel: what could not
        // be written then does not matter, the exit status says what happened.
        if !stdin.is_empty() {
            let _ = writer.data(stdin).await;
        }
        let _ = writer.eof().await;
    };
    let read = async {
        let mut status = None;
        let mut held_open = false;
        loop {
            let message = match status {
                None => reader.wait().await,
                Some(_) => match timeout(EXIT_GRACE, reader.wait()).await {
                    Ok(message) => message,
                    Err(_) => {
                        held_open = true;
                        break;
                    }
                },
            };
            let Some(message) = message else {
                break;
            };
            match message {
                ChannelMsg::Data { data } => lines.feed(0, &data, on_line),
                ChannelMsg::ExtendedData { data, ext: 1 } => lines.feed(1, &data, on_line),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    lines.note(&format!("[ended by signal {signal_name:?}]"), on_line);
                    status = Some(128 + signal_number(&signal_name));
                }
                ChannelMsg::Failure => {
                    return Err(SshError::Protocol(
                        "the machine refused to run the command".into(),
                    ))
                }
                _ => {}
            }
        }
        lines.finish(on_line);
        if held_open {
            lines.note(
                &format!(
                    "[the command exited; its output was still open {EXIT_GRACE:?} later (a process it left running holds it) and was not waited for]"
                ),
                on_line,
            );
        }
        status.ok_or_else(|| {
            SshError::Protocol("the channel closed without the command's exit status".into())
        })
    };
    let ((), status) = tokio::join!(write, read);
    status
}

fn signal_number(signal: &Sig) -> u32 {
    match signal {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        _ => 127,
    }
}

/// Output cut into lines per stream (stdout 0, stderr 1), each masked before anyone sees it.
struct Lines<'a> {
    secret: &'a str,
    pending: [Vec<u8>; 2],
    output: String,
    truncated: bool,
}

impl<'a> Lines<'a> {
    fn new(secret: &'a str) -> Lines<'a> {
        Lines {
            secret,
            pending: [Vec::new(), Vec::new()],
            output: String::new(),
            truncated: false,
        }
    }

    fn feed(&mut self, stream: usize, bytes: &[u8], on_line: &mut (dyn FnMut(&str) + Send)) {
        self.pending[stream].extend_from_slice(bytes);
        while let Some(end) = self.pending[stream].iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.pending[stream].drain(..=end).collect();
            self.emit(&line[..end], on_line);
        }
        if self.pending[stream].len() > LINE_CAP {
            // Hand on all but a tail that could hold the start of the password: masked first,
            // so a password wholly inside is masked, and one starting in the tail stays whole
            // for the next chunk.
            let masked = mask_bytes(&self.pending[stream], self.secret.as_bytes());
            let keep = self.secret.len().saturating_sub(1).min(masked.len());
            let (head, tail) = masked.split_at(masked.len() - keep);
            let head = head.to_vec();
            self.pending[stream] = tail.to_vec();
            self.emit(&head, on_line);
        }
    }

    fn finish(&mut self, on_line: &mut (dyn FnMut(&str) + Send)) {
        for stream in 0..2 {
            let rest = std::mem::take(&mut self.pending[stream]);
            if !rest.is_empty() {
                self.emit(&rest, on_line);
            }
        }
    }

    /// A line of our own (not the machine's) in the output.
    fn note(&mut self, text: &str, on_line: &mut (dyn FnMut(&str) + Send)) {
        self.emit(text.as_bytes(), on_line);
    }

    fn emit(&mut self, raw: &[u8], on_line: &mut (dyn FnMut(&str) + Send)) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = mask(&String::from_utf8_lossy(raw), self.secret);
        on_line(&line);
        if self.truncated {
            return;
        }
        if self.output.len() + line.len() + 1 > OUTPUT_CAP {
            self.truncated = true;
            self.output.push_str("[output truncated]\n");
            return;
        }
        self.output.push_str(&line);
        self.output.push('\n');
    }
}

fn mask_bytes(text: &[u8], secret: &[u8]) -> Vec<u8> {
    if secret.is_empty() {
        return text.to_vec();
    }
    let mut out = Vec::with_capacity(text.len());
    let mut index = 0;
    while index < text.len() {
        if text[index..].starts_with(secret) {
            out.extend_from_slice(MASK.as_bytes());
            index += secret.len();
        } else {
            out.push(text[index]);
            index += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(secret: &str, chunks: &[(usize, &[u8])]) -> (Vec<String>, String) {
        let mut seen = Vec::new();
        let mut lines = Lines::new(secret);
        {
            let mut on_line = |line: &str| seen.push(line.to_string());
            for (stream, chunk) in chunks {
                lines.feed(*stream, chunk, &mut on_line);
            }
            lines.finish(&mut on_line);
        }
        (seen, lines.output)
    }

    #[test]
    fn pv_05_the_password_is_masked_wherever_it_appears() {
        assert_eq!(
            mask("login hunter2 then hunter2hunter2", "hunter2"),
            "login ******** then ****************"
        );
        assert_eq!(mask("nothing here", "hunter2"), "nothing here");
        assert_eq!(
            mask("an empty secret masks nothing", ""),
            "an empty secret masks nothing"
        );
    }

    #[test]
    fn pv_05_a_password_split_across_chunks_is_still_masked_in_the_line() {
        let (seen, output) = collect(
            "s3cretpass",
            &[(0, b"set to s3cr"), (0, b"etpass\nnext"), (0, b" line\r\n")],
        );
        assert_eq!(seen, vec!["set to ********", "next line"]);
        assert_eq!(output, "set to ********\nnext line\n");
        assert!(!output.contains("s3cretpass"));
    }

    #[test]
    fn pv_05_stdout_and_stderr_lines_are_kept_apart_and_both_masked() {
        let (seen, _) = collect(
            "pw-123456",
            &[
                (0, b"out pw-12"),
                (1, b"err pw-123456\n"),
                (0, b"3456 end\n"),
                (1, b"tail"),
            ],
        );
        assert_eq!(seen, vec!["err ********", "out ******** end", "tail"]);
    }

    #[test]
    fn pv_05_a_line_without_breaks_is_handed_on_in_pieces_and_never_shows_the_password() {
        let secret = "abcdefghijkl";
        let mut long = vec![b'x'; LINE_CAP - 5];
        long.extend_from_slice(b"abcdef");
        let (seen, output) = collect(
            secret,
            &[(0, &long), (0, b"ghijkl more"), (0, &vec![b'y'; LINE_CAP])],
        );
        let joined: String = seen.concat();
        assert!(!joined.contains(secret), "the password leaked");
        assert!(joined.contains("xx********yy") || joined.contains("********"));
        assert!(!output.contains(secret));
        assert!(seen.len() >= 2, "a long line comes in pieces");
    }

    #[test]
    fn the_kept_output_is_capped_and_says_so() {
        let line = vec![b'z'; 1000];
        let mut chunks: Vec<(usize, &[u8])> = Vec::new();
        let newline: &[u8] = b"\n";
        for _ in 0..1200 {
            chunks.push((0, &line));
            chunks.push((0, newline));
        }
        let (seen, output) = collect("secret-pw", &chunks);
        assert_eq!(seen.len(), 1200, "every line is still streamed");
        assert!(output.len() <= OUTPUT_CAP + 32);
        assert!(output.ends_with("[output truncated]\n"));
    }

    #[test]
    fn pv_05_a_host_key_is_trusted_on_first_use_and_only_that_key_after() {
        assert!(host_key_accepted(None, "SHA256:anything"));
        assert!(host_key_accepted(Some("SHA256:abc"), "SHA256:abc"));
        assert!(!host_key_accepted(Some("SHA256:abc"), "SHA256:abd"));
        assert!(!host_key_accepted(Some(""), "SHA256:abc"));
    }

    #[test]
    fn a_host_key_fingerprint_reads_as_ssh_keygen_prints_it() {
        let key = PublicKey::from_openssh(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOM0prn7Z8fiMDCFyfG8y7ElHkVYHSsXQTRAwK0DQ4Fp test",
        )
        .expect("a key");
        let print = host_key_fingerprint(&key);
        assert!(print.starts_with("SHA256:"), "{print}");
        assert_eq!(print.len(), "SHA256:".len() + 43, "{print}");
    }

    fn target(user: &str, password: &str) -> SshTarget {
        SshTarget {
            address: "127.0.0.1:22".parse().expect("an address"),
            user: user.into(),
            password: SecretString::from(password.to_string()),
        }
    }

    #[test]
    fn pv_05_a_password_that_could_not_be_masked_is_refused_and_the_error_does_not_hold_it() {
        let error = usable_password(&target("root", "two\nlines")).expect_err("refused");
        assert!(!error.to_string().contains("two\nlines"));
        assert!(usable_password(&target("root", "")).is_err());
        assert!(usable_password(&target("", "fine-password")).is_err());
        assert_eq!(
            usable_password(&target("root", "fine-password")).expect("usable"),
            "fine-password"
        );
    }

    #[test]
    fn an_upload_writes_beside_and_renames_with_its_mode() {
        let upload = Upload {
            path: "/etc/capstan-agent/agent.env".into(),
            mode: 0o600,
            bytes: Bytes::from_static(b"x"),
        };
        assert_eq!(
            upload_command(&upload).expect("a command"),
            "umask 077 && mkdir -p /etc/capstan-agent && cat > /etc/capstan-agent/agent.env.capstan-upload \
             && chmod 0600 /etc/capstan-agent/agent.env.capstan-upload \
             && mv -f /etc/capstan-agent/agent.env.capstan-upload /etc/capstan-agent/agent.env"
        );
        let top = Upload {
            path: "/install.sh".into(),
            mode: 0o755,
            bytes: Bytes::new(),
        };
        assert!(upload_command(&top)
            .expect("a command")
            .starts_with("umask 077 && mkdir -p / && cat > /install.sh.capstan-upload"));
    }

    #[test]
    fn an_upload_path_the_shell_could_read_otherwise_is_refused() {
        for path in [
            "relative/file",
            "/etc/dir/",
            "/tmp/a b",
            "/tmp/$(reboot)",
            "/tmp/a;b",
            "/tmp/'quoted'",
            "/tmp/../etc/shadow",
            "/tmp//double",
            "/tmp/./here",
            "/tmp/new\nline",
        ] {
            let upload = Upload {
                path: path.into(),
                mode: 0o644,
                bytes: Bytes::new(),
            };
            assert!(
                matches!(upload_command(&upload), Err(SshError::Upload { .. })),
                "{path:?} was taken"
            );
        }
        let bad_mode = Upload {
            path: "/tmp/file".into(),
            mode: 0o10000,
            bytes: Bytes::new(),
        };
        assert!(upload_command(&bad_mode).is_err());
    }
}
