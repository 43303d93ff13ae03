//! Packet captures with tcpdump inside a namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::Result;
use crate::netns::Netns;
use crate::process::{NsChild, Signal};

/// A running `tcpdump -w` in a namespace. [`Capture::stop`] ends it (the
/// pcap file is complete afterwards); dropping the handle stops it too.
#[derive(Debug)]
pub struct Capture {
    child: Option<NsChild>,
    path: PathBuf,
    log: PathBuf,
}

impl Capture {
    /// Starts `tcpdump -i ifname -w path -U -n [filter]` in `ns` and returns
    /// once tcpdump says it is listening. `filter` words form a pcap filter
    /// expression (`["arp", "or", "icmp6"]`); empty captures everything.
    pub fn start(ns: &Netns, ifname: &str, path: &Path, filter: &[&str]) -> Result<Capture> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let logs = ns.state_dir().join("logs");
        crate::cleanup::create_dir(&logs)?;
        let log = logs.join(format!(
            "tcpdump-{}.log",
            path.file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let _ = std::fs::remove_file(&log);
        let mut c = ns.command("tcpdump");
        // -Z root: tcpdump would otherwise drop to user tcpdump and might not
        // be allowed to write `path`.
        c.args(["-i", ifname, "-w"])
            .arg(path)
            .args(["-U", "-n", "-Z", "root", "--immediate-mode"])
            .args(filter);
        let child = NsChild::spawn_logged(c, &log)?;
        let mut cap = Capture {
            child: Some(child),
            path: path.to_path_buf(),
            log,
        };
        let started = crate::wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            let text = std::fs::read_to_string(&cap.log).unwrap_or_default();
            if text.contains("listening on") {
                return Ok(true);
            }
            match cap.child.as_mut().map(|c| c.is_running()) {
                Some(true) => Err(format!("tcpdump not listening yet: {text}")),
                _ => Ok(false),
            }
        })
        .context("waiting for tcpdump to start")?;
        if !started {
            let text = std::fs::read_to_string(&cap.log).unwrap_or_default();
            cap.child = None;
            bail!("tcpdump on {ifname} in {} exited: {text}", ns.name());
        }
        Ok(cap)
    }

    /// The pcap file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops tcpdump (SIGINT, which flushes the file) and returns the path.
    /// Waits a quarter second first, so frames still on their way (or in
    /// the capture socket) are written.
    pub fn stop(mut self) -> Result<PathBuf> {
        if let Some(mut c) = self.child.take() {
            std::thread::sleep(Duration::from_millis(250));
            c.stop_with(Signal::INT, Duration::from_secs(10))?;
        }
        Ok(self.path.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.stop_with(Signal::INT, Duration::from_secs(5));
        }
    }
}

/// Decodes a pcap file as text (`tcpdump -r path -nn -e [filter]`), one
/// packet per line, link-layer header included.
pub fn read_pcap(path: &Path, filter: &[&str]) -> Result<String> {
    let mut c = std::process::Command::new("tcpdump");
    c.arg("-r").arg(path).args(["-nn", "-e"]).args(filter);
    crate::cmd::run(&mut c)
}
