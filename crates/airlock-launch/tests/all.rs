//! One integration-test binary for the launch seam; the cases live in `suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
