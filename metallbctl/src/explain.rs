//! `metallbctl explain service NS/NAME`: for every Node, what its speaker
//! decides for the Service and why, by running the speaker's own decision
//! code (`speaker::explain`) on the objects of the given files (the
//! configuration, the Nodes, the Service and its EndpointSlices).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use config::load::{LoadOptions, Loader};
use speaker::decide::bgp::Options;
use speaker::explain::Explanation;

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
    /// input.
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
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
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Human-readable text.
    Text,
    /// One JSON object.
    Json,
}

/// Runs `explain`: 0 when the Service is announced by some node, 1 when not.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let What::Service(args) = &args.what;
    let (ns, name) = args
        .service
        .split_once('/')
        .unwrap_or(("default", args.service.as_str()));
    if ns.is_empty() || name.is_empty() {
        bail!("the Service is namespace/name, got {:?}", args.service);
    }
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
    let svc = loaded.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(ns) && s.metadata.name.as_deref() == Some(name)
    });
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
        .cloned()
        .collect();
    let options = Options {
        lb_class: args.lb_class.clone(),
        ignore_exclude_lb: args.ignore_exclude_lb,
    };
    let key = format!("{ns}/{name}");
    let explanation = speaker::explain::service(
        &loaded.resources,
        &key,
        svc.map(AsRef::as_ref),
        &slices,
        &options,
    );
    let mut out = io::stdout().lock();
    match args.output {
        Output::Text => print_text(&mut out, &explanation),
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &explanation)?;
            writeln!(out)
        }
    }
    .context("writing the explanation")?;
    let l2_announced = explanation
        .l2
        .as_ref()
        .is_some_and(|l| l.nodes.iter().any(|n| n.announced));
    Ok(ExitCode::from(
        if l2_announced || explanation.bgp.iter().any(|n| n.announced) {
            0
        } else {
            1
        },
    ))
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
