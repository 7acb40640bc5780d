//! AUD-4: verifying stored lines as they are (`Verifier::push_line`, `LineView`) against the
//! path that parses each line and canonicalises the event again (`from_json_line`, then
//! `Verifier::push`). The claim under test (see `src/line.rs`): on every canonical line both
//! reach the same verdict from the same hash; every line the old path refused is refused; a
//! non-canonical line is refused even where the old path accepted it.

use std::process::Command;

use airlock_audit::jcs::canonicalize;
use airlock_audit::{
    ChainError, ChainedEvent, GENESIS, LineView, Verifier, VerifySummary, from_json_line, hex,
    link_hash, map_in_runs, prepare_lines, to_json_line,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::props::{arb_json, arb_string};
use super::support::{WS, attacks, chain, event};

/// The stored line of `e`, or, for an event with no canonical form (an attack row), the same
/// members written by plain serde_json, as a tampered database could hold them.
fn line(e: &ChainedEvent) -> String {
    to_json_line(e).unwrap_or_else(|_| {
        let mut v = serde_json::to_value(&e.event).unwrap();
        v["prev_hash"] = Value::String(e.prev_hash_hex());
        v["hash"] = Value::String(e.hash_hex());
        v.to_string()
    })
}

/// A verifier for workspace `ws` (any when `None`) holding checkpoint `cp`.
fn verifier(ws: Option<&str>, cp: Option<(u64, [u8; 32])>) -> Verifier {
    let mut v = Verifier::new();
    if let Some(ws) = ws {
        v = v.for_workspace(ws);
    }
    if let Some((seq, head)) = cp {
        v = v.with_checkpoint(seq, head);
    }
    v
}

fn verify_lines(
    lines: &[String],
    ws: Option<&str>,
    cp: Option<(u64, [u8; 32])>,
) -> Result<VerifySummary, ChainError> {
    let mut v = verifier(ws, cp);
    for l in lines {
        v.push_line(l)?;
    }
    v.finish()
}

/// [`verify_lines`] with the lines read and hashed on `threads` threads first
/// (`prepare_lines`), then checked in order (`Verifier::push_prepared`).
fn verify_prepared(
    lines: &[String],
    ws: Option<&str>,
    cp: Option<(u64, [u8; 32])>,
    threads: usize,
) -> Result<VerifySummary, ChainError> {
    let mut v = verifier(ws, cp);
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    for p in &prepare_lines(&refs, threads) {
        v.push_prepared(p)?;
    }
    v.finish()
}

/// The old path over stored lines: parse, then verify the parsed events.
fn verify_parsed(lines: &[String]) -> Result<VerifySummary, String> {
    let mut v = Verifier::new();
    for l in lines {
        let e = from_json_line(l).map_err(|e| e.to_string())?;
        v.push(&e).map_err(|e| e.to_string())?;
    }
    v.finish().map_err(|e| e.to_string())
}

/// What an attacker who knows the algorithm does to a line: recompute `hash` over the bytes
/// the line verifier would hash (the line without its `hash` and `prev_hash` members),
/// whatever those bytes are.
fn forge(line: &str) -> String {
    let member = |name: &str| {
        let at = line.find(&format!(",\"{name}\":\"")).unwrap();
        let start = at + name.len() + 5;
        (
            line[at..start + 65].to_owned(),
            line[start..start + 64].to_owned(),
        )
    };
    let (hash_member, h) = member("hash");
    let (prev_member, p) = member("prev_hash");
    let body = line
        .replacen(&hash_member, "", 1)
        .replacen(&prev_member, "", 1);
    assert_eq!(body.len() + 153, line.len(), "both members cut out");
    let forged = link_hash(&hex::decode_hash(&p).unwrap(), body.as_bytes());
    line.replacen(&h, &hex::encode(&forged), 1)
}

/// A two-event chain whose first event's metadata also holds `extra`.
fn two_lines(extra: Value) -> (String, String) {
    let mut first = event(WS, 1);
    first.metadata["u"] = extra;
    let first = airlock_audit::append(None, first).unwrap();
    let second = airlock_audit::append(Some(&first), event(WS, 2)).unwrap();
    (
        to_json_line(&first).unwrap(),
        to_json_line(&second).unwrap(),
    )
}

fn python(lines: &[String]) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_export.py");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "airlock-audit-line-{}-{}.jsonl",
        std::process::id(),
        rand_suffix()
    ));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let out = Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3 must be installed");
    std::fs::remove_file(&path).ok();
    String::from_utf8(out.stdout).unwrap()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn aud_4_stored_lines_verify_like_parsed_events_on_the_attack_matrix() {
    for a in attacks() {
        let lines: Vec<String> = a.events.iter().map(line).collect();
        let got = verify_lines(&lines, a.workspace, a.checkpoint);
        match (&a.expected, &got) {
            (Ok(count), Ok(summary)) => {
                assert_eq!(summary.count, *count, "{}", a.name);
                let head = a
                    .events
                    .iter()
                    .rev()
                    .find(|e| e.event.seq == *count)
                    .map_or(GENESIS, |e| e.hash);
                assert_eq!(summary.head, head, "{}", a.name);
            }
            // An event with no canonical form cannot be stored canonically: the line is
            // refused at the same sequence number.
            (Err(ChainError::Canonical { seq, .. }), Err(ChainError::Malformed { seq: s, .. })) => {
                assert_eq!(s, seq, "{}", a.name)
            }
            (Err(want), Err(got)) => assert_eq!(got, want, "{}", a.name),
            _ => panic!("{}: expected {:?}, got {:?}", a.name, a.expected, got),
        }
    }
}

#[test]
fn aud_4_lines_hashed_on_several_threads_give_the_one_thread_verdict() {
    // The whole attack matrix: the same summary or the same error (variant, seq, reason)
    // whatever the number of threads, including more threads than lines.
    for a in attacks() {
        let lines: Vec<String> = a.events.iter().map(line).collect();
        let one = verify_lines(&lines, a.workspace, a.checkpoint);
        for threads in [1, 2, 3, 4, 7, 64] {
            let got = verify_prepared(&lines, a.workspace, a.checkpoint, threads);
            assert_eq!(got, one, "{} on {threads} threads", a.name);
        }
    }
    assert!(prepare_lines(&[], 2).is_empty());

    // Several bad lines, one in each thread's share: the first in chain order is named,
    // not the first a thread finished with.
    let base: Vec<String> = chain(50).iter().map(line).collect();
    let edit = |lines: &mut Vec<String>, seq: usize| {
        lines[seq - 1] = lines[seq - 1].replace("2026-05-01", "2026-05-02");
    };
    let control = verify_lines(&base, Some(WS), None).unwrap();
    assert_eq!(control.count, 50, "control: the untouched chain verifies");
    for threads in [1, 2, 3, 4] {
        assert_eq!(
            verify_prepared(&base, Some(WS), None, threads),
            Ok(control),
            "control on {threads} threads"
        );
    }
    for (bad, first) in [
        (vec![40], 40),
        (vec![10, 40], 10),
        (vec![26, 49], 26),
        (vec![50, 2], 2),
    ] {
        let mut lines = base.clone();
        for &seq in &bad {
            edit(&mut lines, seq);
        }
        for threads in [1, 2, 3, 4] {
            let got = verify_prepared(&lines, Some(WS), None, threads);
            assert_eq!(
                got,
                Err(ChainError::Edited { seq: first }),
                "{bad:?} on {threads} threads"
            );
        }
    }
    // A line that is not an event at all in the second half, an edited one after it in the
    // same half: the malformed one is named, at the seq due there.
    let mut lines = base.clone();
    lines[34] = "{}".to_string();
    edit(&mut lines, 45);
    for threads in [1, 2, 4] {
        let got = verify_prepared(&lines, Some(WS), None, threads).map_err(|e| e.first_bad_seq());
        assert_eq!(got, Err(35), "{threads} threads");
    }
}

/// A page's lines are handed to the threads in runs of up to 64, whichever thread is free
/// taking the next: on a chain of many runs the verdict is still the one-thread verdict,
/// and the first bad line in chain order is named whichever thread prepared it.
#[test]
fn aud_4_lines_prepared_in_runs_by_whichever_thread_is_free_keep_chain_order() {
    let base: Vec<String> = chain(1100).iter().map(line).collect();
    let control = verify_lines(&base, Some(WS), None).unwrap();
    assert_eq!(control.count, 1100, "control: the untouched chain verifies");
    for threads in [2, 3, 8] {
        assert_eq!(verify_prepared(&base, Some(WS), None, threads), Ok(control));
    }
    for (bad, first) in [
        (vec![1000, 130], 130),
        (vec![64, 65], 64),
        (vec![1100], 1100),
    ] {
        let mut lines = base.clone();
        for &seq in &bad {
            lines[seq - 1] = lines[seq - 1].replace("2026-05-01", "2026-05-02");
        }
        for threads in [1, 2, 3, 8] {
            assert_eq!(
                verify_prepared(&lines, Some(WS), None, threads),
                Err(ChainError::Edited { seq: first }),
                "{bad:?} on {threads} threads"
            );
        }
    }
}

/// `map_in_runs`, which prepares a page's lines and decodes its hash columns on every core:
/// each item is mapped exactly once and the results come back in the items' order, for
/// lengths around the run sizes and any number of threads.
#[test]
fn aud_4_map_in_runs_maps_each_item_once_in_order() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for n in [0usize, 1, 2, 7, 63, 64, 65, 255, 256, 257, 1000, 4096] {
        let items: Vec<usize> = (0..n).collect();
        for threads in [1, 2, 3, 8, 64] {
            let calls = AtomicUsize::new(0);
            let got = map_in_runs(&items, threads, |i| {
                calls.fetch_add(1, Ordering::Relaxed);
                i * 3
            });
            assert_eq!(got.len(), n);
            assert_eq!(got.is_empty(), n == 0);
            let got: Vec<usize> = got.iter().copied().collect();
            assert_eq!(
                got,
                items.iter().map(|i| i * 3).collect::<Vec<_>>(),
                "{n} on {threads}"
            );
            assert_eq!(calls.load(Ordering::Relaxed), n, "{n} on {threads}");
        }
    }
}

#[test]
fn aud_4_line_view_reads_what_the_event_says_and_hashes_its_canonical_bytes() {
    for e in chain(20) {
        let l = to_json_line(&e).unwrap();
        let view = LineView::parse(&l).unwrap();
        assert_eq!(view.seq, e.event.seq);
        assert_eq!(view.hash, e.hash);
        assert_eq!(view.prev_hash, e.prev_hash);
        assert_eq!(view.workspace_id(), WS);
        assert!(view.workspace_is(WS) && !view.workspace_is("ws-7f3"));
        assert_eq!(
            view.event_bytes_parts().concat(),
            airlock_audit::event_bytes(&e.event).unwrap()
        );
        assert_eq!(view.event_hash(), e.hash);
    }
    // A workspace id that needs escapes.
    let odd = "ws \"q\" \\ \u{1}\n é";
    let e = airlock_audit::append(None, event(odd, 1)).unwrap();
    let l = to_json_line(&e).unwrap();
    let view = LineView::parse(&l).unwrap();
    assert!(view.workspace_is(odd));
    assert_eq!(view.workspace_id(), odd);
    assert_eq!(view.event_hash(), e.hash);
}

/// Spellings of a valid line that mean the same event, so that its stored hash still
/// matches: the old path accepted each, the line verifier and `verify_export.py` refuse each.
#[test]
fn aud_4_non_canonical_spellings_of_a_good_line_are_refused() {
    let (good, second) = two_lines(json!("\u{1f}/"));
    let respell = |from: &str, to: &str| {
        assert!(good.contains(from), "{from}");
        good.replacen(from, to, 1)
    };
    let metadata = {
        let v: Value = serde_json::from_str(&good).unwrap();
        String::from_utf8(canonicalize(&v["metadata"]).unwrap()).unwrap()
    };
    let cases = [
        ("space after a colon", respell("\"seq\":1", "\"seq\": 1")),
        ("trailing space", format!("{good} ")),
        ("carriage return at the end", format!("{good}\r")),
        (
            "escaped letter",
            respell("\"result\":\"ok\"", "\"result\":\"\\u006fk\""),
        ),
        (
            "escaped letter in a key",
            respell("\"n\":1", "\"\\u006e\":1"),
        ),
        ("escaped solidus", respell("\\u001f/", "\\u001f\\/")),
        ("uppercase hex in an escape", respell("\\u001f", "\\u001F")),
        (
            "long form of \\n",
            respell("line\\nbreak", "line\\u000abreak"),
        ),
        ("escaped non-ASCII", respell("\"\u{20ac}\"", "\"\\u20ac\"")),
        (
            "integer written as a float",
            respell("\"n\":1", "\"n\":1.0"),
        ),
        ("integer with an exponent", respell("\"n\":1", "\"n\":1e0")),
        (
            "float with an uppercase exponent",
            respell("1e+30", "1E+30"),
        ),
        ("float without the exponent sign", respell("1e+30", "1e30")),
        (
            "members out of order",
            respell(
                "\"action_id\":\"act-1\",\"actor\":{\"id\":\"agent-claude\",\"kind\":\"agent\"}",
                "\"actor\":{\"id\":\"agent-claude\",\"kind\":\"agent\"},\"action_id\":\"act-1\"",
            ),
        ),
        (
            "actor members out of order",
            respell(
                "{\"id\":\"agent-claude\",\"kind\":\"agent\"}",
                "{\"kind\":\"agent\",\"id\":\"agent-claude\"}",
            ),
        ),
        ("metadata keys in UTF-8 order", {
            // U+1F600 sorts before U+FB33 by UTF-16 code units, after it by UTF-8 bytes.
            let grin = "\"\u{1f600}\":[\"grin\",null,true]";
            let dagesh = &metadata[metadata.find("\"\u{fb33}\"").unwrap()..metadata.len() - 1];
            assert!(
                metadata.contains(&format!("{grin},{dagesh}}}")),
                "{metadata}"
            );
            respell(&format!("{grin},{dagesh}"), &format!("{dagesh},{grin}"))
        }),
    ];
    // Positive controls: the good chain verifies on all three paths.
    let pair = [good.clone(), second.clone()];
    assert_eq!(verify_lines(&pair, Some(WS), None).unwrap().count, 2);
    assert_eq!(verify_parsed(&pair).unwrap().count, 2);
    assert!(
        python(&pair).starts_with("ok 2 events"),
        "{}",
        python(&pair)
    );
    for (name, first) in cases {
        assert_ne!(first, good, "{name}: the edit applied");
        let lines = [first.clone(), second.clone()];
        // The old path accepted it: the same event, so the same hash.
        assert_eq!(
            verify_parsed(&lines).map(|s| s.count),
            Ok(2),
            "{name}: old path"
        );
        match verify_lines(&lines, Some(WS), None) {
            Err(ChainError::Malformed { seq: 1, .. }) => {}
            other => panic!("{name}: line verifier says {other:?} for {first}"),
        }
        let py = python(&lines);
        assert!(py.starts_with("bad seq 1: "), "{name}: python says {py}");
    }
}

/// Lines the old path refused, each with its hash recomputed over exactly the bytes the line
/// verifier would hash: still refused, by all three verifiers.
#[test]
fn aud_4_forged_lines_the_old_path_refused_are_refused() {
    let (good, second) = two_lines(json!(0));
    let meta = |add: &str| good.replacen("\"metadata\":{", &format!("\"metadata\":{{{add}"), 1);
    let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let hash = serde_json::from_str::<Value>(&good).unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    // (name, line, whether to recompute its hash over the bytes the line verifier hashes)
    let cases = [
        ("repeated metadata key", meta("\"\\r\":\"cr\","), true),
        (
            "repeated top-level member",
            good.replacen("\"at\":", "\"at\":\"2026-01-01T00:00:00Z\",\"at\":", 1),
            true,
        ),
        (
            "unknown member",
            good.replacen("\"at\":", "\"at_\":1,\"at\":", 1),
            true,
        ),
        (
            "missing member",
            good.replacen("\"target\":\"target-1\",", "", 1),
            true,
        ),
        (
            "system actor with null id",
            good.replacen(
                "{\"id\":\"agent-claude\",\"kind\":\"agent\"}",
                "{\"id\":null,\"kind\":\"system\"}",
                1,
            ),
            true,
        ),
        (
            "unknown actor kind",
            good.replacen("\"kind\":\"agent\"", "\"kind\":\"robot\"", 1),
            true,
        ),
        (
            "metadata not an object",
            {
                let v: Value = serde_json::from_str(&good).unwrap();
                let m = String::from_utf8(canonicalize(&v["metadata"]).unwrap()).unwrap();
                good.replacen(&m, "[1]", 1)
            },
            true,
        ),
        (
            "seq negative",
            good.replacen("\"seq\":1", "\"seq\":-1", 1),
            true,
        ),
        (
            "seq a float",
            good.replacen("\"seq\":1", "\"seq\":1.5", 1),
            true,
        ),
        (
            "seq beyond u64",
            good.replacen("\"seq\":1", "\"seq\":18446744073709551616", 1),
            true,
        ),
        (
            "null event type",
            good.replacen("\"event_type\":\"secret.read\"", "\"event_type\":null", 1),
            true,
        ),
        (
            "number in an optional string",
            good.replacen("\"result\":\"ok\"", "\"result\":1", 1),
            true,
        ),
        ("inexact integer", meta("\"\":9007199254740993,"), true),
        ("lone surrogate", meta("\"\":\"\\ud800\","), true),
        ("NaN", meta("\"\":NaN,"), true),
        (
            "raw control character",
            good.replacen("\"result\":\"ok\"", "\"result\":\"o\u{1}k\"", 1),
            true,
        ),
        (
            "nesting one level too deep",
            meta(&format!("\"\":{},", deep(126))),
            true,
        ),
        (
            "uppercase hash",
            good.replacen(&hash, &hash.to_uppercase(), 1),
            false,
        ),
    ];
    // Positive controls: forging a canonical line changes nothing; the deepest nesting the
    // old path accepted (127 containers, the event included) is accepted.
    assert_eq!(forge(&good), good);
    let (deepest, deepest_second) = two_lines(serde_json::from_str(&deep(125)).unwrap());
    assert!(deepest.contains(&format!("\"u\":{}", deep(125))));
    let pair = [deepest, deepest_second];
    assert_eq!(verify_lines(&pair, Some(WS), None).map(|s| s.count), Ok(2));
    assert_eq!(verify_parsed(&pair).map(|s| s.count), Ok(2));
    assert!(python(&pair).starts_with("ok 2 events"));
    let mut too_deep = airlock_audit::AuditEvent {
        metadata: json!({}),
        ..event(WS, 1)
    };
    too_deep.metadata["u"] = serde_json::from_str(&deep(126)).unwrap();
    assert!(
        airlock_audit::append(None, too_deep).is_err(),
        "one more is too deep"
    );
    for (name, bad, recompute) in cases {
        assert_ne!(bad, good, "{name}: the edit applied");
        let forged = if recompute { forge(&bad) } else { bad };
        let lines = [forged.clone(), second.clone()];
        assert!(
            verify_parsed(&lines).is_err(),
            "{name}: old path accepts {forged}"
        );
        match verify_lines(&lines, Some(WS), None) {
            Err(ChainError::Malformed { seq: 1, .. }) => {}
            other => panic!("{name}: line verifier says {other:?} for {forged}"),
        }
        let py = python(&lines);
        assert!(py.starts_with("bad seq 1: "), "{name}: python says {py}");
    }
}

#[test]
fn aud_4_stored_rows_in_a_gap_wait_for_the_verdict() {
    let lines: Vec<String> = chain(5).iter().map(|e| to_json_line(e).unwrap()).collect();
    let mut v = Verifier::new().for_workspace(WS);
    assert_eq!(v.push_line(&lines[0]), Ok(Some((1, chain(1)[0].hash))));
    // Event 2 deleted: 3 opens a gap, and neither it nor a later line is vouched for.
    assert_eq!(v.push_line(&lines[2]), Ok(None));
    assert_eq!(v.push_line(&lines[3]), Ok(None));
    // An unreadable line after the gap is bad from the gap on.
    assert_eq!(
        v.clone().push_line("{}"),
        Err(ChainError::Missing { expected_seq: 2 })
    );
    assert_eq!(v.finish(), Err(ChainError::Missing { expected_seq: 2 }));
    // Without a gap an unreadable line is bad at its position.
    let mut v = Verifier::new();
    v.push_line(&lines[0]).unwrap();
    assert!(matches!(
        v.push_line("not json"),
        Err(ChainError::Malformed { seq: 2, .. })
    ));
}

/// One random change to a line: a byte inserted, removed or replaced, from bytes that matter
/// to JSON.
fn mutate(line: &str, at: usize, what: u8, how: u8) -> String {
    const BYTES: &[u8] = b" \"\\,:{}[]0123456789.-+eEnulltrfas\t\n/u";
    let mut b = line.as_bytes().to_vec();
    let at = at % (b.len() + 1);
    let c = BYTES[usize::from(what) % BYTES.len()];
    match how % 3 {
        0 => b.insert(at, c),
        1 if at < b.len() => drop(b.remove(at)),
        _ if at < b.len() => b[at] = c,
        _ => b.push(c),
    }
    String::from_utf8(b).unwrap_or_else(|_| line.to_owned())
}

/// The old path's verdict on one line, plus whether the line is canonical: `Some((seq,
/// workspace, prev, hash, recomputed hash))` when it accepted the line and it is canonical.
/// What a verifier reads from a line: seq, workspace, prev_hash, hash, recomputed hash.
type Reading = (u64, String, [u8; 32], [u8; 32], [u8; 32]);

fn old_accepts_canonical(l: &str) -> Option<Reading> {
    let e = from_json_line(l).ok()?;
    let recomputed = e.expected_hash().ok()?;
    let v: Value = serde_json::from_str(l).ok()?;
    (canonicalize(&v).ok()? == l.as_bytes()).then_some((
        e.event.seq,
        e.event.workspace_id,
        e.prev_hash,
        e.hash,
        recomputed,
    ))
}

fn new_accepts(l: &str) -> Option<Reading> {
    let v = LineView::parse(l).ok()?;
    Some((v.seq, v.workspace_id(), v.prev_hash, v.hash, v.event_hash()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The line verifier accepts exactly the canonical lines the old path accepted, and
    /// reads and hashes them alike.
    #[test]
    fn aud_4_line_view_agrees_with_parse_and_canonicalise(
        meta in proptest::collection::vec((arb_string(), arb_json()), 0..5),
        ws in arb_string(),
        seq in prop_oneof![1u64..5, Just(1u64 << 53), Just(1_000_000_000_000_000_000)],
        mutations in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..3),
    ) {
        let mut e = event(&ws, 1);
        e.seq = seq;
        e.metadata = Value::Object(meta.into_iter().collect());
        let chained = ChainedEvent { event: e, prev_hash: [3; 32], hash: [0; 32] };
        let chained = ChainedEvent { hash: chained.expected_hash().unwrap_or([0; 32]), ..chained };
        let Ok(mut l) = to_json_line(&chained) else {
            // No canonical form (an inexact integer): nothing to store.
            prop_assert!(chained.expected_hash().is_err());
            return Ok(());
        };
        if mutations.is_empty() {
            let v = LineView::parse(&l).unwrap();
            prop_assert_eq!(v.event_hash(), chained.hash);
        }
        for (at, what, how) in mutations {
            l = mutate(&l, at, what, how);
        }
        prop_assert_eq!(new_accepts(&l), old_accepts_canonical(&l), "{}", l);
    }
}

#[test]
fn aud_4_line_view_agrees_on_hand_picked_values() {
    // Values at the edges of the canonical rules, each in a line of its own.
    let values = [
        json!(0),
        json!(-1),
        json!(999_999_999_999_999i64),
        json!(1_000_000_000_000_000i64),
        json!(9_007_199_254_740_992i64),
        json!(1e21),
        json!(1e-7),
        json!(0.1),
        json!(-0.0),
        json!(5e-324),
        json!(1.7976931348623157e308),
        json!(123456789012345680000.0),
        json!("\u{7f}\u{80}\u{2028}\u{ffff}\u{10ffff}"),
        json!({"": 1, "\u{0}": 2, "a": {"b": []}}),
        json!([[], {}, [null, true, false]]),
    ];
    for v in values {
        let e = airlock_audit::append(
            None,
            airlock_audit::AuditEvent {
                metadata: json!({"v": v}),
                ..event(WS, 1)
            },
        )
        .unwrap();
        let l = to_json_line(&e).unwrap();
        assert_eq!(
            LineView::parse(&l).map(|v| v.event_hash()),
            Ok(e.hash),
            "{l}"
        );
        assert_eq!(new_accepts(&l), old_accepts_canonical(&l), "{l}");
    }
    for spelled in [
        "1.0",
        "-0",
        "1E2",
        "1e2",
        "0.10",
        "1e-07",
        "0.0000001",
        "100000000000000000000000",
        "01",
        "9007199254740993",
        "1.5e+0",
    ] {
        let good = to_json_line(&airlock_audit::append(None, event(WS, 1)).unwrap()).unwrap();
        let l = good.replacen("\"n\":1", &format!("\"n\":{spelled}"), 1);
        assert_eq!(new_accepts(&l), old_accepts_canonical(&l), "{l}");
        assert_eq!(new_accepts(&l), None, "{l}");
    }
}
