#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Documentation that mirrors code: the README's error-code table and the
//! role and permission names the OpenAPI document states.

use std::path::Path;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

const START: &str = "<!-- error-codes:start -->\n";
const END: &str = "<!-- error-codes:end -->";

/// API-1: every code an answer can carry is in the README with its status
/// and meaning, and nothing else is.
#[test]
fn api_1_readme_lists_every_error_code_with_its_status() {
    let text = readme();
    let start = text.find(START).expect("README has the error-code markers") + START.len();
    let end = text[start..]
        .find(END)
        .expect("README closes the error-code table")
        + start;
    assert_eq!(
        &text[start..end],
        airlock_api::error_code_table(),
        "regenerate the table between the markers from airlock_api::error_code_table()"
    );
    // Positive control: the table is not empty and names a known code.
    assert!(text[start..end].contains("`quota_exceeded` | 429"));
}

/// The role and permission names the document states are the table the
/// server enforces (IAM-7).
#[test]
fn iam_7_the_documented_names_are_the_role_table() {
    let roles: Vec<&str> = airlock_iam::Role::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(roles, airlock_protocol::identity::ROLE_NAMES);
    let perms: Vec<&str> = airlock_iam::Permission::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(perms, airlock_protocol::identity::PERMISSION_NAMES);
    let doc = serde_json::to_value(airlock_api::openapi_document()).unwrap();
    let schema = &doc["components"]["schemas"];
    let listed = |name: &str| -> Vec<String> {
        schema[name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is an enum: {}", schema[name]))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed("RoleName"), roles);
    assert_eq!(listed("PermissionName"), perms);
}

/// AUD-4: the verification result documents which checkpoint was used,
/// and every schema it refers to is in the document.
#[test]
fn aud_4_the_documented_verification_names_its_checkpoint() {
    let doc = serde_json::to_value(airlock_api::openapi_document()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let v = &schemas["AuditVerification"]["properties"];
    for field in [
        "ok",
        "first_bad_seq",
        "checkpoint",
        "checkpoint_error",
        "warnings",
    ] {
        assert!(v.get(field).is_some(), "{field}: {v}");
    }
    let text = v["checkpoint"].to_string();
    let name = text
        .split("#/components/schemas/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("checkpoint is a reference: {text}"));
    assert_eq!(name, "CheckpointUsed");
    for field in ["seq", "head", "at"] {
        assert!(
            schemas[name]["properties"].get(field).is_some(),
            "{}",
            schemas[name]
        );
    }
}
