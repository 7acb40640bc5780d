//! JSON Schemas for tools, from the one place each shape is described.
//!
//! Inputs are the argument structs of this crate (schemars, as rmcp
//! reads them). Outputs are the protocol's own types: their schema is the
//! one the OpenAPI document carries (utoipa), made self-contained — the
//! `#/components/schemas/X` references of the document become
//! `#/$defs/X`, with every referenced type under `$defs` — so the MCP
//! client validates `structuredContent` against exactly what the HTTP API
//! promises for the same body.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Map, Value};

/// The schema of an argument struct.
pub(crate) fn input<T: rmcp::schemars::JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_type::<T>()
}

/// The self-contained schema of a protocol type (an object: MCP wants
/// `outputSchema` to describe an object).
pub(crate) fn output<T: utoipa::ToSchema>() -> Arc<JsonObject> {
    let mut refs = Vec::new();
    T::schemas(&mut refs);
    let mut root = match serde_json::to_value(T::schema()) {
        Ok(Value::Object(o)) => o,
        // Derived schemas always serialise to an object; anything else
        // would be a bug of this build, answered with the loosest schema.
        _ => Map::new(),
    };
    let mut defs = Map::new();
    for (name, schema) in refs {
        if let Ok(v) = serde_json::to_value(schema) {
            defs.insert(name, v);
        }
    }
    if !defs.is_empty() {
        root.insert("$defs".into(), Value::Object(defs));
    }
    let mut v = Value::Object(root);
    rewrite_refs(&mut v);
    match v {
        Value::Object(mut o) => {
            o.entry("type").or_insert_with(|| Value::from("object"));
            Arc::new(o)
        }
        _ => Arc::new(Map::new()),
    }
}

fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                *r = format!("#/$defs/{name}");
            }
            for x in o.values_mut() {
                rewrite_refs(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs_in(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs_in(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs_in(x, out)),
            _ => {}
        }
    }

    /// Every reference of every output schema resolves inside it: a
    /// dangling `#/components/…` would make clients reject the tool.
    #[test]
    fn output_schemas_are_self_contained_objects() {
        for (name, s) in crate::tools::TOOLS.iter().map(|t| (t.name, (t.output)())) {
            assert_eq!(s.get("type"), Some(&Value::from("object")), "{name}");
            let v = Value::Object((*s).clone());
            let mut refs = Vec::new();
            refs_in(&v, &mut refs);
            for r in refs {
                let def = r
                    .strip_prefix("#/$defs/")
                    .unwrap_or_else(|| panic!("{name}: foreign reference {r}"));
                assert!(v["$defs"].get(def).is_some(), "{name}: {r} dangles");
            }
        }
    }

    /// The positive control of the test above: a schema whose reference
    /// is not rewritten is caught.
    #[test]
    fn a_component_reference_is_rewritten() {
        let mut v =
            serde_json::json!({"properties": {"run": {"$ref": "#/components/schemas/Run"}}});
        rewrite_refs(&mut v);
        assert_eq!(v["properties"]["run"]["$ref"], "#/$defs/Run");
    }
}
