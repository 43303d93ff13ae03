//! Running short-lived commands with a timeout and useful errors.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::Result;

/// Default bound for one short command (a loaded 2-core CI machine is slow,
/// but nothing the kit runs synchronously should take a minute).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// `program arg1 arg2 ...`, quoting arguments that need it, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = quote(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&quote(&a.to_string_lossy()));
    }
    s
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` to completion (stdin closed, output captured) within
/// [`DEFAULT_TIMEOUT`]; a non-zero exit is not an error here.
pub fn output(cmd: &mut Command) -> Result<Output> {
    output_timeout(cmd, DEFAULT_TIMEOUT)
}

/// Like [`output`] with an explicit bound; on timeout the command's whole
/// process group is killed and an error returned.
pub fn output_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let what = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let pid = child.id();
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    // Readers report through channels so that a background process which
    // inherited the pipes (a daemon that did not close them) cannot hang us.
    let (out_tx, out_rx) = mpsc::channel();
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        let _ = out_tx.send(b);
    });
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        let _ = err_tx.send(b);
    });
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(timeout) {
        Ok(status) => status.with_context(|| format!("waiting for `{what}`"))?,
        Err(_) => {
            crate::process::kill_group(pid, rustix::process::Signal::KILL);
            let _ = waiter.join();
            bail!("`{what}` did not finish within {timeout:?}; killed");
        }
    };
    let _ = waiter.join();
    let grace = Duration::from_secs(5);
    let stdout =
        String::from_utf8_lossy(&out_rx.recv_timeout(grace).unwrap_or_default()).into_owned();
    let stderr =
        String::from_utf8_lossy(&err_rx.recv_timeout(grace).unwrap_or_default()).into_owned();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Runs `cmd` and returns its stdout; a non-zero exit is an error naming the
/// command, its status, stderr and stdout.
pub fn run(cmd: &mut Command) -> Result<String> {
    run_timeout(cmd, DEFAULT_TIMEOUT)
}

/// Like [`run`] with an explicit bound.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Result<String> {
    let what = describe(cmd);
    let out = output_timeout(cmd, timeout)?;
    if !out.success() {
        bail!(
            "`{what}` failed ({}):\n{}{}",
            out.status,
            indent(&out.stderr),
            indent(&out.stdout)
        );
    }
    Ok(out.stdout)
}

fn indent(s: &str) -> String {
    let s = s.trim_end();
    if s.is_empty() {
        return String::new();
    }
    let mut r = String::new();
    for l in s.lines() {
        r.push_str("  | ");
        r.push_str(l);
        r.push('\n');
    }
    r
}

/// Runs `cmd` with stdin closed and stdout/stderr appended to `log`, within
/// `timeout`; a non-zero exit is an error that quotes the log's tail. For
/// commands that start daemons (which may keep inherited descriptors).
pub fn run_logged(cmd: &mut Command, log: &std::path::Path, timeout: Duration) -> Result<()> {
    let what = describe(cmd);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(timeout) {
        Ok(status) => status.with_context(|| format!("waiting for `{what}`"))?,
        Err(_) => {
            crate::process::kill_group(pid, rustix::process::Signal::KILL);
            let _ = waiter.join();
            bail!("`{what}` did not finish within {timeout:?}; killed");
        }
    };
    let _ = waiter.join();
    if !status.success() {
        bail!(
            "`{what}` failed ({status}); end of {}:\n{}",
            log.display(),
            indent(&tail(log, 30))
        );
    }
    Ok(())
}

/// The last `lines` lines of a text file (empty when unreadable).
pub fn tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `Command::new(program).args(args)`.
pub fn command<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_reports_failure_with_stderr() {
        let err = run(&mut command("sh", &["-c", "echo oops >&2; exit 3"])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("oops"), "{msg}");
        assert!(msg.contains("sh -c"), "{msg}");
    }

    #[test]
    fn run_times_out_and_kills() {
        let start = std::time::Instant::now();
        let err = run_timeout(
            &mut command("sh", &["-c", "sleep 30"]),
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(format!("{err}").contains("did not finish"));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn quoting() {
        assert_eq!(
            describe(&command("vtysh", &["-c", "show bgp summary json"])),
            "vtysh -c 'show bgp summary json'"
        );
    }
}
