use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::wait::wait_until;

/// `lab/audit-count` on the lab's audit log: counts writes per user, verb and
/// `resource[.group][/subresource]` (see its `--help`).
#[derive(Clone, Debug)]
pub struct Audit {
    script: PathBuf,
    log: PathBuf,
}

/// Filters of `lab/audit-count` (empty = everything).
#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    pub users: Vec<String>,
    pub verbs: Vec<String>,
    /// `resource[.group][/subresource]`; `services` also matches `services/status`.
    pub resources: Vec<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `ok` (2xx), `failed` or `all` (the default).
    pub status: Option<String>,
}

impl AuditFilter {
    /// The writes of one user.
    pub fn user(user: impl Into<String>) -> AuditFilter {
        AuditFilter {
            users: vec![user.into()],
            ..Default::default()
        }
    }

    /// Only the writes the server answered with `status` (`ok`, `failed`, `all`).
    pub fn status(mut self, status: &str) -> AuditFilter {
        self.status = Some(status.to_string());
        self
    }
}

/// One line of the count: `count` writes of `user` with `verb` on `resource`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditWrite {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub count: u64,
}

/// The output of `lab/audit-count --json`.
#[derive(Clone, Debug, Deserialize)]
pub struct AuditCount {
    pub total: u64,
    /// The mark at the end of what was counted.
    pub mark: u64,
    pub writes: Vec<AuditWrite>,
}

impl AuditCount {
    /// The rows of [`rows`](Self::rows) but for those of resources starting with
    /// `prefix` (e.g. `leases`: a leader renews its Lease every few seconds, which is
    /// not a write about anything it manages).
    pub fn rows_except(&self, prefix: &str) -> Vec<(String, String, u64)> {
        self.rows()
            .into_iter()
            .filter(|(_, resource, _)| !resource.starts_with(prefix))
            .collect()
    }

    /// `(verb, resource, count)` of every line, sorted: easy to compare with a literal.
    pub fn rows(&self) -> Vec<(String, String, u64)> {
        let mut r: Vec<_> = self
            .writes
            .iter()
            .map(|w| (w.verb.clone(), w.resource.clone(), w.count))
            .collect();
        r.sort();
        r
    }
}

impl Audit {
    pub fn new(script: PathBuf, log: PathBuf) -> Audit {
        Audit { script, log }
    }

    async fn run(&self, args: &[String]) -> Result<String> {
        let out = tokio::process::Command::new(&self.script)
            .arg("--log")
            .arg(&self.log)
            .args(args)
            .output()
            .await
            .with_context(|| format!("running {}", self.script.display()))?;
        if !out.status.success() {
            bail!(
                "lab/audit-count {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The current mark: writes logged after it are counted by `count(Some(mark), ..)`.
    pub async fn mark(&self) -> Result<u64> {
        let s = self.run(&["--mark".into()]).await?;
        s.trim()
            .parse()
            .with_context(|| format!("lab/audit-count --mark printed {s:?}"))
    }

    /// The writes matching `filter` logged after `since` (all, when `None`).
    pub async fn count(&self, since: Option<u64>, filter: &AuditFilter) -> Result<AuditCount> {
        let mut args = vec!["--json".to_string()];
        if let Some(m) = since {
            args.extend(["--since".into(), m.to_string()]);
        }
        for u in &filter.users {
            args.extend(["--user".into(), u.clone()]);
        }
        for v in &filter.verbs {
            args.extend(["--verb".into(), v.clone()]);
        }
        for r in &filter.resources {
            args.extend(["--resource".into(), r.clone()]);
        }
        if let Some(n) = &filter.namespace {
            args.extend(["--namespace".into(), n.clone()]);
        }
        if let Some(n) = &filter.name {
            args.extend(["--name".into(), n.clone()]);
        }
        if let Some(s) = &filter.status {
            args.extend(["--status".into(), s.clone()]);
        }
        let out = self.run(&args).await?;
        serde_json::from_str(&out)
            .with_context(|| format!("parsing lab/audit-count --json output: {out}"))
    }

    /// Waits until the count since `since` reaches `total` (the server logs an entry when
    /// the request completes, a moment after the client has its answer), then waits
    /// `settle` more and checks that no further write came: the count is then exact.
    pub async fn expect_total(
        &self,
        since: u64,
        filter: &AuditFilter,
        total: u64,
        settle: Duration,
    ) -> Result<AuditCount> {
        let what = format!("{total} audited writes matching {filter:?} since mark {since}");
        wait_until(&what, Duration::from_secs(10), || async {
            match self.count(Some(since), filter).await {
                Ok(c) if c.total >= total => Ok(()),
                Ok(c) => Err(format!("{} so far: {:?}", c.total, c.rows())),
                Err(e) => Err(format!("error: {e:#}")),
            }
        })
        .await?;
        tokio::time::sleep(settle).await;
        let c = self.count(Some(since), filter).await?;
        if c.total != total {
            bail!(
                "expected exactly {total} audited writes matching {filter:?} since mark {since}, \
                 found {}: {:?}",
                c.total,
                c.rows()
            );
        }
        Ok(c)
    }
}
