//! Uploads (API-5).

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// An upload's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Upload {
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

/// An upload and a download link bound to the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UploadWithLink {
    pub upload: Upload,
    /// `/v1/uploads/{id}/content?expires=…&sig=…`: valid for this user only, for 15 minutes.
    pub download_url: String,
}

/// Query of `POST /v1/uploads`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UploadName {
    /// File name or relative path (`a/b.json`). The pattern is the portable
    /// subset that is always accepted (ASCII names whose stem has at least
    /// five characters, so no Windows device name); the server also accepts
    /// other names that pass its checks (no traversal in any encoding, no
    /// absolute path, no control or look-alike characters, no device names).
    #[param(
        min_length = 1,
        max_length = 1024,
        pattern = r"^[A-Za-z0-9_-]{5,64}(\.[A-Za-z0-9_-]{1,16}){0,3}(/[A-Za-z0-9_-]{5,64}(\.[A-Za-z0-9_-]{1,16}){0,3}){0,3}$"
    )]
    pub name: String,
}

/// Query of `GET /v1/uploads/{id}/content`: the signed link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DownloadLink {
    /// Unix seconds after which the link is refused.
    pub expires: Option<String>,
    /// Hex HMAC-SHA256 binding user, upload and expiry.
    pub sig: Option<String>,
}
