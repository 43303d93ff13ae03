//! Go's `flag` package accepts `-flag`, `-flag=v`, `--flag` and `--flag=v`; clap only
//! the double-dash long form. MetalLB's manifests and chart use both spellings.

/// `args` with every single-dash long option (`-node-name=x`, `-log-level`) written
/// with two dashes. Single-letter options, `-` and values after `--` are kept.
pub fn go_style(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = false;
    for (i, a) in args.into_iter().enumerate() {
        if i == 0 || rest {
            out.push(a);
            continue;
        }
        if a == "--" {
            rest = true;
            out.push(a);
            continue;
        }
        let name_len = a
            .strip_prefix('-')
            .filter(|s| !s.starts_with('-'))
            .map(|s| s.split('=').next().unwrap_or_default().len());
        match name_len {
            Some(n) if n > 1 => out.push(format!("-{a}")),
            _ => out.push(a),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn single_dash_long_flags_get_two() {
        assert_eq!(
            go_style(v(&[
                "speaker",
                "-node-name=n1",
                "--port=7472",
                "-log-level",
                "debug",
                "-h",
                "-",
                "--",
                "-x"
            ])),
            v(&[
                "speaker",
                "--node-name=n1",
                "--port=7472",
                "--log-level",
                "debug",
                "-h",
                "-",
                "--",
                "-x"
            ])
        );
        // Values with `=` inside stay whole.
        assert_eq!(
            go_style(v(&["speaker", "-ml-labels=app=metallb"])),
            v(&["speaker", "--ml-labels=app=metallb"])
        );
    }
}
