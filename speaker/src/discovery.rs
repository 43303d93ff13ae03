//! Finding the other speakers for the membership protocol, as MetalLB does
//! (speaker.md 3.4): the Pod IPs of the speaker Pods selected by
//! `--ml-labels` in the speaker's namespace, listed at start and every
//! 5 minutes (the membership protocol joins those that are not members
//! every minute). Each list has a deadline; a failed one is retried with
//! backoff and jitter, and the last good list stays in force.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use thiserror::Error;
use tokio::sync::watch;

/// MetalLB lists the speaker Pods this often.
pub const REFRESH: Duration = Duration::from_secs(300);
/// Deadline of one list.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait after a failed list, doubling to [`REFRESH`]: a speaker starting while
/// its API server comes back (connection refused, then 403 while the RBAC loads) finds
/// the others within its join wait (`crate::join`).
pub const FIRST_RETRY: Duration = Duration::from_millis(500);

#[derive(Debug, Error)]
pub enum DiscoveryError {
    #[error("listing the speaker Pods ({selector}) in {namespace}: {source}")]
    List {
        namespace: String,
        selector: String,
        source: kube::Error,
    },
    #[error("listing the speaker Pods ({selector}) in {namespace}: no answer within {timeout:?}")]
    Timeout {
        namespace: String,
        selector: String,
        timeout: Duration,
    },
}

/// The Pod IPs of the speaker Pods (`selector`, e.g.
/// `app=metallb,component=speaker`) in `namespace`; Pods without an IP yet
/// are left out.
pub async fn speaker_pod_ips(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<Vec<IpAddr>, DiscoveryError> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let list = tokio::time::timeout(
        LIST_TIMEOUT,
        api.list(&ListParams::default().labels(selector)),
    )
    .await
    .map_err(|_| DiscoveryError::Timeout {
        namespace: namespace.to_owned(),
        selector: selector.to_owned(),
        timeout: LIST_TIMEOUT,
    })?
    .map_err(|source| DiscoveryError::List {
        namespace: namespace.to_owned(),
        selector: selector.to_owned(),
        source,
    })?;
    Ok(pod_ips(&list.items))
}

/// The IPs of `pods` (status.podIP; each of status.podIPs too), sorted and
/// without repeats.
pub fn pod_ips(pods: &[Pod]) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = pods
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.pod_ip
                .iter()
                .cloned()
                .chain(s.pod_ips.iter().flatten().map(|i| i.ip.clone()))
        })
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The seed addresses: every IP of the family of `bind` (a membership
/// socket speaks one family) at `bind`'s port, except `bind` itself.
pub fn seeds(ips: &[IpAddr], bind: SocketAddr) -> Vec<SocketAddr> {
    ips.iter()
        .filter(|ip| ip.is_ipv4() == bind.is_ipv4() && **ip != bind.ip())
        .map(|ip| SocketAddr::new(*ip, bind.port()))
        .collect()
}

/// Lists the speaker Pods now and every [`REFRESH`], publishing each new
/// seed list on `out`. A failed list is retried after [`FIRST_RETRY`] doubling to 5 min,
/// with up to 20 % jitter; it ends when `out` has no receiver left or when
/// `stop` completes.
pub async fn run(
    client: Client,
    namespace: String,
    selector: String,
    bind: SocketAddr,
    out: watch::Sender<Option<Vec<SocketAddr>>>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut backoff = FIRST_RETRY;
    loop {
        let listed = tokio::select! {
            () = &mut stop => return,
            r = speaker_pod_ips(&client, &namespace, &selector) => r,
        };
        let wait = match listed {
            Ok(ips) => {
                let seeds = seeds(&ips, bind);
                tracing::debug!(?seeds, "speaker Pods found");
                out.send_if_modified(|cur| {
                    let changed = cur.as_ref() != Some(&seeds);
                    *cur = Some(seeds);
                    changed
                });
                backoff = FIRST_RETRY;
                REFRESH
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "membership discovery failed; keeping the last list");
                let w = backoff;
                backoff = (backoff * 2).min(REFRESH);
                w
            }
        };
        tokio::select! {
            _ = out.closed() => return,
            () = &mut stop => return,
            _ = tokio::time::sleep(jitter(wait)) => {}
        }
    }
}

/// `d` plus up to 20 %, drawn from the clock (no security role).
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(nanos % 1000) / 5000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ip: Option<&str>, ips: &[&str]) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {
                "podIP": ip,
                "podIPs": ips.iter().map(|i| json!({"ip": i})).collect::<Vec<_>>(),
            }
        }))
        .unwrap()
    }

    #[test]
    fn pod_ips_are_sorted_unique_and_skip_pods_without_one() {
        let pods = [
            pod(Some("192.0.2.12"), &["192.0.2.12", "2001:db8::12"]),
            pod(None, &[]),
            pod(Some("192.0.2.11"), &[]),
            pod(Some("not-an-ip"), &[]),
        ];
        let ips: Vec<String> = pod_ips(&pods).iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["192.0.2.11", "192.0.2.12", "2001:db8::12"]);
    }

    #[test]
    fn seeds_keep_the_bind_family_and_leave_out_the_own_address() {
        let ips: Vec<IpAddr> = ["192.0.2.11", "192.0.2.12", "2001:db8::12"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let s = seeds(&ips, "192.0.2.11:7946".parse().unwrap());
        assert_eq!(s, ["192.0.2.12:7946".parse::<SocketAddr>().unwrap()]);
        let s = seeds(&ips, "[2001:db8::11]:7000".parse().unwrap());
        assert_eq!(s, ["[2001:db8::12]:7000".parse::<SocketAddr>().unwrap()]);
    }

    #[test]
    fn jitter_adds_at_most_a_fifth() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(10) && j <= Duration::from_secs(12),
                "{j:?}"
            );
        }
    }
}
