//! Child processes that are killed with their whole process tree on drop.
//!
//! Every child is started as the leader of a new process group; stopping it
//! signals the group, so helpers it started (a shell's children, for example)
//! go too. Daemons that detach into their own session (FRR with `-d`, BIRD)
//! are not children: they are stopped through their pid files.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process, kill_process_group, test_kill_process};

use crate::Result;
use crate::cmd::describe;

/// How long a stopped process gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Sends `sig` to the process group `pgid`; errors (already gone) are ignored.
pub fn kill_group(pgid: u32, sig: Signal) {
    if let Some(p) = pid_of(pgid) {
        let _ = kill_process_group(p, sig);
    }
}

/// Sends `sig` to one process; errors (already gone) are ignored.
pub fn kill_pid(pid: u32, sig: Signal) {
    if let Some(p) = pid_of(pid) {
        let _ = kill_process(p, sig);
    }
}

/// Whether `pid` names a live (non-zombie) process.
pub fn pid_alive(pid: u32) -> bool {
    let Some(p) = pid_of(pid) else { return false };
    if test_kill_process(p).is_err() {
        return false;
    }
    // A zombie still answers kill(0); it is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// The start time of `pid` (clock ticks since boot, field 22 of
/// `/proc/<pid>/stat`), to tell a process from a later one with the same pid.
pub fn pid_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts with field 3 (state); start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// SIGTERM to `pid`, then SIGKILL after `grace`; returns once it is gone
/// (or after a further second). Returns whether it is gone.
pub fn stop_pid(pid: u32, grace: Duration) -> bool {
    if !pid_alive(pid) {
        return true;
    }
    kill_pid(pid, Signal::TERM);
    if wait_pid_gone(pid, grace) {
        return true;
    }
    kill_pid(pid, Signal::KILL);
    wait_pid_gone(pid, Duration::from_secs(1))
}

/// Polls until `pid` is gone or `timeout` passes.
pub fn wait_pid_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !pid_alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a pid file (a decimal pid, possibly followed by a newline).
pub fn read_pid_file(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A running child process (usually `ip netns exec NS ...`) that is killed,
/// with its process group, when dropped.
#[derive(Debug)]
pub struct NsChild {
    child: Option<Child>,
    pid: u32,
    what: String,
    log: Option<PathBuf>,
    status: Option<ExitStatus>,
}

impl NsChild {
    /// Starts `cmd` as the leader of a new process group, stdin closed.
    /// Stdout/stderr are whatever `cmd` was given (inherited by default).
    pub fn spawn(mut cmd: Command) -> Result<NsChild> {
        let what = describe(&cmd);
        cmd.process_group(0).stdin(Stdio::null());
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{what}`"))?;
        Ok(NsChild {
            pid: child.id(),
            child: Some(child),
            what,
            log: None,
            status: None,
        })
    }

    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn_logged(mut cmd: Command, log: &Path) -> Result<NsChild> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        cmd.stdout(file.try_clone()?).stderr(file);
        let mut c = NsChild::spawn(cmd)?;
        c.log = Some(log.to_path_buf());
        Ok(c)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The command line, for messages.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// Where stdout/stderr go, when started with [`NsChild::spawn_logged`].
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// The log's content so far (empty without a log).
    pub fn log(&self) -> String {
        self.log
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The exit status if the child has exited (reaping it).
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let Some(child) = self.child.as_mut() else {
            return Ok(self.status);
        };
        let s = child.try_wait()?;
        if s.is_some() {
            self.status = s;
        }
        Ok(s)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for the child to exit by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` to the child's process group.
    pub fn signal(&self, sig: Signal) {
        kill_group(self.pid, sig);
    }

    /// Sends `sig` to the group, waits up to `grace`, then SIGKILLs the group
    /// and reaps the child. Returns the exit status.
    pub fn stop_with(&mut self, sig: Signal, grace: Duration) -> Result<ExitStatus> {
        if self.status.is_none() {
            kill_group(self.pid, sig);
            if self.wait_timeout(grace)?.is_none() {
                kill_group(self.pid, Signal::KILL);
            }
        }
        // Stragglers of the group (children that ignored the signal).
        kill_group(self.pid, Signal::KILL);
        let status = match self.child.as_mut() {
            Some(child) => {
                let s = child.wait()?;
                self.status = Some(s);
                s
            }
            None => self.status.context("child already gone")?,
        };
        self.child = None;
        Ok(status)
    }

    /// SIGTERM, up to [`STOP_GRACE`], then SIGKILL; returns the exit status.
    pub fn stop(mut self) -> Result<ExitStatus> {
        self.stop_with(Signal::TERM, STOP_GRACE)
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop_with(Signal::TERM, Duration::from_secs(2));
        }
    }
}

/// The tokio flavour of [`NsChild`]: a child started as a process-group
/// leader; dropping it SIGKILLs the group (tokio reaps it), and
/// [`AsyncNsChild::stop`] stops it gracefully.
#[derive(Debug)]
pub struct AsyncNsChild {
    child: tokio::process::Child,
    pid: u32,
    what: String,
    done: bool,
}

impl AsyncNsChild {
    /// Starts `cmd` (stdin closed) as the leader of a new process group.
    pub fn spawn(mut cmd: tokio::process::Command) -> Result<AsyncNsChild> {
        let what = describe(cmd.as_std());
        cmd.process_group(0).stdin(Stdio::null()).kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{what}`"))?;
        let pid = child.id().context("child has no pid")?;
        Ok(AsyncNsChild {
            child,
            pid,
            what,
            done: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn describe(&self) -> &str {
        &self.what
    }

    /// The child itself (for its pipes, or to wait on it).
    pub fn child_mut(&mut self) -> &mut tokio::process::Child {
        &mut self.child
    }

    pub fn signal(&self, sig: Signal) {
        kill_group(self.pid, sig);
    }

    /// SIGTERM to the group, up to `grace`, then SIGKILL; returns the status.
    pub async fn stop(mut self, grace: Duration) -> Result<ExitStatus> {
        kill_group(self.pid, Signal::TERM);
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(s) => s?,
            Err(_) => {
                kill_group(self.pid, Signal::KILL);
                self.child.wait().await?
            }
        };
        kill_group(self.pid, Signal::KILL);
        self.done = true;
        Ok(status)
    }
}

impl Drop for AsyncNsChild {
    fn drop(&mut self) {
        if !self.done {
            kill_group(self.pid, Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_kills_the_whole_group() {
        let dir = std::env::temp_dir().join(format!("testkit-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pidfile = dir.join("grandchild.pid");
        // The shell starts a grandchild and writes its pid.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "sleep 60 & echo $! > \"$1\"; wait",
            "sh",
            pidfile.to_str().unwrap(),
        ]);
        let child = NsChild::spawn(cmd).unwrap();
        let gc = crate::wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            read_pid_file(&pidfile).ok_or_else(|| "no pid yet".to_string())
        })
        .unwrap();
        assert!(pid_alive(gc));
        drop(child);
        assert!(
            wait_pid_gone(gc, Duration::from_secs(5)),
            "grandchild survived"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn start_time_is_read() {
        assert!(pid_start_time(std::process::id()).is_some());
    }
}
