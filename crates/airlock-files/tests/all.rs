//! One integration-test binary for the file layer; the cases live in `suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
