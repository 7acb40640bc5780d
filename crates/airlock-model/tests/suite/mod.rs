mod common;
mod faults;
mod limits;
mod profiles;
mod retry;
mod roundtrip;
mod secrets;
mod usage;
