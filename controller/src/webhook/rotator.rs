//! The Kubernetes edge of the webhook's certificates: keeps the Secret
//! holding a valid CA and serving certificate ([`super::certs`]), hands the
//! serving certificate to the server, and keeps the `caBundle` of the
//! ValidatingWebhookConfiguration (every webhook of it) and of the BGPPeer
//! CRD's conversion webhook (when it has one) equal to the CA. Every API call
//! has a deadline; writes are conditional on the `resourceVersion` read, so
//! two controllers rotating at once do not overwrite each other (the loser
//! reads again at its next turn).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_metrics::ServerTls;
use serde_json::json;
use time::OffsetDateTime;
use tokio::sync::watch;

use super::certs::{self, Bundle, Lifetimes, Plan};

/// MetalLB's ValidatingWebhookConfiguration.
pub const WEBHOOK_CONFIGURATION: &str = "metallb-webhook-configuration";
/// The CRD whose conversion webhook gets the CA too.
pub const BGPPEER_CRD: &str = "bgppeers.metallb.io";

/// What the rotator manages.
#[derive(Clone, Debug)]
pub struct RotatorConfig {
    /// The MetalLB namespace (of the Secret).
    pub namespace: String,
    /// The Secret (`--webhook-secret`).
    pub secret: String,
    /// The serving certificate's names, `<service>.<namespace>.svc` first.
    pub names: Vec<String>,
    /// The ValidatingWebhookConfiguration whose `caBundle`s are kept current.
    pub webhook_configuration: String,
    /// The CRD whose conversion `caBundle` is kept current.
    pub crd: String,
    /// Certificate lifetimes.
    pub lifetimes: Lifetimes,
    /// How often everything is checked again.
    pub interval: Duration,
    /// Deadline of each API call.
    pub call_timeout: Duration,
}

/// Why one pass failed (it is tried again at the next turn).
#[derive(Debug, thiserror::Error)]
pub enum RotatorError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// The call.
        what: &'static str,
        /// What the API said.
        #[source]
        source: kube::Error,
    },
    /// An API call took longer than its deadline.
    #[error("{0}: deadline exceeded")]
    Timeout(&'static str),
    /// The certificates could not be made.
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    /// The certificate could not be served.
    #[error("serving the webhook certificate: {0}")]
    Tls(#[from] kube_metrics::Error),
}

async fn call<T>(
    what: &'static str,
    deadline: Duration,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, RotatorError> {
    match tokio::time::timeout(deadline, f).await {
        Ok(r) => r.map_err(|source| RotatorError::Api { what, source }),
        Err(_) => Err(RotatorError::Timeout(what)),
    }
}

/// The rotator: run it as a task; it ends when `stopped` completes.
pub struct Rotator {
    client: Client,
    config: RotatorConfig,
    tls: ServerTls,
    served: Option<String>,
}

impl Rotator {
    /// A rotator serving through `tls`.
    pub fn new(client: Client, config: RotatorConfig, tls: ServerTls) -> Rotator {
        Rotator {
            client,
            config,
            tls,
            served: None,
        }
    }

    /// Runs a pass now and every [`RotatorConfig::interval`] (every 2 s
    /// after a failure); `ready` turns true once a certificate is served.
    pub async fn run(mut self, ready: watch::Sender<bool>, stopped: impl Future<Output = ()>) {
        tokio::pin!(stopped);
        loop {
            let wait = match self.pass().await {
                Ok(()) => {
                    ready.send_replace(true);
                    self.config.interval
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook certificate pass failed; trying again");
                    Duration::from_secs(2)
                }
            };
            tokio::select! {
                () = &mut stopped => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass: the Secret, the served certificate, the `caBundle`s.
    pub async fn pass(&mut self) -> Result<(), RotatorError> {
        let t = self.config.call_timeout;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let existing = call(
            "reading the webhook Secret",
            t,
            secrets.get_opt(&self.config.secret),
        )
        .await?;
        let data: Option<BTreeMap<String, Vec<u8>>> = existing.as_ref().map(|s| {
            s.data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect()
        });
        let bundle = data.as_ref().and_then(Bundle::from_data);
        let now = OffsetDateTime::now_utc();
        let dns = self.config.names.first().cloned().unwrap_or_default();
        let plan = certs::plan(bundle.as_ref(), &dns, now, self.config.lifetimes);
        let bundle = if let (Plan::Keep, Some(kept)) = (plan, &bundle) {
            kept.clone()
        } else {
            let names = self.config.names.clone();
            let lifetimes = self.config.lifetimes;
            let old = bundle.clone();
            let new = tokio::task::spawn_blocking(move || {
                certs::generate(plan, old.as_ref(), &names, now, lifetimes)
            })
            .await
            .map_err(|_| RotatorError::Timeout("generating certificates"))??;
            let data: BTreeMap<String, ByteString> = new
                .to_data()
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect();
            match existing {
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(self.config.secret.clone()),
                            namespace: Some(self.config.namespace.clone()),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    call(
                        "creating the webhook Secret",
                        t,
                        secrets.create(&PostParams::default(), &secret),
                    )
                    .await?;
                }
                Some(mut secret) => {
                    // Conditional on the resourceVersion read (kept in metadata).
                    secret.data = Some(data);
                    secret.string_data = None;
                    call(
                        "updating the webhook Secret",
                        t,
                        secrets.replace(&self.config.secret, &PostParams::default(), &secret),
                    )
                    .await?;
                }
            }
            tracing::info!(
                ?plan,
                secret = self.config.secret,
                "webhook certificates written"
            );
            new
        };
        if self.served.as_deref() != Some(bundle.tls_cert.as_str()) {
            self.tls
                .replace_pem(bundle.tls_cert.as_bytes(), bundle.tls_key.as_bytes())?;
            self.served = Some(bundle.tls_cert.clone());
            tracing::info!("serving the webhook certificate from the Secret");
        }
        self.inject(bundle.ca_cert.as_bytes()).await
    }

    /// Sets the `caBundle`s that differ from `ca`.
    async fn inject(&self, ca: &[u8]) -> Result<(), RotatorError> {
        let t = self.config.call_timeout;
        let ca_b64 = serde_json::to_value(ByteString(ca.to_vec())).unwrap_or_default();
        let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(vwc) = call(
            "reading the ValidatingWebhookConfiguration",
            t,
            vwcs.get_opt(&self.config.webhook_configuration),
        )
        .await?
        {
            let webhooks = vwc.webhooks.clone().unwrap_or_default();
            if webhooks
                .iter()
                .any(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca))
            {
                let mut list = serde_json::to_value(&webhooks).unwrap_or_default();
                if let Some(items) = list.as_array_mut() {
                    for w in items {
                        w["clientConfig"]["caBundle"] = ca_b64.clone();
                    }
                }
                // A merge patch replaces the list: conditional on the version read.
                let patch = json!({
                    "metadata": {"resourceVersion": vwc.metadata.resource_version},
                    "webhooks": list,
                });
                call(
                    "patching the ValidatingWebhookConfiguration's caBundle",
                    t,
                    vwcs.patch(
                        &self.config.webhook_configuration,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    ),
                )
                .await?;
                tracing::info!(
                    name = self.config.webhook_configuration,
                    "webhook caBundle updated"
                );
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        if let Some(crd) =
            call("reading the BGPPeer CRD", t, crds.get_opt(&self.config.crd)).await?
        {
            let conversion_webhook = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref());
            if let Some(cc) = conversion_webhook
                && cc.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca)
            {
                let patch = json!({
                    "metadata": {"resourceVersion": crd.metadata.resource_version},
                    "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": ca_b64}}}},
                });
                call(
                    "patching the BGPPeer CRD's conversion caBundle",
                    t,
                    crds.patch(
                        &self.config.crd,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    ),
                )
                .await?;
                tracing::info!(crd = self.config.crd, "conversion caBundle updated");
            }
        }
        Ok(())
    }
}
