//! `metallbctl explain service NS/NAME`: for every Node, what its speaker
//! decides for the Service and why, by running the speaker's own decision
//! code (`speaker::explain`) on the objects of the given files (the
//! configuration, the Nodes, the Service and its EndpointSlices), or, without
//! files, on the same objects read from the API server (`list`/`get` only,
//! each request with a deadline), with what the speakers report
//! (ServiceBGPStatus, ServiceL2Status) next to what they should decide.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use config::load::{LoadOptions, Loader};
use speaker::decide::bgp::Options;
use speaker::explain::{Explanation, LiveSpeakers};

use crate::live::Summarised;

/// `metallbctl explain` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Why a Service is (not) announced, node by node.
    Service(ServiceArgs),
}

#[derive(Debug, clap::Args)]
struct ServiceArgs {
    /// The Service, `namespace/name` (or `name` in namespace `default`).
    service: String,

    /// Files or directories with the metallb.io objects, the Nodes, the Service and
    /// its EndpointSlices (`kubectl get -o yaml` output works); `-` reads standard
    /// input. Without: the objects of the cluster of the current kubeconfig context.
    #[arg(short = 'f', long = "filename", value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Namespace MetalLB runs in (its configuration objects).
    #[arg(short = 'n', long, default_value = config::api::DEFAULT_NAMESPACE)]
    namespace: String,

    /// The speakers' `--lb-class`.
    #[arg(long, default_value = "")]
    lb_class: String,

    /// The speakers run with `--ignore-exclude-lb`.
    #[arg(long)]
    ignore_exclude_lb: bool,

    /// Output format: `text`, or one `json` object on stdout.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,

    /// The speakers taking part in layer-2 elections (node names, comma-separated), as
    /// their membership sees them, for every node. Default: from the cluster, each Ready
    /// speaker's own view (its ConfigurationState's `layer2Membership`), else the Nodes
    /// whose speaker Pod is Ready (`--speaker-labels`); from files, every Node
    /// (membership off).
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    live_speakers: Option<Vec<String>>,

    /// The nodes where a MetalLB speaker runs (a migration in progress; node names,
    /// comma-separated): with membership on, the speakers leave the layer-2 Services
    /// they are candidates of to MetalLB. Default: from the cluster, the running speaker
    /// Pods in `--namespace` of MetalLB's image without the label metallb-rs/component
    /// whose node reports no membership view of ours; from files, none.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    metallb_speakers: Option<Vec<String>>,

    /// Labels of the speaker Pods in `--namespace` (without `-f`).
    #[arg(long, default_value = "app=metallb,component=speaker")]
    speaker_labels: String,

    /// Deadline of each API request, in seconds (without `-f`).
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// The explanation, and (from the cluster) what the speakers report.
#[derive(Debug, serde::Serialize)]
struct Report {
    #[serde(flatten)]
    explanation: Explanation,
    /// What the speakers' status objects say (live only).
    #[serde(skip_serializing_if = "Option::is_none")]
    reported: Option<crate::live::Reported>,
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Human-readable text.
    Text,
    /// One JSON object.
    Json,
}

/// Runs `explain`: 0 when the Service is announced by some node (over BGP:
/// to some peer), 1 when not.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let What::Service(args) = &args.what;
    let (ns, name) = args
        .service
        .split_once('/')
        .unwrap_or(("default", args.service.as_str()));
    if ns.is_empty() || name.is_empty() {
        bail!("the Service is namespace/name, got {:?}", args.service);
    }
    let options = Options {
        lb_class: args.lb_class.clone(),
        ignore_exclude_lb: args.ignore_exclude_lb,
    };
    let key = format!("{ns}/{name}");
    let given: Option<std::collections::BTreeSet<String>> = args
        .live_speakers
        .as_ref()
        .map(|v| v.iter().filter(|n| !n.is_empty()).cloned().collect());
    let report = if args.paths.is_empty() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let live = rt.block_on(crate::live::read(
            &args.namespace,
            ns,
            name,
            Duration::from_secs(args.timeout),
        ))?;
        if live.resources.nodes.is_empty() {
            bail!("the cluster has no Node: explain decides per Node");
        }
        let timeout = Duration::from_secs(args.timeout);
        let metallb = match &args.metallb_speakers {
            Some(m) => nodes(m),
            None => rt.block_on(crate::live::metallb_speaker_nodes(&args.namespace, timeout))?,
        };
        let mut speakers = match given {
            Some(g) => LiveSpeakers::same(g),
            None => {
                let ready = rt.block_on(crate::live::ready_speaker_nodes(
                    &args.namespace,
                    &args.speaker_labels,
                    timeout,
                ))?;
                let views = rt.block_on(crate::live::membership_views(&args.namespace, timeout))?;
                live_speakers(ready, views, &metallb)
            }
        };
        // A node whose speaker reports a membership view runs ours.
        speakers.metallb = metallb
            .into_iter()
            .filter(|n| !speakers.reported.contains_key(n))
            .collect();
        let explanation = speaker::explain::service(
            &live.resources,
            &key,
            live.service.as_ref(),
            &live.slices,
            &options,
            &speakers,
        );
        Report {
            explanation,
            reported: Some(live.reported),
        }
    } else {
        let (resources, svc, slices) = from_files(args, ns, name)?;
        Report {
            explanation: speaker::explain::service(
                &resources,
                &key,
                svc.as_deref(),
                &slices,
                &options,
                &LiveSpeakers {
                    metallb: args
                        .metallb_speakers
                        .as_deref()
                        .map(nodes)
                        .unwrap_or_default(),
                    ..given.map(LiveSpeakers::same).unwrap_or_default()
                },
            ),
            reported: None,
        }
    };
    let mut out = io::stdout().lock();
    match args.output {
        Output::Text => {
            print_text(&mut out, &report.explanation).and_then(|()| match &report.reported {
                Some(r) => print_reported(&mut out, &report.explanation, r),
                None => Ok(()),
            })
        }
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)
        }
    }
    .context("writing the explanation")?;
    let explanation = &report.explanation;
    let l2_announced = explanation
        .l2
        .as_ref()
        .is_some_and(|l| l.nodes.iter().any(|n| n.announced));
    // Announced over BGP means sent to some peer.
    let bgp_announced = explanation
        .bgp
        .iter()
        .any(|n| n.announced && !n.routes.is_empty());
    Ok(ExitCode::from(if l2_announced || bgp_announced {
        0
    } else {
        1
    }))
}

type Objects = (
    config::Resources,
    Option<Arc<k8s_openapi::api::core::v1::Service>>,
    Vec<Arc<cluster_view::endpoints::LeanSlice>>,
);

/// The objects of the files `args.paths`, and the Service `ns/name` with its
/// EndpointSlices among them.
fn from_files(args: &ServiceArgs, ns: &str, name: &str) -> anyhow::Result<Objects> {
    let mut loader = Loader::new(LoadOptions {
        namespace: args.namespace.clone(),
        workloads: true,
        ..LoadOptions::default()
    });
    for path in &args.paths {
        crate::validate::add(&mut loader, path)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("reading {}", path.display()))?;
    }
    let loaded = loader.finish();
    if loaded.resources.nodes.is_empty() {
        bail!("no Node in the input: explain decides per Node (add `kubectl get nodes -o yaml`)");
    }
    let svc = loaded
        .services
        .iter()
        .find(|s| {
            s.metadata.namespace.as_deref() == Some(ns) && s.metadata.name.as_deref() == Some(name)
        })
        .cloned();
    let slices: Vec<Arc<_>> = loaded
        .endpoint_slices
        .iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    .is_some_and(|n| n == name)
        })
        .map(|s| Arc::new(cluster_view::endpoints::LeanSlice::from(&**s)))
        .collect();
    Ok((loaded.resources, svc, slices))
}

/// What the speakers report, after what they should decide.
fn print_reported(
    out: &mut impl Write,
    e: &Explanation,
    r: &crate::live::Reported,
) -> io::Result<()> {
    writeln!(
        out,
        "reported by the speakers (ServiceBGPStatus, NodeBGPStatus, ServiceL2Status):"
    )?;
    if r.bgp.is_empty() && r.l2.is_empty() && r.summary.is_empty() {
        writeln!(out, "  nothing: no speaker reports announcing it")?;
    }
    for (node, peers) in &r.bgp {
        writeln!(out, "  {node}  BGP to {}", peers.join(", "))?;
    }
    for (node, s) in &r.summary {
        let says = match s {
            Summarised::Announced(peers) => format!("BGP to {} (NodeBGPStatus)", peers.join(", ")),
            Summarised::Withdrawn(why) => format!("BGP withdrawn: {why} (NodeBGPStatus)"),
            Summarised::AsConfigured => {
                "BGP as the configuration says (NodeBGPStatus lists no exception)".to_owned()
            }
            Summarised::Unknown => "unknown (its NodeBGPStatus list is cut)".to_owned(),
        };
        writeln!(out, "  {node}  {says}")?;
    }
    for (node, ifs) in &r.l2 {
        let on = if ifs.is_empty() {
            "every eligible interface".to_owned()
        } else {
            ifs.join(", ")
        };
        writeln!(out, "  {node}  L2 on {on}")?;
    }
    for line in differences(e, r) {
        writeln!(out, "  differs: {line}")?;
    }
    Ok(())
}

/// Where what the speakers report differs from what they should decide
/// (a speaker down, not running there, or not caught up yet).
/// Who each node elects with, live: a Ready speaker's own membership view
/// when it publishes one it can be elected with (membership on, not past
/// the size it lists), else the Nodes whose speaker Pod is Ready; every Node
/// when no speaker Pod is found (another label, or none runs). A view of a
/// speaker not Ready is stale (its process may be gone): not used, unless no
/// speaker Pod is found at all (then readiness is unknown, the views stand).
/// The Ready speaker Pods of MetalLB (`metallb`) are not ours: their nodes
/// count only where they report a membership view of ours.
fn live_speakers(
    ready: BTreeSet<String>,
    views: BTreeMap<String, config::api::v1beta1::Layer2Membership>,
    metallb: &BTreeSet<String>,
) -> LiveSpeakers {
    let ready: BTreeSet<String> = ready
        .into_iter()
        .filter(|n| !metallb.contains(n) || views.contains_key(n))
        .collect();
    let reported = views
        .into_iter()
        .filter(|(node, _)| ready.is_empty() || ready.contains(node))
        .filter_map(|(node, v)| Some((node, (v.electing()?, v.state))))
        .collect();
    LiveSpeakers {
        reported,
        otherwise: (!ready.is_empty()).then_some(ready),
        metallb: BTreeSet::new(),
    }
}

/// Node names given on the command line (empty ones left out).
fn nodes(v: &[String]) -> BTreeSet<String> {
    v.iter().filter(|n| !n.is_empty()).cloned().collect()
}

fn differences(e: &Explanation, r: &crate::live::Reported) -> Vec<String> {
    let mut out = Vec::new();
    let decided_bgp: std::collections::BTreeSet<&str> = e
        .bgp
        .iter()
        .filter(|n| n.announced && !n.routes.is_empty())
        .map(|n| n.node.as_str())
        .collect();
    let decided_l2: std::collections::BTreeSet<&str> =
        e.l2.iter()
            .flat_map(|l| l.nodes.iter().filter(|n| n.announced))
            .map(|n| n.node.as_str())
            .collect();
    // Nodes in summary mode report only what differs from the configuration.
    let mut bgp: BTreeMap<String, Vec<String>> = r.bgp.clone();
    for (node, s) in &r.summary {
        match s {
            Summarised::Announced(peers) => {
                bgp.insert(node.clone(), peers.clone());
            }
            Summarised::AsConfigured | Summarised::Unknown => {
                if decided_bgp.contains(node.as_str()) {
                    bgp.insert(node.clone(), Vec::new());
                }
            }
            Summarised::Withdrawn(why) => {
                if decided_bgp.contains(node.as_str()) {
                    out.push(format!(
                        "{node} should announce it (BGP) but withdraws it: {why} (its NodeBGPStatus)"
                    ));
                    bgp.insert(node.clone(), Vec::new());
                }
            }
        }
    }
    for (proto, decided, reported) in [("BGP", &decided_bgp, &bgp), ("L2", &decided_l2, &r.l2)] {
        for n in decided.iter().filter(|n| !reported.contains_key(**n)) {
            out.push(format!(
                "{n} should announce it ({proto}) but reports nothing (is its speaker running and ready?)"
            ));
        }
        for n in reported.keys().filter(|n| !decided.contains(n.as_str())) {
            out.push(format!(
                "{n} reports announcing it ({proto}) but should not (stale status, or its speaker sees other objects)"
            ));
        }
    }
    out
}

fn print_text(out: &mut impl Write, e: &Explanation) -> io::Result<()> {
    writeln!(
        out,
        "Service {}: {}",
        e.service,
        if e.ips.is_empty() {
            "no ingress address".to_owned()
        } else {
            e.ips.join(", ")
        }
    )?;
    if !e.bgp.is_empty() {
        writeln!(out, "BGP:")?;
    }
    let width = e
        .bgp
        .iter()
        .map(|n| n.node.len())
        .chain(
            e.l2.iter()
                .flat_map(|l| l.nodes.iter().map(|n| n.node.len())),
        )
        .max()
        .unwrap_or(0);
    for n in &e.bgp {
        if n.announced {
            writeln!(out, "  {:width$}  announces", n.node)?;
            for r in &n.routes {
                let mut extra = Vec::new();
                if let Some(lp) = r.local_pref {
                    extra.push(format!("LOCAL_PREF {lp} to iBGP peers"));
                }
                if !r.communities.is_empty() {
                    extra.push(format!("communities {}", r.communities.join(" ")));
                }
                extra.push(format!("BGPAdvertisement {}", r.advertisement));
                writeln!(
                    out,
                    "  {:width$}    {} -> {} ({})",
                    "",
                    r.prefix,
                    r.peer,
                    extra.join(", ")
                )?;
            }
        } else {
            writeln!(
                out,
                "  {:width$}  not announced: {}",
                n.node,
                n.reason.as_deref().unwrap_or_default()
            )?;
        }
        if let Some(h) = &n.hint {
            writeln!(out, "  {:width$}    {h}", "")?;
        }
    }
    if let Some(l2) = &e.l2 {
        writeln!(out, "L2:")?;
        match &l2.election {
            Some(el) if !el.candidates.is_empty() => {
                writeln!(
                    out,
                    "  election on {} (score descending, then sha256(node#ip) ascending):",
                    el.ip
                )?;
                for (i, c) in el.candidates.iter().enumerate() {
                    writeln!(
                        out,
                        "    {}. {:width$}  score {}  sha256 {}",
                        i + 1,
                        c.node,
                        c.score,
                        &speaker::decide::l2::to_hex(&c.hash)[..16]
                    )?;
                }
            }
            Some(_) => writeln!(out, "  election: no candidate")?,
            None => {}
        }
        for n in &l2.nodes {
            if n.announced {
                let on = if n.interfaces.is_empty() {
                    "every eligible interface".to_owned()
                } else {
                    n.interfaces.join(", ")
                };
                writeln!(out, "  {:width$}  answers on {on}", n.node)?;
            } else {
                writeln!(
                    out,
                    "  {:width$}  not announced: {}",
                    n.node,
                    n.reason.as_deref().unwrap_or_default()
                )?;
            }
            if let Some(h) = &n.hint {
                writeln!(out, "  {:width$}    {h}", "")?;
            }
        }
    }
    if !e.warnings.is_empty() {
        writeln!(out, "warnings:")?;
        for w in &e.warnings {
            writeln!(out, "  {w}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use speaker::explain::{L2, NodeBgp, NodeL2, PeerRoute};

    fn bgp(node: &str, announced: bool) -> NodeBgp {
        NodeBgp {
            node: node.into(),
            announced,
            reason: (!announced).then(|| "notOwner".into()),
            hint: None,
            routes: if announced {
                vec![PeerRoute {
                    peer: "router".into(),
                    prefix: "198.51.100.1/32".into(),
                    local_pref: None,
                    communities: Vec::new(),
                    advertisement: "a".into(),
                }]
            } else {
                Vec::new()
            },
            sessions: Vec::new(),
        }
    }

    #[test]
    fn differences_name_missing_and_unexpected_announcers() {
        let e = Explanation {
            service: "demo/web".into(),
            ips: vec!["198.51.100.1".into()],
            bgp: vec![bgp("n1", true), bgp("n2", true), bgp("n3", false)],
            l2: Some(L2 {
                election: None,
                nodes: vec![NodeL2 {
                    node: "n1".into(),
                    announced: true,
                    reason: None,
                    hint: None,
                    interfaces: Vec::new(),
                }],
            }),
            warnings: Vec::new(),
        };
        let mut r = crate::live::Reported::default();
        r.bgp.insert("n1".into(), vec!["router".into()]);
        r.bgp.insert("n3".into(), vec!["router".into()]);
        r.l2.insert("n1".into(), Vec::new());
        assert_eq!(
            differences(&e, &r),
            [
                "n2 should announce it (BGP) but reports nothing (is its speaker running and ready?)",
                "n3 reports announcing it (BGP) but should not (stale status, or its speaker sees other objects)",
            ]
        );
        r.bgp.remove("n3");
        r.bgp.insert("n2".into(), vec!["router".into()]);
        assert!(differences(&e, &r).is_empty());
    }

    #[test]
    fn summary_nodes_report_only_what_differs() {
        let e = Explanation {
            service: "demo/web".into(),
            ips: vec!["198.51.100.1".into()],
            bgp: vec![
                bgp("n1", true),
                bgp("n2", true),
                bgp("n3", false),
                bgp("n4", true),
                bgp("n5", false),
            ],
            l2: None,
            warnings: Vec::new(),
        };
        let mut r = crate::live::Reported::default();
        r.summary.insert("n1".into(), Summarised::AsConfigured);
        r.summary.insert(
            "n2".into(),
            Summarised::Withdrawn("conflictingAdvertisements".into()),
        );
        r.summary.insert("n3".into(), Summarised::AsConfigured);
        r.summary.insert("n4".into(), Summarised::Unknown);
        r.summary
            .insert("n5".into(), Summarised::Announced(vec!["router".into()]));
        assert_eq!(
            differences(&e, &r),
            [
                "n2 should announce it (BGP) but withdraws it: conflictingAdvertisements (its NodeBGPStatus)",
                "n5 reports announcing it (BGP) but should not (stale status, or its speaker sees other objects)",
            ]
        );
    }

    #[test]
    fn a_summary_says_what_it_lists() {
        use config::api::v1beta1::{NodeBGPStatusStatus, ServiceException};
        let mut st = NodeBGPStatusStatus {
            node: "n1".into(),
            exceptions: vec![
                ServiceException {
                    service_namespace: "demo".into(),
                    service_name: "local".into(),
                    announced: true,
                    peers: vec!["router".into()],
                    ..Default::default()
                },
                ServiceException {
                    service_namespace: "demo".into(),
                    service_name: "c".into(),
                    reason: "conflictingAdvertisements".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            Summarised::of(&st, "demo", "local"),
            Summarised::Announced(vec!["router".into()])
        );
        assert_eq!(
            Summarised::of(&st, "demo", "c"),
            Summarised::Withdrawn("conflictingAdvertisements".into())
        );
        assert_eq!(Summarised::of(&st, "demo", "web"), Summarised::AsConfigured);
        st.exceptions_truncated = true;
        assert_eq!(Summarised::of(&st, "demo", "web"), Summarised::Unknown);
        st.withheld = "nodeNetworkUnavailable".into();
        assert_eq!(
            Summarised::of(&st, "demo", "web"),
            Summarised::Withdrawn("nodeNetworkUnavailable".into())
        );
    }

    /// Issue 27: live, each node elects with the view its speaker reports
    /// (ConfigurationState `layer2Membership`), as its speaker does: views
    /// that differ show as two nodes answering, with a warning naming the
    /// views; a fenced or joining speaker says so; the view of a speaker
    /// whose Pod is not Ready is stale and not used.
    #[test]
    fn each_node_elects_with_the_view_its_speaker_reports() {
        use clap::Parser;
        use config::api::v1beta1::Layer2Membership;
        use sha2::{Digest, Sha256};
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: ServiceArgs,
        }
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/explain-l2");
        let t = T::try_parse_from(["t", "demo/web", "-f", dir.to_str().unwrap()]).unwrap();
        let (resources, svc, slices) = from_files(&t.a, "demo", "web").unwrap();
        // MetalLB's order of the two candidates for the Service's address.
        let mut order = ["edge-1", "edge-2"];
        order.sort_by_key(|n| Sha256::digest(format!("{n}#198.51.100.5")).to_vec());
        let [first, second] = order;
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let view =
            |v: &[&str], joined: bool, fenced: bool| Layer2Membership::of(&set(v), joined, fenced);
        let run_with = |ready: &[&str], views: Vec<(&str, Layer2Membership)>, metallb: &[&str]| {
            let mut live = live_speakers(
                set(ready),
                views.into_iter().map(|(n, v)| (n.to_owned(), v)).collect(),
                &set(metallb),
            );
            live.metallb = set(metallb)
                .into_iter()
                .filter(|n| !live.reported.contains_key(n))
                .collect();
            speaker::explain::service(
                &resources,
                "demo/web",
                svc.as_deref(),
                &slices,
                &Options::default(),
                &live,
            )
        };
        let run =
            |ready: &[&str], views: Vec<(&str, Layer2Membership)>| run_with(ready, views, &[]);
        let answering = |e: &Explanation| -> Vec<String> {
            let l2 = e.l2.as_ref().expect("an L2 section");
            l2.nodes
                .iter()
                .filter(|n| n.announced)
                .map(|n| n.node.clone())
                .collect()
        };
        let hint = |e: &Explanation, node: &str| -> String {
            let l2 = e.l2.as_ref().expect("an L2 section");
            let n = l2.nodes.iter().find(|n| n.node == node).unwrap();
            n.hint.clone().unwrap_or_default()
        };
        let all = ["edge-1", "edge-2", "worker-1"];

        // The same view everywhere: the first of MetalLB's order answers alone.
        let e = run(
            &all,
            all.iter().map(|n| (*n, view(&all, true, false))).collect(),
        );
        assert_eq!(answering(&e), [first], "{e:#?}");
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);

        // The second holds the first down, the first still sees both: both answer.
        let e = run(
            &all,
            vec![
                (first, view(&all, true, false)),
                (second, view(&[second, "worker-1"], true, false)),
            ],
        );
        let mut both = vec![first.to_owned(), second.to_owned()];
        both.sort();
        assert_eq!(answering(&e), both, "{e:#?}");
        let w = e.warnings.join("\n");
        assert!(
            w.contains("membership views differ") && w.contains("all answer for Service demo/web"),
            "{w}"
        );

        // The first is self-fenced: it answers for nothing and says why.
        let e = run(
            &all,
            vec![
                (first, view(&all, true, true)),
                (second, view(&[second, "worker-1"], true, false)),
            ],
        );
        assert_eq!(answering(&e), [second], "{e:#?}");
        assert!(
            hint(&e, first).contains("SelfFenced"),
            "{}",
            hint(&e, first)
        );

        // The first's Pod is not Ready: its (stale) view is not used, it is not live.
        let e = run(
            &[second, "worker-1"],
            vec![
                (first, view(&all, true, false)),
                (second, view(&[second, "worker-1"], true, false)),
            ],
        );
        assert_eq!(answering(&e), [second], "{e:#?}");
        assert!(
            hint(&e, first).contains("is not live"),
            "{}",
            hint(&e, first)
        );

        // No speaker Pod found (other labels): the views stand.
        let e = run(
            &[],
            vec![
                (first, view(&all, true, true)),
                (second, view(&[second, "worker-1"], true, false)),
            ],
        );
        assert_eq!(answering(&e), [second], "{e:#?}");

        // A view too large to list: the Ready speakers stand in for it.
        let mut big = view(&all, true, false);
        big.truncated = true;
        big.live_speakers.clear();
        let e = run(&all, vec![(first, big)]);
        assert_eq!(answering(&e), [first], "{e:#?}");

        // A migration: MetalLB's speaker Ready on the second (no view of ours there).
        // Ours leave the Service to it and say why.
        let ours: Vec<&str> = all.iter().copied().filter(|n| *n != second).collect();
        let e = run_with(
            &all,
            ours.iter()
                .map(|n| (*n, view(&ours, true, false)))
                .collect(),
            &[second],
        );
        assert!(answering(&e).is_empty(), "{e:#?}");
        assert!(
            hint(&e, first).contains("MetalLB speaker"),
            "{}",
            hint(&e, first)
        );
        // The same Pod on a node that reports a view of ours is ours.
        let e = run_with(
            &all,
            all.iter().map(|n| (*n, view(&all, true, false))).collect(),
            &[second],
        );
        assert_eq!(answering(&e), [first], "{e:#?}");
    }
}
