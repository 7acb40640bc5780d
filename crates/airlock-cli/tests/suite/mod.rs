mod egress;
mod runs;
mod sandbox_attacks;
mod sandbox_cli;
mod secrets;
mod support;
mod tidy;
mod upstream;
