//! The admin commands' HTTPS client: hyper with rustls and the ring provider, trusting the
//! system's roots, as the agent's client does (no second TLS stack in the workspace).

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

/// POSTs JSON with a bearer token; returns the status and the answer's bytes.
pub async fn post_json(url: &str, token: &str, body: Vec<u8>) -> anyhow::Result<(u16, Vec<u8>)> {
    // No trusted roots here: https cannot be verified (and says so when tried); plain http to
    // this machine still works.
    let connector = capstan_runtime::tls::https_connector(None, |_| {});
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body)))
        .context("building the request")?;
    let response = client
        .request(request)
        .await
        .with_context(|| format!("sending to {url}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .context("reading the plane's answer")?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}
