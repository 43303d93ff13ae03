//! Reading printer columns: the server's Table (meta.k8s.io/v1) and kubectl's text output.

use anyhow::{Context, Result, bail};
use kube::Client;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct Table {
    #[serde(rename = "columnDefinitions")]
    pub columns: Vec<ColumnDefinition>,
    pub rows: Vec<Row>,
}

#[derive(Debug, Deserialize)]
pub struct ColumnDefinition {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub priority: i32,
}

#[derive(Debug, Deserialize)]
pub struct Row {
    pub cells: Vec<Value>,
}

/// The server-side Table of one object, as kubectl asks for it.
pub async fn get_table(client: &Client, path: &str) -> Result<Table> {
    let req = http::Request::get(path)
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .with_context(|| format!("GET {path} as a Table"))?;
    serde_json::from_str(&text).with_context(|| format!("parsing the Table of {path}: {text}"))
}

/// The value of a simple JSONPath (`.a.b.c`, what the CRDs' printer columns use).
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Result<Option<&'a Value>> {
    let Some(rest) = path.strip_prefix('.') else {
        bail!("unsupported printer column JSONPath {path:?} (only .a.b.c)");
    };
    let mut v = obj;
    for part in rest.split('.') {
        if part.is_empty() || part.contains(['[', ']', '*', '@', '?']) {
            bail!("unsupported printer column JSONPath {path:?} (only .a.b.c)");
        }
        match v.get(part) {
            Some(x) => v = x,
            None => return Ok(None),
        }
    }
    Ok(Some(v))
}

/// The cell the server computes for a column of `type_` whose JSONPath yields `v`: scalar
/// values as they are, lists and objects as compact JSON text.
pub fn expected_cell(v: &Value, type_: &str) -> Value {
    match (v, type_) {
        (Value::String(_) | Value::Bool(_) | Value::Number(_), _) if type_ != "string" => v.clone(),
        (Value::String(_), _) => v.clone(),
        _ => Value::String(v.to_string()),
    }
}

/// How kubectl prints a Table cell.
pub fn rendered(cell: &Value) -> String {
    match cell {
        Value::String(s) => s.clone(),
        Value::Null => "<none>".into(),
        other => other.to_string(),
    }
}

/// kubectl's text table: the header names and each row's cells, cut at the columns'
/// start positions (kubectl aligns columns, separated by at least 3 spaces; names may
/// contain single spaces).
pub fn parse_text_table(out: &str) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().context("kubectl printed nothing")?;
    let bytes = header.as_bytes();
    let mut starts = Vec::new();
    for i in 0..bytes.len() {
        let start = bytes[i] != b' '
            && (i == 0 || (i >= 2 && bytes[i - 1] == b' ' && bytes[i - 2] == b' '));
        if start {
            starts.push(i);
        }
    }
    let cut = |line: &str| -> Vec<String> {
        starts
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let e = starts
                    .get(k + 1)
                    .copied()
                    .unwrap_or(usize::MAX)
                    .min(line.len());
                line.get(s.min(line.len())..e)
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
            .collect()
    };
    let names = cut(header);
    let rows = lines.map(cut).collect();
    Ok((names, rows))
}

/// Whether an age as kubectl prints it (`0s`, `12m`, `3h4m`, `2d`).
pub fn is_age(s: &str) -> bool {
    !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
}
