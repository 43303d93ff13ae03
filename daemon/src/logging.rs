//! MetalLB's logging flags and the subscriber they set up.

use clap::{Args, ValueEnum};

/// `--log-level` (MetalLB's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    All,
    Debug,
    Info,
    Warn,
    Error,
    None,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// The logging flags of every daemon.
#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log level.
    #[arg(long, value_enum, default_value = "info")]
    pub log_level: LogLevel,
    /// Log format: JSON lines, or text for humans.
    #[arg(long, value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

impl LogLevel {
    /// The tracing filter of the level.
    pub fn filter(self) -> &'static str {
        match self {
            LogLevel::All => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::None => "off",
        }
    }
}

/// Installs the global subscriber: to stderr, at the level, in the format asked for.
pub fn init(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::new(args.log_level.filter());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn metallb_spellings_parse() {
        let c = Cli::try_parse_from(["x", "--log-level", "all", "--log-format=text"]).unwrap();
        assert_eq!(
            (c.log.log_level, c.log.log_format),
            (LogLevel::All, LogFormat::Text)
        );
        assert_eq!(c.log.log_level.filter(), "trace");
        let c = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(
            (c.log.log_level, c.log.log_format),
            (LogLevel::Info, LogFormat::Json)
        );
        assert!(Cli::try_parse_from(["x", "--log-level", "loud"]).is_err());
    }
}
