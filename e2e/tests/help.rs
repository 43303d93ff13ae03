//! `demo-network --help` tells the truth (testkit::help): it claims nothing unfinished, and
//! it names its flags. Needs no lab.

use std::path::Path;

use testkit::help::{check_claims, entries, help_of, unfinished_claims};

#[test]
fn demo_network_help_claims_nothing_unfinished_and_names_its_flags() {
    let exe = Path::new(env!("CARGO_BIN_EXE_demo-network"));
    let help = help_of(exe, &[]);
    if let Err(e) = check_claims(&unfinished_claims("demo-network", &help), &[]) {
        panic!("{e}");
    }
    let flags: Vec<String> = entries(&help).into_iter().map(|e| e.flag).collect();
    for f in [
        "--ip",
        "--settle",
        "--run-speaker",
        "--kubeconfig",
        "--speaker-bin",
        "--namespace",
        "--kubectl",
        "--expect-speaker",
        "--expect-l2",
    ] {
        assert!(
            flags.iter().any(|x| x == f),
            "{f} not in {flags:?}:\n{help}"
        );
    }
}
