//! `metallbctl`: the metallb-rs command line.
//!
//! `validate` checks MetalLB configuration files offline, with the same
//! loader and `config::parse` the daemons use and the CRD schemas the API
//! server enforces.
//!
//! Installed under the name `kubectl-metallb` (a link or a copy on PATH), it is the kubectl
//! plugin `kubectl metallb`: the same commands, with usage lines that say `kubectl metallb`.

mod bfd_probe;
mod bgp_probe;
mod convert;
mod explain;
mod l2_announce;
mod live;
mod status;
mod validate;

use std::ffi::OsStr;
use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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

/// The file name under which kubectl runs this binary as `kubectl metallb` (kubectl looks
/// for `kubectl-<name>` on PATH; krew names its plugins the same way).
const PLUGIN_FILE_NAME: &str = "kubectl-metallb";

/// What usage lines call this command: `kubectl metallb` when it was started as the kubectl
/// plugin (`argv[0]`'s file name is `kubectl-metallb`: a link to this binary or a copy of
/// it), `metallbctl` otherwise. Nothing else depends on the name.
fn command_name(argv0: Option<&OsStr>) -> &'static str {
    let plugin = argv0
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name == PLUGIN_FILE_NAME);
    if plugin {
        "kubectl metallb"
    } else {
        "metallbctl"
    }
}

/// The command line, parsed with usage and help naming the command as it was started.
fn parse() -> Cli {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    let matches = Cli::command()
        .bin_name(command_name(argv0.as_deref()))
        .get_matches_from(argv0.into_iter().chain(args));
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_file_name_is_kubectl_metallb_wherever_it_lies() {
        for argv0 in [
            "kubectl-metallb",
            "/usr/local/bin/kubectl-metallb",
            "./kubectl-metallb",
        ] {
            assert_eq!(
                command_name(Some(OsStr::new(argv0))),
                "kubectl metallb",
                "{argv0}"
            );
        }
        for argv0 in [
            "metallbctl",
            "/usr/local/bin/metallbctl",
            "kubectl-metallb-old",
            "kubectl",
            "/opt/kubectl-metallb/metallbctl",
        ] {
            assert_eq!(
                command_name(Some(OsStr::new(argv0))),
                "metallbctl",
                "{argv0}"
            );
        }
        assert_eq!(command_name(None), "metallbctl");
    }

    #[test]
    fn usage_lines_name_the_command_as_started() {
        let mut plugin = Cli::command().bin_name("kubectl metallb");
        assert_eq!(
            plugin.render_usage().to_string(),
            "Usage: kubectl metallb <COMMAND>"
        );
        plugin.build();
        let status = plugin
            .find_subcommand_mut("status")
            .expect("status subcommand");
        assert_eq!(
            status.render_usage().to_string(),
            "Usage: kubectl metallb status [OPTIONS]"
        );
    }
}
