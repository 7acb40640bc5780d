mod egress;
mod runs;
mod sandbox_attacks;
mod sandbox_cli;
mod support;
mod tidy;
mod upstream;
