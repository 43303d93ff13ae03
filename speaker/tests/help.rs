//! `speaker --help` tells the truth: the flags whose help says they have no effect are
//! exactly the allow-list below (each with its reason), and exactly those flags make the
//! speaker warn "no effect yet" when given.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::help::{Allowed, check_claims, entries, help_of, unfinished_claims};

const NOT_YET: &str = "the speaker loads its configuration but announces nothing yet (BGP and L2 \
                       modes are the next issues)";
const MEMBERLIST: &str = "memberlist (L2 liveness) comes with the L2 mode";
const FRR: &str = "every METALLB_BGP_TYPE runs the native stack: FRR's settings mean nothing";

const ALLOWED: &[Allowed] = &[
    Allowed {
        command: "speaker",
        flag: "--ml-bindaddr",
        reason: MEMBERLIST,
    },
    Allowed {
        command: "speaker",
        flag: "--ml-bindport",
        reason: MEMBERLIST,
    },
    Allowed {
        command: "speaker",
        flag: "--ml-labels",
        reason: MEMBERLIST,
    },
    Allowed {
        command: "speaker",
        flag: "--ml-secret-key-path",
        reason: MEMBERLIST,
    },
    Allowed {
        command: "speaker",
        flag: "--ml-wan-config",
        reason: MEMBERLIST,
    },
    Allowed {
        command: "speaker",
        flag: "--lb-class",
        reason: NOT_YET,
    },
    Allowed {
        command: "speaker",
        flag: "--ignore-exclude-lb",
        reason: NOT_YET,
    },
    Allowed {
        command: "speaker",
        flag: "--gratuitous-arp-interval",
        reason: NOT_YET,
    },
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

/// The value `--help` shows as a flag's default (`[default: ""]` is empty), else its first
/// possible value.
fn default_value(text: &str) -> Option<String> {
    let after = |key: &str| {
        let i = text.find(key)? + key.len();
        let end = text[i..].find(']')? + i;
        Some(text[i..end].to_owned())
    };
    match after("[default: ") {
        Some(v) if v == "\"\"" => Some(String::new()),
        Some(v) => Some(v),
        None => after("[possible values: ")
            .map(|v| v.split(',').next().unwrap_or_default().trim().to_owned()),
    }
}

/// Every flag of `--help` given on the command line (with its default value): the
/// speaker warns "no effect yet" for exactly the allowed ones, then fails (no
/// --node-name, no cluster) and exits.
#[test]
fn exactly_the_allowed_flags_warn_that_they_have_no_effect() {
    let help = help_of(speaker(), &[]);
    let mut args = Vec::new();
    let mut given = Vec::new();
    for e in entries(&help) {
        if !e.flag.starts_with("--") || e.flag == "--help" || e.flag == "--version" {
            continue;
        }
        let value = default_value(&e.text)
            .unwrap_or_else(|| panic!("{}: no default value in {:?}", e.flag, e.text));
        args.push(format!("{}={value}", e.flag));
        given.push(e.flag);
    }
    assert!(
        given.len() >= 20 && given.iter().any(|f| f == "--node-name"),
        "parsed too few flags from the help: {given:?}"
    );

    let mut child = Command::new(speaker())
        .args(&args)
        .env_clear()
        .env("KUBECONFIG", "/nonexistent/metallb-rs-help-test/kubeconfig")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("speaker runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the speaker did not exit within 30 s without a cluster");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "exited 0 without a cluster:\n{stderr}"
    );

    let warned: BTreeSet<String> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["level"] == "WARN"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("no effect yet"))
        })
        .filter_map(|v| v["flag"].as_str().map(str::to_owned))
        .collect();
    let allowed: BTreeSet<String> = ALLOWED.iter().map(|a| a.flag.to_owned()).collect();
    assert_eq!(
        warned, allowed,
        "flags warned about (left) vs the allow-list (right); args {args:?}\nstderr:\n{stderr}"
    );
}
