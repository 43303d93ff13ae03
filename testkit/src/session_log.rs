//! Reading the JSON event lines that a BGP session follower prints (the
//! interop helper speaker, `metallbctl bgp-probe`).
//!
//! Every subscription to a session's events starts with a `current` event:
//! the state, negotiation and last error the session had reached when the
//! follower subscribed (the session task may run before the follower
//! subscribes). [`json_events`] expands it into the events it stands for, so
//! that a test asking "did the session reach Established / negotiate / record
//! an error" is answered the same whether that happened before or after the
//! subscription.

use serde_json::{Value, json};

/// The JSON objects of `text`'s lines (other lines skipped), each `current`
/// event replaced by the `state_changed` (with `from: null`), `negotiated` and
/// `error` events it summarises. Fields other than the event's own (e.g. a
/// `peer` tag added by the printer) are kept on each expanded event.
pub fn json_events(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(expand)
        .collect()
}

fn expand(event: Value) -> Vec<Value> {
    if event["event"] != "current" {
        return vec![event];
    }
    let Value::Object(mut fields) = event else {
        return Vec::new();
    };
    let state = fields.remove("state").unwrap_or(Value::Null);
    let negotiated = fields.remove("negotiated").unwrap_or(Value::Null);
    let last_error = fields.remove("last_error").unwrap_or(Value::Null);
    fields.remove("event");
    let tagged = |mut v: Value| {
        if let Value::Object(o) = &mut v {
            for (k, x) in &fields {
                o.entry(k.clone()).or_insert_with(|| x.clone());
            }
        }
        v
    };
    let mut out = Vec::new();
    if !last_error.is_null() {
        out.push(tagged(json!({"event": "error", "text": last_error})));
    }
    if !state.is_null() && state != "Idle" {
        out.push(tagged(json!({
            "event": "state_changed",
            "from": null,
            "to": state,
            "reason": "before the subscription",
        })));
    }
    if let Value::Object(mut n) = negotiated {
        n.insert("event".into(), json!("negotiated"));
        out.push(tagged(Value::Object(n)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_expands_into_what_it_summarises() {
        let text = concat!(
            "not json\n",
            r#"{"event":"current","state":"Established","negotiated":{"hold_time":9,"local":"192.0.2.1:179"},"last_error":"session down: x","peer":"192.0.2.2"}"#,
            "\n",
            r#"{"event":"state_changed","from":"Established","to":"Idle","reason":"x"}"#,
            "\n",
        );
        let ev = json_events(text);
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert_eq!(ev[0]["event"], "error");
        assert_eq!(ev[0]["text"], "session down: x");
        assert_eq!(ev[1]["event"], "state_changed");
        assert_eq!(ev[1]["to"], "Established");
        assert_eq!(ev[1]["peer"], "192.0.2.2");
        assert_eq!(ev[2]["event"], "negotiated");
        assert_eq!(ev[2]["hold_time"], 9);
        assert_eq!(ev[2]["peer"], "192.0.2.2");
        assert_eq!(ev[3]["from"], "Established");
    }

    #[test]
    fn an_idle_current_is_nothing() {
        let ev = json_events(
            r#"{"event":"current","state":"Idle","negotiated":null,"last_error":null}"#,
        );
        assert!(ev.is_empty(), "{ev:?}");
    }
}
