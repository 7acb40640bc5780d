//! The OpenAPI 3.1 document (API-1), generated from the handlers'
//! `#[utoipa::path]` annotations by `utoipa-axum`: a route is registered and
//! described by the same `routes!` call, so the two cannot drift. Served at
//! `/v1/openapi.json`.

use airlock_protocol::{ErrorBody, ErrorCode, ErrorDetail};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("alk_…")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "airlock_session",
                "session cookie from POST /v1/session; state changes also need X-CSRF-Token",
            ))),
        );
    }
}

#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "airlock",
        description = "Self-hosted runtime for AI agents and automation scripts: the agent can use the model, but it cannot have the key."
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCode)),
    modifiers(&Security),
    security(("api_key" = []), ("session" = [])),
    tags(
        (name = "health"), (name = "identity"), (name = "workers"), (name = "runs"),
        (name = "secrets"), (name = "audit"), (name = "uploads"), (name = "webhooks"),
        (name = "approvals"), (name = "emergency"), (name = "models"), (name = "retention")
    )
)]
pub struct ApiDoc;
