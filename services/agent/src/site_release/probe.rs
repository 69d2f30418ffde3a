//! `page_probe` (RO-21, RO-22): a page of the site, its errors and its assets.

use super::*;

/// The viewer's header line from its root-owned file: (name, value). The value is a credential:
/// it never reaches a result or a log line.
fn viewer_header(path: &Path) -> Result<(String, String), CredentialError> {
    let path_buf = || path.to_path_buf();
    let unreadable = |source| CredentialError::Unreadable {
        path: path_buf(),
        source,
    };
    let metadata = fs::symlink_metadata(path).map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(CredentialError::NotAFile { path: path_buf() });
    }
    if metadata.uid() != rustix::process::geteuid().as_raw() || metadata.mode() & 0o077 != 0 {
        return Err(CredentialError::Exposed { path: path_buf() });
    }
    if metadata.len() > 8 * 1024 {
        return Err(CredentialError::TooLarge { path: path_buf() });
    }
    let text = fs::read_to_string(path).map_err(unreadable)?;
    let line = text.lines().next().unwrap_or_default();
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| CredentialError::NotOneHeader { path: path_buf() })?;
    let name = name.trim().to_ascii_lowercase();
    if name != "cookie" && name != "authorization" {
        return Err(CredentialError::WrongHeader { path: path_buf() });
    }
    Ok((name, value.trim().to_string()))
}

type ProbeClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// One GET: the status and up to `limit` bytes of the body, or why there was no answer.
async fn get(
    client: &ProbeClient,
    url: &url::Url,
    header: Option<&(String, String)>,
    limit: usize,
) -> Result<(u16, Vec<u8>), ProbeError> {
    let mut request =
        hyper::Request::get(url.as_str()).header("user-agent", "capstan-agent page_probe");
    if let Some((name, value)) = header {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(Bytes::new()))?;
    let exchange = async {
        let response = client.request(request).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                let room = limit.saturating_sub(bytes.len());
                bytes.extend_from_slice(&data[..data.len().min(room)]);
                if bytes.len() >= limit {
                    break;
                }
            }
        }
        Ok::<_, ProbeError>((status, bytes))
    };
    tokio::time::timeout(Duration::from_secs(PROBE_TIMEOUT_SECS), exchange)
        .await
        .map_err(|_| ProbeError::Timeout)?
}

fn log_length(path: &Path) -> u64 {
    fs::metadata(path)
        .map(|metadata| metadata.len())
        .unwrap_or(0)
}

/// What the error log holds from `from` on (the whole log when it shrank: rotated), at most
/// [`MAX_ERROR_LOG_READ`] bytes.
fn log_tail(path: &Path, from: u64) -> Vec<u8> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let start = if log_length(path) >= from { from } else { 0 };
    let mut bytes = Vec::new();
    if let Ok(mut file) = fs::File::open(path) {
        if file.seek(SeekFrom::Start(start)).is_ok() {
            let _ = file.take(MAX_ERROR_LOG_READ).read_to_end(&mut bytes);
        }
    }
    bytes
}

/// The header the page is fetched with: none for `anonymous`, the viewer's credential for
/// `admin`.
fn viewer_of(site: &Site, viewer: &str) -> Result<Option<(String, String)>, Failed> {
    match viewer {
        "anonymous" => Ok(None),
        "admin" => {
            let file = site.release.viewer_header_file.as_deref().ok_or_else(|| {
                Failed::new("site.json names no release.viewer_header_file, so no page can be fetched as admin")
            })?;
            Ok(Some(viewer_header(file).map_err(Failed::new)?))
        }
        other => Err(Failed::refused(
            format!("viewer must be anonymous or admin, not {other:?}"),
            Value::Null,
        )),
    }
}

/// Fetches each of the page's assets; the ones that failed (an error status or no answer),
/// each also written to `lines` (RO-22).
async fn failed_assets(
    client: &ProbeClient,
    assets: &[url::Url],
    header: Option<&(String, String)>,
    lines: &mut Vec<String>,
) -> Vec<String> {
    let mut failed = Vec::new();
    for asset in assets {
        let shown = match asset.query() {
            Some(query) => format!("{}?{query}", asset.path()),
            None => asset.path().to_string(),
        };
        match get(client, asset, header, MAX_ASSET_BYTES).await {
            Ok((asset_status, _)) if asset_status < 400 => {}
            Ok((asset_status, _)) => {
                lines.push(format!("asset {shown}: {asset_status}"));
                failed.push(shown);
            }
            Err(why) => {
                lines.push(format!("asset {shown}: {why}"));
                failed.push(shown);
            }
        }
    }
    failed
}

/// `page_probe {path, viewer}`: the page from the site's own address, as anonymous or as the
/// configured viewer: its status (none when it did not answer), the error lines the site's error
/// log gained meanwhile, and the same-origin assets that failed to load (RO-21, RO-22).
pub async fn probe(site: &Site, params: &Value) -> Result<Finished, Failed> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Failed::refused("page_probe needs a path", Value::Null))?;
    check_probe_path(path).map_err(|why| Failed::refused(why, Value::Null))?;
    let viewer = params
        .get("viewer")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Failed::refused(
                "page_probe needs a viewer (anonymous or admin)",
                Value::Null,
            )
        })?;
    let base = site.release.base_url.clone().ok_or_else(|| {
        Failed::new("site.json names no release.base_url, so the site's pages cannot be fetched")
    })?;
    let header = viewer_of(site, viewer)?;
    let url = base
        .join(path)
        .map_err(|error| Failed::refused(format!("path {path:?}: {error}"), Value::Null))?;
    if url.origin() != base.origin() {
        return Err(Failed::refused(
            format!("path {path:?} leaves the site"),
            Value::Null,
        ));
    }
    let error_log = site.root.join(&site.release.error_log);
    let before = log_length(&error_log);
    let client: ProbeClient =
        Client::builder(TokioExecutor::new()).build(crate::plane::https_connector());
    let page = get(&client, &url, header.as_ref(), MAX_PAGE_BYTES).await;
    let mut lines = Vec::new();
    let (status, failed_assets, checked) = match page {
        Err(why) => {
            lines.push(format!("{path}: {why}"));
            (None, Vec::new(), 0)
        }
        Ok((status, body)) => {
            lines.push(format!("{path}: {status}"));
            let assets = if status < 400 {
                page_assets(&String::from_utf8_lossy(&body), &url)
            } else {
                Vec::new()
            };
            let failed = failed_assets(&client, &assets, header.as_ref(), &mut lines).await;
            (Some(status), failed, assets.len())
        }
    };
    // The tail holds only what the log gained (or the whole rotated log).
    let tail = log_tail(&error_log, before);
    let errors = new_error_lines(0, &tail, tail.len() as u64);
    lines.push(format!("error log lines added: {errors}"));
    Ok(Finished {
        output: lines.join("\n"),
        result: json!({
            "path": path,
            "viewer": viewer,
            "status": status,
            "errors": errors,
            "failed_assets": failed_assets,
            "assets_checked": checked,
        }),
        redaction: Redaction::Text,
    })
}
