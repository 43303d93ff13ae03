//! `metallbctl` as the kubectl plugin `kubectl metallb`: run through a link named
//! `kubectl-metallb` (as kubectl runs a plugin it finds on PATH), it behaves as
//! `metallbctl` and its usage lines say `kubectl metallb`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn metallbctl() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_metallbctl"))
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A directory holding `kubectl-metallb`, a link to the metallbctl binary; removed on drop.
struct PluginDir(PathBuf);

impl PluginDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "metallbctl-kubectl-plugin-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the plugin directory");
        std::os::unix::fs::symlink(metallbctl(), dir.join("kubectl-metallb"))
            .expect("link kubectl-metallb to metallbctl");
        PluginDir(dir)
    }

    fn plugin(&self) -> PathBuf {
        self.0.join("kubectl-metallb")
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(fixtures())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// The lines of `text` that start with `Usage: `.
fn usage_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("Usage: ")).collect()
}

#[test]
fn run_as_kubectl_metallb_its_usage_says_kubectl_metallb() {
    let dir = PluginDir::new();
    let out = run(&dir.plugin(), &["--help"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        usage_lines(&text(&out.stdout)),
        ["Usage: kubectl metallb <COMMAND>"],
        "{}",
        text(&out.stdout)
    );
    for (sub, usage) in [
        ("status", "Usage: kubectl metallb status [OPTIONS]"),
        (
            "validate",
            "Usage: kubectl metallb validate [OPTIONS] <PATH>...",
        ),
        ("explain", "Usage: kubectl metallb explain <COMMAND>"),
    ] {
        let out = run(&dir.plugin(), &[sub, "--help"]);
        assert!(out.status.success(), "{sub}: {out:?}");
        assert_eq!(
            usage_lines(&text(&out.stdout)),
            [usage],
            "{sub}:\n{}",
            text(&out.stdout)
        );
    }
    // A usage error names the plugin too, with metallbctl's exit status.
    let out = run(&dir.plugin(), &["no-such-command"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("Usage: kubectl metallb <COMMAND>"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn found_on_path_as_kubectl_runs_it() {
    // kubectl looks `kubectl-metallb` up on PATH and executes it: the same lookup here.
    let dir = PluginDir::new();
    let path: OsString = std::env::join_paths([dir.0.as_path()]).expect("PATH");
    let out = Command::new("kubectl-metallb")
        .arg("--help")
        .env("PATH", path)
        .output()
        .expect("kubectl-metallb found on PATH");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        usage_lines(&text(&out.stdout)),
        ["Usage: kubectl metallb <COMMAND>"]
    );
}

#[test]
fn the_plugin_behaves_as_metallbctl() {
    let dir = PluginDir::new();
    for args in [
        &["--version"][..],
        &["validate", "valid.yaml"],
        &["validate", "--output", "json", "valid"],
        &["validate", "no-such-file.yaml"],
    ] {
        let direct = run(metallbctl(), args);
        let plugin = run(&dir.plugin(), args);
        assert_eq!(plugin.status.code(), direct.status.code(), "{args:?}");
        assert_eq!(text(&plugin.stdout), text(&direct.stdout), "{args:?}");
        assert_eq!(text(&plugin.stderr), text(&direct.stderr), "{args:?}");
    }
    // Run under its own name, metallbctl still says metallbctl.
    let out = run(metallbctl(), &["--help"]);
    assert_eq!(
        usage_lines(&text(&out.stdout)),
        ["Usage: metallbctl <COMMAND>"]
    );
}
