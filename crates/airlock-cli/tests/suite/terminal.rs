//! The CLI on a terminal and off it (CLI-1), through a real pseudo-
//! terminal: a spinner while a run is under way only when stderr is a
//! terminal; a password typed at a prompt is not echoed, and a script's
//! piped password gets no prompt.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::suite::runs::Env;
use crate::suite::support::*;

/// The frames of indicatif's default spinner.
const FRAMES: &[char] = &['⠁', '⠂', '⠄', '⡀', '⢀', '⠠', '⠐', '⠈'];

/// A new pseudo-terminal: (master, slave).
fn pty() -> (OwnedFd, OwnedFd) {
    let p = nix::pty::openpty(None, None).unwrap();
    (p.master, p.slave)
}

/// Everything the terminal shows until every slave end is closed.
fn drain(master: OwnedFd) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break, // EIO once the slave side is gone
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the command did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cli_1_a_spinner_only_on_a_terminal() {
    let env = Env::new(Who::Invoker);
    env.sh_worker("nap", "", "sleep 1\necho rested\n");
    // On a terminal: the progress lines and the spinner's frames.
    let (master, slave) = pty();
    let reader = drain(master);
    let mut child = env
        .cmd()
        .args(["run", "nap"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    drop(child);
    let shown = reader.join().unwrap();
    assert!(status.success(), "{shown}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    assert!(
        shown.contains("airlock: run_"),
        "no progress line: {shown:?}"
    );
    assert!(
        shown.chars().any(|c| FRAMES.contains(&c)),
        "no spinner on the terminal: {shown:?}"
    );
    // Off a terminal: the same run shows neither.
    let out = env.cmd().args(["run", "nap"]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("airlock: run_"), "{err:?}");
    assert!(!err.chars().any(|c| FRAMES.contains(&c)), "{err:?}");
    assert!(
        !err.contains('\u{1b}'),
        "escape sequences off a terminal: {err:?}"
    );
}

#[test]
fn cli_1_a_typed_password_is_not_echoed_and_a_piped_one_is_not_prompted() {
    const TYPED: &str = "hunter2-typed-secret";
    // Runs `program` on a new terminal, types TYPED once `wait_for` shows
    // (at once when empty), and returns all the terminal showed.
    let run_on_pty = |program: &str, args: &[&str], wait_for: &str| {
        let (master, slave) = pty();
        let mut writer = std::fs::File::from(master.try_clone().unwrap());
        let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = shown.clone();
        let reader = std::thread::spawn(move || {
            let mut f = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&shown.lock().unwrap()).contains(wait_for) {
            assert!(Instant::now() < deadline, "no {wait_for:?} on the terminal");
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.write_all(format!("{TYPED}\n").as_bytes()).unwrap();
        let _ = wait_exit(&mut child);
        drop(child);
        drop(writer);
        reader.join().unwrap();
        let bytes = shown.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    // Control: a terminal echoes what is typed by default.
    let shown = run_on_pty("sh", &["-c", "printf ready; read x; echo done"], "ready");
    assert!(shown.contains(TYPED), "the control saw no echo: {shown:?}");
    // airlock's prompt: shown, the password not.
    let bin = airlock_bin();
    let shown = run_on_pty(
        bin.to_str().unwrap(),
        &[
            "login",
            "--server",
            "http://127.0.0.1:9",
            "--username",
            "bob",
        ],
        "Password for bob:",
    );
    assert!(!shown.contains(TYPED), "the password was echoed: {shown:?}");
    // A script pipes it: no prompt, read from stdin all the same (the
    // login then fails to reach the server, which is not the point).
    let mut child = Command::new(&bin)
        .args([
            "login",
            "--server",
            "http://127.0.0.1:9",
            "--username",
            "bob",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"piped-secret\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("Password for"), "{err:?}");
    assert!(
        err.contains("127.0.0.1:9"),
        "it did try the server: {err:?}"
    );
}
