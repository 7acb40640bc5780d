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
    /// File name or relative path (`a/b.json`); traversal, absolute paths, NUL and
    /// percent-encoded forms of them are refused.
    #[param(min_length = 1, max_length = 255)]
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
