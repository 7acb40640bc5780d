//! RUN-3: run inputs are checked against `[inputs]` and normalised.

use airlock_worker::{InputError, MAX_INPUT_BYTES, Manifest};
use serde_json::{Value, json};

use super::{parse_ok, script};

fn manifest() -> Manifest {
    parse_ok(&script(
        r#"
[inputs.name]
type = "string"
max_length = 5

[inputs.times]
type = "number"
default = 1

[inputs.shout]
type = "boolean"
default = false

[inputs.colour]
type = "string"
enum = ["red", "green"]
required = false

[inputs.size]
type = "number"
enum = [1, 2.5]
required = false

[inputs.data]
type = "json"
max_bytes = 16
required = false

[inputs.ratio]
type = "number"
minimum = 0
maximum = 1.5
required = false
"#,
    ))
}

#[test]
fn run_3_input_refusal_table() {
    let m = manifest();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "not an object",
            json!([1]),
            "input must be a JSON object, got an array",
        ),
        (
            "a string",
            json!("x"),
            "input must be a JSON object, got a string",
        ),
        (
            "missing required",
            json!({}),
            "inputs.name: missing required input",
        ),
        (
            "null required",
            json!({"name": null}),
            "inputs.name: missing required input",
        ),
        (
            "unknown key",
            json!({"name": "a", "nmae": "b"}),
            "inputs.nmae: unknown input (declared: colour, data, name, ratio, shout, size, times)",
        ),
        (
            "string wrong type",
            json!({"name": 5}),
            "inputs.name: expected a string, got a number",
        ),
        (
            "number wrong type",
            json!({"name": "a", "times": "2"}),
            "inputs.times: expected a number, got a string",
        ),
        (
            "boolean wrong type",
            json!({"name": "a", "shout": "yes"}),
            "inputs.shout: expected a boolean, got a string",
        ),
        (
            "string enum",
            json!({"name": "a", "colour": "blue"}),
            "inputs.colour: \"blue\" is not one of \"red\", \"green\"",
        ),
        (
            "number enum",
            json!({"name": "a", "size": 3}),
            "inputs.size: 3 is not one of 1, 2.5",
        ),
        (
            "too long",
            json!({"name": "abcdef"}),
            "inputs.name: longer than 5 characters (6)",
        ),
        (
            "below the minimum",
            json!({"name": "a", "ratio": -0.5}),
            "inputs.ratio: -0.5 is below the minimum 0",
        ),
        (
            "above the maximum",
            json!({"name": "a", "ratio": 2}),
            "inputs.ratio: 2 is above the maximum 1.5",
        ),
        (
            "json too big",
            json!({"name": "a", "data": {"k": "0123456789"}}),
            "inputs.data: larger than 16 bytes as JSON (18)",
        ),
    ];
    for (label, input, message) in cases {
        let err = m.check_input(&input).unwrap_err();
        assert_eq!(err.to_string(), message, "{label}");
        assert_eq!(err.code(), "invalid_input", "{label}");
    }
}

#[test]
fn run_3_defaults_are_filled_and_nulls_mean_absent() {
    let m = manifest();
    assert_eq!(
        m.check_input(&json!({"name": "Ada"})).unwrap(),
        json!({"name": "Ada", "times": 1, "shout": false})
    );
    assert_eq!(
        m.check_input(&json!({"name": "Ada", "times": null, "colour": null, "shout": true}))
            .unwrap(),
        json!({"name": "Ada", "times": 1, "shout": true})
    );
    assert_eq!(
        m.check_input(
            &json!({"name": "Ada", "times": 2.5, "colour": "red", "size": 2.5, "data": [1]})
        )
        .unwrap(),
        json!({"name": "Ada", "times": 2.5, "shout": false, "colour": "red", "size": 2.5, "data": [1]})
    );
    // The bounds are inclusive.
    assert!(m.check_input(&json!({"name": "a", "ratio": 0})).is_ok());
    assert!(m.check_input(&json!({"name": "a", "ratio": 1.5})).is_ok());
    // max_length counts characters, not bytes.
    assert!(m.check_input(&json!({"name": "éééé"})).is_ok());
}

#[test]
fn run_3_oversized_input_is_refused() {
    let m = manifest();
    let err = m
        .check_input(&json!({"name": "a", "data": "x".repeat(MAX_INPUT_BYTES)}))
        .unwrap_err();
    assert_eq!(
        err,
        InputError::TooLarge {
            limit: MAX_INPUT_BYTES
        }
    );
}

#[test]
fn run_3_unknown_keys_are_not_echoed_unbounded() {
    let m = manifest();
    let long = "k".repeat(10_000);
    let err = m.check_input(&json!({ long: 1 })).unwrap_err();
    assert!(err.to_string().len() < 300, "{err}");
}

#[test]
fn run_3_no_declared_inputs_accepts_only_an_empty_object() {
    let m = parse_ok(&script(""));
    assert_eq!(m.check_input(&json!({})).unwrap(), json!({}));
    assert_eq!(
        m.check_input(&json!({"x": 1})).unwrap_err().to_string(),
        "inputs.x: unknown input (declared: none)"
    );
}

#[test]
fn run_3_file_inputs_take_an_upload() {
    let m = parse_ok(&script(
        "[inputs.doc]\ntype = \"file\"\nmax_bytes = 100\n[inputs.extra]\ntype = \"file\"\nrequired = false\n",
    ));
    let id = "upl_0123456789abcdef0123456789abcdef";
    // The caller's shape, and the service's resolved shape, pass unchanged.
    let given = json!({"doc": {"upload": id}});
    assert_eq!(m.check_input(&given).unwrap(), given);
    let resolved = json!({"doc": {"upload": id, "name": "a.txt", "size": 3,
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}});
    assert_eq!(m.check_input(&resolved).unwrap(), resolved);
    assert_eq!(airlock_worker::file_upload_id(&given["doc"]), Some(id));

    // Anything else is refused, naming the field.
    let cases = [
        (
            json!({"doc": "upload:abc"}),
            "inputs.doc: a file input is given as {\"upload\": \"<upload id>\"}, got a string",
        ),
        (
            json!({"doc": 3}),
            "inputs.doc: a file input is given as {\"upload\": \"<upload id>\"}, got a number",
        ),
        (
            json!({"doc": {}}),
            "inputs.doc: a file input is given as {\"upload\": \"<upload id>\"}; the \"upload\" key is missing",
        ),
        (
            json!({"doc": {"upload": 7}}),
            "inputs.doc: a file input is given as {\"upload\": \"<upload id>\"}; \"upload\" must be a string, got a number",
        ),
        (
            json!({"doc": {"upload": id, "path": "/etc/passwd"}}),
            "inputs.doc: a file input is given as {\"upload\": \"<upload id>\"}; unknown key \"path\"",
        ),
        (
            json!({"doc": {"upload": "../x"}}),
            "inputs.doc: \"../x\" is not an upload id",
        ),
        (
            json!({"doc": {"upload": "run_abc"}}),
            "inputs.doc: \"run_abc\" is not an upload id",
        ),
        (
            json!({"doc": {"upload": id, "size": -1}}),
            "inputs.doc: \"size\" must be a non-negative integer",
        ),
        (
            json!({"doc": {"upload": id, "sha256": "ABC"}}),
            "inputs.doc: \"sha256\" must be 64 lowercase hex digits",
        ),
        (json!({}), "inputs.doc: missing required input"),
    ];
    for (input, want) in cases {
        let err = m.check_input(&input).unwrap_err();
        assert_eq!(err.code(), "invalid_input");
        assert_eq!(err.to_string(), want, "{input}");
    }
    // An optional file input left out is fine.
    let m = parse_ok(&script(
        "[inputs.extra]\ntype = \"file\"\nrequired = false\n",
    ));
    assert_eq!(m.check_input(&json!({})).unwrap(), json!({}));
}

#[test]
fn run_3_number_bounds_reach_the_input_schema() {
    let schema = manifest().input_schema();
    assert_eq!(
        schema["properties"]["ratio"],
        json!({"type": "number", "minimum": 0.0, "maximum": 1.5})
    );
    assert_eq!(
        schema["properties"]["times"],
        json!({"type": "number", "default": 1})
    );
}
