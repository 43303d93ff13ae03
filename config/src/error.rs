//! Configuration errors and warnings.

use std::fmt;

use serde::Serialize;

/// The object an error or warning is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    /// Kind, e.g. `IPAddressPool`.
    pub kind: String,
    /// Object name.
    pub name: String,
}

impl ObjectRef {
    /// A reference to `kind`/`name`.
    pub fn new(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// A configuration MetalLB would refuse. `Display` is MetalLB's message,
/// byte for byte (the text that follows `configuration error: ` in a
/// `ConfigurationState`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The object at fault, when one is.
    pub object: Option<ObjectRef>,
    /// MetalLB's message.
    pub message: String,
    /// Caused by the order objects were created in (a referenced BFD profile,
    /// password Secret or community alias does not exist yet): it resolves by
    /// itself once the referenced object appears.
    pub transient: bool,
}

impl ConfigError {
    pub(crate) fn new(object: ObjectRef, message: impl Into<String>) -> Self {
        Self {
            object: Some(object),
            message: message.into(),
            transient: false,
        }
    }

    pub(crate) fn transient(object: ObjectRef, message: impl Into<String>) -> Self {
        Self {
            object: Some(object),
            message: message.into(),
            transient: true,
        }
    }

    /// Whether the error goes away once a referenced object is created.
    pub fn is_transient(&self) -> bool {
        self.transient
    }
}

/// Something accepted but not (yet) acted on, or likely a mistake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The object concerned.
    pub object: ObjectRef,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}
