//! The process-wide (and cross-process) lock that serialises every test
//! using namespaces or timing, even across test binaries run in parallel.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::Result;

/// The lock file (an `flock` on it is the lock).
pub const LOCK_PATH: &str = "/run/metallb-testkit.lock";
/// Who holds the lock (pid and test name), for messages while waiting.
pub const HOLDER_PATH: &str = "/run/metallb-testkit.holder";

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Held for the duration of a test; dropping it lets the next one run.
#[derive(Debug)]
pub struct SerialGuard {
    _file: File,
    _thread: MutexGuard<'static, ()>,
}

/// Takes the serial lock: checks that we are root, waits for the lock
/// (threads of this process and other processes alike; up to
/// `TESTKIT_LOCK_TIMEOUT` seconds, default 1800), then removes what crashed
/// runs left behind ([`crate::cleanup_stale`]).
///
/// Do not call it twice on one thread (it would wait for itself).
pub fn serial() -> Result<SerialGuard> {
    crate::require_root()?;
    let thread = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .with_context(|| format!("cannot open {LOCK_PATH}"))?;
    let timeout = std::env::var("TESTKIT_LOCK_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let start = Instant::now();
    let mut said = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(HOLDER_PATH).unwrap_or_default();
                if start.elapsed() > timeout {
                    bail!(
                        "the testkit lock {LOCK_PATH} is still held after {timeout:?} by: {}",
                        holder.trim()
                    );
                }
                if !said {
                    eprintln!(
                        "testkit: waiting for {LOCK_PATH}, held by: {}",
                        holder.trim()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {LOCK_PATH}"));
            }
        }
    }
    let me = format!(
        "pid {} ({})\n",
        std::process::id(),
        std::thread::current().name().unwrap_or("?")
    );
    if let Ok(mut f) = File::create(HOLDER_PATH) {
        let _ = f.write_all(me.as_bytes());
    }
    crate::cleanup::cleanup_stale().context("cleaning up what earlier runs left behind")?;
    Ok(SerialGuard {
        _file: file,
        _thread: thread,
    })
}
