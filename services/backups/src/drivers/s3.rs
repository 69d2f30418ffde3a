//! The S3-compatible storage of one target, with the plane's own credential (BK-04: SigV4,
//! signed by `rusty-s3`, never by hand). The plane presigns for nodes (PUT with
//! `If-None-Match: *` signed in, GET) and itself lists, reads, heads and deletes (BK-13,
//! BK-15, BK-17). Requests go over hyper with rustls (ring, the system's trusted roots).

use std::time::Duration;

use bytes::Bytes;
use capstan_runtime::tls::HttpsConnector;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rusty_s3::actions::{ListObjectsV2, S3Action};
use rusty_s3::{Bucket, Credentials, UrlStyle};
use url::Url;

use super::seal;

/// How long the plane's own signed requests stay valid.
const OWN_REQUEST_VALID: Duration = Duration::from_secs(60);
/// The longest one storage request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The most bytes the plane reads of one object (a manifest).
pub const MAX_READ: usize = 16 * 1024 * 1024;

/// What went wrong talking to the storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("the target's settings do not make an S3 bucket: {0}")]
    Config(String),
    #[error("the storage could not be reached: {0}")]
    Unreachable(String),
    #[error("the storage answered {status} to {what}")]
    Status { what: String, status: u16 },
    #[error("the storage's answer to {what} could not be read: {why}")]
    Unreadable { what: String, why: String },
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    /// When it was written, as the store says (`None` when it says nothing readable).
    pub last_modified: Option<chrono::DateTime<chrono::Utc>>,
}

/// A presigned request for a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presigned {
    pub url: Url,
    /// Headers signed into the URL, which the request must carry.
    pub headers: Vec<(String, String)>,
}

/// The HTTPS client every target shares.
pub type Http = Client<HttpsConnector, Full<Bytes>>;

/// A client for the storages (TLS through rustls with ring and the system's roots).
pub fn http() -> Http {
    let connector = capstan_runtime::tls::https_connector(Some(Duration::from_secs(10)), |error| {
        tracing::warn!(%error, "no trusted certificate authorities found; https storage cannot be verified");
    });
    Client::builder(TokioExecutor::new()).build(connector)
}

/// One target's bucket with the plane's credential.
#[derive(Clone)]
pub struct Storage {
    bucket: Bucket,
    credentials: Credentials,
    /// Whether PUTs carry a signed `If-None-Match: *`.
    pub conditional_writes: bool,
    http: Http,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Storage")
            .field("bucket", &self.bucket.name())
            .field("base", &self.bucket.base_url().as_str())
            .finish()
    }
}

impl Storage {
    pub fn new(
        endpoint: &str,
        region: &str,
        bucket: &str,
        credentials: &seal::Credentials,
        conditional_writes: bool,
        http: Http,
    ) -> Result<Storage, StorageError> {
        let endpoint =
            Url::parse(endpoint).map_err(|error| StorageError::Config(error.to_string()))?;
        let bucket = Bucket::new(
            endpoint,
            UrlStyle::Path,
            bucket.to_string(),
            region.to_string(),
        )
        .map_err(|error| StorageError::Config(error.to_string()))?;
        Ok(Storage {
            bucket,
            credentials: Credentials::new(
                credentials.access_key.clone(),
                credentials.secret_key.clone(),
            ),
            conditional_writes,
            http,
        })
    }

    /// A presigned PUT of `key`, valid for `ttl`; with `If-None-Match: *` signed in when the
    /// store supports conditional writes (BK-14: it then refuses a key that exists).
    pub fn presign_put(&self, key: &str, ttl: Duration) -> Presigned {
        let mut action = self.bucket.put_object(Some(&self.credentials), key);
        let mut headers = Vec::new();
        if self.conditional_writes {
            action.headers_mut().insert("if-none-match", "*");
            headers.push(("if-none-match".to_string(), "*".to_string()));
        }
        Presigned {
            url: action.sign(ttl),
            headers,
        }
    }

    /// A presigned GET of `key`, valid for `ttl`.
    pub fn presign_get(&self, key: &str, ttl: Duration) -> Presigned {
        let action = self.bucket.get_object(Some(&self.credentials), key);
        Presigned {
            url: action.sign(ttl),
            headers: Vec::new(),
        }
    }

    async fn send(
        &self,
        method: hyper::Method,
        url: Url,
        what: &str,
    ) -> Result<(u16, Bytes), StorageError> {
        let request = hyper::Request::builder()
            .method(method)
            .uri(url.as_str())
            .body(Full::new(Bytes::new()))
            .map_err(|error| StorageError::Config(error.to_string()))?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| {
                StorageError::Unreachable(format!("{what} took over {REQUEST_TIMEOUT:?}"))
            })?
            .map_err(|error| StorageError::Unreachable(error.to_string()))?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), MAX_READ)
            .collect()
            .await
            .map_err(|error| StorageError::Unreadable {
                what: what.to_string(),
                why: error.to_string(),
            })?
            .to_bytes();
        Ok((status, body))
    }

    /// The size of `key`, or `None` when it does not exist.
    pub async fn head(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let url = self
            .bucket
            .head_object(Some(&self.credentials), key)
            .sign(OWN_REQUEST_VALID);
        let request = hyper::Request::builder()
            .method(hyper::Method::HEAD)
            .uri(url.as_str())
            .body(Full::new(Bytes::new()))
            .map_err(|error| StorageError::Config(error.to_string()))?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| StorageError::Unreachable("a HEAD took too long".into()))?
            .map_err(|error| StorageError::Unreachable(error.to_string()))?;
        match response.status().as_u16() {
            404 => Ok(None),
            200 => Ok(Some(
                response
                    .headers()
                    .get(hyper::header::CONTENT_LENGTH)
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.parse().ok())
                    .unwrap_or(0),
            )),
            status => Err(StorageError::Status {
                what: format!("HEAD {key}"),
                status,
            }),
        }
    }

    /// Reads `key` whole (at most [`MAX_READ`] bytes), or `None` when it does not exist.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        let url = self
            .bucket
            .get_object(Some(&self.credentials), key)
            .sign(OWN_REQUEST_VALID);
        let what = format!("GET {key}");
        match self.send(hyper::Method::GET, url, &what).await? {
            (200, body) => Ok(Some(body)),
            (404, _) => Ok(None),
            (status, _) => Err(StorageError::Status { what, status }),
        }
    }

    /// Deletes `key` (a key already gone is no error).
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let url = self
            .bucket
            .delete_object(Some(&self.credentials), key)
            .sign(OWN_REQUEST_VALID);
        let what = format!("DELETE {key}");
        match self.send(hyper::Method::DELETE, url, &what).await? {
            (200 | 204 | 404, _) => Ok(()),
            (status, _) => Err(StorageError::Status { what, status }),
        }
    }

    /// Checks the credential can list the bucket under `prefix` (one page of one key): what a
    /// target is tried with before it is saved.
    pub async fn probe(&self, prefix: &str) -> Result<(), StorageError> {
        let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
        action.with_prefix(prefix);
        action.with_max_keys(1);
        let url = action.sign(OWN_REQUEST_VALID);
        let what = format!("LIST {prefix}");
        match self.send(hyper::Method::GET, url, &what).await? {
            (200, _) => Ok(()),
            (status, _) => Err(StorageError::Status { what, status }),
        }
    }

    /// Every object under `prefix`, every page of the listing.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StorageError> {
        let mut listed = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(token) = &token {
                action.with_continuation_token(token.clone());
            }
            let url = action.sign(OWN_REQUEST_VALID);
            let what = format!("LIST {prefix}");
            let body = match self.send(hyper::Method::GET, url, &what).await? {
                (200, body) => body,
                (status, _) => return Err(StorageError::Status { what, status }),
            };
            let page = parse_list_page(&body, &what)?;
            listed.extend(page.contents.into_iter().map(|object| {
                Listed {
                    last_modified: object
                        .last_modified
                        .as_deref()
                        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                        .map(|at| at.with_timezone(&chrono::Utc)),
                    key: object.key,
                    size: object.size,
                }
            }));
            match page.next_continuation_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => break,
            }
        }
        Ok(listed)
    }
}

/// One page of a ListObjectsV2 answer: only what the plane reads. rusty-s3's own parser insists
/// on every object's `ETag`, which some stores (s3s-fs among them) leave out.
#[derive(Debug, serde::Deserialize)]
struct ListPage {
    #[serde(rename = "Contents", default)]
    contents: Vec<ListEntry>,
    #[serde(rename = "NextContinuationToken")]
    next_continuation_token: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct ListEntry {
    #[serde(rename = "Key")]
    key: String,
    #[serde(rename = "LastModified", default)]
    last_modified: Option<String>,
    #[serde(rename = "Size")]
    size: u64,
}

/// Reads a page of a listing (`what` names the request it answers).
fn parse_list_page(body: &[u8], what: &str) -> Result<ListPage, StorageError> {
    let unreadable = |why: String| StorageError::Unreadable {
        what: what.to_string(),
        why,
    };
    let text = std::str::from_utf8(body).map_err(|error| unreadable(error.to_string()))?;
    quick_xml::de::from_str(text).map_err(|error| unreadable(error.to_string()))
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn bk_13_a_listing_reads_without_etags_and_keeps_its_continuation() {
        let page = parse_list_page(
            br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>fleet/1/node-4/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>
<IsTruncated>true</IsTruncated><NextContinuationToken>abc</NextContinuationToken>
<Contents><Key>fleet/1/node-4/0000000001/manifest-1.json</Key>
<LastModified>2026-12-02T10:00:00.000Z</LastModified><Size>700</Size></Contents>
<Contents><Key>fleet/1/node-4/0000000001/db.dump.zst.age.000001</Key>
<ETag>"x"</ETag><Size>10</Size></Contents></ListBucketResult>"#,
            "LIST fleet/1/node-4/",
        )
        .unwrap();
        assert_eq!(page.contents.len(), 2);
        assert_eq!(page.contents[0].size, 700);
        assert_eq!(page.contents[1].last_modified, None);
        assert_eq!(page.next_continuation_token.as_deref(), Some("abc"));
        assert!(parse_list_page(
            b"<ListBucketResult><Contents><Key>k</Key></Contents>",
            "LIST k"
        )
        .is_err());
    }
}
