//! `controller --help` tells the truth: the flags whose help says they have no effect are
//! exactly the allow-list below (each with the reason, checked against the code), and
//! exactly those flags make the controller warn "no effect yet" when given.

use std::path::Path;

use testkit::help::{Allowed, check_claims, check_no_effect_warnings, help_of, unfinished_claims};

const WEBHOOK: &str = "the webhook speaks HTTP/1.1 only (MetalLB's default; the API server \
                       needs nothing more)";

/// The controller's flags that are accepted for compatibility with MetalLB and do nothing.
const ALLOWED: &[Allowed] = &[
    Allowed {
        command: "controller",
        flag: "--pprof-bind-address",
        reason: "Go's pprof profiler: a Rust binary has none (no effect, for good)",
    },
    Allowed {
        command: "controller",
        flag: "--webhook-http2",
        reason: WEBHOOK,
    },
    Allowed {
        command: "controller",
        flag: "--tls-cipher-suites",
        reason: "the metrics port's TLS (kube-metrics) takes only a minimum version \
                 (--tls-min-version); cipher suites are the TLS library's defaults",
    },
    Allowed {
        command: "controller",
        flag: "--tls-curve-preferences",
        reason: "the metrics port's TLS takes no curve preferences; curves are the TLS \
                 library's defaults",
    },
];

fn controller() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_controller"))
}

#[test]
fn help_claims_no_effect_only_for_the_allowed_flags() {
    let help = help_of(controller(), &[]);
    let claims = unfinished_claims("controller", &help);
    if let Err(e) = check_claims(&claims, ALLOWED) {
        panic!("{e}\nhelp:\n{help}");
    }
}

/// Every flag of `--help` given on the command line (with its default value): the
/// controller warns "no effect yet" for exactly the allowed ones, then fails without a
/// cluster and exits.
#[test]
fn exactly_the_allowed_flags_warn_that_they_have_no_effect() {
    check_no_effect_warnings(controller(), ALLOWED, "--lb-class");
}
