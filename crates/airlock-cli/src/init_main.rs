//! `airlock-sandbox-init`: the sandbox init and nothing else. A broker starts it instead of the
//! airlock binary when it may (`airlock_sandbox::init_binary` says when, and why it is faster).

fn main() {
    airlock_sandbox::init::main_if_requested();
    eprintln!("airlock-sandbox-init: this is airlock's sandbox init; only airlock starts it");
    std::process::exit(2);
}
