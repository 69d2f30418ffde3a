//! The UI's stylesheet and script, compiled into the binary. Pages link them as
//! `/ui/static/app.css?v=<content hash>`: a request naming the current hash may be cached for
//! a year, since a changed file has a new URL; any other request is answered but revalidated.

use axum::{
    extract::{Path, Query},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../static/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../static/app.js"),
    },
];

/// The first 16 hex digits of each asset's SHA-256, computed once.
fn versions() -> &'static Vec<String> {
    static VERSIONS: OnceLock<Vec<String>> = OnceLock::new();
    VERSIONS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| {
                Sha256::digest(asset.body.as_bytes())
                    .iter()
                    .take(8)
                    .map(|byte| format!("{byte:02x}"))
                    .collect()
            })
            .collect()
    })
}

/// The URL of asset `name`, with its content hash.
pub fn url(name: &str) -> String {
    match ASSETS.iter().position(|asset| asset.name == name) {
        Some(index) => format!("/ui/static/{name}?v={}", versions()[index]),
        None => format!("/ui/static/{name}"),
    }
}

#[derive(Debug, Deserialize)]
pub struct Version {
    v: Option<String>,
}

pub async fn serve(Path(file): Path<String>, Query(version): Query<Version>) -> Response {
    let Some(index) = ASSETS.iter().position(|asset| asset.name == file) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such file\n",
        )
            .into_response();
    };
    let asset = &ASSETS[index];
    let cache = if version.v.as_deref() == Some(versions()[index].as_str()) {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, cache),
        ],
        asset.body,
    )
        .into_response()
}
