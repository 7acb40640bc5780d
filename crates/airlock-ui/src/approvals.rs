//! (to be written)

use airlock_api::AppState;
use axum::Router;

pub fn routes() -> Router<AppState> {
    Router::new()
}
