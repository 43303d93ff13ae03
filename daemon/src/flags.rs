//! Flag handling both daemons share.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::ArgMatches;
use clap::parser::ValueSource;

/// Where a Pod finds its namespace.
pub const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The namespace of the configuration: `flag` (`--namespace` / `METALLB_NAMESPACE`)
/// when set, else the ServiceAccount's namespace (an error naming both when neither is
/// there, as MetalLB exits).
pub fn namespace(flag: &str) -> Result<String> {
    if !flag.is_empty() {
        return Ok(flag.to_owned());
    }
    let ns = std::fs::read_to_string(SA_NAMESPACE_FILE).with_context(|| {
        format!("no --namespace / METALLB_NAMESPACE, and reading {SA_NAMESPACE_FILE}")
    })?;
    Ok(ns.trim().to_owned())
}

/// A Go-style duration (`15s`, `1500ms`, `1m`), as client-go's flags take.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = config::api::Duration::parse(s).map_err(|e| format!("{e}"))?;
    let nanos = u64::try_from(d.as_nanos()).map_err(|_| format!("{s}: must not be negative"))?;
    Ok(Duration::from_nanos(nanos))
}

/// One warning for each flag of `ids` (clap argument ids) given on the command line
/// or through its variable: accepted for compatibility, no effect yet.
pub fn warn_no_effect(matches: &ArgMatches, ids: &[&str]) {
    for id in ids {
        if matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            let flag = format!("--{}", id.replace('_', "-"));
            tracing::warn!(
                flag,
                "flag accepted for compatibility; it has no effect yet"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn an_explicit_namespace_wins() {
        assert_eq!(namespace("metallb-system").unwrap(), "metallb-system");
    }
}
