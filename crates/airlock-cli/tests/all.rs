//! One integration-test binary for the CLI crate; the cases live in `suite/`.
mod suite;
