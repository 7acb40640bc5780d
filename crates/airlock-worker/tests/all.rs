//! One integration-test binary for the crate; the cases live in `suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
