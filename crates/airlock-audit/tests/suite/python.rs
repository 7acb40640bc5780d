//! AUD-4: `verify_export.py`, an independent verifier using only Python's standard library,
//! agrees with this crate on good chains and on every row of the attack matrix.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock_audit::{ChainedEvent, hex, to_json_line};
use serde_json::Value;

use super::support::{attacks, chain};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_export.py")
}

/// The export line of `e`, or, for an event that has no canonical form (an attack row), the
/// same members written by plain serde_json.
fn line(e: &ChainedEvent) -> String {
    to_json_line(e).unwrap_or_else(|_| {
        let mut v = serde_json::to_value(&e.event).unwrap();
        v["prev_hash"] = Value::String(e.prev_hash_hex());
        v["hash"] = Value::String(e.hash_hex());
        v.to_string()
    })
}

fn export(events: &[ChainedEvent]) -> String {
    let mut out = String::new();
    for e in events {
        out.push_str(&line(e));
        out.push('\n');
    }
    out
}

fn write_temp(name: &str, contents: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("airlock-audit-{}-{name}.jsonl", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

fn python(args: &[String], stdin: Option<&str>) -> Output {
    // `cryptography` (for --public-key): the system's, or the pinned copy
    // scripts/test installs when there is none.
    let pydeps = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-crypto");
    let mut pythonpath = std::env::var_os("PYTHONPATH").unwrap_or_default();
    if pydeps.is_dir() {
        let mut p = pydeps.into_os_string();
        if !pythonpath.is_empty() {
            p.push(":");
            p.push(&pythonpath);
        }
        pythonpath = p;
    }
    let mut child = Command::new("python3")
        .env("PYTHONPATH", pythonpath)
        .arg(script())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed to run the export verifier test");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn aud_4_python_verifies_a_good_export_file_and_rejects_a_tampered_copy() {
    let c = chain(20);
    let good = write_temp("good", &export(&c));
    let out = python(&[good.display().to_string()], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout(&out),
        format!("ok 20 events head={}\n", hex::encode(&c[19].hash))
    );

    let mut tampered = c.clone();
    tampered[6].event.metadata["n"] = serde_json::json!(700);
    let bad = write_temp("tampered", &export(&tampered));
    let out = python(&[bad.display().to_string()], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "bad seq 7: event 7 was edited: its hash does not match its contents\n"
    );

    std::fs::remove_file(good).unwrap();
    std::fs::remove_file(bad).unwrap();
}

#[test]
fn aud_4_python_reads_standard_input_and_checks_a_checkpoint() {
    let c = chain(5);
    let text = export(&c);
    let out = python(&[], Some(&text));
    assert_eq!(
        stdout(&out),
        format!("ok 5 events head={}\n", c[4].hash_hex())
    );
    let out = python(
        &[
            "-".into(),
            "--checkpoint".into(),
            format!("9:{}", c[4].hash_hex()),
        ],
        Some(&text),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "bad seq 6: chain ends at event 5 but a checkpoint covers event 9\n"
    );
    let out = python(&["--checkpoint".into(), "bogus".into()], Some(&text));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn aud_4_python_agrees_with_rust_on_the_attack_matrix() {
    for a in attacks() {
        let mut args = Vec::new();
        if let Some(ws) = a.workspace {
            args.extend(["--workspace".to_owned(), ws.to_owned()]);
        }
        if let Some((seq, head)) = a.checkpoint {
            args.extend([
                "--checkpoint".to_owned(),
                format!("{seq}:{}", hex::encode(&head)),
            ]);
        }
        let out = python(&args, Some(&export(&a.events)));
        let text = stdout(&out);
        match &a.expected {
            Ok(count) => {
                assert_eq!(out.status.code(), Some(0), "{}: {text}", a.name);
                assert!(
                    text.starts_with(&format!("ok {count} events head=")),
                    "{}: {text}",
                    a.name
                );
            }
            Err(e) => {
                assert_eq!(out.status.code(), Some(1), "{}: {text}", a.name);
                assert!(
                    text.starts_with(&format!("bad seq {}: ", e.first_bad_seq())),
                    "{}: rust says {e}, python says {text}",
                    a.name
                );
                // Same wording as the Rust error, except where Python adds detail.
                assert!(
                    text.contains(&e.to_string()),
                    "{}: rust says {e}, python says {text}",
                    a.name
                );
            }
        }
    }
}

#[test]
fn aud_4_python_refuses_lines_rust_refuses() {
    let c = chain(2);
    let good = to_json_line(&c[0]).unwrap();
    let second = to_json_line(&c[1]).unwrap();
    for (name, first) in [
        (
            "repeated key",
            good.replacen("\"metadata\":{", "\"metadata\":{\"n\":0,\"n\":1,", 1),
        ),
        (
            "NaN",
            good.replacen("\"metadata\":{", "\"metadata\":{\"x\":NaN,", 1),
        ),
        (
            "Infinity",
            good.replacen("\"metadata\":{", "\"metadata\":{\"x\":-Infinity,", 1),
        ),
        (
            "lone surrogate",
            good.replacen("\"metadata\":{", "\"metadata\":{\"x\":\"\\ud800\",", 1),
        ),
        (
            "inexact integer",
            good.replacen("\"metadata\":{", "\"metadata\":{\"x\":9007199254740993,", 1),
        ),
        (
            "system actor with null id",
            good.replacen(
                r#""actor":{"id":"agent-claude","kind":"agent"}"#,
                r#""actor":{"id":null,"kind":"system"}"#,
                1,
            ),
        ),
        (
            "missing member",
            good.replacen("\"target\":\"target-1\",", "", 1),
        ),
        ("extra member", good.replacen("{", "{\"zzz\":1,", 1)),
    ] {
        assert_ne!(first, good, "{name}: the edit applied");
        // Rust refuses at import, or (no canonical form) when verifying.
        let rust = airlock_audit::from_json_line(&first)
            .map_err(|e| e.to_string())
            .and_then(|e| airlock_audit::verify([&e]).map_err(|e| e.to_string()));
        assert!(rust.is_err(), "{name}: rust accepts");
        let out = python(&[], Some(&format!("{first}\n{second}\n")));
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stdout(&out));
        assert!(
            stdout(&out).starts_with("bad seq 1: "),
            "{name}: {}",
            stdout(&out)
        );
    }
}

/// Deterministic pseudo-random bits (splitmix64).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn aud_2_number_canonical_form_matches_python_on_many_doubles() {
    // Python's repr (David Gay's shortest, correctly rounded digits) is an independent
    // implementation of the digits ECMAScript asks for.
    let mut state = 0x5eed;
    let mut xs: Vec<f64> = Vec::new();
    for i in 0..60_000u64 {
        let r = splitmix(&mut state);
        xs.push(f64::from_bits(r)); // every exponent, subnormals included
        // Exact ties in the last digit: integers in [2^50, 2^51) plus 0.25 or 0.75.
        xs.push(((1u64 << 50) + (r >> 14)) as f64 + if i % 2 == 0 { 0.25 } else { 0.75 });
        // Short decimals at every scale, and values around the layout boundaries.
        let m = (r % 2_000_000) as f64 - 1_000_000.0;
        xs.push(m * 10f64.powi((r >> 40) as i32 % 60 - 30));
        xs.push(f64::from_bits(
            1e21f64.to_bits().wrapping_add(r % 7).wrapping_sub(3),
        ));
        xs.push(f64::from_bits(
            1e-6f64.to_bits().wrapping_add(r % 7).wrapping_sub(3),
        ));
        xs.push(((1u64 << 53) + (r >> 11)) as f64);
    }
    xs.retain(|x| x.is_finite());
    let input: String = xs
        .iter()
        .map(|x| format!("{:016x}\n", x.to_bits()))
        .collect();
    let program = format!(
        "import importlib.util, struct, sys\n\
         spec = importlib.util.spec_from_file_location('v', {:?})\n\
         v = importlib.util.module_from_spec(spec); spec.loader.exec_module(v)\n\
         for h in sys.stdin.read().split():\n\
         \x20   print(v.es_number(struct.unpack('>d', bytes.fromhex(h))[0]))\n",
        script().display().to_string()
    );
    let mut child = Command::new("python3")
        .args(["-c", &program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 must be installed");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let python: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(python.len(), xs.len());
    let digits = |s: &str| -> String {
        let mantissa = s.split('e').next().unwrap_or_default();
        let d: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        d.trim_matches('0').to_owned()
    };
    let mut corrected_ties = 0;
    for (x, py) in xs.iter().zip(&python) {
        let rust = airlock_audit::jcs::format_f64(*x).unwrap();
        assert_eq!(&rust, py, "{:016x}", x.to_bits());
        if digits(&format!("{x:e}")) != digits(&rust) {
            corrected_ties += 1;
        }
    }
    assert!(xs.len() > 300_000);
    // Positive control: the tie family really exercised the round-half-even correction.
    assert!(corrected_ties > 10_000, "{corrected_ties}");
}

/// AUD-4: checkpoints signed here are checked by the script with the public key, with the
/// same verdicts as `read_checkpoints` and the verifier: the newest is used, a cut chain is
/// caught against it, a forged or foreign-key line is refused, no key means no checkpoint.
#[test]
fn aud_4_python_checks_signed_checkpoints_like_rust() {
    use airlock_audit::checkpoint::{Checkpoint, public_key, read_checkpoints};
    let seed = [3u8; 32];
    let key = hex::encode(&public_key(&seed).unwrap());
    let c = chain(8);
    let ws = c[0].event.workspace_id.clone();
    let signed = |seq: u64, seed: &[u8; 32]| {
        Checkpoint {
            workspace_id: ws.clone(),
            seq,
            head: c[seq as usize - 1].hash,
            at: "2026-12-04T11:00:00.000Z".into(),
        }
        .sign(seed)
        .unwrap()
        .to_line()
        .unwrap()
    };
    let with = |events: &[ChainedEvent], lines: &[String]| {
        let mut t = export(events);
        for l in lines {
            t.push_str(l);
            t.push('\n');
        }
        t
    };
    let key_arg = |k: &str| vec!["-".to_string(), "--public-key".to_string(), k.to_string()];
    let cps = vec![signed(3, &seed), signed(6, &seed)];
    // Rust's reading of the same lines, for the agreement.
    let read = read_checkpoints(&cps.join("\n"), &ws, &public_key(&seed).unwrap()).unwrap();
    assert_eq!(read.newest.unwrap().checkpoint.seq, 6);

    // Control: the whole chain verifies against the newest checkpoint.
    let out = python(&key_arg(&key), Some(&with(&c, &cps)));
    assert_eq!(
        stdout(&out),
        format!(
            "ok 8 events head={} (checkpoint seq=6 at=2026-12-04T11:00:00.000Z)\n",
            c[7].hash_hex()
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A chain cut below the newest checkpoint: what the verifier says.
    let rust = airlock_audit::verify_against(&c[..4], Some((6, c[5].hash))).unwrap_err();
    let out = python(&key_arg(&key), Some(&with(&c[..4], &cps)));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with(&format!("bad seq {}: ", rust.first_bad_seq())),
        "{}",
        stdout(&out)
    );
    // A rewrite from event 2 onwards, every later hash recomputed: named at the first
    // checkpoint it changed (3), by both; against the newest alone it shows only at 6.
    let mut rw: Vec<ChainedEvent> = c[..1].to_vec();
    for e in &c[1..] {
        let mut ev = e.event.clone();
        if ev.seq == 2 {
            ev.metadata["n"] = serde_json::json!(999);
        }
        let next = airlock_audit::append(rw.last(), ev).unwrap();
        rw.push(next);
    }
    assert!(
        airlock_audit::verify(&rw).is_ok(),
        "the rewrite is consistent"
    );
    let mut v = airlock_audit::Verifier::new()
        .with_checkpoint(3, c[2].hash)
        .with_checkpoint(6, c[5].hash);
    let rust = rw.iter().try_for_each(|e| v.push(e)).unwrap_err();
    assert_eq!(rust.first_bad_seq(), 3);
    let out = python(&key_arg(&key), Some(&with(&rw, &cps)));
    assert!(stdout(&out).starts_with("bad seq 3: "), "{}", stdout(&out));
    let out = python(&key_arg(&key), Some(&with(&rw, &cps[1..])));
    assert!(stdout(&out).starts_with("bad seq 6: "), "{}", stdout(&out));
    // Without the key the checkpoints are not used (a warning), so the cut passes.
    let out = python(&[], Some(&with(&c[..4], &cps)));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not checked"));
    // Forged: a changed head, and a checkpoint signed with another key.
    let mut changed: serde_json::Value = serde_json::from_str(&cps[1]).unwrap();
    changed["head"] = serde_json::Value::String(c[7].hash_hex());
    for forged in [changed.to_string(), signed(8, &[4u8; 32])] {
        let lines = vec![cps[0].clone(), forged.clone()];
        assert!(read_checkpoints(&lines.join("\n"), &ws, &public_key(&seed).unwrap()).is_err());
        let out = python(&key_arg(&key), Some(&with(&c, &lines)));
        assert_eq!(out.status.code(), Some(1), "{forged}");
        assert_eq!(
            stdout(&out),
            "bad checkpoint line 10: the signature does not verify\n"
        );
    }
    // A bad key argument is a usage error.
    let out = python(&key_arg("xyz"), Some(&with(&c, &cps)));
    assert_eq!(out.status.code(), Some(2));
}
