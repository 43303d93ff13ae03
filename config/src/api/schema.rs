//! Schema pieces the `#[schemars(...)]` attributes of the API types cannot
//! express on their own. Used only for CRD generation (`crate::crd`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Value, json};

/// Struct-level transform: marks `fields` as required and drops the `default`
/// schemars derives for them from the struct's `Default` (a required field
/// has no default in the CRD; the zero value is only how Rust decodes it).
pub(crate) fn required(fields: &'static [&'static str]) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        if let Some(Value::Object(props)) = schema.get_mut("properties") {
            for f in fields {
                if let Some(Value::Object(p)) = props.get_mut(*f) {
                    p.remove("default");
                }
            }
        }
        let obj = schema.ensure_object();
        let req = obj
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(req) = req {
            for f in fields {
                if !req.iter().any(|r| r == *f) {
                    req.push(json!(f));
                }
            }
            req.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
}

/// `metav1.Condition` list as Kubernetes API types declare it: a map list
/// keyed by `type`, with the field bounds of `metav1.Condition`.
pub(crate) fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut item = Condition::json_schema(generator);
    if let Some(Value::Object(props)) = item.get_mut("properties") {
        let mut set = |name: &str, extra: Value| {
            if let (Some(Value::Object(p)), Value::Object(extra)) = (props.get_mut(name), extra) {
                p.extend(extra);
            }
        };
        set("message", json!({ "maxLength": 32768 }));
        set("observedGeneration", json!({ "minimum": 0 }));
        set(
            "reason",
            json!({
                "maxLength": 1024,
                "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            }),
        );
        set("status", json!({ "enum": ["True", "False", "Unknown"] }));
        set(
            "type",
            json!({
                "maxLength": 316,
                "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            }),
        );
    }
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}
