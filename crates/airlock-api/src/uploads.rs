//! Upload routes (API-5): the raw body in, a link out, the bytes served
//! back as an inert attachment. The checks (name, type, archive, link)
//! are in the service.

use airlock_protocol::uploads::{DownloadLink, UploadName, UploadWithLink};
use airlock_protocol::{ErrorBody, ErrorCode};
use airlock_service::MAX_UPLOAD_BYTES;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, QueryOf, query};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_upload).layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)))
        .routes(routes!(get_upload))
        .routes(routes!(download_upload))
}

/// Upload a file (API-5).
#[utoipa::path(
    post,
    path = "/v1/uploads",
    tag = "uploads",
    params(UploadName),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the raw file, at most 25 MiB; its Content-Type must agree with the content"),
    responses(
        (status = 201, description = "stored; the link is valid for the uploader only", body = UploadWithLink),
        (status = 400, description = "invalid_name: the name was refused", body = ErrorBody),
        (status = 413, description = "the body is over 25 MiB", body = ErrorBody),
        (status = 415, description = "media_type_mismatch: the declared type contradicts the content", body = ErrorBody),
        (status = 422, description = "bad_archive: a ZIP failed its checks", body = ErrorBody),
        (status = "4XX", description = "error", body = ErrorBody),
        (status = "5XX", description = "internal error", body = ErrorBody)
    )
)]
async fn create_upload(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    q: QueryOf<UploadName>,
    req: Request,
) -> Result<(StatusCode, Json<UploadWithLink>), ApiError> {
    query(q)?;
    // The name as sent, still percent-encoded: the query extractor has
    // already decoded it once and would have replaced invalid UTF-8 with
    // U+FFFD; the service does all the decoding itself and refuses what is
    // not UTF-8. (`+` is a space in a query string.)
    let raw_name = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("name="))
        .unwrap_or("")
        .replace('+', "%20");
    let declared = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Read only now, after the caller and the query passed: the route's
    // body limit applies.
    let body = Bytes::from_request(req, &s).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::BodyTooLarge,
                format!("uploads are limited to {MAX_UPLOAD_BYTES} bytes"),
            )
        } else {
            ApiError::new(ErrorCode::InvalidBody, e.body_text())
        }
    })?;
    let created = s
        .service
        .create_upload(&c, &raw_name, declared.as_deref(), body.to_vec())
        .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// One upload of the caller's workspace, with a download link for the caller.
#[utoipa::path(
    get,
    path = "/v1/uploads/{id}",
    tag = "uploads",
    params(("id" = String, Path, description = "upload id")),
    responses(
        (status = 200, description = "the upload and a link valid for the caller", body = UploadWithLink),
        (status = "4XX", description = "error", body = ErrorBody),
        (status = "5XX", description = "internal error", body = ErrorBody)
    )
)]
async fn get_upload(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<UploadWithLink>, ApiError> {
    Ok(Json(s.service.get_upload(&c, &id).await?))
}

/// Download an upload's bytes through a signed, expiring link.
#[utoipa::path(
    get,
    path = "/v1/uploads/{id}/content",
    tag = "uploads",
    params(("id" = String, Path, description = "upload id"), DownloadLink),
    responses(
        (status = 200, description = "the file, as an attachment", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 403, description = "link_invalid or link_expired", body = ErrorBody),
        (status = "4XX", description = "error", body = ErrorBody),
        (status = "5XX", description = "internal error", body = ErrorBody)
    )
)]
async fn download_upload(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    q: QueryOf<DownloadLink>,
) -> Result<Response, ApiError> {
    // A malformed link is the same refusal as a forged one.
    let link = query(q).map_err(|_| {
        ApiError::new(
            ErrorCode::LinkInvalid,
            "this download link is not valid for you",
        )
    })?;
    let content = s.service.open_upload(&c, &id, &link).await?;
    let file = tokio::fs::File::open(&content.path)
        .await
        .map_err(|e| ApiError(airlock_protocol::Error::internal(e)))?;
    let mut r = Response::new(Body::from_stream(tokio_util::io::ReaderStream::new(file)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&content.upload.media_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(content.len));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&content.upload.name)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("sha-256={}", content.upload.digest)) {
        h.insert("x-airlock-digest", v);
    }
    Ok(r)
}

/// `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC
/// 6266 / 8187), both of the last path segment only.
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
}
