//! Uploads (API-5): a user hands the server a file, the server checks it and keeps it
//! content-addressed, and later serves it back only to that user through an expiring link.
//!
//! - `POST /v1/uploads?name=…` takes the raw body (at most [`MAX_UPLOAD_BYTES`], enforced by a
//!   body limit on this route alone) and a declared `Content-Type`. The name goes through
//!   [`validate_relative_path`] (every percent-encoded traversal refused). The media type is
//!   sniffed from the content with a small magic-number table ([`sniff`]); a declared type that
//!   contradicts it is 415 — `application/octet-stream` is always accepted and the sniffed type
//!   stored instead. A ZIP must pass [`check_zip`] (symlinks, traversal, duplicates, bombs,
//!   encryption: 422 `bad_archive`). The bytes are staged in a temp file and published into the
//!   artifact store under their SHA-256; the record and its audit event commit together.
//! - `GET /v1/uploads/{id}` answers the record and a fresh download link for the caller; another
//!   workspace's id is the same 404 as a missing one.
//! - `GET /v1/uploads/{id}/content?expires=&sig=` serves the bytes as an attachment with the
//!   stored type and `nosniff`. `sig` is HMAC-SHA256 over `"{user_id}\n{upload_id}\n{expires}"`
//!   under a 32-byte server key in the key directory (`download.key`, 0600, created once with
//!   `O_EXCL`), and the request must be authenticated as that same user: a leaked link is useless
//!   to anyone else, and every link expires ([`LINK_TTL_SECS`]).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use airlock_files::names::validate_relative_path;
use airlock_files::zipcheck::{ZipLimits, check_zip};
use airlock_iam::Permission;
use airlock_store::{AuditRecord, UploadRecord};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::{ApiError, AppState};

/// The largest upload body, in bytes (25 MiB).
pub const MAX_UPLOAD_BYTES: usize = 25 * 1024 * 1024;
/// How long a download link stays valid.
pub const LINK_TTL_SECS: i64 = 15 * 60;
/// The file in the key directory that holds the link-signing key.
pub const DOWNLOAD_KEY_FILE: &str = "download.key";
const KEY_LEN: usize = 32;

/// What an uploaded ZIP may expand to while it is checked.
pub const UPLOAD_ZIP_LIMITS: ZipLimits = ZipLimits {
    max_entries: 1000,
    max_total_uncompressed: 100 * 1024 * 1024,
    max_ratio: 100,
    ratio_grace_bytes: 1024 * 1024,
};

/// The routes of this module, with their OpenAPI descriptions.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_upload).layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)))
        .routes(routes!(get_upload))
        .routes(routes!(download_upload))
}

// ------------------------------------------------------------ media types

/// Which declared types agree with a sniffed one, and what is then stored:
/// `(sniffed, declared, stored)`. Anything not listed contradicts the content (415), except a
/// declared `application/octet-stream`, which stores the sniffed type. No active type (HTML,
/// SVG, JavaScript) is ever stored.
const AGREES: &[(&str, &str, &str)] = &[
    ("image/png", "image/png", "image/png"),
    ("image/jpeg", "image/jpeg", "image/jpeg"),
    ("image/jpeg", "image/jpg", "image/jpeg"),
    ("image/jpeg", "image/pjpeg", "image/jpeg"),
    ("image/gif", "image/gif", "image/gif"),
    ("application/pdf", "application/pdf", "application/pdf"),
    ("application/pdf", "application/x-pdf", "application/pdf"),
    ("application/zip", "application/zip", "application/zip"),
    (
        "application/zip",
        "application/x-zip-compressed",
        "application/zip",
    ),
    ("application/gzip", "application/gzip", "application/gzip"),
    ("application/gzip", "application/x-gzip", "application/gzip"),
    ("application/json", "application/json", "application/json"),
    ("application/json", "text/plain", "text/plain"),
    ("text/plain", "text/plain", "text/plain"),
    ("text/plain", "text/csv", "text/csv"),
    ("text/plain", "text/markdown", "text/markdown"),
];

const OCTET_STREAM: &str = "application/octet-stream";

/// Names the media type of `bytes` from their content alone: a magic number, else valid JSON,
/// else UTF-8 text without NUL, else `application/octet-stream`.
pub fn sniff(bytes: &[u8]) -> &'static str {
    if let Some((_, media)) = airlock_files::MAGIC
        .iter()
        .find(|(m, _)| bytes.starts_with(m))
    {
        return media;
    }
    if bytes.contains(&0) || std::str::from_utf8(bytes).is_err() {
        return OCTET_STREAM;
    }
    if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
        "application/json"
    } else {
        "text/plain"
    }
}

/// The type to store for content sniffed as `sniffed` and declared as `content_type`
/// (parameters allowed; a charset other than UTF-8 or ASCII contradicts text content).
pub fn agreed_type(content_type: &str, sniffed: &'static str) -> Option<&'static str> {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    for param in parts {
        if let Some((k, v)) = param.split_once('=')
            && k.trim().eq_ignore_ascii_case("charset")
            && !matches!(
                v.trim().trim_matches('"').to_ascii_lowercase().as_str(),
                "utf-8" | "utf8" | "us-ascii"
            )
        {
            return None;
        }
    }
    if essence == OCTET_STREAM {
        return Some(sniffed);
    }
    AGREES
        .iter()
        .find(|(s, d, _)| *s == sniffed && *d == essence)
        .map(|(_, _, stored)| *stored)
}

// ------------------------------------------------------------ download links

type HmacSha256 = Hmac<Sha256>;

fn link_mac(key: &[u8; KEY_LEN], user: &str, upload: &str, expires: i64) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail for a 32-byte key.
    let mut mac = match <HmacSha256 as KeyInit>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("hmac accepts any key length"),
    };
    mac.update(format!("{user}\n{upload}\n{expires}").as_bytes());
    mac
}

/// Lowercase hex HMAC-SHA256 of `"{user}\n{upload}\n{expires}"`.
pub fn sign_link(key: &[u8; KEY_LEN], user: &str, upload: &str, expires: i64) -> String {
    airlock_store::hex(&link_mac(key, user, upload, expires).finalize().into_bytes())
}

/// Upload ids are random tokens: ASCII letters, digits, `_` and `-`. Anything else (a newline
/// that could shift the fields of the signed message, a slash) is refused before any lookup.
fn plausible_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Constant-time check of a hex signature.
fn verify_link(key: &[u8; KEY_LEN], user: &str, upload: &str, expires: i64, sig: &str) -> bool {
    let Some(bytes) = unhex(sig) else {
        return false;
    };
    link_mac(key, user, upload, expires)
        .verify_slice(&bytes)
        .is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

fn link_for(key: &[u8; KEY_LEN], user: &str, upload: &str, now_ms: i64) -> String {
    let expires = now_ms.div_euclid(1000) + LINK_TTL_SECS;
    let sig = sign_link(key, user, upload, expires);
    format!("/v1/uploads/{upload}/content?expires={expires}&sig={sig}")
}

/// Keys already read, per key directory (a process may serve several in tests).
static KEYS: OnceLock<Mutex<HashMap<PathBuf, [u8; KEY_LEN]>>> = OnceLock::new();

fn internal(message: &str) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

/// The link-signing key of this server: read from `download.key`, created on first use.
async fn download_key(s: &AppState) -> Result<[u8; KEY_LEN], ApiError> {
    let dir = s.service.config().key_dir.clone();
    let cache = KEYS.get_or_init(Default::default);
    if let Some(k) = cache.lock().map_err(|_| internal("key cache"))?.get(&dir) {
        return Ok(*k);
    }
    let key = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || load_or_create_key(&dir)
    })
    .await
    .map_err(|_| internal("key task"))?
    .map_err(|_| internal("download key unavailable"))?;
    let mut map = cache.lock().map_err(|_| internal("key cache"))?;
    Ok(*map.entry(dir).or_insert(key))
}

/// Reads `dir/download.key`, or creates it (0600, `O_EXCL`) with 32 bytes from the OS CSPRNG.
/// Two processes starting together: one creates, the other sees `AlreadyExists` and reads the
/// winner's key once it is complete.
fn load_or_create_key(dir: &FsPath) -> std::io::Result<[u8; KEY_LEN]> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(DOWNLOAD_KEY_FILE);
    for _ in 0..100 {
        if let Some(key) = read_key(&path)? {
            return Ok(key);
        }
        let mut key = [0u8; KEY_LEN];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(&key)?;
                f.sync_all()?;
                std::fs::File::open(dir)?.sync_all()?;
                return Ok(key);
            }
            // Someone else is creating it: read theirs once it is written.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("download.key is incomplete"))
}

/// `Ok(None)` when the key file is missing or still being written.
fn read_key(path: &FsPath) -> std::io::Result<Option<[u8; KEY_LEN]>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_file() || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(
            "download.key must be a regular file readable by its owner only",
        ));
    }
    let file = std::fs::File::open(path)?;
    let opened = file.metadata()?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(std::io::Error::other("download.key changed while opening"));
    }
    let mut buf = Vec::with_capacity(KEY_LEN + 1);
    file.take(KEY_LEN as u64 + 1).read_to_end(&mut buf)?;
    match <[u8; KEY_LEN]>::try_from(buf.as_slice()) {
        Ok(k) => Ok(Some(k)),
        Err(_) if buf.len() < KEY_LEN => Ok(None),
        Err(_) => Err(std::io::Error::other("download.key is not 32 bytes")),
    }
}

// ------------------------------------------------------------ handlers

/// An upload as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadView {
    pub id: String,
    /// The validated (decoded) name.
    pub name: String,
    /// Lowercase hex SHA-256 of the content.
    pub digest: String,
    pub size: i64,
    /// The media type checked against the content.
    pub media_type: String,
    /// Unix milliseconds.
    pub created_at: i64,
}

impl From<&UploadRecord> for UploadView {
    fn from(r: &UploadRecord) -> Self {
        Self {
            id: r.id.clone(),
            name: r.name.clone(),
            digest: r.digest.clone(),
            size: r.size,
            media_type: r.media_type.clone(),
            created_at: r.created_at,
        }
    }
}

/// An upload and a download link bound to the caller.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadWithLink {
    pub upload: UploadView,
    /// `/v1/uploads/{id}/content?expires=…&sig=…`: valid for this user only, for 15 minutes.
    pub download_url: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UploadQuery {
    /// File name or relative path (`a/b.json`); traversal, absolute paths, NUL and
    /// percent-encoded forms of them are refused.
    pub name: String,
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text())
}

fn declared_type(headers: &HeaderMap) -> Result<String, ApiError> {
    let v = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    v.map(str::to_owned).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "media_type_required",
            "declare the file's Content-Type (application/octet-stream if unsure)",
        )
    })
}

/// Upload a file (API-5).
#[utoipa::path(
    post,
    path = "/v1/uploads",
    tag = "uploads",
    params(UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the raw file, at most 25 MiB; its Content-Type must agree with the content"),
    responses(
        (status = 201, description = "stored; the link is valid for the uploader only", body = UploadWithLink),
        (status = 400, description = "invalid_name: the name was refused", body = crate::openapi::ErrorBody),
        (status = 413, description = "the body is over 25 MiB", body = crate::openapi::ErrorBody),
        (status = 415, description = "media_type_mismatch: the declared type contradicts the content", body = crate::openapi::ErrorBody),
        (status = 422, description = "bad_archive: a ZIP failed its checks", body = crate::openapi::ErrorBody),
        (status = "4XX", description = "error", body = crate::openapi::ErrorBody),
        (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)
    )
)]
pub async fn create_upload(
    State(s): State<AppState>,
    c: Caller,
    q: Result<Query<UploadQuery>, QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Query(_checked) = q.map_err(bad_query)?;
    // The name as sent, still percent-encoded: the query extractor has
    // already decoded it once and would have replaced invalid UTF-8 with
    // U+FFFD; `validate_relative_path` does all the decoding itself and
    // refuses what is not UTF-8. (`+` is a space in a query string.)
    let raw_name = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("name="))
        .unwrap_or("")
        .replace('+', "%20");
    let name = validate_relative_path(&raw_name).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_name",
            format!("invalid file name: {e}"),
        )
    })?;
    let declared = declared_type(req.headers())?;
    // Read only now, after the caller and the name passed: the route's body limit applies.
    let body = Bytes::from_request(req, &s).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("uploads are limited to {MAX_UPLOAD_BYTES} bytes"),
            )
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text())
        }
    })?;

    let sniffed = sniff(&body);
    let media_type = agreed_type(&declared, sniffed).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "media_type_mismatch",
            format!("the content is {sniffed}, which the declared Content-Type contradicts"),
        )
    })?;
    if sniffed == "application/zip" {
        let bytes = body.clone();
        tokio::task::spawn_blocking(move || check_zip(&bytes, UPLOAD_ZIP_LIMITS))
            .await
            .map_err(|_| internal("archive check"))?
            .map_err(|e| {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "bad_archive",
                    format!("{}: {e}", e.code()),
                )
            })?;
    }

    // Content-addressed: staged in the store's tmp/, hashed as written, renamed into place.
    let artifacts = s.service.artifacts().clone();
    let bytes = body.clone();
    let (digest, size) =
        tokio::task::spawn_blocking(move || artifacts.put(&bytes[..], MAX_UPLOAD_BYTES as u64))
            .await
            .map_err(|_| internal("store task"))?
            .map_err(|_| internal("could not store the upload"))?;

    let rec = UploadRecord {
        id: airlock_store::random_id("upl"),
        workspace_id: c.workspace.clone(),
        user_id: c.actor().to_string(),
        name,
        digest,
        size: i64::try_from(size).map_err(|_| internal("size"))?,
        media_type: media_type.to_string(),
        created_at: s.auth.now(),
    };
    let mut audit = AuditRecord::system("upload.created", None)
        .with_actor(c.audit_actor())
        .with_metadata(serde_json::json!({
            "name": rec.name,
            "digest": rec.digest,
            "size": rec.size,
            "media_type": rec.media_type,
        }));
    audit.target = Some(rec.id.clone());
    s.service.store().create_upload(&rec, audit).await?;

    let key = download_key(&s).await?;
    let body = UploadWithLink {
        upload: UploadView::from(&rec),
        download_url: link_for(&key, c.actor(), &rec.id, s.auth.now()),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// One upload of the caller's workspace, with a download link for the caller.
#[utoipa::path(
    get,
    path = "/v1/uploads/{id}",
    tag = "uploads",
    params(("id" = String, Path, description = "upload id")),
    responses(
        (status = 200, description = "the upload and a link valid for the caller", body = UploadWithLink),
        (status = "4XX", description = "error", body = crate::openapi::ErrorBody),
        (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)
    )
)]
pub async fn get_upload(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<Json<UploadWithLink>, ApiError> {
    c.require(Permission::RunsRead)?;
    let rec = s
        .service
        .store()
        .get_upload(&c.workspace, &id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let key = download_key(&s).await?;
    Ok(Json(UploadWithLink {
        upload: UploadView::from(&rec),
        download_url: link_for(&key, c.actor(), &rec.id, s.auth.now()),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LinkQuery {
    /// Unix seconds after which the link is refused.
    pub expires: Option<String>,
    /// Hex HMAC-SHA256 binding user, upload and expiry.
    pub sig: Option<String>,
}

fn link_refused(code: &'static str, message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, code, message)
}

/// Download an upload's bytes through a signed, expiring link.
#[utoipa::path(
    get,
    path = "/v1/uploads/{id}/content",
    tag = "uploads",
    params(("id" = String, Path, description = "upload id"), LinkQuery),
    responses(
        (status = 200, description = "the file, as an attachment", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 403, description = "link_invalid or link_expired", body = crate::openapi::ErrorBody),
        (status = "4XX", description = "error", body = crate::openapi::ErrorBody),
        (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)
    )
)]
pub async fn download_upload(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    q: Result<Query<LinkQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsRead)?;
    let invalid = || link_refused("link_invalid", "this download link is not valid for you");
    let Query(q) = q.map_err(|_| invalid())?;
    let (Some(expires), Some(sig)) = (q.expires, q.sig) else {
        return Err(invalid());
    };
    let expires: i64 = expires.parse().map_err(|_| invalid())?;
    if !plausible_id(&id) {
        return Err(invalid());
    }
    // The signature first: nothing about the upload (not even whether the link expired) is
    // told to a caller who does not hold a link made for them.
    let key = download_key(&s).await?;
    if !verify_link(&key, c.actor(), &id, expires, &sig) {
        return Err(invalid());
    }
    if s.auth.now().div_euclid(1000) >= expires {
        return Err(link_refused(
            "link_expired",
            "this download link has expired",
        ));
    }
    let rec = s
        .service
        .store()
        .get_upload(&c.workspace, &id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let path = s
        .service
        .artifacts()
        .path(&rec.digest)
        .ok_or_else(|| internal("blob missing"))?;
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|_| internal("blob unreadable"))?;
    let len = file
        .metadata()
        .await
        .map_err(|_| internal("blob unreadable"))?
        .len();
    if i64::try_from(len).ok() != Some(rec.size) {
        return Err(internal("blob damaged"));
    }
    let mut r = Response::new(Body::from_stream(tokio_util::io::ReaderStream::new(file)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&rec.media_type).unwrap_or(HeaderValue::from_static(OCTET_STREAM)),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&rec.name)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("sha-256={}", rec.digest)) {
        h.insert("x-airlock-digest", v);
    }
    Ok(r)
}

/// `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266 / 8187), both
/// of the last path segment only.
fn content_disposition(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    let ascii: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._- ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let ascii = if ascii.trim_matches(['.', '_', ' ']).is_empty() {
        "download".to_string()
    } else {
        ascii
    };
    let mut encoded = String::with_capacity(last.len() * 3);
    for b in last.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_5_sniff_table() {
        let cases: &[(&[u8], &str)] = &[
            (b"\x89PNG\r\n\x1a\n\0\0", "image/png"),
            (b"\xff\xd8\xff\xe0", "image/jpeg"),
            (b"GIF87a..", "image/gif"),
            (b"GIF89a..", "image/gif"),
            (b"%PDF-1.7\n", "application/pdf"),
            (b"PK\x03\x04rest", "application/zip"),
            (b"PK\x05\x06", "application/zip"),
            (b"\x1f\x8b\x08\0", "application/gzip"),
            (b"{\"a\": 1}", "application/json"),
            (b" [1, 2] ", "application/json"),
            (b"42", "application/json"),
            (b"{\"a\": ", "text/plain"),
            (b"hello", "text/plain"),
            (b"", "text/plain"),
            (b"<html><script>", "text/plain"),
            (b"text\0nul", "application/octet-stream"),
            (b"\xff\xfe bad", "application/octet-stream"),
            (b"\x7fELF\x02\x01\x01\0", "application/octet-stream"),
        ];
        for (bytes, want) in cases {
            assert_eq!(sniff(bytes), *want, "{bytes:?}");
        }
    }

    #[test]
    fn api_5_declared_types_must_agree_with_the_content() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("image/png", "image/png", Some("image/png")),
            ("IMAGE/PNG", "image/png", Some("image/png")),
            ("text/plain", "image/png", None),
            ("image/jpeg", "image/png", None),
            ("application/octet-stream", "image/png", Some("image/png")),
            (
                "application/octet-stream",
                "application/octet-stream",
                Some("application/octet-stream"),
            ),
            ("image/png", "application/octet-stream", None),
            (
                "text/plain; charset=utf-8",
                "text/plain",
                Some("text/plain"),
            ),
            (
                "text/plain; charset=\"UTF-8\"",
                "text/plain",
                Some("text/plain"),
            ),
            ("text/plain; charset=utf-16", "text/plain", None),
            ("text/csv", "text/plain", Some("text/csv")),
            ("text/html", "text/plain", None),
            ("image/svg+xml", "text/plain", None),
            ("application/javascript", "text/plain", None),
            ("text/plain", "application/json", Some("text/plain")),
            ("application/json", "text/plain", None),
            (
                "application/x-zip-compressed",
                "application/zip",
                Some("application/zip"),
            ),
            ("", "text/plain", None),
        ];
        for (declared, sniffed, want) in cases {
            let sniffed: &'static str = airlock_files::MAGIC
                .iter()
                .map(|(_, m)| *m)
                .chain(["application/json", "text/plain", OCTET_STREAM])
                .find(|m| m == sniffed)
                .unwrap_or(OCTET_STREAM);
            assert_eq!(
                agreed_type(declared, sniffed),
                *want,
                "{declared} / {sniffed}"
            );
        }
    }

    #[test]
    fn api_5_links_bind_user_upload_and_expiry() {
        let key = [7u8; KEY_LEN];
        let sig = sign_link(&key, "usr_a", "upl_1", 100);
        assert_eq!(sig.len(), 64);
        assert!(verify_link(&key, "usr_a", "upl_1", 100, &sig));
        assert!(!verify_link(&key, "usr_b", "upl_1", 100, &sig));
        assert!(!verify_link(&key, "usr_a", "upl_2", 100, &sig));
        assert!(!verify_link(&key, "usr_a", "upl_1", 101, &sig));
        assert!(!verify_link(&[8u8; KEY_LEN], "usr_a", "upl_1", 100, &sig));
        assert!(!verify_link(
            &key,
            "usr_a",
            "upl_1",
            100,
            &sig.to_uppercase()
        ));
        assert!(!verify_link(&key, "usr_a", "upl_1", 100, &sig[..62]));
        assert!(!verify_link(&key, "usr_a", "upl_1", 100, ""));
        // Ids are random tokens without separators; one that is not cannot carry a link.
        assert!(plausible_id("upl_AbC-09"));
        for bad in ["", "upl\n1", "upl/1", "upl 1", "üpl", &"a".repeat(129)] {
            assert!(!plausible_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn api_5_content_disposition_is_safe() {
        assert_eq!(
            content_disposition("a/report.txt"),
            "attachment; filename=\"report.txt\"; filename*=UTF-8''report.txt"
        );
        assert_eq!(
            content_disposition("ünï \"x\";.txt"),
            "attachment; filename=\"_n_ _x__.txt\"; filename*=UTF-8''%C3%BCn%C3%AF%20%22x%22%3B.txt"
        );
        assert!(content_disposition("é").contains("filename=\"download\""));
    }

    #[test]
    fn api_5_the_download_key_is_created_once_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let a = load_or_create_key(&keys).unwrap();
        let b = load_or_create_key(&keys).unwrap();
        assert_eq!(a, b);
        let meta = std::fs::metadata(keys.join(DOWNLOAD_KEY_FILE)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(meta.len(), KEY_LEN as u64);
        assert_eq!(std::fs::metadata(&keys).unwrap().mode() & 0o777, 0o700);
        // A group-readable key is refused, not used.
        std::fs::set_permissions(
            keys.join(DOWNLOAD_KEY_FILE),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .unwrap();
        assert!(load_or_create_key(&keys).is_err());
        // A symlink in its place is refused.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(dir.path().join("elsewhere"), [1u8; KEY_LEN]).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), other.join(DOWNLOAD_KEY_FILE))
            .unwrap();
        assert!(load_or_create_key(&other).is_err());
    }
}
