use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use tokio::io::AsyncWriteExt;

use crate::audit::Audit;
use crate::{FIELD_MANAGER, METALLB_NAMESPACE};

/// The cluster name `lab/cluster` writes into its kubeconfig; anything else is refused.
const LAB_CLUSTER_NAME: &str = "metallb-rs-lab";

/// Where the lab is, from the same variables `lab/cluster` reads.
#[derive(Clone, Debug)]
pub struct LabEnv {
    /// The repository (the parent of `e2e/`).
    pub repo: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Which variable named the kubeconfig (for messages).
    pub kubeconfig_from: String,
    /// The lab's state directory (audit log, CA, kubectl cache).
    pub state_dir: PathBuf,
    /// `LAB_APISERVER_PORT`, when set: the kubeconfig must point at this port.
    pub apiserver_port: Option<u16>,
    /// `LAB_BIN_DIR`, when set (else `lab/build bindir`).
    pub bin_dir: Option<PathBuf>,
}

impl LabEnv {
    /// Reads `KUBECONFIG`, `LAB_STATE_DIR`, `LAB_APISERVER_PORT` and `LAB_BIN_DIR`.
    pub fn from_env() -> Result<LabEnv> {
        let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("e2e/ has a parent")
            .to_path_buf();
        let state_var = var("LAB_STATE_DIR").map(PathBuf::from);
        let (kubeconfig, kubeconfig_from) = match var("KUBECONFIG") {
            Some(k) => {
                let k = PathBuf::from(k);
                if k.to_string_lossy().contains(':') {
                    bail!(
                        "KUBECONFIG={} lists several files; the e2e tests need the lab's one \
                         (eval \"$(lab/cluster env)\" sets it)",
                        k.display()
                    );
                }
                (k, "KUBECONFIG".to_string())
            }
            None => match &state_var {
                Some(s) => (s.join("kubeconfig"), "LAB_STATE_DIR".to_string()),
                None => (
                    repo.join("lab/.state/kubeconfig"),
                    "the default lab/.state (neither KUBECONFIG nor LAB_STATE_DIR is set)".into(),
                ),
            },
        };
        let state_dir = match (&state_var, kubeconfig_from.as_str()) {
            (Some(s), "KUBECONFIG") => {
                if kubeconfig != s.join("kubeconfig") {
                    bail!(
                        "KUBECONFIG={} and LAB_STATE_DIR={} name different labs: unset one \
                         (lab/cluster env prints KUBECONFIG=$LAB_STATE_DIR/kubeconfig)",
                        kubeconfig.display(),
                        s.display()
                    );
                }
                s.clone()
            }
            (Some(s), _) => s.clone(),
            (None, "KUBECONFIG") => kubeconfig
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(".")),
            (None, _) => repo.join("lab/.state"),
        };
        let apiserver_port = match var("LAB_APISERVER_PORT") {
            Some(p) => Some(
                p.to_string_lossy()
                    .parse::<u16>()
                    .map_err(|e| anyhow!("LAB_APISERVER_PORT={p:?}: {e}"))?,
            ),
            None => None,
        };
        Ok(LabEnv {
            repo,
            kubeconfig,
            kubeconfig_from,
            state_dir,
            apiserver_port,
            bin_dir: var("LAB_BIN_DIR").map(PathBuf::from),
        })
    }

    /// The command that brings this lab up (with the variables of this run).
    pub fn up_command(&self) -> String {
        let mut vars = Vec::new();
        for v in [
            "LAB_STATE_DIR",
            "LAB_APISERVER_PORT",
            "LAB_ETCD_PORT",
            "LAB_ETCD_PEER_PORT",
            "LAB_KCM_PORT",
            "LAB_BIN_DIR",
        ] {
            if let Some(val) = std::env::var_os(v).filter(|v| !v.is_empty()) {
                vars.push(format!("{v}={}", val.to_string_lossy()));
            }
        }
        vars.push("lab/cluster up".into());
        vars.join(" ")
    }

    fn not_up(&self, why: impl std::fmt::Display) -> anyhow::Error {
        anyhow!(
            "THE LAB IS NOT UP: {why}\n\
             The e2e tests run against the lab's real API server and never skip.\n\
             Bring it up first (from {}):\n    {}\n\
             then run the tests with the same LAB_* variables (or after eval \"$(lab/cluster env)\").",
            self.repo.display(),
            self.up_command()
        )
    }
}

/// A connection to the running lab: the admin client and the lab's tools.
#[derive(Clone)]
pub struct Lab {
    pub env: LabEnv,
    /// The directory of the lab's kubectl (and kube-apiserver, etcd, ...).
    pub bin_dir: PathBuf,
    /// The API server URL, e.g. `https://127.0.0.1:16443`.
    pub server: String,
    config: Config,
    /// A client with the lab's admin credential (system:masters).
    pub client: Client,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("server", &self.server)
            .field("kubeconfig", &self.env.kubeconfig)
            .finish()
    }
}

impl Lab {
    /// Connects to the lab named by the environment ([`LabEnv::from_env`]). Fails with a
    /// message saying how to bring it up when it is not up.
    pub async fn connect() -> Result<Lab> {
        Lab::connect_to(LabEnv::from_env()?).await
    }

    /// Connects to the lab of `env`.
    pub async fn connect_to(env: LabEnv) -> Result<Lab> {
        if !env.kubeconfig.exists() {
            return Err(env.not_up(format_args!(
                "{} does not exist (kubeconfig from {})",
                env.kubeconfig.display(),
                env.kubeconfig_from
            )));
        }
        let kubeconfig = Kubeconfig::read_from(&env.kubeconfig)
            .with_context(|| format!("reading the lab kubeconfig {}", env.kubeconfig.display()))?;
        let server = check_lab_kubeconfig(&kubeconfig, &env)?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading the lab kubeconfig {}", env.kubeconfig.display()))?;
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(60));
        let client = Client::try_from(config.clone()).context("building the admin client")?;

        let readyz = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a valid request");
        match tokio::time::timeout(Duration::from_secs(10), client.request_text(readyz)).await {
            Ok(Ok(body)) if body.trim() == "ok" => {}
            Ok(Ok(body)) => {
                return Err(env.not_up(format_args!(
                    "the API server at {server} is not ready: /readyz says {body:?}"
                )));
            }
            Ok(Err(e)) => {
                return Err(env.not_up(format_args!(
                    "the API server at {server} (from {}) does not answer: {e}{}",
                    env.kubeconfig.display(),
                    cluster_status(&env)
                )));
            }
            Err(_) => {
                return Err(env.not_up(format_args!(
                    "the API server at {server} did not answer /readyz in 10 s{}",
                    cluster_status(&env)
                )));
            }
        }

        let bin_dir = match &env.bin_dir {
            Some(d) => d.clone(),
            None => {
                let out = std::process::Command::new(env.repo.join("lab/build"))
                    .arg("bindir")
                    .current_dir(&env.repo)
                    .stderr(Stdio::inherit())
                    .output()
                    .context("running lab/build bindir")?;
                if !out.status.success() {
                    bail!("lab/build bindir failed ({})", out.status);
                }
                let s = String::from_utf8_lossy(&out.stdout);
                PathBuf::from(s.lines().last().unwrap_or_default().trim())
            }
        };
        if !bin_dir.join("kubectl").is_file() {
            bail!(
                "the lab's kubectl is missing: {} (run lab/build)",
                bin_dir.join("kubectl").display()
            );
        }
        Ok(Lab {
            env,
            bin_dir,
            server,
            config,
            client,
        })
    }

    /// The admin client configuration (a copy), e.g. to build clients with other
    /// credentials.
    pub fn config(&self) -> Config {
        self.config.clone()
    }

    /// The repository root.
    pub fn repo(&self) -> &Path {
        &self.env.repo
    }

    /// The lab's CA certificate (PEM file).
    pub fn ca_file(&self) -> PathBuf {
        self.env.state_dir.join("pki/ca.crt")
    }

    /// The audit-log helper of this lab.
    pub fn audit(&self) -> Audit {
        Audit::new(
            self.env.repo.join("lab/audit-count"),
            self.env.state_dir.join("audit/audit.log"),
        )
    }

    /// Runs the lab's kubectl with the admin kubeconfig, in the repository root (so that
    /// `deploy/...` paths work), with `stdin` as input. Does not fail on a non-zero exit:
    /// see [`KubectlOutput::ok`].
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<KubectlOutput> {
        let mut cmd = tokio::process::Command::new(self.bin_dir.join("kubectl"));
        cmd.arg("--kubeconfig")
            .arg(&self.env.kubeconfig)
            .args(args)
            .env("KUBECACHEDIR", self.env.state_dir.join("kube-cache"))
            .current_dir(&self.env.repo)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let shown = format!("kubectl {}", args.join(" "));
        let mut child = cmd.spawn().with_context(|| format!("starting {shown}"))?;
        if let Some(input) = stdin {
            let mut w = child.stdin.take().expect("piped stdin");
            w.write_all(input.as_bytes()).await?;
            drop(w);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .map_err(|_| anyhow!("{shown} did not finish in 120 s"))??;
        Ok(KubectlOutput {
            cmd: shown,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs kubectl and returns its stdout; fails (with its stderr) on a non-zero exit.
    pub async fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        Ok(self.kubectl(args, stdin).await?.ok()?.stdout)
    }

    /// Applies `deploy/namespace.yaml` and `deploy/rbac/` (server-side, idempotent), so
    /// that the `controller` and `speaker` ServiceAccounts and their roles exist.
    pub async fn apply_deploy_rbac(&self) -> Result<()> {
        self.kubectl_ok(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                FIELD_MANAGER,
                "-f",
                "deploy/namespace.yaml",
                "-f",
                "deploy/rbac/",
            ],
            None,
        )
        .await
        .context("applying deploy/namespace.yaml and deploy/rbac/ to the lab")?;
        // One permission from each Role and ClusterRole, so the authorizer has them all.
        let sa = |n: &str| format!("system:serviceaccount:{METALLB_NAMESPACE}:{n}");
        let ns = Some(METALLB_NAMESPACE);
        self.wait_allowed(
            &sa("speaker"),
            "create",
            "servicebgpstatuses.metallb.io",
            ns,
        )
        .await?;
        self.wait_allowed(
            &sa("speaker"),
            "list",
            "endpointslices.discovery.k8s.io",
            None,
        )
        .await?;
        self.wait_allowed(
            &sa("controller"),
            "patch",
            "ipaddresspools.metallb.io/status",
            ns,
        )
        .await?;
        self.wait_allowed(&sa("controller"), "patch", "services/status", None)
            .await?;
        Ok(())
    }

    /// Creates a namespace `e2e-<test>-<suffix>` for one test, labelled with the test.
    pub async fn test_namespace(&self, test: &str) -> Result<TestNamespace> {
        let name = format!("e2e-{test}-{}", unique_suffix());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("e2e.metallb-rs/test".to_string(), test.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace {
            name,
            client: self.client.clone(),
        })
    }

    /// An API of a metallb.io kind (by its kind name, at its storage version) in `ns`.
    pub fn metallb(&self, client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), ns, &metallb_resource(kind))
    }
}

/// The [`ApiResource`] of a metallb.io kind at its storage version (BGPPeer v1beta2, the
/// others v1beta1).
pub fn metallb_resource(kind: &str) -> ApiResource {
    let version = if kind == "BGPPeer" {
        "v1beta2"
    } else {
        "v1beta1"
    };
    let lower = kind.to_lowercase();
    let plural = if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("metallb.io", version, kind), &plural)
}

/// Checks that a kubeconfig is a metallb-rs lab's (cluster name, 127.0.0.1, port) and
/// returns its server URL: the tests write to the cluster, never to another one.
fn check_lab_kubeconfig(kc: &Kubeconfig, env: &LabEnv) -> Result<String> {
    let ctx_name = kc
        .current_context
        .clone()
        .ok_or_else(|| anyhow!("{} has no current-context", env.kubeconfig.display()))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| anyhow!("{} lacks its context {ctx_name}", env.kubeconfig.display()))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .ok_or_else(|| anyhow!("{} lacks cluster {}", env.kubeconfig.display(), ctx.cluster))?;
    let server = cluster
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap_or_default();
    let uri: http::Uri = server
        .parse()
        .with_context(|| format!("server {server:?} in {}", env.kubeconfig.display()))?;
    if cluster.name != LAB_CLUSTER_NAME || uri.host() != Some("127.0.0.1") {
        bail!(
            "refusing {} (from {}): its cluster is {:?} at {server}, not a metallb-rs lab \
             ({LAB_CLUSTER_NAME} on 127.0.0.1). The e2e tests write to the cluster; point \
             KUBECONFIG at the lab's (eval \"$(lab/cluster env)\") or unset it.",
            env.kubeconfig.display(),
            env.kubeconfig_from,
            cluster.name
        );
    }
    if let Some(port) = env.apiserver_port
        && uri.port_u16() != Some(port)
    {
        bail!(
            "LAB_APISERVER_PORT={port} but {} points at {server}: the variables name another \
             lab than the kubeconfig (set LAB_STATE_DIR too, or unset KUBECONFIG)",
            env.kubeconfig.display()
        );
    }
    Ok(server)
}

fn cluster_status(env: &LabEnv) -> String {
    match std::process::Command::new(env.repo.join("lab/cluster"))
        .arg("status")
        .current_dir(&env.repo)
        .output()
    {
        Ok(out) => format!(
            "\nlab/cluster status says:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("\n(lab/cluster status could not run: {e})"),
    }
}

/// What a kubectl run printed.
#[derive(Debug)]
pub struct KubectlOutput {
    pub cmd: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl KubectlOutput {
    /// Fails with the command, its exit status and its output unless it succeeded.
    pub fn ok(self) -> Result<KubectlOutput> {
        if self.status.success() {
            Ok(self)
        } else {
            bail!(
                "{} failed ({}):\n{}{}",
                self.cmd,
                self.status,
                self.stderr,
                self.stdout
            )
        }
    }
}

/// A namespace of one test. [`TestNamespace::delete`] removes it (the lab's namespace
/// controller deletes what is in it); one left behind by a failed test goes with
/// `lab/cluster down`.
#[derive(Clone)]
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Deletes the namespace, after releasing the harness's terminating backend Pods
    /// (their finalizer would keep the namespace Terminating).
    pub async fn delete(self) -> Result<()> {
        crate::services::release_backends(&self.client, &self.name).await?;
        Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

/// A short suffix, unique per process and call, valid in Kubernetes names (lower-case
/// base 36).
pub fn unique_suffix() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default() as u64;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) as u64;
    let mut x = (nanos / 1000) ^ ((std::process::id() as u64) << 24) ^ (n << 40);
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut s = String::new();
    for _ in 0..7 {
        let d = (x % 36) as u32;
        s.push(char::from_digit(d, 36).expect("digit"));
        x /= 36;
    }
    s
}
