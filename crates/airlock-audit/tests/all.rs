//! airlock-audit's integration tests: one binary, one module per concern (AUD-2, AUD-4).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod suite;
