//! Pure identity logic for Airlock: no SQL, no HTTP, no global state beyond a lazily computed
//! dummy password hash.
//!
//! | module | serves |
//! |---|---|
//! | [`roles`] | IAM-7 — the role × permission table, as data, and the grant rule |
//! | [`password`] | IAM-2 — Argon2id password hashing, constant-work verification, usernames |
//! | [`throttle`] | IAM-2 — the login throttling policy (bounded, non-revealing, never locks out forever); its state is in the store |
//! | [`keys`] | IAM-1, IAM-3, IAM-4, IAM-5 — session/CSRF/capability tokens, API keys, recovery codes |
//! | [`totp`] | IAM-4 — RFC 6238 second factor with per-step replay protection |
//!
//! Requirement ids are explained in `docs/requirements.md`.
//! | [`clock`] | controllable time for all of the above |

pub mod clock;
pub mod keys;
pub mod password;
pub mod roles;
pub mod throttle;
pub mod totp;

pub use clock::{Clock, ManualClock, SystemClock};
pub use roles::{Permission, Role};

/// Errors from identity logic. `Invalid` messages are safe to show to the user.
#[derive(Debug, thiserror::Error)]
pub enum IamError {
    #[error("{0}")]
    Invalid(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Fills `buf` from the OS CSPRNG. There is no safe fallback for a broken OS random source
/// (weak secrets are worse than no secrets), so a failure here aborts the operation loudly.
pub(crate) fn os_random(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("OS CSPRNG unavailable: {e}");
    }
}
