//! The claim check for large rpc bodies. NATS refuses a message above its `max_payload`
//! (1 MiB by default), and an agent's `result` may be 4 MiB, so a body above
//! [`INLINE_BODY_LIMIT`] does not ride in the message: the sender puts it in the JetStream
//! object store bucket [`BODY_BUCKET`] under a fresh name, sends that name in the
//! [`BODY_OBJECT_HEADER`] with an empty payload, and the receiver fetches the object, deletes
//! it and hands the bytes on. The JSON half ([`META_HEADER`]) travels the same way when it is
//! too large for a header. Objects nobody collects (an asker that gave up) expire after
//! [`BODY_MAX_AGE`]. Callers never see any of this: `ask_with_body` and `route_with_body`
//! take and give plain bytes. A plain JSON question or answer (`Bus::ask`, `route`) too
//! large for a message takes the same path.

use async_nats::{
    jetstream::{
        object_store::{self, ObjectStore},
        stream::StorageType,
    },
    HeaderMap,
};
use bytes::Bytes;
use capstan_events::rpc::{ErrorCode, RpcError};
use futures::future::BoxFuture;
use std::time::Duration;
use tokio::io::AsyncReadExt;

use crate::Bus;

/// The object store bucket that holds bodies too large for a message.
pub const BODY_BUCKET: &str = "CAPSTAN_RPC_BODIES";
/// The header that carries the JSON half of a request or reply whose payload is a raw body.
pub const META_HEADER: &str = "Capstan-Meta";
/// Names the object that holds a message's body; the payload is then empty.
pub const BODY_OBJECT_HEADER: &str = "Capstan-Body-Object";
/// Names the object that holds a message's JSON half, when it is too large for a header.
pub const META_OBJECT_HEADER: &str = "Capstan-Meta-Object";
/// A body larger than this goes through the bucket (half of NATS' default `max_payload`,
/// which leaves room for the headers).
pub const INLINE_BODY_LIMIT: usize = 512 * 1024;
/// A JSON half larger than this goes through the bucket too: with an inline body of at most
/// [`INLINE_BODY_LIMIT`], the message stays under 1 MiB.
pub const INLINE_META_LIMIT: usize = 64 * 1024;
/// How long an uncollected object stays in the bucket. Longer than any rpc waits.
pub const BODY_MAX_AGE: Duration = Duration::from_secs(10 * 60);

fn unavailable(what: &str, error: impl std::fmt::Display) -> RpcError {
    RpcError::new(
        ErrorCode::Unavailable,
        format!("rpc body store: {what}: {error}"),
    )
}

impl Bus {
    /// The bucket, created on first use (every replica may race to create it; creating an
    /// identical bucket again is not an error, and a failed create is followed by a look-up).
    async fn body_bucket(&self) -> Result<ObjectStore, RpcError> {
        self.bodies
            .get_or_try_init(|| async {
                if let Ok(bucket) = self.jetstream().get_object_store(BODY_BUCKET).await {
                    return Ok(bucket);
                }
                let created = self
                    .jetstream()
                    .create_object_store(object_store::Config {
                        bucket: BODY_BUCKET.to_string(),
                        description: Some(
                            "rpc bodies too large for one message, collected by the receiver"
                                .into(),
                        ),
                        max_age: BODY_MAX_AGE,
                        storage: StorageType::File,
                        ..Default::default()
                    })
                    .await;
                match created {
                    Ok(bucket) => Ok(bucket),
                    Err(error) => self
                        .jetstream()
                        .get_object_store(BODY_BUCKET)
                        .await
                        .map_err(|_| unavailable("creating the bucket", error)),
                }
            })
            .await
            .cloned()
    }

    /// Stores `bytes` under a fresh name (a UUIDv7) and returns the name.
    ///
    /// Boxed, as is [`Bus::check_out`]: the object store's futures take kilobytes, and inline
    /// they would make every request and reply future that large while it waits (at thousands
    /// of long polls, tens of megabytes), though few bodies ever go this way.
    pub(crate) fn check_in<'a>(
        &'a self,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, RpcError>> {
        Box::pin(self.check_in_boxed(bytes))
    }

    async fn check_in_boxed(&self, bytes: &[u8]) -> Result<String, RpcError> {
        let bucket = self.body_bucket().await?;
        let name = uuid::Uuid::now_v7().to_string();
        let mut reader = bytes;
        bucket
            .put(name.as_str(), &mut reader)
            .await
            .map_err(|error| unavailable("storing a body", error))?;
        metrics::counter!("capstan_rpc_bodies_checked_in_total").increment(1);
        Ok(name)
    }

    /// Fetches the object `name`, deletes it, and returns its bytes (boxed, see
    /// [`Bus::check_in`]).
    pub(crate) fn check_out<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Bytes, RpcError>> {
        Box::pin(self.check_out_boxed(name))
    }

    async fn check_out_boxed(&self, name: &str) -> Result<Bytes, RpcError> {
        let bucket = self.body_bucket().await?;
        let mut object = bucket
            .get(name)
            .await
            .map_err(|error| unavailable(&format!("fetching body {name}"), error))?;
        // The size is the sender's word; reserve no more than a sane amount up front.
        let mut bytes = Vec::with_capacity(object.info().size.min(64 * 1024 * 1024));
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|error| unavailable(&format!("reading body {name}"), error))?;
        if let Err(error) = bucket.delete(name).await {
            // The bytes are in hand; the bucket's max age removes what the delete could not.
            tracing::warn!(object = name, %error, "rpc body not deleted after use");
        }
        Ok(bytes.into())
    }

    /// Puts `meta` and `body` into `headers` and returns the payload to send: each inline when
    /// small enough, else checked in and named in a header.
    pub(crate) async fn pack(
        &self,
        headers: &mut HeaderMap,
        meta: &str,
        body: Bytes,
    ) -> Result<Bytes, RpcError> {
        if meta.len() > INLINE_META_LIMIT {
            let name = self.check_in(meta.as_bytes()).await?;
            headers.insert(META_OBJECT_HEADER, name.as_str());
        } else {
            headers.insert(META_HEADER, meta);
        }
        self.pack_body(headers, body).await
    }

    /// The payload to send for `body`: itself when small enough, else empty, with the body
    /// checked in and named in `headers`. Plain JSON questions and answers go this way too.
    pub(crate) async fn pack_body(
        &self,
        headers: &mut HeaderMap,
        body: Bytes,
    ) -> Result<Bytes, RpcError> {
        if body.len() > INLINE_BODY_LIMIT {
            let name = self.check_in(&body).await?;
            headers.insert(BODY_OBJECT_HEADER, name.as_str());
            Ok(Bytes::new())
        } else {
            Ok(body)
        }
    }

    /// The reverse of [`Bus::pack`]: the JSON half (`None` when the message has none) and the
    /// body, checked out of the bucket when it was put there.
    pub(crate) async fn unpack(
        &self,
        headers: Option<&HeaderMap>,
        payload: Bytes,
    ) -> Result<(Option<String>, Bytes), RpcError> {
        let header = |name: &str| {
            headers
                .and_then(|headers| headers.get(name))
                .map(|v| v.to_string())
        };
        // Collect the body first, so a message whose JSON half cannot be read still leaves
        // nothing behind in the bucket.
        let body = match header(BODY_OBJECT_HEADER) {
            Some(name) => self.check_out(&name).await,
            None => Ok(payload),
        };
        let meta = match header(META_OBJECT_HEADER) {
            Some(name) => {
                let bytes = self.check_out(&name).await?;
                Some(String::from_utf8(bytes.to_vec()).map_err(|_| {
                    RpcError::new(ErrorCode::InvalidRequest, "rpc meta is not UTF-8")
                })?)
            }
            None => header(META_HEADER),
        };
        Ok((meta, body?))
    }
}
