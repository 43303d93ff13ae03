//! The BGPPeer conversion webhook's reviews, pure: a `ConversionReview` in,
//! the response review out. The objects are converted by
//! [`config::conversion`] (MetalLB's field mapping).
//!
//! The API server sends the review version the CRD's
//! `conversionReviewVersions` names first among those it knows: MetalLB's CRD
//! lists `v1beta1` first, so both `apiextensions.k8s.io/v1` and `v1beta1`
//! (the same fields) are answered, each in its own version. Every object of
//! `request.objects` is converted to `request.desiredAPIVersion`; when one
//! cannot be, the whole review fails (`result.status: Failure` with the
//! reason, no objects), as controller-runtime's handler does.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The path MetalLB serves conversion on (`internal/k8s/webhook.go`), which
/// the BGPPeer CRD names.
pub const PATH: &str = config::conversion::WEBHOOK_PATH;

/// The review versions answered.
pub const REVIEW_VERSIONS: [&str; 2] = ["apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"];

/// `ConversionReview` (apiextensions.k8s.io/v1 and v1beta1).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionReview {
    /// One of [`REVIEW_VERSIONS`].
    #[serde(default)]
    pub api_version: String,
    /// `ConversionReview`.
    #[serde(default)]
    pub kind: String,
    /// What the API server asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ConversionRequest>,
    /// The answer (not read: the API server sends an empty one with
    /// `convertedObjects: null` along with the request).
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub response: Option<ConversionResponse>,
}

/// `null` (Go's nil slice) as empty.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
    Ok(Option::<Vec<Value>>::deserialize(d)?.unwrap_or_default())
}

/// The request of a review.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// The apiVersion every object is to be converted to.
    #[serde(rename = "desiredAPIVersion")]
    pub desired_api_version: String,
    /// The objects (whole objects, metadata included).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub objects: Vec<Value>,
}

/// The response of a review.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionResponse {
    /// The request's uid.
    pub uid: String,
    /// The converted objects, in the order of the request (none on failure).
    #[serde(default)]
    pub converted_objects: Vec<Value>,
    /// `Success`, or `Failure` with the reason.
    pub result: ConversionResult,
}

/// The `metav1.Status` of a response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ConversionResult {
    /// `Success` or `Failure`.
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The response to `request`.
pub fn respond(request: &ConversionRequest) -> ConversionResponse {
    let converted: Result<Vec<Value>, String> = request
        .objects
        .iter()
        .map(|o| {
            config::conversion::convert_object(o, &request.desired_api_version)
                .map_err(|e| e.to_string())
        })
        .collect();
    match converted {
        Ok(converted_objects) => ConversionResponse {
            uid: request.uid.clone(),
            converted_objects,
            result: ConversionResult {
                status: "Success".into(),
                message: String::new(),
            },
        },
        Err(message) => ConversionResponse {
            uid: request.uid.clone(),
            converted_objects: Vec::new(),
            result: ConversionResult {
                status: "Failure".into(),
                message,
            },
        },
    }
}

/// A review answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reviewed {
    /// The response review, JSON.
    pub body: Vec<u8>,
    /// Why the conversion failed, when it did (for the log).
    pub failure: Option<String>,
}

/// Reads a review and writes the response review (in the request's review
/// version). A body that is no review of a known version gets `Err` with the
/// reason (the server answers 400).
pub fn review(body: &[u8]) -> Result<Reviewed, String> {
    let review: ConversionReview =
        serde_json::from_slice(body).map_err(|e| format!("not a ConversionReview: {e}"))?;
    if !REVIEW_VERSIONS.contains(&review.api_version.as_str()) {
        return Err(format!(
            "ConversionReview apiVersion {:?} is not served (only {})",
            review.api_version,
            REVIEW_VERSIONS.join(", ")
        ));
    }
    let request = review
        .request
        .ok_or_else(|| "ConversionReview without a request".to_string())?;
    let response = respond(&request);
    let failure = (response.result.status != "Success").then(|| response.result.message.clone());
    let out = ConversionReview {
        api_version: review.api_version,
        kind: "ConversionReview".into(),
        request: None,
        response: Some(response),
    };
    let body = serde_json::to_vec(&out).map_err(|e| format!("encoding the response: {e}"))?;
    Ok(Reviewed { body, failure })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn peer_v1beta1(name: &str) -> Value {
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "BGPPeer",
            "metadata": {"name": name, "namespace": "metallb-system", "uid": "u-1"},
            "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1",
                "holdTime": "90s", "password": "s3cret",
                "nodeSelectors": [{"matchLabels": {"rack": "r1"}}]}})
    }

    fn body(api_version: &str, desired: &str, objects: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": api_version, "kind": "ConversionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "desiredAPIVersion": desired, "objects": objects}
        }))
        .expect("json")
    }

    fn answer(body: &[u8]) -> Value {
        let r = review(body).expect("a review");
        let out: Value = serde_json::from_slice(&r.body).expect("json");
        assert_eq!(
            r.failure.as_deref(),
            (out["response"]["result"]["status"] == "Failure").then(|| {
                out["response"]["result"]["message"]
                    .as_str()
                    .unwrap_or_default()
            })
        );
        out
    }

    #[test]
    fn converts_every_object_and_echoes_the_uid() {
        let out = answer(&body(
            "apiextensions.k8s.io/v1",
            "metallb.io/v1beta2",
            vec![peer_v1beta1("a"), peer_v1beta1("b")],
        ));
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(out.get("request"), None);
        let r = &out["response"];
        assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(r["result"], json!({"status": "Success"}));
        let objs = r["convertedObjects"].as_array().expect("objects");
        assert_eq!(objs.len(), 2);
        for (o, name) in objs.iter().zip(["a", "b"]) {
            assert_eq!(o["apiVersion"], "metallb.io/v1beta2");
            assert_eq!(o["kind"], "BGPPeer");
            assert_eq!(o["metadata"]["name"], name);
            assert_eq!(o["metadata"]["uid"], "u-1");
            assert_eq!(o["spec"]["holdTime"], "90s");
            assert_eq!(o["spec"]["password"], "s3cret");
            assert_eq!(
                o["spec"]["nodeSelectors"],
                json!([{"matchLabels": {"rack": "r1"}}])
            );
        }
    }

    #[test]
    fn answers_a_v1beta1_review_in_v1beta1() {
        // MetalLB's CRD lists conversionReviewVersions [v1beta1, v1beta2]:
        // the API server then sends apiextensions.k8s.io/v1beta1.
        let v2 = answer(&body(
            "apiextensions.k8s.io/v1beta1",
            "metallb.io/v1beta2",
            vec![peer_v1beta1("a")],
        ));
        assert_eq!(v2["apiVersion"], "apiextensions.k8s.io/v1beta1");
        let back = answer(&body(
            "apiextensions.k8s.io/v1beta1",
            "metallb.io/v1beta1",
            v2["response"]["convertedObjects"]
                .as_array()
                .expect("objects")
                .clone(),
        ));
        assert_eq!(back["response"]["result"]["status"], "Success");
        assert_eq!(
            back["response"]["convertedObjects"],
            json!([peer_v1beta1("a")])
        );
    }

    #[test]
    fn reads_the_review_as_the_api_server_sends_it() {
        // kube-apiserver 1.37 sends an empty response along with the request,
        // `convertedObjects: null` in it (seen in the lab).
        let body = serde_json::to_vec(&json!({
            "kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1beta1",
            "request": {"uid": "u", "desiredAPIVersion": "metallb.io/v1beta2",
                "objects": [peer_v1beta1("a")]},
            "response": {"uid": "", "convertedObjects": null,
                "result": {"metadata": {}, "status": ""}}
        }))
        .expect("json");
        let out = answer(&body);
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(out["response"]["uid"], "u");
        assert_eq!(
            out["response"]["convertedObjects"][0]["apiVersion"],
            "metallb.io/v1beta2"
        );
        let body = serde_json::to_vec(&json!({
            "kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1",
            "request": {"uid": "u", "desiredAPIVersion": "metallb.io/v1beta2", "objects": null}
        }))
        .expect("json");
        assert_eq!(answer(&body)["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn an_empty_request_succeeds_with_no_objects() {
        let out = answer(&body(
            "apiextensions.k8s.io/v1",
            "metallb.io/v1beta1",
            vec![],
        ));
        assert_eq!(out["response"]["result"]["status"], "Success");
        assert_eq!(out["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn one_object_that_cannot_be_converted_fails_the_review() {
        let pool = json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": "p"}});
        let out = answer(&body(
            "apiextensions.k8s.io/v1",
            "metallb.io/v1beta2",
            vec![peer_v1beta1("a"), pool],
        ));
        let r = &out["response"];
        assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(r["result"]["status"], "Failure");
        assert_eq!(
            r["result"]["message"],
            "cannot convert kind \"IPAddressPool\" (metallb.io/v1beta1): only metallb.io BGPPeer is converted"
        );
        assert_eq!(r["convertedObjects"], json!([]));
        let out = answer(&body(
            "apiextensions.k8s.io/v1",
            "metallb.io/v2",
            vec![peer_v1beta1("a")],
        ));
        assert_eq!(out["response"]["result"]["status"], "Failure");
        assert!(
            out["response"]["result"]["message"]
                .as_str()
                .expect("message")
                .contains("\"metallb.io/v2\""),
            "{out}"
        );
    }

    #[test]
    fn what_is_not_a_review_is_an_error() {
        assert!(
            review(b"{")
                .expect_err("syntax")
                .starts_with("not a ConversionReview")
        );
        let e = review(&body("admission.k8s.io/v1", "metallb.io/v1beta2", vec![]))
            .expect_err("an admission review");
        assert!(e.contains("\"admission.k8s.io/v1\" is not served"), "{e}");
        let e = review(br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#)
            .expect_err("no request");
        assert_eq!(e, "ConversionReview without a request");
    }
}
