//! metallb-rs binaries run as processes against the lab: where the built binaries are, a
//! kubeconfig that authenticates with a ServiceAccount token (so that the process runs
//! with the RBAC of `deploy/`), and a child process with its log in a file, stopped with
//! SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use crate::lab::{Lab, unique_suffix};

/// The built binary `name` of the main workspace (`cargo build -p <package>`): looked for
/// in `$CARGO_TARGET_DIR/debug`, next to the running test binary (`<target>/debug/deps/..`),
/// in the `target-dir` of the repository's `.cargo/config.toml`, and in `<repo>/target/debug`.
/// Fails with the places it looked and how to build it.
pub fn workspace_binary(repo: &Path, name: &str, package: &str) -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        dirs.push(PathBuf::from(t).join("debug"));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(debug) = exe.parent().and_then(Path::parent)
    {
        dirs.push(debug.to_path_buf());
    }
    if let Ok(cfg) = std::fs::read_to_string(repo.join(".cargo/config.toml")) {
        for line in cfg.lines() {
            let line = line.trim();
            if let Some(v) = line.strip_prefix("target-dir")
                && let Some(v) = v.trim_start().strip_prefix('=')
            {
                let v = v.trim().trim_matches('"');
                let p = PathBuf::from(v);
                dirs.push(if p.is_absolute() { p } else { repo.join(p) }.join("debug"));
            }
        }
    }
    dirs.push(repo.join("target/debug"));
    for d in &dirs {
        let p = d.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "the {name} binary is missing (looked in {}): build it with `cargo build -p {package}`",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A free TCP port on 127.0.0.1 (free when this returns; good enough for a test).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Lab {
    /// Writes a kubeconfig into `dir` that reaches the lab's API server (trusting the lab
    /// CA) and authenticates with a TokenRequest token of ServiceAccount `ns/name` only.
    pub async fn service_account_kubeconfig(
        &self,
        dir: &Path,
        ns: &str,
        name: &str,
    ) -> Result<PathBuf> {
        let token = self.token(ns, name, Duration::from_secs(3600)).await?;
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "lab", "cluster": {
                "server": self.server,
                "certificate-authority": self.ca_file(),
            }}],
            "users": [{ "name": name, "user": { "token": token } }],
            "contexts": [{ "name": "sa", "context": { "cluster": "lab", "user": name } }],
            "current-context": "sa",
        });
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("kubeconfig-{ns}-{name}"));
        std::fs::write(&path, serde_json::to_vec_pretty(&kubeconfig)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// A child process whose stdout and stderr go to a log file; killed when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// The log file (stdout and stderr).
    pub log: PathBuf,
    name: String,
}

impl Process {
    /// A fresh directory for one test's files (kubeconfigs, logs) under the system temp dir.
    pub fn scratch_dir(test: &str) -> Result<PathBuf> {
        let dir = std::env::temp_dir().join(format!("metallb-rs-e2e-{test}-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// Starts `bin` with `args` and `env` (added to this process's environment), logging
    /// to `<dir>/<name>.log`.
    pub fn spawn(
        bin: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        name: &str,
    ) -> Result<Process> {
        let log = dir.join(format!("{name}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Process {
            child,
            log,
            name: name.into(),
        })
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails (with its log) when the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited early with {status}; its log:\n{}",
                self.name,
                self.log_text()
            );
        }
        Ok(())
    }

    /// Sends SIGTERM and waits up to `timeout` for it to exit (then kills it and fails).
    pub async fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let pid = self
            .child
            .id()
            .with_context(|| format!("{} has already exited", self.name))?;
        let st = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .context("running kill -TERM")?;
        if !st.success() {
            bail!("kill -TERM {pid} failed: {st}");
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!(
                    "{} did not exit within {timeout:?} of SIGTERM; its log:\n{}",
                    self.name,
                    self.log_text()
                )
            }
        }
    }
}
