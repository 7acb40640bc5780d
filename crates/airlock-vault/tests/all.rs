//! airlock-vault's integration tests: one binary, one module per requirement group
//! (KEY-1 … KEY-6).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod suite;
