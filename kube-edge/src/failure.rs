//! One classification of API errors for every caller.

use std::fmt;
use std::time::Duration;

/// What kind of failure an API request met, and so what to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// 409: the object changed since it was read (or already exists): re-read
    /// and decide again, no backoff needed.
    Conflict,
    /// 404: the object (or its namespace) is gone.
    NotFound,
    /// 410: a watch or list continuation expired: list again.
    Gone,
    /// 429: the server asks for less: back off.
    Throttled,
    /// 5xx, 401 (a token being rotated) and connection errors: retry with
    /// exponential backoff.
    Transient,
    /// The request did not finish before its deadline: retry with backoff.
    Timeout,
    /// Other 4xx (400, 403 missing RBAC, 422 invalid, a webhook's denial):
    /// the same request will fail again; retry only at a slow pace, or when
    /// the input changes.
    Permanent,
}

impl Class {
    /// Of an HTTP status code of an API answer.
    pub fn of_code(code: u16) -> Self {
        match code {
            409 => Self::Conflict,
            404 => Self::NotFound,
            410 => Self::Gone,
            429 => Self::Throttled,
            401 => Self::Transient,
            400..=499 => Self::Permanent,
            _ => Self::Transient,
        }
    }

    /// True when retrying the same request soon can help.
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Throttled | Self::Transient | Self::Timeout)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Conflict => "conflict",
            Self::NotFound => "not found",
            Self::Gone => "gone",
            Self::Throttled => "throttled",
            Self::Transient => "transient",
            Self::Timeout => "timeout",
            Self::Permanent => "permanent",
        })
    }
}

/// An API request that failed: what was asked, the class, the server's code
/// and message. Never holds a request body (so no secret reaches a log).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message}")]
pub struct ApiFailure {
    /// The request, e.g. `patching services/status demo/web`.
    pub what: String,
    pub class: Class,
    /// The HTTP status code, when the server answered.
    pub code: Option<u16>,
    /// The server's reason (`Conflict`, `Forbidden`, ...), when it answered.
    pub reason: Option<String>,
    /// What went wrong, for people.
    pub message: String,
}

impl ApiFailure {
    /// Of a kube client error.
    pub fn from_kube(what: String, e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self {
                what,
                class: Class::of_code(s.code),
                code: Some(s.code),
                reason: Some(s.reason.clone()).filter(|r| !r.is_empty()),
                message: e.to_string(),
            },
            _ => Self {
                what,
                class: Class::Transient,
                code: None,
                reason: None,
                message: e.to_string(),
            },
        }
    }

    /// A request that got no answer within `timeout`.
    pub fn timeout(what: String, timeout: Duration) -> Self {
        Self {
            what,
            class: Class::Timeout,
            code: None,
            reason: None,
            message: format!("no answer within {}", humantime(timeout)),
        }
    }

    /// A failure of a class, for tests and fakes.
    pub fn new(
        what: impl Into<String>,
        class: Class,
        code: Option<u16>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            what: what.into(),
            class,
            code,
            reason: None,
            message: message.into(),
        }
    }
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn codes_are_classified() {
        for (code, class) in [
            (400, Class::Permanent),
            (401, Class::Transient),
            (403, Class::Permanent),
            (404, Class::NotFound),
            (409, Class::Conflict),
            (410, Class::Gone),
            (422, Class::Permanent),
            (429, Class::Throttled),
            (500, Class::Transient),
            (503, Class::Transient),
            (504, Class::Transient),
        ] {
            assert_eq!(Class::of_code(code), class, "{code}");
            let f = ApiFailure::from_kube("x".into(), &api_error(code, "Reason", "m"));
            assert_eq!((f.class, f.code), (class, Some(code)));
        }
        assert!(Class::Timeout.is_transient() && Class::Throttled.is_transient());
        assert!(!Class::Permanent.is_transient() && !Class::Conflict.is_transient());
    }

    #[test]
    fn a_denial_names_the_request_and_the_reason() {
        let f = ApiFailure::from_kube(
            "patching services/status demo/web".into(),
            &api_error(403, "Forbidden", "services \"web\" is forbidden"),
        );
        assert_eq!(f.reason.as_deref(), Some("Forbidden"));
        assert!(
            f.to_string()
                .starts_with("patching services/status demo/web: "),
            "{f}"
        );
        assert!(f.to_string().contains("is forbidden"), "{f}");
    }
}
