//! What the bench binaries (`bench-bgp`, `bench-l2`, `bench-scale`) share: which
//! implementation a run measures, and where each one's binaries are.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};

/// The implementation a run measures: ours, or MetalLB v0.15.2 (`lab/build-metallb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    Ours,
    Metallb,
}

impl Impl {
    /// The name in figures, files and `--impl`.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Metallb => "metallb",
        }
    }

    /// The value of `--impl`: `ours`, `metallb`, `both`, and `none` where `allow_none`
    /// (a run that only generates objects).
    pub fn parse_list(value: &str, allow_none: bool) -> anyhow::Result<Vec<Impl>> {
        Ok(match value {
            "ours" => vec![Impl::Ours],
            "metallb" => vec![Impl::Metallb],
            "both" => vec![Impl::Ours, Impl::Metallb],
            "none" if allow_none => vec![],
            v if allow_none => bail!("--impl {v}: ours, metallb, both or none"),
            v => bail!("--impl {v}: ours, metallb or both"),
        })
    }
}

/// Our binaries: `--ours-bin` when given, else the release directory of
/// `CARGO_TARGET_DIR` (else the repository's `target/`).
pub fn ours_bin_dir(repo: &Path, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("release"),
        None => repo.join("target/release"),
    })
}

/// MetalLB's binaries: `--metallb-bin` when given, else `lab/build-metallb bindir`
/// (which fails, saying why, when they are not built).
pub fn metallb_bin_dir(repo: &Path, given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir);
    }
    let script = repo.join("lab/build-metallb");
    let out = std::process::Command::new(&script)
        .arg("bindir")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        out.status.success(),
        "{} bindir: {}: {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let dir = String::from_utf8(out.stdout)?;
    let dir = dir.lines().last().unwrap_or_default().trim();
    ensure!(
        !dir.is_empty(),
        "{} bindir printed nothing",
        script.display()
    );
    Ok(PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impl_lists() {
        assert_eq!(
            Impl::parse_list("both", false).unwrap(),
            [Impl::Ours, Impl::Metallb]
        );
        assert_eq!(Impl::parse_list("metallb", false).unwrap(), [Impl::Metallb]);
        assert!(Impl::parse_list("none", true).unwrap().is_empty());
        let e = Impl::parse_list("none", false).unwrap_err().to_string();
        assert_eq!(e, "--impl none: ours, metallb or both");
        assert!(Impl::parse_list("frr", true).is_err());
    }

    #[test]
    fn ours_given_wins() {
        let given = PathBuf::from("/opt/x");
        assert_eq!(ours_bin_dir(Path::new("/repo"), Some(given.clone())), given);
    }
}
