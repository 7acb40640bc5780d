//! One integration-test binary: the real HTTP model client against the
//! scripted model server (`airlock-modeltest`) on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
