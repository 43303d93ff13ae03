//! `metallbctl validate`: load files, run `config::parse` on them (what the
//! daemons do), and check every object against its CRD schema (what
//! `kubectl apply` would be told by the API server).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use config::load::{LoadError, LoadOptions, Loaded, LoadedObject, Loader, Note, Origin};
use config::{Config, ConfigError, ObjectRef, Summary};
use serde::Serialize;

/// Exit status of a valid configuration.
pub const EXIT_VALID: u8 = 0;
/// Exit status of an invalid configuration.
pub const EXIT_INVALID: u8 = 1;
/// Exit status when the input cannot be loaded.
pub const EXIT_LOAD_ERROR: u8 = 2;

/// `metallbctl validate` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Namespace MetalLB runs in: objects without a namespace are put in it,
    /// and namespaced objects of other namespaces are ignored, as the daemons
    /// ignore them.
    #[arg(short = 'n', long, default_value = config::api::DEFAULT_NAMESPACE)]
    namespace: String,

    /// Unknown fields are errors, as with kubectl's strict field validation
    /// (without it they are warnings).
    #[arg(long)]
    strict: bool,

    /// Output format: `text`, or one `json` object on stdout.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,

    /// Files or directories (read recursively: *.yaml, *.yml, *.json, in
    /// name order); `-` reads standard input.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Human-readable text.
    Text,
    /// One JSON object.
    Json,
}

/// Runs `validate`; the exit status is documented in `--help`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut loader = Loader::new(LoadOptions {
        namespace: args.namespace.clone(),
        strict: args.strict,
        ..LoadOptions::default()
    });
    for path in &args.paths {
        if let Err(e) = add(&mut loader, path) {
            report_load_error(args.output, &e)?;
            return Ok(ExitCode::from(EXIT_LOAD_ERROR));
        }
    }
    let loaded = loader.finish();
    // Selector combinations that cannot overlap: warnings, when Nodes are given.
    let parsed = config::parse(&loaded.resources).map(|mut c| {
        let extra = config::overlap::selector_warnings(&c, &loaded.resources.nodes);
        c.warnings.extend(extra);
        c
    });
    let violations = schema_violations(&loaded.objects);
    let valid = parsed.is_ok() && violations.is_empty();
    match args.output {
        Output::Text => print_text(&loaded, &parsed, &violations),
        Output::Json => print_json(&loaded, &parsed, &violations),
    }
    .context("writing the report")?;
    Ok(ExitCode::from(if valid {
        EXIT_VALID
    } else {
        EXIT_INVALID
    }))
}

pub(crate) fn add(loader: &mut Loader, path: &Path) -> Result<(), LoadError> {
    if path.as_os_str() == "-" {
        loader.add_reader("<stdin>", io::stdin().lock())
    } else {
        loader.add_path(path)
    }
}

/// Something `kubectl apply` would have rejected in one object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Violation {
    /// The object.
    object: ObjectRef,
    /// Its apiVersion.
    api_version: String,
    /// Where it is.
    at: Origin,
    /// The API server's complaint.
    message: String,
}

/// Every schema violation of every object, in input order.
///
/// Unknown fields are left out: the loader reports them already (warnings,
/// or errors with `--strict`).
fn schema_violations(objects: &[LoadedObject]) -> Vec<Violation> {
    let mut out = Vec::new();
    for obj in objects {
        for message in config::crd::check_object(&obj.api_version, &obj.kind, &obj.value) {
            if message.starts_with("unknown field ") {
                continue;
            }
            out.push(Violation {
                object: ObjectRef::new(&obj.kind, &obj.name),
                api_version: obj.api_version.clone(),
                at: obj.at.clone(),
                message,
            });
        }
    }
    out
}

fn print_text(
    loaded: &Loaded,
    parsed: &Result<Config, ConfigError>,
    violations: &[Violation],
) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let mut warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    match parsed {
        Ok(config) if violations.is_empty() => {
            writeln!(out, "configuration is valid")?;
            writeln!(out, "{}", config.summary())?;
        }
        Ok(config) => {
            writeln!(out, "configuration is invalid")?;
            writeln!(
                out,
                "MetalLB accepts it ({}), but the API server would reject the objects listed \
                 under \"schema violations\", so they would never reach the cluster",
                config.summary()
            )?;
        }
        Err(e) => {
            writeln!(out, "configuration is invalid")?;
            if let Some(object) = &e.object {
                writeln!(out, "object: {object}")?;
            }
            writeln!(out, "error: {}", e.message)?;
            if e.transient {
                writeln!(
                    out,
                    "transient: yes — it resolves once the referenced object exists"
                )?;
            } else {
                writeln!(out, "transient: no")?;
            }
        }
    }
    if let Ok(config) = parsed {
        warnings.extend(config.warnings.iter().map(ToString::to_string));
    }
    section(&mut out, "warnings", warnings)?;
    section(
        &mut out,
        "notes",
        loaded.notes.iter().map(ToString::to_string).collect(),
    )?;
    section(
        &mut out,
        "schema violations (kubectl apply would reject these objects)",
        violations
            .iter()
            .map(|v| format!("{} ({}): {}", v.object, v.at.short(), v.message))
            .collect(),
    )?;
    out.flush()
}

fn section(out: &mut impl Write, heading: &str, lines: Vec<String>) -> io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    writeln!(out, "{heading}:")?;
    for line in lines {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// The `--output json` report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    valid: bool,
    summary: Option<Summary>,
    warnings: Vec<JsonWarning>,
    notes: &'a [Note],
    error: Option<&'a ConfigError>,
    schema_violations: &'a [Violation],
    load_error: Option<serde_json::Value>,
}

/// A loader warning (with `at` and `path`) or a configuration warning.
#[derive(Debug, Serialize)]
struct JsonWarning {
    object: ObjectRef,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<Origin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
}

fn print_json(
    loaded: &Loaded,
    parsed: &Result<Config, ConfigError>,
    violations: &[Violation],
) -> io::Result<()> {
    let mut warnings: Vec<JsonWarning> = loaded
        .warnings
        .iter()
        .map(|w| JsonWarning {
            object: ObjectRef::new(&w.kind, &w.name),
            message: format!("unknown field {}", config::gofmt::quote(&w.path)),
            at: Some(w.at.clone()),
            path: Some(w.path.clone()),
        })
        .collect();
    if let Ok(config) = parsed {
        warnings.extend(config.warnings.iter().map(|w| JsonWarning {
            object: w.object.clone(),
            message: w.message.clone(),
            at: None,
            path: None,
        }));
    }
    write_json(&Report {
        valid: parsed.is_ok() && violations.is_empty(),
        summary: parsed.as_ref().ok().map(Config::summary),
        warnings,
        notes: &loaded.notes,
        error: parsed.as_ref().err(),
        schema_violations: violations,
        load_error: None,
    })
}

fn report_load_error(output: Output, e: &LoadError) -> anyhow::Result<()> {
    match output {
        Output::Text => {
            eprintln!("metallbctl: {e}");
            Ok(())
        }
        Output::Json => {
            let mut detail = serde_json::to_value(e).context("serialising the error")?;
            if let Some(map) = detail.as_object_mut() {
                map.insert("display".to_owned(), e.to_string().into());
            }
            write_json(&Report {
                valid: false,
                summary: None,
                warnings: Vec::new(),
                notes: &[],
                error: None,
                schema_violations: &[],
                load_error: Some(detail),
            })
            .context("writing the report")
        }
    }
}

fn write_json(report: &Report<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, report)?;
    writeln!(out)?;
    out.flush()
}
