//! Running the controller binary (`cargo build -p controller` first) against the lab with
//! the deployed RBAC, isolated from the other tests that run in parallel:
//!
//! - its configuration namespace is a test namespace of its own, holding a copy of
//!   deploy/rbac's `metallb-rs:controller` Role (read from the API, so the deployed rules
//!   are what is tested), bound with the deployed ClusterRole to a `controller`
//!   ServiceAccount of that namespace, whose writes the audit log tells apart;
//! - it handles only Services of a `loadBalancerClass` of its own (`--lb-class`), so it
//!   never allocates the Services of other tests (and theirs never touch its Services).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::METALLB_NAMESPACE;
use crate::lab::{Lab, TestNamespace};
use crate::process::{Process, free_port, workspace_binary};
use crate::services::LbService;
use crate::wait_until;

const ROLE: &str = "metallb-rs:controller";

/// A test's controller setup: namespace, RBAC, ServiceAccount kubeconfig, class.
pub struct ControllerSetup {
    pub ns: TestNamespace,
    /// `metallb-rs:controller` or `metallb-rs:speaker`.
    pub role: String,
    /// The audit-log user of its ServiceAccount.
    pub user: String,
    /// Its `--lb-class`.
    pub lb_class: String,
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    client: kube::Client,
}

/// One running controller process and its health port.
pub struct RunningController {
    pub process: Process,
    pub health: u16,
}

impl RunningController {
    /// Waits (30 s) until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, name: &str) -> Result<()> {
        wait_ready(&mut self.process, name, self.health).await
    }

    /// `/readyz`'s status line.
    pub async fn readyz(&self) -> Result<String> {
        let r = http_get(self.health, "/readyz").await?;
        Ok(r.lines().next().unwrap_or_default().to_owned())
    }
}

impl Lab {
    /// Creates the namespace, RBAC and ServiceAccount of a controller for `test`.
    pub async fn controller_setup(&self, test: &str) -> Result<ControllerSetup> {
        self.component_setup(test, "controller").await
    }

    /// The same for a speaker: a namespace of its own with a copy of deploy/rbac's
    /// `metallb-rs:speaker` Role, bound with the deployed ClusterRole to a `speaker`
    /// ServiceAccount of that namespace.
    pub async fn speaker_setup(&self, test: &str) -> Result<ControllerSetup> {
        self.component_setup(test, "speaker").await
    }

    async fn component_setup(&self, test: &str, component: &str) -> Result<ControllerSetup> {
        let role = format!("metallb-rs:{component}");
        let role = role.as_str();
        let bin = workspace_binary(self.repo(), component, component)?;
        self.apply_deploy_rbac().await?;
        let test_ns = self.test_namespace(test).await?;
        let ns = test_ns.name.clone();
        let deployed = Api::<Role>::namespaced(self.client.clone(), METALLB_NAMESPACE)
            .get(role)
            .await?;
        let meta = || ObjectMeta {
            name: Some(role.into()),
            namespace: Some(ns.clone()),
            ..Default::default()
        };
        Api::<Role>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &Role {
                    metadata: meta(),
                    rules: deployed.rules,
                },
            )
            .await?;
        Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(component.into()),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await?;
        let user = format!("system:serviceaccount:{ns}:{component}");
        let subject = || Subject {
            kind: "ServiceAccount".into(),
            name: component.into(),
            namespace: Some(ns.clone()),
            ..Default::default()
        };
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &ClusterRoleBinding {
                    metadata: ObjectMeta {
                        name: Some(format!("{role}:{ns}")),
                        ..Default::default()
                    },
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: role.into(),
                    },
                    subjects: Some(vec![subject()]),
                },
            )
            .await?;
        Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &RoleBinding {
                    metadata: meta(),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: role.into(),
                    },
                    subjects: Some(vec![subject()]),
                },
            )
            .await?;
        self.wait_allowed(&user, "list", "ipaddresspools.metallb.io", Some(&ns))
            .await?;
        self.wait_allowed(&user, "create", "configurationstates.metallb.io", Some(&ns))
            .await?;
        if component == "controller" {
            self.wait_allowed(&user, "create", "leases.coordination.k8s.io", Some(&ns))
                .await?;
            self.wait_allowed(&user, "patch", "services/status", None)
                .await?;
        } else {
            self.wait_allowed(&user, "list", "nodes", None).await?;
        }
        let dir = Process::scratch_dir(test)?;
        let kubeconfig = self
            .service_account_kubeconfig(&dir, &ns, component)
            .await?;
        Ok(ControllerSetup {
            role: role.to_owned(),
            lb_class: format!("e2e.metallb-rs.io/{ns}"),
            ns: test_ns,
            user,
            bin,
            dir,
            kubeconfig,
            client: self.client.clone(),
        })
    }
}

impl ControllerSetup {
    /// The namespace name.
    pub fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// A LoadBalancer Service of this controller's class.
    pub fn service(&self, name: &str) -> LbService {
        LbService::new(name).class(&self.lb_class)
    }

    /// Starts a controller process named `name` (its log is `<dir>/<name>.log`) with
    /// `extra` arguments, and waits until `/readyz` answers 200.
    pub async fn start(&self, name: &str, extra: &[&str]) -> Result<RunningController> {
        self.start_as(name, extra, &self.kubeconfig).await
    }

    /// [`Self::start`] with another kubeconfig (e.g. [`Self::second_account`]'s).
    pub async fn start_as(
        &self,
        name: &str,
        extra: &[&str],
        kubeconfig: &std::path::Path,
    ) -> Result<RunningController> {
        let mut running = self.spawn_as(name, extra, kubeconfig)?;
        running.wait_ready(name).await?;
        Ok(running)
    }

    /// [`Self::start`] without waiting for `/readyz`.
    pub fn spawn(&self, name: &str, extra: &[&str]) -> Result<RunningController> {
        self.spawn_as(name, extra, &self.kubeconfig)
    }

    fn spawn_as(
        &self,
        name: &str,
        extra: &[&str],
        kubeconfig: &std::path::Path,
    ) -> Result<RunningController> {
        spawn_controller_process(
            &self.bin,
            &self.dir,
            kubeconfig,
            self.namespace(),
            &self.lb_class,
            name,
            extra,
        )
    }

    /// A second ServiceAccount `name` with the same RBAC (so the audit log tells
    /// two controllers apart): its kubeconfig and audit-log user.
    pub async fn second_account(&self, lab: &Lab, name: &str) -> Result<(PathBuf, String)> {
        let ns = self.ns.name.clone();
        Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await?;
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(ns.clone()),
            ..Default::default()
        };
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &ClusterRoleBinding {
                    metadata: ObjectMeta {
                        name: Some(format!("{ROLE}:{ns}:{name}")),
                        ..Default::default()
                    },
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: ROLE.into(),
                    },
                    subjects: Some(vec![subject.clone()]),
                },
            )
            .await?;
        Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &RoleBinding {
                    metadata: ObjectMeta {
                        name: Some(format!("{ROLE}:{name}")),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: ROLE.into(),
                    },
                    subjects: Some(vec![subject]),
                },
            )
            .await?;
        let user = format!("system:serviceaccount:{ns}:{name}");
        lab.wait_allowed(&user, "patch", "services/status", None)
            .await?;
        lab.wait_allowed(&user, "create", "leases.coordination.k8s.io", Some(&ns))
            .await?;
        let kubeconfig = lab.service_account_kubeconfig(&self.dir, &ns, name).await?;
        Ok((kubeconfig, user))
    }

    /// Starts a speaker process for `node` named `name` (log `<dir>/<name>.log`), with
    /// plain-HTTP metrics on a free port, and waits until `/readyz` answers 200 (its
    /// watches are ready). Returns it with its metrics port.
    pub async fn start_speaker(&self, name: &str, node: &str) -> Result<(RunningController, u16)> {
        let health = free_port()?;
        let metrics = free_port()?;
        let (health_s, metrics_s) = (health.to_string(), metrics.to_string());
        let args = [
            "--log-format",
            "text",
            "--node-name",
            node,
            "--health-probe-port",
            &health_s,
            "--port",
            &metrics_s,
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-insecure-http",
        ];
        let kubeconfig = self.kubeconfig.to_str().context("kubeconfig path")?;
        let mut process = Process::spawn(
            &self.bin,
            &args,
            &[
                ("KUBECONFIG", kubeconfig),
                ("METALLB_NAMESPACE", self.namespace()),
            ],
            &self.dir,
            name,
        )?;
        wait_ready(&mut process, name, health).await?;
        Ok((RunningController { process, health }, metrics))
    }

    /// Deletes the namespace and the ClusterRoleBindings.
    pub async fn delete(self) -> Result<()> {
        let crbs = Api::<ClusterRoleBinding>::all(self.client.clone());
        let prefix = format!("{}:{}", self.role, self.ns.name);
        if let Ok(list) = crbs.list(&Default::default()).await {
            for crb in list.items {
                let name = crb.metadata.name.unwrap_or_default();
                if name == prefix || name.starts_with(&format!("{prefix}:")) {
                    let _ = crbs.delete(&name, &DeleteParams::default()).await;
                }
            }
        }
        self.ns.delete().await
    }
}

/// Starts the controller `bin` as process `name` (log `<dir>/<name>.log`) for
/// `namespace` and `lb_class`, with `kubeconfig` and `extra` arguments (no metrics
/// server without `--port`, no webhook without `--webhook-port`), and waits until
/// `/readyz` answers 200.
pub async fn start_controller_process(
    bin: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    namespace: &str,
    lb_class: &str,
    name: &str,
    extra: &[&str],
) -> Result<RunningController> {
    let mut running =
        spawn_controller_process(bin, dir, kubeconfig, namespace, lb_class, name, extra)?;
    running.wait_ready(name).await?;
    Ok(running)
}

/// [`start_controller_process`] without waiting for `/readyz`.
pub fn spawn_controller_process(
    bin: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    namespace: &str,
    lb_class: &str,
    name: &str,
    extra: &[&str],
) -> Result<RunningController> {
    let health = free_port()?;
    let health_s = health.to_string();
    let mut args = vec![
        "--log-format",
        "text",
        "--health-probe-port",
        &health_s,
        "--health-probe-bind-address",
        "127.0.0.1",
        "--lb-class",
        lb_class,
    ];
    if !extra.contains(&"--port") {
        // No metrics server unless the test asks for one.
        args.extend_from_slice(&["--port", "0"]);
    }
    if !extra.contains(&"--webhook-port") {
        // No webhook unless the test asks for one (each would bind 9443 on the host).
        args.extend_from_slice(&["--webhook-mode", "disabled"]);
    }
    args.extend_from_slice(extra);
    let kubeconfig = kubeconfig.to_str().context("kubeconfig path")?;
    let process = Process::spawn(
        bin,
        &args,
        &[
            ("KUBECONFIG", kubeconfig),
            ("METALLB_NAMESPACE", namespace),
            ("METALLB_POD_NAME", name),
        ],
        dir,
        name,
    )?;
    Ok(RunningController { process, health })
}

/// Waits (30 s) until `process`'s `/readyz` on `health` answers 200; the error holds
/// its log.
async fn wait_ready(process: &mut Process, name: &str, health: u16) -> Result<()> {
    let ready = wait_until(
        &format!("{name} /readyz 200"),
        Duration::from_secs(30),
        || async {
            match http_get(health, "/readyz").await {
                Ok(r) if r.starts_with("HTTP/1.1 200 ") => Ok(()),
                Ok(r) => Err(r.lines().next().unwrap_or_default().to_owned()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    if let Err(e) = ready {
        process.check_running()?;
        return Err(e.context(format!("{name} log:\n{}", process.log_text())));
    }
    Ok(())
}

/// A plain HTTP/1.1 GET on 127.0.0.1 (the health probes, plain-HTTP metrics), asking
/// the server to close the connection after its answer.
pub async fn http_get(port: u16, path: &str) -> Result<String> {
    tokio::time::timeout(Duration::from_secs(5), http_get_unbounded(port, path))
        .await
        .map_err(|_| anyhow::anyhow!("GET 127.0.0.1:{port}{path}: no answer within 5 s"))?
}

async fn http_get_unbounded(port: u16, path: &str) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
