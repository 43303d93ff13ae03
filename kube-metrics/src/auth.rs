//! Who may read the metrics: the bearer token, the decision, the [`Authorizer`] trait and
//! the Kubernetes implementation (TokenReview, then SubjectAccessReview), with a small
//! cache of decisions.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// A bearer token from a request's `Authorization` header. It is never printed: its
/// `Debug` is `BearerToken(<redacted>)` and it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> BearerToken {
        BearerToken(token.into())
    }

    /// The token itself, to send to the API server.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The token of an `Authorization` header value: `Bearer <token>` (the scheme in any
    /// case), `None` for another scheme or an empty token.
    pub fn from_header(value: &[u8]) -> Option<BearerToken> {
        let value = std::str::from_utf8(value).ok()?.trim();
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return None;
        }
        Some(BearerToken(token.to_string()))
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Whether a request may read the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Authenticated and authorised: 200.
    Allow,
    /// The token does not authenticate anyone: 401.
    Unauthenticated,
    /// The user may not `get` the path: 403.
    Forbidden,
    /// The decision could not be made (the API server failed or did not answer): 500.
    Error,
}

/// Decides whether the holder of a token may `get` a path.
///
/// Implementations may be written with `async fn`. They must not log or return the token.
pub trait Authorizer: Send + Sync + 'static {
    /// The decision for `token` on the non-resource URL `path`.
    fn check(&self, token: &BearerToken, path: &str) -> impl Future<Output = Decision> + Send;
}

/// A shared authorizer (the caller may keep a handle on it).
impl<A: Authorizer> Authorizer for std::sync::Arc<A> {
    fn check(&self, token: &BearerToken, path: &str) -> impl Future<Output = Decision> + Send {
        (**self).check(token, path)
    }
}

pub(crate) type BoxedDecision<'a> = Pin<Box<dyn Future<Output = Decision> + Send + 'a>>;

/// [`Authorizer`] as a trait object (the server holds any authorizer behind one type).
pub(crate) trait DynAuthorizer: Send + Sync + 'static {
    fn check_boxed<'a>(&'a self, token: &'a BearerToken, path: &'a str) -> BoxedDecision<'a>;
}

impl<A: Authorizer> DynAuthorizer for A {
    fn check_boxed<'a>(&'a self, token: &'a BearerToken, path: &'a str) -> BoxedDecision<'a> {
        Box::pin(self.check(token, path))
    }
}

/// How long decisions are kept, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long an [`Decision::Allow`] is reused.
    pub allow_ttl: Duration,
    /// How long a [`Decision::Unauthenticated`] or [`Decision::Forbidden`] is reused.
    /// [`Decision::Error`] is never cached.
    pub deny_ttl: Duration,
    /// At most this many decisions are kept (then the expired ones, then the ones closest
    /// to expiry, are dropped).
    pub capacity: usize,
}

impl Default for CacheConfig {
    /// 10 s for allowed, 2 s for denied, 1024 entries.
    fn default() -> Self {
        CacheConfig {
            allow_ttl: Duration::from_secs(10),
            deny_ttl: Duration::from_secs(2),
            capacity: 1024,
        }
    }
}

/// Decisions by SHA-256 of (token, path): the tokens themselves are not kept.
struct DecisionCache {
    config: CacheConfig,
    entries: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
}

impl DecisionCache {
    fn new(config: CacheConfig) -> DecisionCache {
        DecisionCache {
            config,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn key(token: &BearerToken, path: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update((token.0.len() as u64).to_be_bytes());
        h.update(token.0.as_bytes());
        h.update(path.as_bytes());
        h.finalize().into()
    }

    fn get(&self, key: &[u8; 32]) -> Option<Decision> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some(&(d, expires)) if Instant::now() < expires => Some(d),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: [u8; 32], decision: Decision) {
        let ttl = match decision {
            Decision::Allow => self.config.allow_ttl,
            Decision::Unauthenticated | Decision::Forbidden => self.config.deny_ttl,
            Decision::Error => return,
        };
        if ttl.is_zero() || self.config.capacity == 0 {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.config.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| *expires > now);
            while entries.len() >= self.config.capacity {
                let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (decision, now + ttl));
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The Kubernetes [`Authorizer`]: a TokenReview (authentication.k8s.io/v1) of the token,
/// then a SubjectAccessReview (authorization.k8s.io/v1) of the user it names for `get` on
/// the non-resource URL, as controller-runtime's `WithAuthenticationAndAuthorization`
/// filter does. Decisions are cached by a hash of the token ([`CacheConfig`]).
pub struct KubeAuthorizer {
    client: kube::Client,
    cache: DecisionCache,
}

impl fmt::Debug for KubeAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeAuthorizer")
            .field("cache", &self.cache.config)
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl KubeAuthorizer {
    /// Reviews through `client`, with the default cache.
    pub fn new(client: kube::Client) -> KubeAuthorizer {
        KubeAuthorizer::with_cache(client, CacheConfig::default())
    }

    /// Reviews through `client`, caching as `cache` says.
    pub fn with_cache(client: kube::Client, cache: CacheConfig) -> KubeAuthorizer {
        KubeAuthorizer {
            client,
            cache: DecisionCache::new(cache),
        }
    }

    async fn review(&self, token: &BearerToken, path: &str) -> Decision {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.expose().to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        // Errors of the API server never hold the token (it is in the request body only).
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "metrics request: TokenReview failed");
                return Decision::Error;
            }
        };
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => {
                tracing::debug!(
                    error = status.error.as_deref().unwrap_or(""),
                    "metrics request: token not authenticated"
                );
                return Decision::Unauthenticated;
            }
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some("get".to_string()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let reviewed = match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "metrics request: SubjectAccessReview failed");
                return Decision::Error;
            }
        };
        let status = reviewed.status.unwrap_or_default();
        if status.allowed {
            Decision::Allow
        } else {
            tracing::debug!(
                user = user.username.as_deref().unwrap_or(""),
                reason = status.reason.as_deref().unwrap_or(""),
                evaluation_error = status.evaluation_error.as_deref().unwrap_or(""),
                "metrics request: user not authorised",
            );
            Decision::Forbidden
        }
    }
}

impl Authorizer for KubeAuthorizer {
    async fn check(&self, token: &BearerToken, path: &str) -> Decision {
        let key = DecisionCache::key(token, path);
        if let Some(d) = self.cache.get(&key) {
            return d;
        }
        let d = self.review(token, path).await;
        self.cache.put(key, d);
        d
    }
}

/// Bounds the reviews in flight: at most `permits` decisions at once (a scrape storm,
/// or many clients with fresh tokens, cannot make the process send unbounded
/// TokenReviews); a request that waits longer than `wait` for its turn, or whose
/// decision takes longer than `timeout`, is answered [`Decision::Error`] (500).
pub struct Limited<A> {
    inner: A,
    permits: tokio::sync::Semaphore,
    wait: Duration,
    timeout: Duration,
}

impl<A> Limited<A> {
    /// `inner` with at most `permits` decisions in flight.
    pub fn new(inner: A, permits: usize, wait: Duration, timeout: Duration) -> Limited<A> {
        Limited {
            inner,
            permits: tokio::sync::Semaphore::new(permits.max(1)),
            wait,
            timeout,
        }
    }
}

/// Reviews in flight at once by default.
pub const MAX_REVIEWS: usize = 4;

impl<A: Authorizer> Authorizer for Limited<A> {
    async fn check(&self, token: &BearerToken, path: &str) -> Decision {
        let Ok(Ok(_permit)) = tokio::time::timeout(self.wait, self.permits.acquire()).await else {
            tracing::warn!(
                in_flight = MAX_REVIEWS,
                "metrics request: too many authorisation reviews in flight"
            );
            return Decision::Error;
        };
        match tokio::time::timeout(self.timeout, self.inner.check(token, path)).await {
            Ok(d) => d,
            Err(_) => {
                tracing::warn!(timeout = ?self.timeout, "metrics request: authorisation review timed out");
                Decision::Error
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response};
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn header_parsing() {
        let t = BearerToken::from_header(b"Bearer abc.def").unwrap();
        assert_eq!(t.expose(), "abc.def");
        assert_eq!(
            BearerToken::from_header(b"bearer  xyz ").unwrap().expose(),
            "xyz"
        );
        assert_eq!(BearerToken::from_header(b"Basic dXNlcjpwYXNz"), None);
        assert_eq!(BearerToken::from_header(b"Bearer "), None);
        assert_eq!(BearerToken::from_header(b"Bearer"), None);
        assert_eq!(BearerToken::from_header(b""), None);
        assert_eq!(BearerToken::from_header(b"Bearer \xff"), None);
    }

    #[test]
    fn token_is_never_in_debug() {
        let t = BearerToken::new("s3cr3t-token");
        let shown = format!("{t:?} {:?} {:#?}", Some(&t), vec![t.clone()]);
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn cache_is_bounded_and_skips_errors() {
        let cache = DecisionCache::new(CacheConfig {
            capacity: 3,
            ..CacheConfig::default()
        });
        for i in 0..10 {
            let k = DecisionCache::key(&BearerToken::new(format!("t{i}")), "/metrics");
            cache.put(k, Decision::Allow);
            assert!(cache.len() <= 3);
        }
        let last = DecisionCache::key(&BearerToken::new("t9"), "/metrics");
        assert_eq!(cache.get(&last), Some(Decision::Allow));
        let err = DecisionCache::key(&BearerToken::new("e"), "/metrics");
        cache.put(err, Decision::Error);
        assert_eq!(cache.get(&err), None);
        // The path is part of the key.
        let other = DecisionCache::key(&BearerToken::new("t9"), "/other");
        assert_eq!(cache.get(&other), None);
    }

    /// What the fake API server saw and will answer.
    #[derive(Default)]
    struct Fake {
        requests: Mutex<Vec<(String, Value)>>,
        answers: Mutex<VecDeque<(u16, Value)>>,
    }

    impl Fake {
        fn answer(&self, code: u16, body: Value) {
            self.answers.lock().unwrap().push_back((code, body));
        }
        fn requests(&self) -> Vec<(String, Value)> {
            self.requests.lock().unwrap().clone()
        }
    }

    fn client(fake: Arc<Fake>) -> kube::Client {
        let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
            let fake = fake.clone();
            async move {
                let path = format!("{} {}", req.method(), req.uri().path());
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&body).unwrap();
                fake.requests.lock().unwrap().push((path, body));
                let (code, answer) = fake
                    .answers
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("an unexpected API request");
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(answer.to_string())))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(svc, "default")
    }

    fn token_review(authenticated: bool) -> Value {
        let mut status = json!({"authenticated": authenticated});
        if authenticated {
            status["user"] = json!({
                "username": "system:serviceaccount:monitoring:prometheus",
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            });
        } else {
            status["error"] = json!("invalid bearer token");
        }
        json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "metadata": {}, "spec": {}, "status": status,
        })
    }

    fn access_review(allowed: bool) -> Value {
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {}, "spec": {}, "status": {"allowed": allowed, "reason": "rbac"},
        })
    }

    fn api_error(code: u16) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": "boom", "reason": "InternalError", "code": code,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn reviews_then_caches_allow_for_the_allow_ttl() {
        let fake = Arc::new(Fake::default());
        let auth = KubeAuthorizer::new(client(fake.clone()));
        let token = BearerToken::new("tok-1");
        fake.answer(201, token_review(true));
        fake.answer(201, access_review(true));
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Allow);

        let reqs = fake.requests();
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        assert_eq!(
            reqs[0].0,
            "POST /apis/authentication.k8s.io/v1/tokenreviews"
        );
        assert_eq!(reqs[0].1["spec"]["token"], "tok-1");
        assert_eq!(
            reqs[1].0,
            "POST /apis/authorization.k8s.io/v1/subjectaccessreviews"
        );
        let spec = &reqs[1].1["spec"];
        assert_eq!(spec["user"], "system:serviceaccount:monitoring:prometheus");
        assert_eq!(spec["uid"], "u-1");
        assert_eq!(
            spec["groups"],
            json!(["system:serviceaccounts", "system:authenticated"])
        );
        assert_eq!(
            spec["extra"],
            json!({"authentication.kubernetes.io/pod-name": ["prometheus-0"]})
        );
        assert_eq!(
            spec["nonResourceAttributes"],
            json!({"path": "/metrics", "verb": "get"})
        );
        assert!(spec.get("resourceAttributes").is_none(), "{spec}");

        // Within 10 s: no API call (the fake would panic on an unexpected request).
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Allow);
        assert_eq!(fake.requests().len(), 2);

        // After: reviewed again, and now refused.
        tokio::time::advance(Duration::from_secs(2)).await;
        fake.answer(201, token_review(true));
        fake.answer(201, access_review(false));
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Forbidden);
        assert_eq!(fake.requests().len(), 4);

        // A denial is kept 2 s.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Forbidden);
        assert_eq!(fake.requests().len(), 4);
        tokio::time::advance(Duration::from_secs(2)).await;
        fake.answer(201, token_review(false));
        assert_eq!(
            auth.check(&token, "/metrics").await,
            Decision::Unauthenticated
        );
        // Not authenticated: no SubjectAccessReview.
        assert_eq!(fake.requests().len(), 5);
        assert_eq!(
            auth.check(&token, "/metrics").await,
            Decision::Unauthenticated
        );
        assert_eq!(fake.requests().len(), 5);

        // Another token is reviewed on its own.
        fake.answer(201, token_review(false));
        assert_eq!(
            auth.check(&BearerToken::new("tok-2"), "/metrics").await,
            Decision::Unauthenticated
        );
        assert_eq!(fake.requests().len(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn api_errors_are_errors_and_not_cached() {
        let fake = Arc::new(Fake::default());
        let auth = KubeAuthorizer::new(client(fake.clone()));
        let token = BearerToken::new("tok-err");
        fake.answer(500, api_error(500));
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Error);
        fake.answer(201, token_review(true));
        fake.answer(403, api_error(403));
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Error);
        // Retried at once (errors are not cached).
        fake.answer(201, token_review(true));
        fake.answer(201, access_review(true));
        assert_eq!(auth.check(&token, "/metrics").await, Decision::Allow);
        assert_eq!(fake.requests().len(), 5);
        let shown = format!("{auth:?}");
        assert!(!shown.contains("tok-err"), "{shown}");
    }

    #[tokio::test(start_paused = true)]
    async fn reviews_in_flight_are_bounded() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Slow {
            now: AtomicUsize,
            max: AtomicUsize,
        }
        impl Authorizer for Slow {
            async fn check(&self, _: &BearerToken, _: &str) -> Decision {
                let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
                self.max.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.now.fetch_sub(1, Ordering::SeqCst);
                Decision::Allow
            }
        }
        let slow = Arc::new(Slow {
            now: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
        });
        let limited = Arc::new(Limited::new(
            slow.clone(),
            4,
            Duration::from_millis(2500),
            Duration::from_secs(10),
        ));
        let checks: Vec<_> = (0..20)
            .map(|i| {
                let l = limited.clone();
                tokio::spawn(async move {
                    let token = BearerToken::new(format!("token-{i}"));
                    l.check(&token, "/metrics").await
                })
            })
            .collect();
        let mut allowed = 0;
        let mut errors = 0;
        for c in checks {
            match c.await.unwrap() {
                Decision::Allow => allowed += 1,
                Decision::Error => errors += 1,
                d => panic!("{d:?}"),
            }
        }
        assert_eq!(slow.max.load(Ordering::SeqCst), 4);
        // 4 at a time, 1 s each, 2.5 s of patience: three rounds, then errors.
        assert_eq!((allowed, errors), (12, 8));
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_that_hangs_is_an_error() {
        struct Hang;
        impl Authorizer for Hang {
            async fn check(&self, _: &BearerToken, _: &str) -> Decision {
                std::future::pending().await
            }
        }
        let limited = Limited::new(Hang, 1, Duration::from_secs(1), Duration::from_secs(5));
        let d = limited.check(&BearerToken::new("t"), "/metrics").await;
        assert_eq!(d, Decision::Error);
    }
}
