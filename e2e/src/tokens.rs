use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::AuthInfo;

use crate::lab::Lab;
use crate::wait::wait_until;

impl Lab {
    /// A bound token of ServiceAccount `ns/name`, from the API's TokenRequest (what
    /// `kubectl create token` does), valid for `ttl` (at least 10 minutes, the API's
    /// minimum).
    pub async fn token(&self, ns: &str, name: &str, ttl: Duration) -> Result<String> {
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(ttl.as_secs().max(600) as i64),
                ..Default::default()
            }),
            ..Default::default()
        };
        let tr = Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{name}"))?;
        match tr.status.and_then(|s| s.token) {
            Some(t) if !t.is_empty() => Ok(t),
            _ => bail!("the TokenRequest for {ns}/{name} returned no token"),
        }
    }

    /// A client that authenticates with `token` only (no client certificate), to the lab
    /// API server, trusting the lab CA.
    pub fn client_with_token(&self, token: &str) -> Result<Client> {
        let mut config = self.config();
        // AuthInfo's token is a secret type of kube's; build it through serde.
        config.auth_info =
            serde_json::from_value::<AuthInfo>(serde_json::json!({ "token": token }))
                .context("building an AuthInfo with a token")?;
        Client::try_from(config).context("building a token client")
    }

    /// A client acting as ServiceAccount `ns/name` (a fresh TokenRequest token), after
    /// checking that the API server authenticates it as
    /// `system:serviceaccount:<ns>:<name>`.
    pub async fn client_as(&self, ns: &str, name: &str) -> Result<Client> {
        let token = self.token(ns, name, Duration::from_secs(600)).await?;
        let client = self.client_with_token(&token)?;
        let who = whoami(&client).await?;
        let want = format!("system:serviceaccount:{ns}:{name}");
        if who != want {
            bail!("the token of {ns}/{name} authenticates as {who:?}, not {want:?}");
        }
        Ok(client)
    }
}

impl Lab {
    /// Waits until the API server's authorizer allows `user` to `verb` `resource`
    /// (`resource[.group][/subresource]`) in `ns` (a SubjectAccessReview): RBAC objects
    /// just written reach the authorizer's cache a moment later.
    pub async fn wait_allowed(
        &self,
        user: &str,
        verb: &str,
        resource: &str,
        ns: Option<&str>,
    ) -> Result<()> {
        let (res, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        let (res, group) = match res.split_once('.') {
            Some((r, g)) => (r, g),
            None => (res, ""),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: ns.map(str::to_string),
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(res.into()),
                    subresource: sub,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(self.client.clone());
        let what = format!("RBAC to allow {user} to {verb} {resource} in {ns:?}");
        wait_until(&what, Duration::from_secs(30), || async {
            match api.create(&PostParams::default(), &review).await {
                Ok(r) => match r.status {
                    Some(s) if s.allowed => Ok(()),
                    Some(s) => Err(format!(
                        "not allowed (yet): {}",
                        s.reason.unwrap_or_default()
                    )),
                    None => Err("no status".into()),
                },
                Err(e) => Err(format!("SubjectAccessReview failed: {e}")),
            }
        })
        .await
    }
}

/// The user name the API server sees for `client` (a SelfSubjectReview).
pub async fn whoami(client: &Client) -> Result<String> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("SelfSubjectReview (who am I)")?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// How an RBAC refusal looks: for checks that a write is refused with 403 Forbidden.
pub trait Forbidden<T> {
    /// `Ok(message)` when the result is a 403 Forbidden, else an error saying what
    /// happened instead (success, or another error).
    fn forbidden(self) -> Result<String>;
}

impl<T: std::fmt::Debug> Forbidden<T> for kube::Result<T> {
    fn forbidden(self) -> Result<String> {
        match self {
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(s.message),
            Err(e) => bail!("expected 403 Forbidden, got another error: {e}"),
            Ok(v) => {
                let mut shown = format!("{v:?}");
                shown.truncate(200);
                bail!("expected 403 Forbidden, but it was allowed: {shown}")
            }
        }
    }
}
