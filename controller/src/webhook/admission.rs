//! Admission review handling, pure: an `AdmissionReview` (admission.k8s.io/v1)
//! and the objects the controller already sees in, a decision out.
//!
//! Each endpoint validates what MetalLB's webhook of the same path validates
//! (`internal/k8s/webhooks`): the candidate object replaces the existing one
//! of the same name (or is added), the subset of the configuration that
//! webhook looks at is parsed with [`config::parse`] (the daemons' parser, so
//! a refusal carries the text the `ConfigurationState` would show), and the
//! fields that make an error depend on the order objects are created in are
//! cleared first, as MetalLB's `resetTransientErrorsFields` does (a BGPPeer's
//! `bfdProfile` and `passwordSecret`, a BGPAdvertisement's community aliases).
//!
//! | path | operations | parsed with |
//! |---|---|---|
//! | `/validate-metallb-io-v1beta1-ipaddresspool` | CREATE, UPDATE | the pools |
//! | `/validate-metallb-io-v1beta2-bgppeer` | CREATE, UPDATE | the peers and Nodes |
//! | `/validate-metallb-io-v1beta1-bgpadvertisement` | CREATE, UPDATE | the BGP advertisements, pools and Nodes |
//! | `/validate-metallb-io-v1beta1-l2advertisement` | CREATE, UPDATE | the L2 advertisements and pools |
//! | `/validate-metallb-io-v1beta1-community` | CREATE, UPDATE | the Communities |
//! | `/validate-metallb-io-v1beta1-bfdprofile` | CREATE, DELETE | CREATE: the namespace only; DELETE: refused while a BGPPeer uses the profile |
//!
//! A CREATE outside the MetalLB namespace is refused (`resource must be
//! created in <ns> namespace`); a BGPPeer CREATE with `disableMP: true` is
//! allowed with MetalLB's deprecation warning and nothing else checked;
//! every other DELETE is allowed. The BGPPeer endpoint also takes v1beta1
//! objects (converted with [`config::convert_bgp_peer`]): deploy/webhook.yaml
//! matches v1beta2 only, as MetalLB (the API server converts v1beta1 objects
//! with the CRD's conversion webhook first), but a configuration that matches
//! v1beta1 too, or a CRD without conversion, hands them over as written.

use std::sync::Arc;

use config::Resources;
use config::api::{v1beta1, v1beta2};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API version of the reviews served.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// MetalLB's warning for a BGPPeer created with `disableMP`.
pub const DISABLE_MP_WARNING: &str =
    "disable mp is deprecated and has no effect since it's the default behavior now";

/// One validating endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// IPAddressPool.
    IPAddressPool,
    /// BGPPeer (v1beta2, and v1beta1 converted).
    BGPPeer,
    /// BGPAdvertisement.
    BGPAdvertisement,
    /// L2Advertisement.
    L2Advertisement,
    /// Community.
    Community,
    /// BFDProfile.
    BFDProfile,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 6] = [
        Endpoint::IPAddressPool,
        Endpoint::BGPPeer,
        Endpoint::BGPAdvertisement,
        Endpoint::L2Advertisement,
        Endpoint::Community,
        Endpoint::BFDProfile,
    ];

    /// The path MetalLB serves it on (its ValidatingWebhookConfiguration).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::IPAddressPool => "/validate-metallb-io-v1beta1-ipaddresspool",
            Endpoint::BGPPeer => "/validate-metallb-io-v1beta2-bgppeer",
            Endpoint::BGPAdvertisement => "/validate-metallb-io-v1beta1-bgpadvertisement",
            Endpoint::L2Advertisement => "/validate-metallb-io-v1beta1-l2advertisement",
            Endpoint::Community => "/validate-metallb-io-v1beta1-community",
            Endpoint::BFDProfile => "/validate-metallb-io-v1beta1-bfdprofile",
        }
    }

    /// The endpoint served on `path`.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.path() == path)
    }
}

/// `AdmissionReview` as far as read and written here.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `AdmissionReview`.
    #[serde(default)]
    pub kind: String,
    /// The request (in what the API server sends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<AdmissionRequest>,
    /// The response (in what is sent back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AdmissionResponse>,
}

/// The request of a review (the fields used).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default)]
    pub operation: String,
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The object's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The new object (CREATE, UPDATE).
    #[serde(default)]
    pub object: Option<Value>,
    /// The existing object (UPDATE, DELETE).
    #[serde(default)]
    pub old_object: Option<Value>,
    /// Whether nothing will be persisted (`--dry-run=server`).
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// The response of a review.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid.
    pub uid: String,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why not (or 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Warnings shown to the client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A `metav1.Status` as controller-runtime fills it in a response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Status {
    /// HTTP-like code: 200 allowed, 403 denied, 400 a request that cannot be read.
    pub code: u16,
    /// `Forbidden` for a denial.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The message the client shows.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What the webhook answers, before the uid is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, with these warnings.
    Allowed(Vec<String>),
    /// Refused with MetalLB's message (403).
    Denied(String),
    /// The request could not be handled (code, message), as controller-runtime's
    /// `admission.Errored`.
    Errored(u16, String),
}

impl Decision {
    fn allowed() -> Decision {
        Decision::Allowed(Vec::new())
    }

    /// The response to the request `uid`.
    pub fn into_response(self, uid: String) -> AdmissionResponse {
        let (allowed, status, warnings) = match self {
            Decision::Allowed(w) => (
                true,
                Status {
                    code: 200,
                    ..Default::default()
                },
                w,
            ),
            Decision::Denied(m) => (
                false,
                Status {
                    code: 403,
                    reason: "Forbidden".into(),
                    message: m,
                },
                Vec::new(),
            ),
            Decision::Errored(code, m) => (
                false,
                Status {
                    code,
                    reason: String::new(),
                    message: m,
                },
                Vec::new(),
            ),
        };
        AdmissionResponse {
            uid,
            allowed,
            status: Some(status),
            warnings,
        }
    }
}

/// Reads a review, decides, and writes the response review. `existing` is
/// the configuration as the controller sees it (objects of `namespace`).
/// A body that is no review gets `Err` with the reason (the server answers 400).
pub fn review(
    endpoint: Endpoint,
    body: &[u8],
    existing: &Resources,
    namespace: &str,
) -> Result<Vec<u8>, String> {
    let review: AdmissionReview =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    let request = review
        .request
        .ok_or_else(|| "AdmissionReview without a request".to_string())?;
    let decision = decide(endpoint, &request, existing, namespace);
    let out = AdmissionReview {
        api_version: ADMISSION_API_VERSION.into(),
        kind: "AdmissionReview".into(),
        request: None,
        response: Some(decision.into_response(request.uid)),
    };
    serde_json::to_vec(&out).map_err(|e| format!("encoding the response: {e}"))
}

/// Decodes the object of the request (the old one for a DELETE).
fn object<K: serde::de::DeserializeOwned>(req: &AdmissionRequest) -> Result<K, Decision> {
    let raw = if req.operation == "DELETE" {
        req.old_object.as_ref()
    } else {
        req.object.as_ref()
    };
    let raw = raw.ok_or_else(|| Decision::Errored(400, "there is no content to decode".into()))?;
    K::deserialize(raw).map_err(|e| Decision::Errored(400, e.to_string()))
}

/// The list with `new` in place of the object of the same name, or added.
fn with<K: kube::Resource>(existing: &[Arc<K>], new: K) -> Vec<Arc<K>> {
    let name = new.meta().name.clone();
    let mut out: Vec<Arc<K>> = existing.to_vec();
    match out.iter().position(|o| o.meta().name == name) {
        Some(i) => out[i] = Arc::new(new),
        None => out.push(Arc::new(new)),
    }
    out
}

/// MetalLB's `resetTransientErrorsFields`: a BGPPeer's BFD profile and
/// password Secret may be created after it.
fn reset_peer(p: &v1beta2::BGPPeer) -> Arc<v1beta2::BGPPeer> {
    let mut p = p.clone();
    p.spec.bfd_profile.clear();
    p.spec.password_secret = None;
    Arc::new(p)
}

/// MetalLB's `resetTransientErrorsFields`: only communities that may be
/// values (with a `:`) are kept; an alias may be defined later.
fn reset_bgp_advertisement(a: &v1beta1::BGPAdvertisement) -> Arc<v1beta1::BGPAdvertisement> {
    let mut a = a.clone();
    a.spec.communities.retain(|c| c.contains(':'));
    Arc::new(a)
}

fn validate(r: &Resources) -> Decision {
    match config::parse(r) {
        Ok(_) => Decision::allowed(),
        Err(e) => Decision::Denied(e.to_string()),
    }
}

fn namespace_check(
    req: &AdmissionRequest,
    meta: &kube::api::ObjectMeta,
    namespace: &str,
) -> Option<Decision> {
    let ns = meta.namespace.as_deref().unwrap_or(&req.namespace);
    (req.operation == "CREATE" && ns != namespace)
        .then(|| Decision::Denied(format!("resource must be created in {namespace} namespace")))
}

/// The decision on one request: MetalLB's webhook of `endpoint`.
pub fn decide(
    endpoint: Endpoint,
    req: &AdmissionRequest,
    existing: &Resources,
    namespace: &str,
) -> Decision {
    match decide_inner(endpoint, req, existing, namespace) {
        Ok(d) | Err(d) => d,
    }
}

fn decide_inner(
    endpoint: Endpoint,
    req: &AdmissionRequest,
    existing: &Resources,
    namespace: &str,
) -> Result<Decision, Decision> {
    let op = req.operation.as_str();
    if endpoint == Endpoint::BFDProfile {
        let profile: v1beta1::BFDProfile = object(req)?;
        return Ok(match op {
            "CREATE" => {
                namespace_check(req, &profile.metadata, namespace).unwrap_or_else(Decision::allowed)
            }
            "DELETE" => {
                let name = profile.metadata.name.clone().unwrap_or_default();
                let mut peers: Vec<_> = existing.peers.iter().collect();
                peers.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                match peers.iter().find(|p| p.spec.bfd_profile == name) {
                    Some(p) => Decision::Denied(format!(
                        "failed to delete BFDProfile {name}, used by BGPPeer {}",
                        p.metadata.name.as_deref().unwrap_or_default()
                    )),
                    None => Decision::allowed(),
                }
            }
            _ => Decision::allowed(),
        });
    }
    if op != "CREATE" && op != "UPDATE" {
        return Ok(Decision::allowed());
    }
    let mut r = Resources::default();
    match endpoint {
        Endpoint::IPAddressPool => {
            let pool: v1beta1::IPAddressPool = object(req)?;
            if let Some(d) = namespace_check(req, &pool.metadata, namespace) {
                return Ok(d);
            }
            r.pools = with(&existing.pools, pool);
        }
        Endpoint::BGPPeer => {
            let api_version = req
                .object
                .as_ref()
                .and_then(|o| o.get("apiVersion"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let peer: v1beta2::BGPPeer = if api_version == "metallb.io/v1beta1" {
                config::convert_bgp_peer(&object::<v1beta1::BGPPeer>(req)?)
            } else {
                object(req)?
            };
            if op == "CREATE" && peer.spec.disable_mp {
                return Ok(Decision::Allowed(vec![DISABLE_MP_WARNING.into()]));
            }
            if let Some(d) = namespace_check(req, &peer.metadata, namespace) {
                return Ok(d);
            }
            r.peers = with(&existing.peers, peer)
                .iter()
                .map(|p| reset_peer(p))
                .collect();
            r.nodes = existing.nodes.clone();
        }
        Endpoint::BGPAdvertisement => {
            let ad: v1beta1::BGPAdvertisement = object(req)?;
            if let Some(d) = namespace_check(req, &ad.metadata, namespace) {
                return Ok(d);
            }
            r.bgp_advertisements = with(&existing.bgp_advertisements, ad)
                .iter()
                .map(|a| reset_bgp_advertisement(a))
                .collect();
            r.pools = existing.pools.clone();
            r.nodes = existing.nodes.clone();
        }
        Endpoint::L2Advertisement => {
            let ad: v1beta1::L2Advertisement = object(req)?;
            if let Some(d) = namespace_check(req, &ad.metadata, namespace) {
                return Ok(d);
            }
            r.l2_advertisements = with(&existing.l2_advertisements, ad);
            r.pools = existing.pools.clone();
        }
        Endpoint::Community => {
            let c: v1beta1::Community = object(req)?;
            if let Some(d) = namespace_check(req, &c.metadata, namespace) {
                return Ok(d);
            }
            r.communities = with(&existing.communities, c);
        }
        // Decided above, before any parse.
        Endpoint::BFDProfile => return Ok(Decision::allowed()),
    }
    Ok(validate(&r))
}

#[cfg(test)]
mod tests;
