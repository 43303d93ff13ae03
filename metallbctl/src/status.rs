//! `metallbctl status`: one screen summing up MetalLB from what the daemons
//! write (ConfigurationStates, pool status, BGPSessionStatus,
//! ServiceBGPStatus or NodeBGPStatus, ServiceL2Status) and the LoadBalancer Services. Reads
//! only: `list` of those kinds, what a viewer's RBAC allows.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, IPAddressPool, NodeBGPStatus, ServiceBGPStatus,
    ServiceL2Status,
};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// `metallbctl status` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Namespace MetalLB runs in.
    #[arg(short = 'n', long, default_value = config::api::DEFAULT_NAMESPACE)]
    namespace: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,

    /// Deadline of each API request, in seconds.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Human-readable text.
    Text,
    /// One JSON object.
    Json,
    /// One YAML document.
    Yaml,
}

/// The summary.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Each component's configuration state.
    pub components: Vec<Component>,
    /// Pools with their usage.
    pub pools: Vec<Pool>,
    /// BGP sessions per node and peer.
    pub sessions: Vec<Session>,
    /// Nodes reporting BGP in summary mode (NodeBGPStatus).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bgp_nodes: Vec<BgpNode>,
    /// LoadBalancer Services with their addresses and who announces them.
    pub services: Vec<Svc>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    pub name: String,
    pub result: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    pub name: String,
    pub addresses: Vec<String>,
    pub assigned_ipv4: i64,
    pub available_ipv4: i64,
    pub assigned_ipv6: i64,
    pub available_ipv6: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub node: String,
    pub peer: String,
    pub bgp: String,
    pub bfd: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub since: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

/// A node's NodeBGPStatus: its Services announced as the configuration says are
/// not listed (`metallbctl explain` derives them).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpNode {
    pub node: String,
    pub peers: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub withheld: String,
    pub local_services: i32,
    pub withdrawn_services: i32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Svc {
    /// `namespace/name`.
    pub service: String,
    pub ips: Vec<String>,
    /// Node -> the BGPPeers it sends the Service to.
    pub bgp: BTreeMap<String, Vec<String>>,
    /// Node -> the interfaces it answers on (empty: every eligible one).
    pub l2: BTreeMap<String, Vec<String>>,
    /// Node (summary mode) -> why it does not announce it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub bgp_withdrawn: BTreeMap<String, String>,
}

/// Runs `status`; exits 0 when every component's configuration is valid.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let status = rt.block_on(read(&args.namespace, Duration::from_secs(args.timeout)))?;
    let mut out = io::stdout().lock();
    match args.output {
        Output::Text => print_text(&mut out, &status)?,
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &status)?;
            writeln!(out)?;
        }
        Output::Yaml => {
            let text = serde_saphyr::to_string(&status).context("YAML output")?;
            out.write_all(text.as_bytes())?;
        }
    }
    let valid = status.components.iter().all(|c| c.result == "Valid");
    Ok(ExitCode::from(if valid { 0 } else { 1 }))
}

async fn list<K>(api: Api<K>, what: &str, timeout: Duration) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let l = tokio::time::timeout(timeout, api.list(&ListParams::default()))
        .await
        .with_context(|| format!("listing {what}: no answer within {timeout:?}"))?
        .with_context(|| format!("listing {what}"))?;
    Ok(l.items)
}

/// Reads the summary from the cluster of the current kubeconfig context.
pub async fn read(ns: &str, timeout: Duration) -> anyhow::Result<Status> {
    let client = crate::live::client(timeout).await?;
    let states: Vec<ConfigurationState> = list(
        Api::namespaced(client.clone(), ns),
        "configurationstates",
        timeout,
    )
    .await?;
    let pools: Vec<IPAddressPool> = list(
        Api::namespaced(client.clone(), ns),
        "ipaddresspools",
        timeout,
    )
    .await?;
    let sessions: Vec<BGPSessionStatus> = list(
        Api::namespaced(client.clone(), ns),
        "bgpsessionstatuses",
        timeout,
    )
    .await?;
    let bgp: Vec<ServiceBGPStatus> = list(
        Api::namespaced(client.clone(), ns),
        "servicebgpstatuses",
        timeout,
    )
    .await?;
    let l2: Vec<ServiceL2Status> = list(
        Api::namespaced(client.clone(), ns),
        "servicel2statuses",
        timeout,
    )
    .await?;
    let node_bgp: Vec<NodeBGPStatus> = crate::live::list_optional(
        Api::namespaced(client.clone(), ns),
        "nodebgpstatuses",
        timeout,
    )
    .await?;
    let services: Vec<Service> = list(Api::all(client), "services", timeout).await?;
    Ok(summarise(
        states, pools, sessions, bgp, node_bgp, l2, services,
    ))
}

/// The summary of the objects read (pure).
pub fn summarise(
    states: Vec<ConfigurationState>,
    pools: Vec<IPAddressPool>,
    sessions: Vec<BGPSessionStatus>,
    bgp: Vec<ServiceBGPStatus>,
    node_bgp: Vec<NodeBGPStatus>,
    l2: Vec<ServiceL2Status>,
    services: Vec<Service>,
) -> Status {
    let mut out = Status::default();
    for s in states {
        let name = s.name_any();
        let st = s.status.unwrap_or_default();
        out.components.push(Component {
            name,
            result: st
                .result
                .map(|r| format!("{r:?}"))
                .unwrap_or_else(|| "Unknown".into()),
            error: st.last_error,
            warnings: st
                .conditions
                .iter()
                .filter(|c| c.type_ == "ConfigurationWarnings" && c.status == "True")
                .map(|c| c.message.clone())
                .collect(),
        });
    }
    out.components.sort_by(|a, b| a.name.cmp(&b.name));
    for p in pools {
        let st = p.status.clone().unwrap_or_default();
        out.pools.push(Pool {
            name: p.name_any(),
            addresses: p.spec.addresses.clone(),
            assigned_ipv4: st.assigned_ipv4,
            available_ipv4: st.available_ipv4,
            assigned_ipv6: st.assigned_ipv6,
            available_ipv6: st.available_ipv6,
        });
    }
    out.pools.sort_by(|a, b| a.name.cmp(&b.name));
    for s in sessions {
        let st = s.status.unwrap_or_default();
        out.sessions.push(Session {
            node: st.node,
            peer: st.peer,
            bgp: st.bgp_status,
            bfd: st.bfd_status,
            since: st
                .last_transition_time
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            last_error: st.last_error,
        });
    }
    out.sessions
        .sort_by(|a, b| (&a.node, &a.peer).cmp(&(&b.node, &b.peer)));
    let mut by_svc: BTreeMap<String, Svc> = BTreeMap::new();
    for s in services {
        let is_lb = s.spec.as_ref().and_then(|x| x.type_.as_deref()) == Some("LoadBalancer");
        if !is_lb {
            continue;
        }
        let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        let ips = s
            .status
            .and_then(|st| st.load_balancer?.ingress)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.ip)
            .collect();
        by_svc.insert(
            key.clone(),
            Svc {
                service: key,
                ips,
                bgp: BTreeMap::new(),
                l2: BTreeMap::new(),
                bgp_withdrawn: BTreeMap::new(),
            },
        );
    }
    let entry = |m: &mut BTreeMap<String, Svc>, ns: &str, name: &str| {
        let key = format!("{ns}/{name}");
        m.entry(key.clone())
            .or_insert_with(|| Svc {
                service: key,
                ips: Vec::new(),
                bgp: BTreeMap::new(),
                l2: BTreeMap::new(),
                bgp_withdrawn: BTreeMap::new(),
            })
            .service
            .clone()
    };
    for b in bgp {
        let Some(st) = b.status else { continue };
        let k = entry(&mut by_svc, &st.service_namespace, &st.service_name);
        if let Some(svc) = by_svc.get_mut(&k) {
            svc.bgp.insert(st.node, st.peers);
        }
    }
    for n in node_bgp {
        let Some(st) = n.status else { continue };
        for x in &st.exceptions {
            let k = entry(&mut by_svc, &x.service_namespace, &x.service_name);
            if let Some(svc) = by_svc.get_mut(&k) {
                if x.announced {
                    svc.bgp.insert(st.node.clone(), x.peers.clone());
                } else {
                    svc.bgp_withdrawn.insert(st.node.clone(), x.reason.clone());
                }
            }
        }
        out.bgp_nodes.push(BgpNode {
            node: st.node,
            peers: st.peers,
            withheld: st.withheld,
            local_services: st.local_services,
            withdrawn_services: st.withdrawn_services,
            truncated: st.exceptions_truncated,
        });
    }
    out.bgp_nodes.sort_by(|a, b| a.node.cmp(&b.node));
    for l in l2 {
        let Some(st) = l.status else { continue };
        let k = entry(&mut by_svc, &st.service_namespace, &st.service_name);
        if let Some(svc) = by_svc.get_mut(&k) {
            svc.l2
                .insert(st.node, st.interfaces.into_iter().map(|i| i.name).collect());
        }
    }
    out.services = by_svc.into_values().collect();
    out
}

/// A session's last error as what it is: the error that ended an earlier state. Beside
/// Established it is history (the session came up again after it), so it is said so,
/// with the time the current state began; otherwise it is why the session is down.
fn error_text(x: &Session) -> String {
    if x.bgp == "Established" {
        let at = if x.since.is_empty() {
            String::new()
        } else {
            format!(" at {}", x.since)
        };
        format!("(before Established{at}: {})", x.last_error)
    } else {
        format!("last error: {}", x.last_error)
    }
}

fn print_text(out: &mut impl Write, s: &Status) -> io::Result<()> {
    writeln!(out, "Configuration:")?;
    if s.components.is_empty() {
        writeln!(
            out,
            "  (no ConfigurationState: are the controller and speakers running?)"
        )?;
    }
    for c in &s.components {
        writeln!(out, "  {:24} {}", c.name, c.result)?;
        if !c.error.is_empty() {
            writeln!(out, "  {:24}   {}", "", c.error)?;
        }
        for w in &c.warnings {
            writeln!(out, "  {:24}   warning: {w}", "")?;
        }
    }
    writeln!(out, "Pools:")?;
    for p in &s.pools {
        let mut usage = Vec::new();
        if p.assigned_ipv4 + p.available_ipv4 > 0 {
            usage.push(format!(
                "IPv4 {} in use, {} free",
                p.assigned_ipv4, p.available_ipv4
            ));
        }
        if p.assigned_ipv6 + p.available_ipv6 > 0 {
            usage.push(format!(
                "IPv6 {} in use, {} free",
                p.assigned_ipv6, p.available_ipv6
            ));
        }
        writeln!(
            out,
            "  {:16} {}  {}",
            p.name,
            p.addresses.join(","),
            usage.join("; ")
        )?;
    }
    if !s.sessions.is_empty() {
        writeln!(out, "BGP sessions:")?;
        for x in &s.sessions {
            write!(
                out,
                "  {:12} {:12} {:12} BFD {:9} since {}",
                x.node, x.peer, x.bgp, x.bfd, x.since
            )?;
            if !x.last_error.is_empty() {
                write!(out, "  {}", error_text(x))?;
            }
            writeln!(out)?;
        }
    }
    if !s.bgp_nodes.is_empty() {
        writeln!(
            out,
            "BGP nodes in summary mode (NodeBGPStatus; Services announced as the configuration says are not listed: see metallbctl explain):"
        )?;
        for n in &s.bgp_nodes {
            write!(
                out,
                "  {:12} peers {:20} Local Services {:5} withdrawn {:5}",
                n.node,
                n.peers.join(","),
                n.local_services,
                n.withdrawn_services
            )?;
            if !n.withheld.is_empty() {
                write!(out, "  announces nothing: {}", n.withheld)?;
            }
            if n.truncated {
                write!(out, "  (list cut)")?;
            }
            writeln!(out)?;
        }
    }
    writeln!(out, "Services:")?;
    for svc in &s.services {
        let mut how = Vec::new();
        if !svc.bgp.is_empty() {
            how.push(format!(
                "BGP from {}",
                svc.bgp
                    .iter()
                    .map(|(n, peers)| format!("{n} to {}", peers.join("+")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for (n, why) in &svc.bgp_withdrawn {
            how.push(format!("BGP withdrawn on {n}: {why}"));
        }
        for (n, ifs) in &svc.l2 {
            how.push(format!(
                "L2 from {n} on {}",
                if ifs.is_empty() {
                    "every interface".to_owned()
                } else {
                    ifs.join(",")
                }
            ));
        }
        if how.is_empty() {
            how.push("not announced".into());
        }
        writeln!(
            out,
            "  {:24} {:16} {}",
            svc.service,
            if svc.ips.is_empty() {
                "<pending>".to_owned()
            } else {
                svc.ips.join(",")
            },
            how.join("; ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(bgp: &str) -> Session {
        Session {
            node: "node-1".into(),
            peer: "router".into(),
            bgp: bgp.into(),
            bfd: "N/A".into(),
            since: "2026-11-27T06:08:10Z".into(),
            last_error: "session down: TCP connection closed".into(),
        }
    }

    #[test]
    fn an_error_beside_established_reads_as_the_past() {
        assert_eq!(
            error_text(&session("Established")),
            "(before Established at 2026-11-27T06:08:10Z: session down: TCP connection closed)"
        );
        assert_eq!(
            error_text(&session("Active")),
            "last error: session down: TCP connection closed"
        );
    }
}
