//! The edge to the Kubernetes API that the controller and the speaker share,
//! so each of these is written once:
//!
//! - [`call`]: every request gets a deadline ([`REQUEST_TIMEOUT`] unless the
//!   caller gives another), so one half-open connection cannot wedge a loop;
//! - [`ApiFailure`] and [`Class`]: one classification of what went wrong
//!   (conflict, not found, throttled, transient, permanent, timeout), so
//!   callers re-read on 409, retry 5xx quickly and 4xx slowly;
//! - [`Backoff`] and [`Retries`]: per-object exponential backoff with jitter,
//!   capped, with a slow fixed pace for permanent errors;
//! - [`TokenBucket`]: a request budget (rate and burst) a process can share
//!   between its loops, so a start with thousands of objects does not flood
//!   the API server.

mod backoff;
mod budget;
mod failure;

pub use backoff::{Backoff, Retries};
pub use budget::TokenBucket;
pub use failure::{ApiFailure, Class};

use std::future::Future;
use std::time::Duration;

/// The deadline of one API request unless a caller needs another. Generous
/// for a loaded API server (client-go's default is none; kubectl's 0), short
/// enough that a dead connection is noticed before liveness probes fail.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one API request with a deadline: its error, or [`Class::Timeout`]
/// when `timeout` passed first (the request is dropped, which closes its
/// connection's stream).
pub async fn call<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiFailure> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiFailure::from_kube(what(), &e)),
        Err(_) => Err(ApiFailure::timeout(what(), timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_hung_request_times_out() {
        let started = tokio::time::Instant::now();
        let r: Result<(), _> = call(
            Duration::from_secs(3),
            || "patching services/status demo/web".into(),
            std::future::pending(),
        )
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.class, Class::Timeout);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(
            e.to_string(),
            "patching services/status demo/web: no answer within 3s"
        );
    }

    #[tokio::test]
    async fn answers_and_errors_pass_through() {
        let ok = call(REQUEST_TIMEOUT, || "x".into(), async {
            Ok::<_, kube::Error>(7)
        })
        .await;
        assert_eq!(ok.unwrap(), 7);
        let err = call(REQUEST_TIMEOUT, || "getting lease".into(), async {
            Err::<(), _>(failure::tests::api_error(
                409,
                "Conflict",
                "the object has been modified",
            ))
        })
        .await
        .unwrap_err();
        assert_eq!(err.class, Class::Conflict);
        assert_eq!(err.code, Some(409));
    }
}
