//! The interface's static files, compiled into the binary (no build step,
//! no download): served at `/static/<name>` with a content hash in the
//! link (`?v=…`), so they can be cached for a year and a new build is
//! fetched at once.

use std::sync::LazyLock;

use airlock_api::AppState;
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    pub name: &'static str,
    pub media_type: &'static str,
    pub bytes: &'static [u8],
}

/// Every file under `static/`.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        media_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../static/app.css"),
    },
    Asset {
        name: "app.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../static/app.js"),
    },
    Asset {
        name: "icon.svg",
        media_type: "image/svg+xml",
        bytes: include_bytes!("../static/icon.svg"),
    },
];

/// The first 16 hex digits of each asset's SHA-256, in [`ASSETS`] order.
static VERSIONS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let d = Sha256::digest(a.bytes);
            d.iter().take(8).map(|b| format!("{b:02x}")).collect()
        })
        .collect()
});

/// The versioned URL of asset `name` (`/static/app.css?v=…`).
pub fn url(name: &str) -> String {
    match ASSETS.iter().position(|a| a.name == name) {
        Some(i) => format!("/static/{name}?v={}", VERSIONS[i]),
        None => format!("/static/{name}"),
    }
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/static/{name}", axum::routing::get(serve))
        .route("/favicon.ico", axum::routing::get(favicon))
}

async fn serve(Path(name): Path<String>) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.name == name) else {
        return crate::page::UiError::Page(airlock_protocol::Error::not_found()).into_response();
    };
    let mut r = (StatusCode::OK, a.bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.media_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    r
}

async fn favicon() -> Response {
    serve(Path("icon.svg".to_string())).await
}
