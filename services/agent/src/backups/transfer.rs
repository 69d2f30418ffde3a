//! Moving artifacts: a producer writes plaintext into zstd, then (on a thread of its own) age,
//! then a sink that cuts
//! the ciphertext into parts of at most 16 MiB, hashing each part and the whole as it goes;
//! each full part is PUT at a presigned URL while the next one fills (the next is handed over
//! only once the one before it landed). Going the other way, the
//! parts are fetched in order, checked against their recorded sizes and hashes, and fed
//! through age and zstd to a consumer. At most two parts are held at once either way, so
//! memory does not grow with the site.

use bytes::Bytes;
use http_body_util::BodyExt as _;
use sha2::{Digest, Sha256};
use std::{
    future::Future,
    io::{self, Read, Write},
};
use tokio::sync::mpsc;

use crate::{
    domain::backup::{key, part_name, Artifact, Part, MAX_KEYS_PER_REQUEST, PART_BYTES},
    plane::{ObjectError, Objects, Plane, PlaneError, SignedUrl, UrlOp},
};
use capstan_signing::NodeKey;

/// Why a broker gave no URL.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("the broker gave no URL: {0}")]
    Plane(#[source] PlaneError),
    #[error("the broker gave no URL for {key}")]
    NoUrl { key: String },
}

/// Why an artifact could not be moved (the check or the run could not go on).
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error("reading {key}: {reason}")]
    Reading { key: String, reason: String },
    #[error("the artifact cannot be sealed: {0}")]
    NoSeal(#[source] age::EncryptError),
    #[error("sealing the artifact: {0}")]
    Sealing(#[source] io::Error),
    #[error("compressing the artifact: {0}")]
    Compressing(#[source] io::Error),
    #[error("the sealing thread did not start: {0}")]
    NoSealer(#[source] io::Error),
    #[error("the artifact's writer stopped")]
    WriterStopped,
    #[error("the artifact's writer stopped: {0}")]
    WriterLost(#[source] tokio::task::JoinError),
    #[error("the artifact's sealer stopped: {0}")]
    SealerLost(#[source] tokio::task::JoinError),
    #[error("the artifact's sealer panicked")]
    SealerPanicked,
    #[error("the artifact's reader stopped: {0}")]
    ReaderLost(#[source] tokio::task::JoinError),
}

/// A sealed upload that failed: moving it, or the work that produced its bytes.
#[derive(Debug, thiserror::Error)]
pub enum SealError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error(transparent)]
    Produce(E),
}

crate::domain::refusal!(
    /// What an artifact's reader found wrong with what it read: a problem of the backup.
    Problem
);

/// Who hands out presigned URLs: the plane's broker for a running job, or a test's signer.
pub trait Broker: Sync {
    fn urls(
        &self,
        op: UrlOp,
        keys: &[String],
    ) -> impl Future<Output = Result<Vec<SignedUrl>, BrokerError>> + Send;
}

/// The plane's broker (`POST /api/v1/agent/backup_urls`) for one running job.
pub struct PlaneBroker<'a> {
    pub plane: &'a Plane,
    pub key: &'a NodeKey,
    pub job_id: i64,
}

impl Broker for PlaneBroker<'_> {
    async fn urls(&self, op: UrlOp, keys: &[String]) -> Result<Vec<SignedUrl>, BrokerError> {
        let mut urls = Vec::with_capacity(keys.len());
        for batch in keys.chunks(MAX_KEYS_PER_REQUEST) {
            let got = self
                .plane
                .backup_urls(self.key, self.job_id, op, batch)
                .await
                .map_err(BrokerError::Plane)?;
            urls.extend(got);
        }
        Ok(urls)
    }
}

/// One URL for one key.
pub async fn url_for(broker: &impl Broker, op: UrlOp, key: &str) -> Result<SignedUrl, BrokerError> {
    broker
        .urls(op, &[key.to_string()])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| BrokerError::NoUrl {
            key: key.to_string(),
        })
}

/// The end of the write pipeline: cuts the ciphertext into parts and hands each full one to
/// the uploader with its SHA-256, hashing the part and the whole artifact on the way, while the
/// bytes are fresh in the cache (the uploader then only sends).
struct PartSink {
    parts: mpsc::Sender<(Vec<u8>, String)>,
    /// One message for each part the uploader finished: a part is handed over only once the
    /// one before it landed, so at most one part uploads while the next fills.
    landed: mpsc::Receiver<()>,
    outstanding: bool,
    buffer: Vec<u8>,
    whole: Sha256,
    part: Sha256,
    bytes: u64,
}

impl PartSink {
    fn new(parts: mpsc::Sender<(Vec<u8>, String)>, landed: mpsc::Receiver<()>) -> PartSink {
        PartSink {
            parts,
            landed,
            outstanding: false,
            buffer: Vec::with_capacity(PART_BYTES),
            whole: Sha256::new(),
            part: Sha256::new(),
            bytes: 0,
        }
    }

    fn send(&mut self) -> io::Result<()> {
        let stopped = || io::Error::other("the upload stopped");
        if self.outstanding && self.landed.blocking_recv().is_none() {
            return Err(stopped());
        }
        let part = std::mem::take(&mut self.buffer);
        let sha256 = format!("{:x}", self.part.finalize_reset());
        self.parts
            .blocking_send((part, sha256))
            .map_err(|_| stopped())?;
        self.outstanding = true;
        self.buffer = Vec::with_capacity(PART_BYTES);
        Ok(())
    }

    /// Sends the last part; the artifact's (sha256 hex, bytes).
    fn finish(mut self) -> io::Result<(String, u64)> {
        if !self.buffer.is_empty() {
            self.send()?;
        }
        Ok((format!("{:x}", self.whole.finalize()), self.bytes))
    }
}

impl Write for PartSink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = PART_BYTES - self.buffer.len();
        let taken = data.len().min(room);
        self.buffer.extend_from_slice(&data[..taken]);
        self.whole.update(&data[..taken]);
        self.part.update(&data[..taken]);
        self.bytes += taken as u64;
        if self.buffer.len() == PART_BYTES {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The zstd level artifacts are compressed at.
const ZSTD_LEVEL: i32 = 3;
/// Compressed bytes are handed to the sealing thread in chunks of this size...
const CHUNK_BYTES: usize = 256 * 1024;
/// ...at most this many waiting.
const SEAL_QUEUE: usize = 4;

/// Cuts compressed bytes into chunks for the sealing thread.
struct ChunkWriter {
    chunks: std::sync::mpsc::SyncSender<Vec<u8>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn new(chunks: std::sync::mpsc::SyncSender<Vec<u8>>) -> ChunkWriter {
        ChunkWriter {
            chunks,
            buffer: Vec::with_capacity(CHUNK_BYTES),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        self.chunks
            .send(chunk)
            .map_err(|_| io::Error::other("the sealer stopped"))
    }

    /// Hands over the last chunk, then the end (an empty chunk).
    fn finish(mut self) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.send()?;
        }
        self.send()
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let taken = data.len().min(CHUNK_BYTES - self.buffer.len());
        self.buffer.extend_from_slice(&data[..taken]);
        if self.buffer.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `produce` on a blocking thread writing plaintext into zstd → age (to `recipients`) →
/// parts, and PUTs each part of run `seq` as `<name>.NNNNNN` while the next fills.
pub async fn seal_and_upload<T: Send + 'static, E: std::error::Error + Send + 'static>(
    broker: &impl Broker,
    objects: &Objects,
    recipients: Vec<age::x25519::Recipient>,
    seq: u64,
    name: &str,
    what: &str,
    produce: impl FnOnce(&mut dyn Write) -> Result<T, E> + Send + 'static,
) -> Result<(Artifact, T), SealError<E>> {
    let (sender, receiver) = mpsc::channel::<(Vec<u8>, String)>(1);
    let (landed, landed_receiver) = mpsc::channel::<()>(1);
    // Two threads: the producer writes plaintext through zstd into chunks; the sealer takes
    // them through age into parts. Compression and encryption then run side by side (as
    // `tar | zstd | age` does), at the cost of at most SEAL_QUEUE chunks in flight.
    let (chunks, chunk_receiver) = std::sync::mpsc::sync_channel::<Vec<u8>>(SEAL_QUEUE);
    let sink = PartSink::new(sender, landed_receiver);
    let sealing = spawn_sealer(recipients, chunk_receiver, sink)?;
    let producing = tokio::task::spawn_blocking(move || -> Result<T, SealError<E>> {
        let compressing = TransferError::Compressing;
        let mut compressed =
            zstd::stream::write::Encoder::new(ChunkWriter::new(chunks), ZSTD_LEVEL)
                .map_err(compressing)?;
        let value = produce(&mut compressed).map_err(SealError::Produce)?;
        compressed
            .finish()
            .map_err(compressing)?
            .finish()
            .map_err(compressing)?;
        Ok(value)
    });
    // The uploader owns the receiver: when it stops early, the producer's next send fails
    // instead of waiting forever.
    let uploaded = upload_parts(broker, objects, seq, name, receiver, landed).await;
    let produced = producing.await.map_err(TransferError::WriterLost)?;
    let sealed = tokio::task::spawn_blocking(move || sealing.join())
        .await
        .map_err(TransferError::SealerLost)?
        .map_err(|_| TransferError::SealerPanicked)?;
    // The uploader's error explains the others' ("the upload stopped"): it goes first.
    let parts = uploaded?;
    // The producer's own error says more than the sealer's "the writer stopped".
    let value = produced?;
    let (sha256, bytes) = sealed?;
    Ok((
        Artifact {
            name: name.to_string(),
            what: what.to_string(),
            bytes,
            sha256,
            parts,
        },
        value,
    ))
}

/// The sealing thread, giving the artifact's (sha256 hex, bytes).
type Sealer = std::thread::JoinHandle<Result<(String, u64), TransferError>>;

/// The sealing thread: takes the producer's chunks through age (to `recipients`) into `sink`
/// until the producer's end (an empty chunk); the artifact's (sha256 hex, bytes).
fn spawn_sealer(
    recipients: Vec<age::x25519::Recipient>,
    chunk_receiver: std::sync::mpsc::Receiver<Vec<u8>>,
    sink: PartSink,
) -> Result<Sealer, TransferError> {
    std::thread::Builder::new()
        .name("backup-seal".into())
        .spawn(move || -> Result<(String, u64), TransferError> {
            let sealing = TransferError::Sealing;
            let encryptor = age::Encryptor::with_recipients(
                recipients
                    .iter()
                    .map(|recipient| recipient as &dyn age::Recipient),
            )
            .map_err(TransferError::NoSeal)?;
            let mut sealed = encryptor.wrap_output(sink).map_err(sealing)?;
            // An empty chunk is the producer's end; a channel closed before it, its failure
            // (nothing more is sealed or sent).
            loop {
                match chunk_receiver.recv() {
                    Ok(chunk) if chunk.is_empty() => break,
                    Ok(chunk) => sealed.write_all(&chunk).map_err(sealing)?,
                    Err(_) => return Err(TransferError::WriterStopped),
                }
            }
            let sink = sealed.finish().map_err(sealing)?;
            sink.finish().map_err(sealing)
        })
        .map_err(TransferError::NoSealer)
}

/// PUTs each sealed part as it comes, telling the sink when it landed.
async fn upload_parts(
    broker: &impl Broker,
    objects: &Objects,
    seq: u64,
    name: &str,
    mut receiver: mpsc::Receiver<(Vec<u8>, String)>,
    landed: mpsc::Sender<()>,
) -> Result<Vec<Part>, TransferError> {
    let mut parts = Vec::new();
    while let Some((part, sha256)) = receiver.recv().await {
        let key = key(seq, &part_name(name, parts.len() + 1));
        let bytes = part.len() as u64;
        let url = url_for(broker, UrlOp::Put, &key).await?;
        objects.put(&url, Bytes::from(part)).await?;
        parts.push(Part { key, bytes, sha256 });
        let _ = landed.send(()).await;
    }
    Ok(parts)
}

/// What fetching an artifact found wrong with it (the check itself ran).
#[derive(Debug, Default)]
pub struct Fetched {
    pub problems: Vec<String>,
    pub bytes: u64,
}

/// Reads chunks the fetcher sends, on a blocking thread.
struct ChannelReader {
    chunks: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let taken = buffer.len().min(self.current.len());
        buffer[..taken].copy_from_slice(&self.current[..taken]);
        self.current = self.current.slice(taken..);
        Ok(taken)
    }
}

/// Fetches every part of `artifact` in order, checking each against its recorded size and
/// sha256 and the whole against its own, and feeds the ciphertext through age (opened with
/// `identity`) and zstd to `consume` on a blocking thread. A missing or damaged object, or a
/// consumer that cannot read what it got, is a problem of the backup; a broker that gives no
/// URL or a storage that cannot be reached is an error (the check could not run).
pub async fn fetch_and_open<T: Send + 'static, E: std::fmt::Display>(
    broker: &impl Broker,
    objects: &Objects,
    identity: age::x25519::Identity,
    artifact: &Artifact,
    consume: impl FnOnce(&mut dyn Read) -> Result<T, E> + Send + 'static,
) -> Result<(Option<T>, Fetched), TransferError> {
    let (sender, receiver) = mpsc::channel::<Bytes>(16);
    let name = artifact.name.clone();
    let consuming = tokio::task::spawn_blocking(move || -> Result<T, Problem> {
        let reader = ChannelReader {
            chunks: receiver,
            current: Bytes::new(),
        };
        let unopened = |error: &dyn std::fmt::Display| {
            format!("{name} cannot be opened with the site key: {error}")
        };
        let decryptor = age::Decryptor::new(reader).map_err(|error| unopened(&error))?;
        let plain = decryptor
            .decrypt(std::iter::once(&identity as &dyn age::Identity))
            .map_err(|error| unopened(&error))?;
        let mut decompressed = zstd::stream::read::Decoder::new(plain)
            .map_err(|error| format!("{name} cannot be decompressed: {error}"))?;
        let value = consume(&mut decompressed).map_err(|error| error.to_string())?;
        // Read what is left, so a damaged tail is found too.
        io::copy(&mut decompressed, &mut io::sink()).map_err(|error| format!("{name}: {error}"))?;
        Ok(value)
    });
    let mut fetched = Fetched::default();
    let mut whole = Sha256::new();
    let complete = fetch_parts(broker, objects, artifact, &sender, &mut fetched, &mut whole).await;
    drop(sender);
    let consumed = consuming.await.map_err(TransferError::ReaderLost)?;
    let complete = complete?;
    if complete {
        let sha256 = format!("{:x}", whole.finalize());
        if sha256 != artifact.sha256 {
            fetched.problems.push(format!(
                "{} does not match its sha256 in the manifest",
                artifact.name
            ));
        }
    }
    match consumed {
        Ok(value) if fetched.problems.is_empty() => Ok((Some(value), fetched)),
        Ok(_) => Ok((None, fetched)),
        Err(Problem(problem)) => {
            if complete || fetched.problems.is_empty() {
                fetched.problems.push(problem);
            }
            Ok((None, fetched))
        }
    }
}

/// Fetches the parts in order into `sender`, noting each part's problems in `fetched` and
/// hashing the whole into `whole`; `false` when it stopped early (a part missing, or the
/// consumer stopped: its error says why).
async fn fetch_parts(
    broker: &impl Broker,
    objects: &Objects,
    artifact: &Artifact,
    sender: &mpsc::Sender<Bytes>,
    fetched: &mut Fetched,
    whole: &mut Sha256,
) -> Result<bool, TransferError> {
    for part in &artifact.parts {
        let url = url_for(broker, UrlOp::Get, &part.key).await?;
        let mut body = match objects.get(&url).await {
            Ok(body) => body,
            Err(error) if error.is_not_found() => {
                fetched
                    .problems
                    .push(format!("{} is missing from storage", part.key));
                return Ok(false);
            }
            Err(error) => return Err(error.into()),
        };
        let mut hasher = Sha256::new();
        let mut bytes = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| TransferError::Reading {
                key: part.key.clone(),
                reason: error.to_string(),
            })?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            hasher.update(&chunk);
            whole.update(&chunk);
            bytes += chunk.len() as u64;
            if sender.send(chunk).await.is_err() {
                return Ok(false);
            }
        }
        fetched.bytes += bytes;
        if bytes != part.bytes {
            fetched.problems.push(format!(
                "{} has {bytes} bytes, the manifest says {}",
                part.key, part.bytes
            ));
        }
        let sha256 = format!("{:x}", hasher.finalize());
        if sha256 != part.sha256 {
            fetched.problems.push(format!(
                "{} does not match its sha256 in the manifest",
                part.key
            ));
        }
    }
    Ok(true)
}
