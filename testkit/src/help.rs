//! Checks that command-line help texts tell the truth about what works.
//!
//! A flag's help that says it is "not supported yet" or has "no effect yet" goes stale the
//! day the feature lands. The tests of each binary run every `--help` (the command and each
//! subcommand), find the flags whose help says such a thing ([`UNFINISHED_PHRASES`]) and
//! compare them with an explicit allow-list ([`Allowed`]: each flag that really does nothing
//! yet, with the reason) in both directions: a claim not on the list fails, and so does a
//! listed flag whose help no longer says it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Phrases saying that something does not work (yet). Matched case-insensitively.
pub const UNFINISHED_PHRASES: [&str; 6] = [
    "not supported",
    "no effect",
    "not implemented",
    "not yet",
    "unsupported",
    "unimplemented",
];

/// One entry of a help text: an option (`flag` is its long name, `--port`, or its short
/// one when it has none), a positional argument (`<PATH>`), a subcommand of the
/// `Commands:` list (its name), or the command's own text (`flag` empty: the about text,
/// section headers and the text after the options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub flag: String,
    pub text: String,
}

/// A help entry that says something does not work, and the phrase that says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The command, e.g. `metallbctl bgp-probe`.
    pub command: String,
    pub flag: String,
    pub phrase: &'static str,
    pub text: String,
}

/// A flag whose help may say it does not work, because it does not (yet).
#[derive(Clone, Copy, Debug)]
pub struct Allowed {
    pub command: &'static str,
    pub flag: &'static str,
    /// Why the flag has no effect: what is missing, checked against the code when the
    /// entry was written.
    pub reason: &'static str,
}

/// Splits a clap help text into its entries. An entry starts at an indented line that
/// begins with `-` or `<` (an option or a positional argument) or, in a `Commands:`
/// section, with a name; it goes on over more indented and blank lines. A line at
/// column 0 (a section header, the text after the options) belongs to the command.
pub fn entries(help: &str) -> Vec<Entry> {
    let mut out = vec![Entry {
        flag: String::new(),
        text: String::new(),
    }];
    let mut current = 0usize;
    let mut in_commands = false;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            continue;
        }
        if indent == 0 {
            in_commands = trimmed == "Commands:";
            current = 0;
            push_text(&mut out[0].text, trimmed);
            continue;
        }
        let starts_entry = indent <= 6
            && (trimmed.starts_with('-')
                || trimmed.starts_with('<')
                || (in_commands && indent <= 2));
        if starts_entry {
            let (spec, rest) = split_spec(trimmed);
            out.push(Entry {
                flag: flag_name(spec),
                text: rest.to_owned(),
            });
            current = out.len() - 1;
        } else {
            push_text(&mut out[current].text, trimmed);
        }
    }
    out
}

fn push_text(text: &mut String, line: &str) {
    if !text.is_empty() {
        text.push(' ');
    }
    text.push_str(line);
}

/// Splits `-n, --namespace <NAMESPACE>  Namespace ...` into the flag spec and the text
/// on the same line (separated by at least two spaces).
fn split_spec(line: &str) -> (&str, &str) {
    match line.find("  ") {
        Some(i) => (&line[..i], line[i..].trim_start()),
        None => (line, ""),
    }
}

/// The long name of a flag spec (`-n, --namespace <NAMESPACE>` → `--namespace`), else its
/// first word (`-n`, `<PATH>...`, a subcommand's name).
fn flag_name(spec: &str) -> String {
    let words = spec.split([' ', ',', '=']).filter(|w| !w.is_empty());
    let mut first = None;
    for w in words {
        if w.starts_with("--") {
            return w.to_owned();
        }
        first.get_or_insert(w);
    }
    first.unwrap_or_default().to_owned()
}

/// The entries of `help` (the help of `command`) that contain one of
/// [`UNFINISHED_PHRASES`].
pub fn unfinished_claims(command: &str, help: &str) -> Vec<Claim> {
    let mut out = Vec::new();
    for e in entries(help) {
        let lower = e.text.to_lowercase();
        if let Some(phrase) = UNFINISHED_PHRASES.iter().find(|p| lower.contains(*p)) {
            out.push(Claim {
                command: command.to_owned(),
                flag: e.flag,
                phrase,
                text: e.text,
            });
        }
    }
    out
}

/// Compares the claims with the allow-list: every claim must be allowed, and every allowed
/// flag must still be claimed (a flag that works now must lose both its wording and its
/// entry). The error lists each difference.
pub fn check_claims(claims: &[Claim], allowed: &[Allowed]) -> Result<(), String> {
    let mut msg = String::new();
    for c in claims {
        if !allowed
            .iter()
            .any(|a| a.command == c.command && a.flag == c.flag)
        {
            let flag = if c.flag.is_empty() {
                "(the command's own text)"
            } else {
                &c.flag
            };
            let _ = writeln!(
                msg,
                "`{} --help`, {flag}: says {:?} but is not on the allow-list of flags that \
                 really do not work yet: fix the help if it works now, else add it with the \
                 reason.\n    text: {}",
                c.command, c.phrase, c.text
            );
        }
    }
    for a in allowed {
        if !claims
            .iter()
            .any(|c| a.command == c.command && a.flag == c.flag)
        {
            let _ = writeln!(
                msg,
                "`{} --help`, {}: on the allow-list ({}) but its help no longer says it does \
                 not work: remove it from the list.",
                a.command, a.flag, a.reason
            );
        }
    }
    if msg.is_empty() { Ok(()) } else { Err(msg) }
}

/// Runs `exe ARGS... --help` and returns its standard output; panics unless it exits 0
/// with a non-empty text.
pub fn help_of(exe: &Path, args: &[&str]) -> String {
    let out = Command::new(exe)
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?} --help: {e}", exe.display()));
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 help");
    assert!(
        out.status.success() && !stdout.trim().is_empty(),
        "{} {args:?} --help: {}\nstdout:\n{stdout}\nstderr:\n{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The subcommands a clap help text lists under `Commands:`, without `help`.
pub fn subcommands(help: &str) -> Vec<String> {
    let mut in_commands = false;
    let mut out = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            continue;
        }
        if indent == 0 {
            in_commands = trimmed == "Commands:";
        } else if in_commands && indent <= 2 {
            let name = trimmed.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                out.push(name.to_owned());
            }
        }
    }
    out
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

/// Runs `exe` with every flag of its `--help` at its default value (JSON logs, a
/// kubeconfig that does not exist): it must warn "no effect yet" for exactly the flags
/// of `allowed`, then fail without a cluster within 30 s. `must_see` is a flag the
/// parsed help must contain (a check that the help was parsed at all). Panics with what
/// differs.
pub fn check_no_effect_warnings(exe: &Path, allowed: &[Allowed], must_see: &str) {
    let help = help_of(exe, &[]);
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
        given.len() >= 20 && given.iter().any(|f| f == must_see),
        "parsed too few flags from the help: {given:?}"
    );
    let mut child = Command::new(exe)
        .args(&args)
        .env_clear()
        .env("KUBECONFIG", "/nonexistent/metallb-rs-help-test/kubeconfig")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} runs: {e}", exe.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "{} did not exit within 30 s without a cluster",
                exe.display()
            );
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
    let allowed: BTreeSet<String> = allowed.iter().map(|a| a.flag.to_owned()).collect();
    assert_eq!(
        warned, allowed,
        "flags warned about (left) vs the allow-list (right); args {args:?}\nstderr:\n{stderr}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "\
Does things

Usage: tool [OPTIONS] <PATH>...

Commands:
  run   Runs it
  help  Print this message or the help of the given subcommand(s)

Arguments:
  <PATH>...
          Files to read

Options:
  -n, --namespace <NAMESPACE>
          Namespace (no effect yet)

          [default: metallb-system]

      --strict
          Unknown fields are errors
      --password-file <FILE>  TCP MD5 password (not supported yet by the
                              transport)
  -q                          Quiet; this is NOT IMPLEMENTED
  -h, --help
          Print help

Exit status:
  0  fine
";

    #[test]
    fn entries_split_options_arguments_and_commands() {
        let e = entries(HELP);
        let flags: Vec<&str> = e.iter().map(|e| e.flag.as_str()).collect();
        assert_eq!(
            flags,
            [
                "",
                "run",
                "help",
                "<PATH>...",
                "--namespace",
                "--strict",
                "--password-file",
                "-q",
                "--help"
            ]
        );
        assert_eq!(
            e[4].text,
            "Namespace (no effect yet) [default: metallb-system]"
        );
        assert_eq!(
            e[6].text,
            "TCP MD5 password (not supported yet by the transport)"
        );
        assert!(
            e[0].text.contains("Exit status: 0  fine"),
            "{:?}",
            e[0].text
        );
        assert_eq!(subcommands(HELP), ["run"]);
    }

    #[test]
    fn claims_are_found_and_compared_with_the_allow_list_both_ways() {
        let claims = unfinished_claims("tool", HELP);
        let found: Vec<(&str, &str)> = claims.iter().map(|c| (c.flag.as_str(), c.phrase)).collect();
        assert_eq!(
            found,
            [
                ("--namespace", "no effect"),
                ("--password-file", "not supported"),
                ("-q", "not implemented")
            ]
        );
        let all = [
            Allowed {
                command: "tool",
                flag: "--namespace",
                reason: "r",
            },
            Allowed {
                command: "tool",
                flag: "--password-file",
                reason: "r",
            },
            Allowed {
                command: "tool",
                flag: "-q",
                reason: "r",
            },
        ];
        assert_eq!(check_claims(&claims, &all), Ok(()));
        let err = check_claims(&claims, &all[..2]).unwrap_err();
        assert!(err.contains("-q: says \"not implemented\""), "{err}");
        let mut stale = all.to_vec();
        stale.push(Allowed {
            command: "tool",
            flag: "--strict",
            reason: "r",
        });
        let err = check_claims(&claims, &stale).unwrap_err();
        assert!(err.contains("--strict: on the allow-list"), "{err}");
        // Another command's entry does not allow this one's.
        let other = [Allowed {
            command: "tool run",
            flag: "-q",
            reason: "r",
        }];
        assert!(check_claims(&claims[2..], &other).is_err());
    }
}
