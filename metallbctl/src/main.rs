//! `metallbctl`: the metallb-rs command line.
//!
//! `validate` checks MetalLB configuration files offline, with the same
//! loader and `config::parse` the daemons use and the CRD schemas the API
//! server enforces.

mod bfd_probe;
mod bgp_probe;
mod convert;
mod explain;
mod l2_announce;
mod live;
mod status;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit statuses, shown by `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  0  the configuration is valid
  1  the configuration is invalid: MetalLB would refuse it, or the API server
     would reject one of its objects (a schema violation), so it would never
     reach the cluster
  2  the input could not be loaded: unreadable path, YAML syntax error,
     unknown metallb.io apiVersion or kind, a value of the wrong type, an
     unknown field with --strict; also command-line usage errors";

/// metallb-rs command line.
#[derive(Debug, Parser)]
#[command(name = "metallbctl", version, about, after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate MetalLB configuration files offline, as the daemons and the
    /// API server would.
    #[command(after_help = EXIT_STATUS)]
    Validate(validate::Args),
    /// Open one BGP session to a router, announce prefixes and print the
    /// session as JSON lines; Ctrl-C withdraws and closes with Cease.
    BgpProbe(bgp_probe::Args),
    /// Run one BFD session against a peer and print each state change as a
    /// JSON line; Ctrl-C sends AdminDown and exits.
    BfdProbe(bfd_probe::Args),
    /// Own IPs on an interface (ARP/NDP answers, gratuitous burst) and print
    /// requests, gratuitous packets and counters as JSON lines until Ctrl-C.
    L2Announce(l2_announce::Args),
    /// Explain, node by node, why a Service is (not) announced, with the
    /// speaker's own decisions run on the objects of the given files.
    Explain(explain::Args),
    /// One screen summing up MetalLB in the cluster of the current kubeconfig
    /// context: configuration states, pools, BGP sessions, and who announces
    /// each LoadBalancer Service how.
    Status(status::Args),
    /// Convert a legacy MetalLB ConfigMap (its `config` key) to the
    /// equivalent metallb.io objects, as upstream's configmaptocrs does; YAML
    /// on stdout. Exit 1 when the result is invalid, 2 when the input cannot
    /// be read.
    Convert(convert::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Validate(args) => validate::run(args),
        Command::BgpProbe(args) => bgp_probe::run(args),
        Command::BfdProbe(args) => bfd_probe::run(args),
        Command::L2Announce(args) => l2_announce::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Status(args) => status::run(args),
        Command::Convert(args) => convert::run(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("metallbctl: {e:#}");
        ExitCode::from(validate::EXIT_LOAD_ERROR)
    })
}
