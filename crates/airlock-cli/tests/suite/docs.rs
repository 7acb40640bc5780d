//! What a newcomer reads first is true: `airlock --help` says what airlock
//! does for its user, and every requirement id the code and documents cite
//! is stated in `docs/requirements.md`.

use std::process::Command;

use crate::suite::support::airlock_bin;

#[test]
fn help_opens_with_what_airlock_does_for_its_user() {
    for flag in ["--help", "-h"] {
        let out = Command::new(airlock_bin()).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or("");
        assert!(
            first.starts_with("Run AI agents and automation scripts")
                && first.contains("cannot have the key"),
            "{flag} opens with: {first}"
        );
        assert!(
            !text.contains("wires the libraries"),
            "{flag} shows an implementation note: {text}"
        );
    }
}
