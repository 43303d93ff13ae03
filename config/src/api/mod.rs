//! The `metallb.io` API: every kind and version MetalLB serves, serialising
//! exactly like MetalLB's Go types (camelCase names, `omitempty` fields left
//! out), plus the status kinds metallb-rs adds.
//!
//! Decoding follows Go's zero values: a missing non-pointer field decodes to
//! its zero value, so that errors come from validation (with MetalLB's texts),
//! not from deserialisation. Required-ness lives in the generated CRD schema.

mod duration;
mod schema;
// `#[kube(printcolumn(...))]` repeats keys such as `type_ = "string"`, which
// clippy mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
pub mod v1beta1;
#[allow(clippy::duplicated_attributes)]
pub mod v1beta2;

pub use duration::{Duration, DurationParseError};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every kind.
pub const GROUP: &str = "metallb.io";

/// The category every metallb.io CRD is in (`kubectl get metallb -A`).
pub const CATEGORY: &str = "metallb";

/// Label on `ConfigurationState`: `controller` or `speaker`.
pub const LABEL_COMPONENT_TYPE: &str = "metallb.io/component-type";
/// Label on a speaker's `ConfigurationState`: its node.
pub const LABEL_NODE_NAME: &str = "metallb.io/node-name";
/// Label on `BGPSessionStatus`, `ServiceL2Status`, `ServiceBGPStatus`: the node.
pub const LABEL_NODE: &str = "metallb.io/node";
/// Label on `BGPSessionStatus`: the BGPPeer name.
pub const LABEL_PEER: &str = "metallb.io/peer";
/// Label on `ServiceL2Status`/`ServiceBGPStatus`: the Service name.
pub const LABEL_SERVICE_NAME: &str = "metallb.io/service-name";
/// Label on `ServiceL2Status`/`ServiceBGPStatus`: the Service namespace.
pub const LABEL_SERVICE_NAMESPACE: &str = "metallb.io/service-namespace";

/// The namespace MetalLB's objects live in unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "metallb-system";

/// Lets a spec be left out: MetalLB's CRDs require `spec` only on
/// IPAddressPool, so an `L2Advertisement` without one means "every pool,
/// every node". The kube derive gives the root type a plain `spec` field, so
/// the spec type decodes a missing (or `null`) spec to its default itself.
/// The type carries `#[serde(remote = "Self")]`, which turns its derived
/// serde code into inherent functions this macro wraps.
macro_rules! optional_spec {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                <$ty>::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Present($ty);
                impl<'de> serde::Deserialize<'de> for Present {
                    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                        <$ty>::deserialize(d).map(Present)
                    }
                }
                // A missing field reaches here as `deserialize_option` with
                // nothing: `None`, so the default.
                Ok(Option::<Present>::deserialize(d)?
                    .map(|p| p.0)
                    .unwrap_or_default())
            }
        }
    };
}
pub(crate) use optional_spec;

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

pub(crate) fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

pub(crate) fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

pub(crate) fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// A BGP password as it sits in a `BGPPeer` spec: serialised as written (the
/// API needs it), but never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// True when no password is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The password itself, for the code that installs it on a socket.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("<redacted>")
        }
    }
}

impl JsonSchema for Password {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Password".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}
