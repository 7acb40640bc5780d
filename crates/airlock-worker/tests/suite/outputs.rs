//! RUN-3: outputs are checked against `[outputs]`; any mismatch is a
//! `schema_violation` naming the output.

use airlock_worker::{Manifest, OutputError};
use serde_json::{Value, json};

use super::{parse_ok, script};

fn manifest() -> Manifest {
    parse_ok(&script(
        r#"
[outputs.greeting]
type = "string"
max_length = 10

[outputs.count]
type = "number"
required = false

[outputs.label]
type = "string"
enum = ["bug", "docs"]
required = false

[outputs.report]
type = "file"
path = "reports/report.txt"

[outputs.extra]
type = "file"
path = "extra.bin"
required = false
"#,
    ))
}

fn files(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn run_3_valid_outputs_pass() {
    let m = manifest();
    m.check_outputs(&json!({"greeting": "hi"}), &files(&["reports/report.txt"]))
        .unwrap();
    m.check_outputs(
        &json!({"greeting": "hi", "count": 3, "label": "bug"}),
        &files(&["reports/report.txt", "extra.bin", "debug.log"]),
    )
    .unwrap();
    // Optional outputs may be null.
    m.check_outputs(
        &json!({"greeting": "hi", "count": null}),
        &files(&["reports/report.txt"]),
    )
    .unwrap();
}

/// (label, result.json, files present, message, output named)
type Case = (
    &'static str,
    Value,
    Vec<String>,
    &'static str,
    Option<&'static str>,
);

#[test]
fn run_3_output_violation_table() {
    let m = manifest();
    let report = files(&["reports/report.txt"]);
    let cases: Vec<Case> = vec![
        (
            "missing required scalar",
            json!({}),
            report.clone(),
            "outputs.greeting: missing required output",
            Some("greeting"),
        ),
        (
            "null required scalar",
            json!({"greeting": null}),
            report.clone(),
            "outputs.greeting: missing required output",
            Some("greeting"),
        ),
        (
            "no result.json at all",
            Value::Null,
            report.clone(),
            "outputs.greeting: missing required output",
            Some("greeting"),
        ),
        (
            "missing required file",
            json!({"greeting": "hi"}),
            files(&["report.txt"]),
            "outputs.report: missing required output file \"reports/report.txt\"",
            Some("report"),
        ),
        (
            "wrong type",
            json!({"greeting": 5}),
            report.clone(),
            "outputs.greeting: expected a string, got a number",
            Some("greeting"),
        ),
        (
            "too long",
            json!({"greeting": "hello world!"}),
            report.clone(),
            "outputs.greeting: longer than 10 characters (12)",
            Some("greeting"),
        ),
        (
            "not in enum",
            json!({"greeting": "hi", "label": "feature"}),
            report.clone(),
            "outputs.label: \"feature\" is not one of \"bug\", \"docs\"",
            Some("label"),
        ),
        (
            "undeclared key",
            json!({"greeting": "hi", "secret": "x"}),
            report.clone(),
            "outputs.secret: result.json has an undeclared output",
            Some("secret"),
        ),
        (
            "file output in result.json",
            json!({"greeting": "hi", "report": "text"}),
            report.clone(),
            "outputs.report: is a file output; write it to /airlock/output/reports/report.txt, not to result.json",
            Some("report"),
        ),
        (
            "result not an object",
            json!([1, 2]),
            report.clone(),
            "result.json must contain a JSON object, got an array",
            None,
        ),
    ];
    for (label, result, present, message, output) in cases {
        let err = m.check_outputs(&result, &present).unwrap_err();
        assert_eq!(err.code(), "schema_violation", "{label}");
        assert_eq!(err.to_string(), message, "{label}");
        assert_eq!(err.output(), output, "{label}");
    }
}

#[test]
fn run_3_missing_required_output_is_a_schema_violation_naming_it() {
    let m = parse_ok(&script("[outputs.greeting]\ntype = \"string\"\n"));
    let err = m.check_outputs(&json!({}), &[]).unwrap_err();
    assert_eq!(
        err,
        OutputError::Missing {
            name: "greeting".into()
        }
    );
    assert_eq!(err.code(), "schema_violation");
    assert!(err.to_string().contains("greeting"));
}

#[test]
fn run_3_a_file_output_larger_than_its_max_bytes_is_a_schema_violation() {
    let m = parse_ok(&script(
        "[outputs.report]\ntype = \"file\"\npath = \"report.txt\"\nmax_bytes = 10\n\n[outputs.blob]\ntype = \"file\"\npath = \"blob.bin\"\nrequired = false\n",
    ));
    let sized = |list: &[(&str, u64)]| -> Vec<(String, u64)> {
        list.iter().map(|(n, s)| ((*n).to_string(), *s)).collect()
    };
    let err = m
        .check_output_sizes(&sized(&[("report.txt", 11)]))
        .unwrap_err();
    assert_eq!(err.code(), "schema_violation");
    assert!(
        err.to_string()
            .starts_with("outputs.report: file \"report.txt\" is 11 bytes"),
        "{err}"
    );
    // Positive controls: at the limit, an output without max_bytes, and
    // undeclared files are the collect budget's business.
    m.check_output_sizes(&sized(&[
        ("report.txt", 10),
        ("blob.bin", 1 << 30),
        ("other", 1 << 30),
    ]))
    .unwrap();
}
