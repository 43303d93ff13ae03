//! The memberlist Secret, as MetalLB's controller makes it (`--ml-secret-name`,
//! `--deployment`): when the Secret does not exist, 16 random bytes, base64 without
//! padding (22 characters), under the key `secretkey`, owned by the controller's
//! Deployment (so it goes with the installation). The speakers mount it at
//! `--ml-secret-key-path` and authenticate and encrypt their membership with it. An
//! existing Secret is never changed (a new key would split the speakers until they all
//! restart).

use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, PostParams};
use thiserror::Error;

/// The Secret's key (MetalLB's `MLSecretKeyName`).
pub const SECRET_KEY: &str = "secretkey";
/// Deadline of each request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum MlSecretError {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("{what}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { what: String },
    #[error("reading random bytes for the memberlist key: {0}")]
    Random(String),
    #[error("the controller's Deployment {namespace}/{name} does not exist (--deployment)")]
    NoDeployment { namespace: String, name: String },
}

impl MlSecretError {
    /// Whether trying again cannot help (a missing Deployment stays missing until the
    /// user fixes `--deployment`).
    pub fn is_permanent(&self) -> bool {
        matches!(self, MlSecretError::NoDeployment { .. })
    }
}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Existed,
}

/// The Secret's value for 16 random bytes: base64 (standard alphabet) without padding.
pub fn key_value(random: &[u8; 16]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(random)
}

/// The Secret `name` in `namespace` holding `value`, owned by the Deployment.
pub fn secret(name: &str, namespace: &str, value: &str, owner: Option<OwnerReference>) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.to_owned());
    s.metadata.namespace = Some(namespace.to_owned());
    s.metadata.owner_references = owner.map(|o| vec![o]);
    s.data = Some(
        [(SECRET_KEY.to_owned(), ByteString(value.as_bytes().to_vec()))]
            .into_iter()
            .collect(),
    );
    s
}

async fn within<T>(
    what: impl Fn() -> String,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, MlSecretError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(MlSecretError::Api {
            what: what(),
            source,
        }),
        Err(_) => Err(MlSecretError::Timeout { what: what() }),
    }
}

/// Creates the Secret `name` in `namespace` unless it exists, owned by the Deployment
/// `deployment` (none when empty).
pub async fn ensure(
    client: &Client,
    namespace: &str,
    name: &str,
    deployment: &str,
) -> Result<Outcome, MlSecretError> {
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let what = || format!("reading Secret {namespace}/{name}");
    if within(what, secrets.get_opt(name)).await?.is_some() {
        return Ok(Outcome::Existed);
    }
    let owner = if deployment.is_empty() {
        None
    } else {
        let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
        let what = || format!("reading Deployment {namespace}/{deployment}");
        let d = within(what, deployments.get_opt(deployment))
            .await?
            .ok_or_else(|| MlSecretError::NoDeployment {
                namespace: namespace.to_owned(),
                name: deployment.to_owned(),
            })?;
        Some(OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: deployment.to_owned(),
            uid: d.metadata.uid.unwrap_or_default(),
            ..OwnerReference::default()
        })
    };
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| MlSecretError::Random(e.to_string()))?;
    let s = secret(name, namespace, &key_value(&random), owner);
    let what = || format!("creating Secret {namespace}/{name}");
    match tokio::time::timeout(REQUEST_TIMEOUT, secrets.create(&PostParams::default(), &s)).await {
        Ok(Ok(_)) => Ok(Outcome::Created),
        // Another controller (a second replica) made it first.
        Ok(Err(kube::Error::Api(e))) if e.code == 409 => Ok(Outcome::Existed),
        Ok(Err(source)) => Err(MlSecretError::Api {
            what: what(),
            source,
        }),
        Err(_) => Err(MlSecretError::Timeout { what: what() }),
    }
}

/// [`ensure`] until it succeeds or fails permanently: 2 s doubling to 2 min, with
/// up to 20 % jitter. Logs the outcome.
pub async fn ensure_with_retries(
    client: Client,
    namespace: String,
    name: String,
    deployment: String,
) {
    let mut backoff = Duration::from_secs(2);
    loop {
        match ensure(&client, &namespace, &name, &deployment).await {
            Ok(Outcome::Created) => {
                tracing::info!(secret = name, "memberlist Secret created");
                return;
            }
            Ok(Outcome::Existed) => {
                tracing::debug!(secret = name, "memberlist Secret exists");
                return;
            }
            Err(e) if e.is_permanent() => {
                tracing::error!(error = %e, secret = name, "the memberlist Secret cannot be created");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "the memberlist Secret: retrying");
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |t| t.subsec_nanos());
                let jitter = backoff.mul_f64(f64::from(nanos % 1000) / 5000.0);
                tokio::time::sleep(backoff + jitter).await;
                backoff = (backoff * 2).min(Duration::from_secs(120));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_22_base64_characters_as_metallb_makes_it() {
        let v = key_value(&[0xff; 16]);
        assert_eq!(v.len(), 22);
        assert_eq!(v, "/////////////////////w");
        let v = key_value(&[0; 16]);
        assert_eq!(v, "AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn the_secret_holds_the_key_under_secretkey_with_its_owner() {
        let owner = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "controller".into(),
            uid: "u-1".into(),
            ..OwnerReference::default()
        };
        let s = secret("memberlist", "metallb-system", "abc", Some(owner.clone()));
        assert_eq!(s.metadata.name.as_deref(), Some("memberlist"));
        assert_eq!(s.metadata.owner_references, Some(vec![owner]));
        let data = s.data.unwrap();
        assert_eq!(data[SECRET_KEY].0, b"abc");
        // Not in Debug output of the key: Secret data is bytes the caller never logs.
        assert_eq!(data.len(), 1);
    }
}
