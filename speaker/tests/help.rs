//! `speaker --help` tells the truth: the flags whose help says they have no effect are
//! exactly the allow-list below (each with its reason), and exactly those flags make the
//! speaker warn "no effect yet" when given.

use std::path::Path;

use testkit::help::{Allowed, check_claims, check_no_effect_warnings, help_of, unfinished_claims};

const FRR: &str = "every METALLB_BGP_TYPE runs the native stack: FRR's settings mean nothing";

const ALLOWED: &[Allowed] = &[
    Allowed {
        command: "speaker",
        flag: "--bgp-debounce-timeout",
        reason: FRR,
    },
    Allowed {
        command: "speaker",
        flag: "--frrk8s-namespace",
        reason: FRR,
    },
    Allowed {
        command: "speaker",
        flag: "--frrk8s-secret-passthrough",
        reason: FRR,
    },
    Allowed {
        command: "speaker",
        flag: "--pprof-bind-address",
        reason: "Go's pprof profiler: a Rust binary has none",
    },
    Allowed {
        command: "speaker",
        flag: "--tls-cipher-suites",
        reason: "the metrics TLS takes only a minimum version; cipher suites are the TLS library's defaults",
    },
    Allowed {
        command: "speaker",
        flag: "--tls-curve-preferences",
        reason: "the metrics TLS takes no curve preferences",
    },
];

fn speaker() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_speaker"))
}

#[test]
fn help_claims_no_effect_only_for_the_allowed_flags() {
    let help = help_of(speaker(), &[]);
    let claims = unfinished_claims("speaker", &help);
    if let Err(e) = check_claims(&claims, ALLOWED) {
        panic!("{e}\nhelp:\n{help}");
    }
}

/// Every flag of `--help` given on the command line (with its default value): the
/// speaker warns "no effect yet" for exactly the allowed ones, then fails without a
/// cluster and exits.
#[test]
fn exactly_the_allowed_flags_warn_that_they_have_no_effect() {
    check_no_effect_warnings(speaker(), ALLOWED, "--node-name");
}
