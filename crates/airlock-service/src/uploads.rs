//! Uploads (API-5): a user hands the server a file, the server checks it and keeps it
//! content-addressed, and later serves it back only to that user through an expiring link.
//! Front ends pass the name as sent, the declared type and the bytes; the checks are here.
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

use std::path::{Path as FsPath, PathBuf};

use airlock_files::names::validate_relative_path;
use airlock_files::zipcheck::{ZipLimits, check_zip};
use airlock_iam::Permission;
use airlock_protocol::uploads::{DownloadLink, Upload, UploadWithLink};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, UploadRecord};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The largest upload, in bytes (25 MiB).
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

/// Reads `dir/download.key`, or creates it (0600, `O_EXCL`) with 32 bytes from the OS CSPRNG.
fn load_or_create_key(dir: &FsPath) -> std::io::Result<[u8; KEY_LEN]> {
    crate::keyfile::load_or_create(dir, DOWNLOAD_KEY_FILE)
}

// ------------------------------------------------------------ operations

fn upload_view(r: &UploadRecord) -> Upload {
    Upload {
        id: r.id.clone(),
        name: r.name.clone(),
        digest: r.digest.clone(),
        size: r.size,
        media_type: r.media_type.clone(),
        created_at: r.created_at,
    }
}

fn link_invalid() -> Error {
    Error::new(
        ErrorCode::LinkInvalid,
        "this download link is not valid for you",
    )
}

/// An upload's bytes, ready to be served.
#[derive(Debug, Clone)]
pub struct UploadContent {
    pub upload: Upload,
    /// The immutable blob in the artifact store.
    pub path: PathBuf,
    pub len: u64,
}

impl Service {
    /// The link-signing key of this server: read from `download.key` in the
    /// key directory, created on first use.
    async fn download_key(&self) -> Result<[u8; KEY_LEN]> {
        let dir = self.cfg.key_dir.clone();
        self.download_key
            .get_or_try_init(|| async move {
                tokio::task::spawn_blocking(move || load_or_create_key(&dir))
                    .await
                    .map_err(Error::internal)?
                    .map_err(|e| Error::internal(format!("download key unavailable: {e}")))
            })
            .await
            .copied()
    }

    /// Stores an upload (API-5). `raw_name` is the name exactly as sent,
    /// still percent-encoded: every decoding and traversal check happens
    /// here. `declared` is the Content-Type the client gave.
    pub async fn create_upload(
        &self,
        c: &Caller,
        raw_name: &str,
        declared: Option<&str>,
        body: Vec<u8>,
    ) -> Result<UploadWithLink> {
        c.require(Permission::RunsCreate)?;
        let name = validate_relative_path(raw_name)
            .map_err(|e| Error::new(ErrorCode::InvalidName, format!("invalid file name: {e}")))?;
        let declared = declared
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::MediaTypeRequired,
                    "declare the file's Content-Type (application/octet-stream if unsure)",
                )
            })?;
        if body.len() > MAX_UPLOAD_BYTES {
            return Err(Error::new(
                ErrorCode::BodyTooLarge,
                format!("uploads are limited to {MAX_UPLOAD_BYTES} bytes"),
            ));
        }
        let sniffed = sniff(&body);
        let media_type = agreed_type(declared, sniffed).ok_or_else(|| {
            Error::new(
                ErrorCode::MediaTypeMismatch,
                format!("the content is {sniffed}, which the declared Content-Type contradicts"),
            )
        })?;
        let body = bytes::Bytes::from(body);
        if sniffed == "application/zip" {
            let bytes = body.clone();
            tokio::task::spawn_blocking(move || check_zip(&bytes, UPLOAD_ZIP_LIMITS))
                .await
                .map_err(Error::internal)?
                .map_err(|e| Error::new(ErrorCode::BadArchive, format!("{}: {e}", e.code())))?;
        }
        // Content-addressed: staged in the store's tmp/, hashed as written,
        // renamed into place, and published to the shared blob store
        // (DUR-5) before the row that names it exists, so any node can
        // stage it.
        let (digest, size) = self
            .blobs
            .put(body.clone(), MAX_UPLOAD_BYTES as u64)
            .await
            .map_err(|e| e.to_error("the upload was not stored"))?;
        let rec = UploadRecord {
            id: airlock_store::random_id("upl"),
            workspace_id: c.workspace.clone(),
            user_id: c.actor_id().to_string(),
            name,
            digest,
            size: i64::try_from(size).map_err(Error::internal)?,
            media_type: media_type.to_string(),
            created_at: self.now(),
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
        self.store.create_upload(&rec, audit).await.svc()?;
        let key = self.download_key().await?;
        Ok(UploadWithLink {
            upload: upload_view(&rec),
            download_url: link_for(&key, c.actor_id(), &rec.id, self.now()),
        })
    }

    /// One upload of the caller's workspace, with a fresh link for the caller.
    pub async fn get_upload(&self, c: &Caller, id: &str) -> Result<UploadWithLink> {
        c.require(Permission::RunsRead)?;
        let rec = self
            .store
            .get_upload(&c.workspace, id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)?;
        let key = self.download_key().await?;
        Ok(UploadWithLink {
            upload: upload_view(&rec),
            download_url: link_for(&key, c.actor_id(), &rec.id, self.now()),
        })
    }

    /// An upload's content through a signed link made for this caller.
    /// The signature is checked first: nothing about the upload (not even
    /// whether the link expired) is told to a caller who does not hold a
    /// link made for them.
    pub async fn open_upload(
        &self,
        c: &Caller,
        id: &str,
        link: &DownloadLink,
    ) -> Result<UploadContent> {
        c.require(Permission::RunsRead)?;
        let (Some(expires), Some(sig)) = (&link.expires, &link.sig) else {
            return Err(link_invalid());
        };
        let expires: i64 = expires.parse().map_err(|_| link_invalid())?;
        if !plausible_id(id) {
            return Err(link_invalid());
        }
        let key = self.download_key().await?;
        if !verify_link(&key, c.actor_id(), id, expires, sig) {
            return Err(link_invalid());
        }
        if self.now().div_euclid(1000) >= expires {
            return Err(Error::new(
                ErrorCode::LinkExpired,
                "this download link has expired",
            ));
        }
        let rec = self
            .store
            .get_upload(&c.workspace, id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)?;
        let path = self
            .blobs
            .fetch(&rec.digest, u64::try_from(rec.size).unwrap_or(0))
            .await
            .map_err(|e| match e {
                crate::blobs::BlobError::NotFound(_) => {
                    Error::internal(format!("upload blob unavailable: {e}"))
                }
                e => e.to_error("the upload could not be read"),
            })?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::internal(format!("upload blob unreadable: {e}")))?
            .len();
        if i64::try_from(len).ok() != Some(rec.size) {
            return Err(Error::internal("upload blob damaged"));
        }
        Ok(UploadContent {
            upload: upload_view(&rec),
            path,
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

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
