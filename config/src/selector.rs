//! Kubernetes label selectors exactly as k8s.io/apimachinery (v0.37, the
//! `KUBERNETES_VERSION` of this workspace) implements them:
//! `metav1.LabelSelectorAsSelector`, `labels.NewRequirement` and its
//! validation messages, `labels.Selector.String()` and `Matches`, plus the Go
//! renderings of a `metav1.LabelSelector` that MetalLB puts into its error
//! messages and MetalLB's `validateLabelSelectorDuplicate`.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::{Serialize, Serializer};

use crate::gofmt::quote;

/// An invalid label selector, with apimachinery's error text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// The operators a parsed requirement can have (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    Equals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One parsed requirement (`labels.Requirement`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted, so that equal selectors compare equal; duplicates are kept
    /// (apimachinery keeps them too and prints them).
    values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.values.join(",");
        match self.operator {
            Operator::Equals => write!(f, "{}={values}", self.key),
            Operator::In => write!(f, "{} in ({values})", self.key),
            Operator::NotIn => write!(f, "{} notin ({values})", self.key),
            Operator::Exists => f.write_str(&self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A parsed selector (apimachinery `labels.Selector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// Sorted by key (stable), like `internalSelector.Add`.
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches all label sets (`labels.Everything()`).
    pub fn everything() -> Self {
        Selector {
            requirements: Vec::new(),
        }
    }

    /// Whether this selector matches all label sets (`Empty()`).
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// `metav1.LabelSelectorAsSelector`: an empty selector (no labels, no
    /// expressions) matches everything; otherwise each matchLabels entry (in
    /// key order) then each matchExpression becomes a requirement, and the
    /// first invalid one is the error.
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Selector, SelectorError> {
        let labels = ls.match_labels.as_ref();
        let expressions = ls.match_expressions.as_deref().unwrap_or_default();
        let mut requirements = Vec::new();
        for (key, value) in labels.into_iter().flatten() {
            requirements.push(new_requirement(
                key,
                Operator::Equals,
                Some(std::slice::from_ref(value)),
            )?);
        }
        for expr in expressions {
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError(format!(
                        "{} is not a valid label selector operator",
                        quote(other)
                    )));
                }
            };
            // `append([]string(nil), expr.Values...)`: an empty list is nil.
            let values = expr.values.as_deref().filter(|v| !v.is_empty());
            requirements.push(new_requirement(&expr.key, operator, values)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector { requirements })
    }

    /// Whether all requirements match `labels` (`Selector.Matches`).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    /// `labels.Selector.String()`: `a=b,c in (x,y),!d,e,f notin (z)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl Serialize for Selector {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `labels.NewRequirement` without path options: collects every problem and
/// returns them as `field.ErrorList.ToAggregate()` prints them. `values` is
/// `None` for Go's nil slice.
fn new_requirement(
    key: &str,
    operator: Operator,
    values: Option<&[String]>,
) -> Result<Requirement, SelectorError> {
    let vals = values.unwrap_or_default();
    let mut errs: Vec<String> = Vec::new();
    let key_errs = is_label_key(key);
    if !key_errs.is_empty() {
        errs.push(field_invalid("key", &quote(key), &key_errs.join("; ")));
    }
    let count_detail = match operator {
        Operator::In | Operator::NotIn if vals.is_empty() => {
            Some("for 'in', 'notin' operators, values set can't be empty")
        }
        Operator::Equals if vals.len() != 1 => {
            Some("exact-match compatibility requires one single value")
        }
        Operator::Exists | Operator::DoesNotExist if !vals.is_empty() => {
            Some("values set must be empty for exists and does not exist")
        }
        _ => None,
    };
    if let Some(detail) = count_detail {
        errs.push(field_invalid("values", &json_string_slice(values), detail));
    }
    for (i, v) in vals.iter().enumerate() {
        let value_errs = is_label_value(v);
        if !value_errs.is_empty() {
            errs.push(field_invalid(
                &format!("values[{i}][{key}]"),
                &quote(v),
                &value_errs.join("; "),
            ));
        }
    }
    if !errs.is_empty() {
        return Err(SelectorError(aggregate(errs)));
    }
    let mut values = vals.to_vec();
    values.sort();
    Ok(Requirement {
        key: key.to_owned(),
        operator,
        values,
    })
}

/// `field.Invalid(path, value, detail).Error()`, `value` already rendered.
fn field_invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

/// `ErrorList.ToAggregate().Error()`: duplicates dropped; one error alone,
/// several as `[e1, e2]`.
fn aggregate(errs: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::with_capacity(errs.len());
    for e in errs {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        unique.remove(0)
    } else {
        format!("[{}]", unique.join(", "))
    }
}

/// Go's `json.Marshal` of a `[]string` (how field errors print slices): nil
/// is `null`.
fn json_string_slice(values: Option<&[String]>) -> String {
    let Some(values) = values else {
        return "null".to_owned();
    };
    let mut out = String::from("[");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, v);
    }
    out.push(']');
    out
}

/// Go's `encoding/json` string encoding (with its default HTML escaping).
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

// ---------------------------------------------------------------------------
// k8s.io/apimachinery/pkg/api/validate/content
// ---------------------------------------------------------------------------

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_MAX_LENGTH: usize = 63;
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX_LENGTH: usize = 63;
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

/// `content.MaxLenError` (lengths are in bytes, like Go's `len`).
fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} bytes")
}

/// `content.RegexError`.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{re}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(ex);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(re);
    out.push_str("')");
    out
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
fn is_dns1123_subdomain_syntax(s: &str) -> bool {
    let end_ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                end_ok(first) && end_ok(last) && b.iter().all(|c| end_ok(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

/// `content.IsDNS1123Subdomain`.
fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !is_dns1123_subdomain_syntax(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `content.IsLabelKey` (formerly `validation.IsQualifiedName`).
fn is_label_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_ERR_MSG,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > LABEL_KEY_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(LABEL_KEY_MAX_LENGTH)));
    }
    if !is_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `content.IsLabelValue` (formerly `validation.IsValidLabelValue`).
fn is_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !(value.is_empty() || is_label_key_name(value)) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

// ---------------------------------------------------------------------------
// Go renderings of metav1.LabelSelector
// ---------------------------------------------------------------------------

/// Go's protobuf `(*LabelSelector).String()`:
/// `&LabelSelector{MatchLabels:map[string]string{a: b,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],},},}`
pub fn go_string(ls: &LabelSelector) -> String {
    let mut out = String::from("&LabelSelector{MatchLabels:map[string]string{");
    for (k, v) in ls.match_labels.iter().flatten() {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(v);
        out.push(',');
    }
    out.push_str("},MatchExpressions:[]LabelSelectorRequirement{");
    for r in ls.match_expressions.iter().flatten() {
        // The generated code drops the first '&' of each element.
        out.push_str(&requirement_go_string(r).replacen('&', "", 1));
        out.push(',');
    }
    out.push_str("},}");
    out
}

/// Go's protobuf `(*LabelSelectorRequirement).String()`:
/// `&LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],}`
pub fn requirement_go_string(r: &LabelSelectorRequirement) -> String {
    format!(
        "&LabelSelectorRequirement{{Key:{},Operator:{},Values:{},}}",
        r.key,
        r.operator,
        go_slice(r.values.as_deref(), false)
    )
}

/// Go's `fmt.Sprintf("%v", selector)` of a `metav1.LabelSelector` value
/// (not a pointer, so no `String()`): `{map[a:b c:d] [{k In [x y]}]}`.
pub fn go_value(ls: &LabelSelector) -> String {
    go_struct(ls, false)
}

/// `%v` (or `%q` when `quoted`) of a `metav1.LabelSelector` value.
fn go_struct(ls: &LabelSelector, quoted: bool) -> String {
    let s = |v: &str| if quoted { quote(v) } else { v.to_owned() };
    let labels: Vec<String> = ls
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{}:{}", s(k), s(v)))
        .collect();
    let exprs: Vec<String> = ls
        .match_expressions
        .iter()
        .flatten()
        .map(|r| requirement_go_struct(r, quoted))
        .collect();
    format!("{{map[{}] [{}]}}", labels.join(" "), exprs.join(" "))
}

/// `%v` (or `%q`) of a `metav1.LabelSelectorRequirement` value:
/// `{k In [x y]}`.
fn requirement_go_struct(r: &LabelSelectorRequirement, quoted: bool) -> String {
    let s = |v: &str| if quoted { quote(v) } else { v.to_owned() };
    format!(
        "{{{} {} {}}}",
        s(&r.key),
        s(&r.operator),
        go_slice(r.values.as_deref(), quoted)
    )
}

/// `%v` (or `%q`) of a `[]string`: `[x y]`, nil and empty alike `[]`.
fn go_slice(values: Option<&[String]>, quoted: bool) -> String {
    let items: Vec<String> = values
        .unwrap_or_default()
        .iter()
        .map(|v| if quoted { quote(v) } else { v.clone() })
        .collect();
    format!("[{}]", items.join(" "))
}

/// MetalLB's `validateLabelSelectorDuplicate(selectors, field)`: each
/// expression's values are sorted first, then for each selector in order:
/// a value repeated inside one expression, an expression repeated inside
/// the selector (compared by [`requirement_go_string`]), and the selector
/// repeated later in the list (compared by [`go_string`]) are errors, with
/// MetalLB's texts (`%q` of the value, of the requirement value, of the
/// selector value).
pub fn validate_duplicates(selectors: &[LabelSelector], field: &str) -> Result<(), String> {
    let sorted: Vec<LabelSelector> = selectors
        .iter()
        .map(|ls| {
            let mut ls = ls.clone();
            for me in ls.match_expressions.iter_mut().flatten() {
                if let Some(values) = me.values.as_mut() {
                    values.sort();
                }
            }
            ls
        })
        .collect();
    let strings: Vec<String> = sorted.iter().map(go_string).collect();
    for (i, ls) in sorted.iter().enumerate() {
        let exprs = ls.match_expressions.as_deref().unwrap_or_default();
        let expr_strings: Vec<String> = exprs.iter().map(requirement_go_string).collect();
        for (j, me) in exprs.iter().enumerate() {
            let values = me.values.as_deref().unwrap_or_default();
            for (k, v) in values.iter().enumerate() {
                if values[k + 1..].contains(v) {
                    return Err(format!(
                        "duplicate definition of match expression value in label selector {}",
                        quote(v)
                    ));
                }
            }
            if expr_strings[j + 1..].contains(&expr_strings[j]) {
                return Err(format!(
                    "duplicate definition of match expressions {}",
                    requirement_go_struct(me, true)
                ));
            }
        }
        if strings[i + 1..].contains(&strings[i]) {
            return Err(format!(
                "duplicate definition of {field} {}",
                go_struct(ls, true)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn req(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    fn sel(
        match_labels: Option<&[(&str, &str)]>,
        exprs: Option<Vec<LabelSelectorRequirement>>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: match_labels.map(labels),
            match_expressions: exprs,
        }
    }

    fn err(ls: &LabelSelector) -> String {
        Selector::from_label_selector(ls).unwrap_err().to_string()
    }

    const NAME_REGEX_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_REGEX_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const SUBDOMAIN_REGEX_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn empty_selector_is_everything() {
        for ls in [
            sel(None, None),
            sel(Some(&[]), Some(vec![])),
            LabelSelector::default(),
        ] {
            let s = Selector::from_label_selector(&ls).unwrap();
            assert!(s.is_everything());
            assert_eq!(s, Selector::everything());
            assert_eq!(s.to_string(), "");
            assert!(s.matches(&labels(&[])));
            assert!(s.matches(&labels(&[("a", "b")])));
        }
        assert!(
            !Selector::from_label_selector(&sel(Some(&[("a", "b")]), None))
                .unwrap()
                .is_everything()
        );
    }

    /// Label pairs and whether the selector must match them.
    type MatchCase<'a> = (&'a [(&'a str, &'a str)], bool);

    #[test]
    fn matches_each_operator() {
        let cases: &[(LabelSelectorRequirement, &[MatchCase])] = &[
            (
                req("k", "In", Some(&["x", "y"])),
                &[
                    (&[("k", "x")], true),
                    (&[("k", "y")], true),
                    (&[("k", "z")], false),
                    (&[("k", "")], false),
                    (&[("o", "x")], false),
                    (&[], false),
                ],
            ),
            (
                req("k", "NotIn", Some(&["x", "y"])),
                &[
                    (&[("k", "x")], false),
                    (&[("k", "y")], false),
                    (&[("k", "z")], true),
                    (&[("o", "x")], true),
                    (&[], true),
                ],
            ),
            (
                req("k", "Exists", None),
                &[
                    (&[("k", "")], true),
                    (&[("k", "x")], true),
                    (&[("o", "x")], false),
                ],
            ),
            (
                req("k", "DoesNotExist", Some(&[])),
                &[(&[("k", "")], false), (&[("o", "x")], true), (&[], true)],
            ),
        ];
        for (r, label_cases) in cases {
            let s = Selector::from_label_selector(&sel(None, Some(vec![r.clone()]))).unwrap();
            for (l, want) in *label_cases {
                assert_eq!(s.matches(&labels(l)), *want, "{s} on {l:?}");
            }
        }

        // matchLabels: Equals.
        let s = Selector::from_label_selector(&sel(Some(&[("a", "b"), ("c", "")]), None)).unwrap();
        assert!(s.matches(&labels(&[("a", "b"), ("c", ""), ("x", "y")])));
        assert!(!s.matches(&labels(&[("a", "b")])));
        assert!(!s.matches(&labels(&[("a", "B"), ("c", "")])));

        // All requirements must match.
        let s = Selector::from_label_selector(&sel(
            Some(&[("a", "b")]),
            Some(vec![
                req("c", "Exists", None),
                req("d", "DoesNotExist", None),
            ]),
        ))
        .unwrap();
        assert!(s.matches(&labels(&[("a", "b"), ("c", "1")])));
        assert!(!s.matches(&labels(&[("a", "b"), ("c", "1"), ("d", "1")])));
        assert!(!s.matches(&labels(&[("a", "b")])));
        assert!(Selector::everything().matches(&labels(&[])));
    }

    #[test]
    fn display_sorts_by_key_and_values() {
        let ls = sel(
            Some(&[("a", "b")]),
            Some(vec![
                req("f", "NotIn", Some(&["z"])),
                req("e", "Exists", None),
                req("c", "In", Some(&["y", "x", "x"])),
                req("d", "DoesNotExist", None),
            ]),
        );
        let s = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(s.to_string(), "a=b,c in (x,x,y),!d,e,f notin (z)");
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            "\"a=b,c in (x,x,y),!d,e,f notin (z)\""
        );
        assert_eq!(
            serde_json::to_string(&Selector::everything()).unwrap(),
            "\"\""
        );

        // Same key: stable order (matchLabels first, then expressions in order).
        let ls = sel(
            Some(&[("k", "v")]),
            Some(vec![req("k", "Exists", None), req("b", "In", Some(&["1"]))]),
        );
        let s = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(s.to_string(), "b in (1),k=v,k");

        // Value order does not matter for equality.
        let a = Selector::from_label_selector(&sel(
            None,
            Some(vec![req("k", "In", Some(&["x", "y"]))]),
        ));
        let b = Selector::from_label_selector(&sel(
            None,
            Some(vec![req("k", "In", Some(&["y", "x"]))]),
        ));
        assert_eq!(a, b);
    }

    #[test]
    fn valid_keys_and_values() {
        for key in [
            "a",
            "A-b_c.d9",
            "example.com/MyName",
            "a.b-c.d/x",
            &"k".repeat(63),
            &format!("{}/n", "p".repeat(253)),
        ] {
            let ls = sel(Some(&[(key, "v")]), None);
            assert!(Selector::from_label_selector(&ls).is_ok(), "{key}");
        }
        for value in ["", "a", "My_value.1-2", &"v".repeat(63)] {
            let ls = sel(None, Some(vec![req("k", "In", Some(&[value]))]));
            assert!(Selector::from_label_selector(&ls).is_ok(), "{value:?}");
        }
    }

    #[test]
    fn bad_key() {
        assert_eq!(
            err(&sel(Some(&[("-a", "b")]), None)),
            format!("key: Invalid value: \"-a\": name part {NAME_REGEX_MSG}")
        );
        // Empty name gets both messages.
        assert_eq!(
            err(&sel(None, Some(vec![req("", "Exists", None)]))),
            format!(
                "key: Invalid value: \"\": name part must be non-empty; name part {NAME_REGEX_MSG}"
            )
        );
        assert_eq!(
            err(&sel(None, Some(vec![req("a/b/c", "Exists", None)]))),
            format!(
                "key: Invalid value: \"a/b/c\": a valid label key {NAME_REGEX_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )
        );
    }

    #[test]
    fn bad_prefix() {
        assert_eq!(
            err(&sel(None, Some(vec![req("Example.com/a", "Exists", None)]))),
            format!("key: Invalid value: \"Example.com/a\": prefix part {SUBDOMAIN_REGEX_MSG}")
        );
        assert_eq!(
            err(&sel(None, Some(vec![req("/a", "Exists", None)]))),
            "key: Invalid value: \"/a\": prefix part must be non-empty"
        );
        let long = format!("{}/a", "p".repeat(254));
        assert_eq!(
            err(&sel(None, Some(vec![req(&long, "Exists", None)]))),
            format!("key: Invalid value: \"{long}\": prefix part must be no more than 253 bytes")
        );
        assert_eq!(
            err(&sel(None, Some(vec![req("a..b/", "Exists", None)]))),
            format!(
                "key: Invalid value: \"a..b/\": prefix part {SUBDOMAIN_REGEX_MSG}; name part must be non-empty; name part {NAME_REGEX_MSG}"
            )
        );
    }

    #[test]
    fn too_long_name() {
        let key = "k".repeat(64);
        assert_eq!(
            err(&sel(Some(&[(&key, "v")]), None)),
            format!("key: Invalid value: \"{key}\": name part must be no more than 63 bytes")
        );
        let key = format!("{}-", "k".repeat(64));
        assert_eq!(
            err(&sel(Some(&[(&key, "v")]), None)),
            format!(
                "key: Invalid value: \"{key}\": name part must be no more than 63 bytes; name part {NAME_REGEX_MSG}"
            )
        );
    }

    #[test]
    fn bad_value() {
        assert_eq!(
            err(&sel(Some(&[("k", "-v")]), None)),
            format!("values[0][k]: Invalid value: \"-v\": {VALUE_REGEX_MSG}")
        );
        assert_eq!(
            err(&sel(
                None,
                Some(vec![req("k", "NotIn", Some(&["ok", "a b"]))])
            )),
            format!("values[1][k]: Invalid value: \"a b\": {VALUE_REGEX_MSG}")
        );
        let long = "v".repeat(64);
        assert_eq!(
            err(&sel(Some(&[("k", &long)]), None)),
            format!("values[0][k]: Invalid value: \"{long}\": must be no more than 63 bytes")
        );
        let long = format!("{}.", "v".repeat(63));
        assert_eq!(
            err(&sel(Some(&[("k", &long)]), None)),
            format!(
                "values[0][k]: Invalid value: \"{long}\": must be no more than 63 bytes; {VALUE_REGEX_MSG}"
            )
        );
    }

    #[test]
    fn in_without_values() {
        for values in [None, Some(&[][..])] {
            for op in ["In", "NotIn"] {
                assert_eq!(
                    err(&sel(None, Some(vec![req("k", op, values)]))),
                    "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
                );
            }
        }
    }

    #[test]
    fn exists_with_values() {
        assert_eq!(
            err(&sel(None, Some(vec![req("k", "Exists", Some(&["a"]))]))),
            "values: Invalid value: [\"a\"]: values set must be empty for exists and does not exist"
        );
        assert_eq!(
            err(&sel(
                None,
                Some(vec![req("k", "DoesNotExist", Some(&["a", "b<&\"\n"]))])
            )),
            format!(
                "[values: Invalid value: [\"a\",\"b\\u003c\\u0026\\\"\\n\"]: values set must be empty for exists and does not exist, values[1][k]: Invalid value: \"b<&\\\"\\n\": {VALUE_REGEX_MSG}]"
            )
        );
    }

    #[test]
    fn equals_count() {
        assert_eq!(
            new_requirement("k", Operator::Equals, None).unwrap_err().0,
            "values: Invalid value: null: exact-match compatibility requires one single value"
        );
    }

    #[test]
    fn bad_operator() {
        assert_eq!(
            err(&sel(None, Some(vec![req("k", "in", Some(&["a"]))]))),
            "\"in\" is not a valid label selector operator"
        );
        assert_eq!(
            err(&sel(None, Some(vec![req("-k", "", None)]))),
            "\"\" is not a valid label selector operator"
        );
    }

    #[test]
    fn aggregate_of_errors() {
        assert_eq!(
            err(&sel(None, Some(vec![req("-k", "In", None)]))),
            format!(
                "[key: Invalid value: \"-k\": name part {NAME_REGEX_MSG}, values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty]"
            )
        );
        // Identical messages are reported once (and then without brackets).
        assert_eq!(
            err(&sel(None, Some(vec![req("k", "In", Some(&["-", "-"]))]))),
            format!(
                "[values[0][k]: Invalid value: \"-\": {VALUE_REGEX_MSG}, values[1][k]: Invalid value: \"-\": {VALUE_REGEX_MSG}]"
            )
        );
        assert_eq!(aggregate(vec!["x".into(), "x".into()]), "x");
        assert_eq!(
            aggregate(vec!["x".into(), "y".into(), "x".into()]),
            "[x, y]"
        );
    }

    #[test]
    fn first_failing_requirement_wins() {
        // matchLabels in key order, then expressions in order.
        let ls = sel(
            Some(&[("z", "-"), ("a", "-")]),
            Some(vec![req("k", "Bad", None)]),
        );
        assert_eq!(
            err(&ls),
            format!("values[0][a]: Invalid value: \"-\": {VALUE_REGEX_MSG}")
        );
        let ls = sel(
            Some(&[("a", "b")]),
            Some(vec![req("k", "Bad", None), req("-", "In", None)]),
        );
        assert_eq!(err(&ls), "\"Bad\" is not a valid label selector operator");
    }

    #[test]
    fn go_renderings() {
        let ls = sel(
            Some(&[("c", "d"), ("a", "b")]),
            Some(vec![
                req("k", "In", Some(&["x", "y"])),
                req("e", "Exists", None),
            ]),
        );
        assert_eq!(
            go_string(&ls),
            "&LabelSelector{MatchLabels:map[string]string{a: b,c: d,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],},LabelSelectorRequirement{Key:e,Operator:Exists,Values:[],},},}"
        );
        assert_eq!(
            requirement_go_string(&req("k", "In", Some(&["x", "y"]))),
            "&LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],}"
        );
        assert_eq!(go_value(&ls), "{map[a:b c:d] [{k In [x y]} {e Exists []}]}");
        assert_eq!(
            go_struct(&ls, true),
            "{map[\"a\":\"b\" \"c\":\"d\"] [{\"k\" \"In\" [\"x\" \"y\"]} {\"e\" \"Exists\" []}]}"
        );

        let empty = LabelSelector::default();
        assert_eq!(
            go_string(&empty),
            "&LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement{},}"
        );
        assert_eq!(go_value(&empty), "{map[] []}");
        assert_eq!(go_value(&sel(Some(&[]), Some(vec![]))), "{map[] []}");
    }

    #[test]
    fn duplicate_value() {
        let ls = sel(None, Some(vec![req("k", "In", Some(&["b", "a", "b"]))]));
        assert_eq!(
            validate_duplicates(&[ls], "nodeSelectors"),
            Err("duplicate definition of match expression value in label selector \"b\"".into())
        );
        let ls = sel(None, Some(vec![req("k", "In", Some(&["b", "a"]))]));
        assert_eq!(validate_duplicates(&[ls], "nodeSelectors"), Ok(()));
    }

    #[test]
    fn duplicate_expression() {
        let ls = sel(
            None,
            Some(vec![
                req("k", "In", Some(&["x", "y"])),
                req("k", "In", Some(&["y", "x"])),
            ]),
        );
        assert_eq!(
            validate_duplicates(&[ls], "nodeSelectors"),
            Err("duplicate definition of match expressions {\"k\" \"In\" [\"x\" \"y\"]}".into())
        );
        // nil and empty values print alike, so they are duplicates too.
        let ls = sel(
            None,
            Some(vec![
                req("k", "Exists", None),
                req("k", "Exists", Some(&[])),
            ]),
        );
        assert_eq!(
            validate_duplicates(&[ls], "nodeSelectors"),
            Err("duplicate definition of match expressions {\"k\" \"Exists\" []}".into())
        );
        let ls = sel(
            None,
            Some(vec![
                req("k", "In", Some(&["x", "y"])),
                req("k", "NotIn", Some(&["y", "x"])),
            ]),
        );
        assert_eq!(validate_duplicates(&[ls], "nodeSelectors"), Ok(()));
    }

    #[test]
    fn duplicate_selector() {
        let a = sel(
            Some(&[("a", "b")]),
            Some(vec![req("k", "In", Some(&["y", "x"]))]),
        );
        let b = sel(
            Some(&[("a", "b")]),
            Some(vec![req("k", "In", Some(&["x", "y"]))]),
        );
        let other = sel(Some(&[("a", "c")]), None);
        assert_eq!(
            validate_duplicates(&[a.clone(), other.clone(), b.clone()], "ipAddressPoolSelectors"),
            Err("duplicate definition of ipAddressPoolSelectors {map[\"a\":\"b\"] [{\"k\" \"In\" [\"x\" \"y\"]}]}".into())
        );
        assert_eq!(
            validate_duplicates(&[a, other], "ipAddressPoolSelectors"),
            Ok(())
        );
        // Empty selectors: nil and empty fields print alike.
        assert_eq!(
            validate_duplicates(
                &[LabelSelector::default(), sel(Some(&[]), Some(vec![]))],
                "nodeSelectors"
            ),
            Err("duplicate definition of nodeSelectors {map[] []}".into())
        );
        assert_eq!(validate_duplicates(&[], "nodeSelectors"), Ok(()));
    }

    #[test]
    fn duplicate_checks_run_per_selector_in_order() {
        // The first selector is duplicated later, but the second one's
        // duplicate value is only reached after the first selector's checks.
        let a = sel(Some(&[("a", "b")]), None);
        let bad = sel(None, Some(vec![req("k", "In", Some(&["x", "x"]))]));
        assert_eq!(
            validate_duplicates(&[a.clone(), bad.clone(), a.clone()], "f"),
            Err("duplicate definition of f {map[\"a\":\"b\"] []}".into())
        );
        assert_eq!(
            validate_duplicates(&[bad, a.clone(), a], "f"),
            Err("duplicate definition of match expression value in label selector \"x\"".into())
        );
    }
}
