//! The lab's kube-apiserver as a fault: killed (SIGKILL: its clients get connection
//! refused, their watches break and must list again) and started again with its own
//! command line, as `lab/cluster` started it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use testkit::process::{Signal, kill_pid};

use crate::Lab;

/// The lab's kube-apiserver: its pid file and, to start it again, its command line.
pub struct ApiServer {
    pid_file: PathBuf,
    log: PathBuf,
    exe: PathBuf,
    args: Vec<String>,
}

impl ApiServer {
    pub fn new(lab: &Lab) -> Result<ApiServer> {
        let pid_file = lab.env.state_dir.join("run/kube-apiserver.pid");
        let pid = Self::read_pid(&pid_file)?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .skip(1)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        ensure!(
            args.iter().any(|a| a.starts_with("--secure-port=")),
            "pid {pid} is not the lab's kube-apiserver"
        );
        Ok(ApiServer {
            pid_file,
            log: lab.env.state_dir.join("logs/kube-apiserver.log"),
            exe,
            args,
        })
    }

    fn read_pid(f: &Path) -> Result<u32> {
        Ok(std::fs::read_to_string(f)
            .with_context(|| format!("reading {}", f.display()))?
            .trim()
            .parse()?)
    }

    pub fn pid(&self) -> Result<u32> {
        Self::read_pid(&self.pid_file)
    }

    /// The value of a `--name=value` argument of its command line.
    pub fn arg(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}=");
        self.args.iter().find_map(|a| a.strip_prefix(&prefix))
    }

    /// Sets (or adds) a `--name=value` argument for the next [`ApiServer::start`].
    pub fn set_arg(&mut self, name: &str, value: &str) {
        let prefix = format!("{name}=");
        self.args.retain(|a| !a.starts_with(&prefix));
        self.args.push(format!("{name}={value}"));
    }

    pub fn kill(&self) -> Result<()> {
        let pid = self.pid()?;
        kill_pid(pid, Signal::KILL);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}/exe")).exists() {
            ensure!(
                Instant::now() < deadline,
                "kube-apiserver {pid} did not die"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Its exe link goes (exit_mm) before its sockets close (exit_files): a start at
        // once could find the port still taken ("bind: address already in use") and
        // exit. Wait until the port is free.
        let addr = self.arg("--bind-address").unwrap_or("127.0.0.1").to_owned();
        let port: u16 = self
            .arg("--secure-port")
            .context("--secure-port")?
            .parse()
            .context("--secure-port")?;
        while std::net::TcpListener::bind((addr.as_str(), port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "kube-apiserver {pid} is gone but {addr}:{port} is still taken"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts it again as `lab/cluster` does (its own session, output appended to its
    /// log, the pid file rewritten so that `lab/cluster down` stops it).
    pub fn start(&self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = std::process::Command::new(&self.exe)
            .args(&self.args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting kube-apiserver")?;
        std::fs::write(&self.pid_file, format!("{}\n", child.id()))?;
        // Reaped by init once this process exits; it outlives the benchmark.
        std::mem::forget(child);
        Ok(())
    }
}

/// Waits until the API server answers a list (up to 120 s); returns when.
pub async fn wait_api(lab: &Lab) -> Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    loop {
        let r = tokio::time::timeout(
            Duration::from_secs(2),
            nsapi.list(&ListParams::default().limit(1)),
        )
        .await;
        if matches!(r, Ok(Ok(_))) {
            return Ok(Instant::now());
        }
        ensure!(
            Instant::now() < deadline,
            "the API server did not answer within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (up to 120 s) until the lab's kube-controller-manager works again after an API
/// server restart (its informers come back with client-go's back-off, 13-30 s and more
/// here): a throwaway namespace gets its `default` ServiceAccount. Tests after a restart
/// need it (Pod admission refuses Pods without it), so a test that restarts the API server
/// leaves only once this holds.
pub async fn wait_controller_manager(lab: &Lab) -> Result<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    let name = format!("e2e-kcm-back-{}", std::process::id());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    loop {
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            nsapi.create(&Default::default(), &ns),
        )
        .await;
        match r {
            Ok(Ok(_)) => break,
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => break,
            Ok(Err(e)) => {
                ensure!(
                    Instant::now() < deadline,
                    "creating namespace {name} after the API server restart: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => ensure!(
                Instant::now() < deadline,
                "creating namespace {name}: no answer within 5 s, 120 s after the restart"
            ),
        }
    }
    let sas =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(lab.client.clone(), &name);
    let r = loop {
        let got = tokio::time::timeout(Duration::from_secs(5), sas.get_opt("default")).await;
        if matches!(got, Ok(Ok(Some(_)))) {
            break Ok(started.elapsed());
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!(
                "the lab's kube-controller-manager made no `default` ServiceAccount in {name} \
                 within 120 s of the API server's restart"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        nsapi.delete(&name, &Default::default()),
    )
    .await;
    r
}
