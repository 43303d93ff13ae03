//! Every `metallbctl --help` (the command and each subcommand) tells the truth: no flag
//! says it is "not supported yet" or has "no effect yet" unless it is on the allow-list
//! below, with the reason (testkit::help).

use std::path::Path;

use testkit::help::{Allowed, check_claims, help_of, subcommands, unfinished_claims};

/// Flags of metallbctl that really do not work yet, each with the reason. Empty: every
/// flag of every subcommand works (TCP MD5 of `bgp-probe --password-file` included, see
/// bgp/README.md).
const ALLOWED: &[Allowed] = &[];

fn metallbctl() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_metallbctl"))
}

#[test]
fn every_help_text_claims_only_what_is_allowed() {
    let top = help_of(metallbctl(), &[]);
    let commands = subcommands(&top);
    // The list comes from the help itself, so a new subcommand is checked too; these four
    // must be among them (else the parsing found nothing to check).
    for expected in ["validate", "bgp-probe", "bfd-probe", "l2-announce"] {
        assert!(
            commands.iter().any(|c| c == expected),
            "{expected} not in {commands:?}:\n{top}"
        );
    }
    let mut claims = unfinished_claims("metallbctl", &top);
    for c in &commands {
        let help = help_of(metallbctl(), &[c]);
        claims.extend(unfinished_claims(&format!("metallbctl {c}"), &help));
    }
    if let Err(e) = check_claims(&claims, ALLOWED) {
        panic!("{e}");
    }
}

#[test]
fn bgp_probe_help_says_tcp_md5_works() {
    let help = help_of(metallbctl(), &["bgp-probe"]);
    let entry = testkit::help::entries(&help)
        .into_iter()
        .find(|e| e.flag == "--password-file")
        .unwrap_or_else(|| panic!("no --password-file in:\n{help}"));
    assert!(
        entry.text.contains("TCP MD5") && entry.text.contains("TCP_MD5SIG"),
        "{entry:?}"
    );
}
