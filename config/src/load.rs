//! Reading configuration objects from YAML (or JSON) text into
//! [`Resources`], the way `kubectl apply` and MetalLB's daemons would see
//! them, with errors that name the file, the document and the line.
//!
//! Each document is parsed into a tree that remembers the line and column of
//! every value, converted to JSON (`serde_json::Value`) with a map from JSON
//! path (`spec.addresses[0]`) to position, and then decoded into the typed
//! object. Decoding follows Go's zero values, as MetalLB's Go types do:
//! map entries whose value is `null` are removed first, a missing `spec` is
//! an empty one, and missing fields are zero values. Type errors and unknown
//! fields are reported with their JSON path and line.
//!
//! What is read:
//!
//! * group `metallb.io`: `IPAddressPool`, `L2Advertisement`,
//!   `BGPAdvertisement`, `BFDProfile`, `Community` (v1beta1), `BGPPeer`
//!   (v1beta1, converted with [`convert_bgp_peer`], and v1beta2), and the
//!   status kinds `ConfigurationState`, `ServiceL2Status`, `ServiceBGPStatus`,
//!   `BGPSessionStatus`, `NodeBGPStatus` (v1beta1; checked, not part of the configuration).
//!   An unknown version or kind of this group is an error.
//! * core `v1`: `Secret`, `Node`, `Namespace`, and the `ConfigMap` named
//!   `bgpextras`.
//! * `List` and `*List` objects: their `items`.
//!
//! Anything else is skipped with a [`Note`]. Objects without a namespace get
//! the configured one ([`LoadOptions::namespace`]); namespaced objects of
//! another namespace are left out of the configuration (the daemons watch
//! only their own namespace), with a note. `Node`s and `Namespace`s are
//! cluster-scoped and always kept.
//!
//! Input is bounded: files over [`LoadOptions::max_file_bytes`] are refused,
//! and the YAML parser runs with a budget (nodes, events, nesting depth,
//! anchors and alias replays), so that a hostile file (an alias bomb, deep
//! nesting) is rejected with an error rather than exhausting memory.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use serde_saphyr::{MessageFormatter, Spanned};

use crate::api::{DEFAULT_NAMESPACE, GROUP, v1beta1, v1beta2};
use crate::resources::{Resources, convert_bgp_peer};

// ---------------------------------------------------------------------------
// Public types

/// How to load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The namespace MetalLB runs in: objects without a namespace are put in
    /// it, namespaced objects of other namespaces are not configuration.
    pub namespace: String,
    /// Unknown fields are errors (kubectl's strict field validation) rather
    /// than warnings.
    pub strict: bool,
    /// Largest file (or stream) accepted, in bytes.
    pub max_file_bytes: u64,
    /// Largest total of all inputs accepted, in bytes.
    pub max_total_bytes: u64,
    /// Also keep Services (`v1`) and EndpointSlices (`discovery.k8s.io/v1`),
    /// of any namespace, in [`Loaded::services`] and
    /// [`Loaded::endpoint_slices`] (`metallbctl explain` on files); they are
    /// never configuration.
    pub workloads: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            strict: false,
            max_file_bytes: 16 * 1024 * 1024,
            max_total_bytes: 64 * 1024 * 1024,
            workloads: false,
        }
    }
}

/// Where something is in the input. `document` is 1-based and counts empty
/// documents too; `line` and `column` are 1-based.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The file name as given (`<stdin>` for standard input).
    pub file: String,
    /// The YAML document, from 1, when known.
    pub document: Option<u32>,
    /// The line, from 1, when known.
    pub line: Option<u32>,
    /// The column, from 1, when known.
    pub column: Option<u32>,
}

impl Origin {
    fn file(file: &str) -> Self {
        Self {
            file: file.to_owned(),
            document: None,
            line: None,
            column: None,
        }
    }

    /// `file:line` (or just `file`), the short form for listings.
    pub fn short(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line}", self.file),
            None => self.file.clone(),
        }
    }

    /// Like `Display`, with the column when known.
    fn with_column(&self) -> String {
        match self.column {
            Some(c) if self.line.is_some() => format!("{self}, column {c}"),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for Origin {
    /// `config.yaml: document 2, line 7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(d) = self.document {
            write!(f, ": document {d}")?;
            if let Some(l) = self.line {
                write!(f, ", line {l}")?;
            }
        } else if let Some(l) = self.line {
            write!(f, ": line {l}")?;
        }
        Ok(())
    }
}

/// Why input could not be loaded. `Display` names the file, the document and
/// the line, e.g. `config.yaml: document 2, line 7: spec.peerPort: invalid
/// type: string "x", expected u16`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum LoadError {
    /// The path cannot be read (missing, permissions, not UTF-8, over the
    /// total size limit).
    #[error("{file}: {message}")]
    Read {
        /// The path.
        file: String,
        /// What went wrong.
        message: String,
    },
    /// The input is larger than the configured limit.
    #[error("{file}: input larger than the limit of {limit} bytes")]
    TooLarge {
        /// The path.
        file: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The text is not valid YAML, or exceeds the parser's resource budget.
    #[error("{}: {message}", .at.with_column())]
    Syntax {
        /// Where.
        at: Box<Origin>,
        /// The parser's message.
        message: String,
    },
    /// A `metallb.io` kind with an apiVersion MetalLB does not serve.
    #[error("{at}: {kind} {}: unknown apiVersion {}; {kind} is served as {}", display_name(.name), crate::gofmt::quote(.api_version), served_versions(.kind))]
    UnknownApiVersion {
        /// Where the object starts.
        at: Box<Origin>,
        /// The apiVersion as written.
        api_version: String,
        /// The kind.
        kind: String,
        /// The object name, when present.
        name: String,
    },
    /// A kind of group `metallb.io` that does not exist.
    #[error("{at}: {api_version} {kind} {}: no such kind in group metallb.io", display_name(.name))]
    UnknownKind {
        /// Where the object starts.
        at: Box<Origin>,
        /// The apiVersion as written.
        api_version: String,
        /// The kind as written.
        kind: String,
        /// The object name, when present.
        name: String,
    },
    /// A value of the wrong JSON type, or one that cannot be decoded.
    #[error("{at}: {}{message}", path_prefix(.path))]
    Decode {
        /// Where the value is (the closest enclosing one when unknown).
        at: Box<Origin>,
        /// JSON path of the value, e.g. `spec.peerPort` (empty for the
        /// document itself).
        path: String,
        /// What is wrong, e.g. `invalid type: string "x", expected u16`.
        message: String,
    },
    /// `apiVersion`, `kind` or `metadata.name` is missing or empty.
    #[error("{at}: {}missing {field}", path_prefix(.prefix))]
    MissingField {
        /// Where the object starts.
        at: Box<Origin>,
        /// JSON path of the object within the document (`items[2]` in a
        /// List; empty otherwise).
        prefix: String,
        /// `apiVersion`, `kind` or `metadata.name`.
        field: String,
    },
    /// An unknown field, in strict mode.
    #[error("{at}: {kind}/{name}: unknown field {}", crate::gofmt::quote(.path))]
    UnknownField {
        /// Where the field is.
        at: Box<Origin>,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// JSON path of the field, e.g. `spec.adresses`.
        path: String,
    },
}

impl LoadError {
    /// Where the error is.
    pub fn origin(&self) -> Origin {
        match self {
            Self::Read { file, .. } | Self::TooLarge { file, .. } => Origin::file(file),
            Self::Syntax { at, .. }
            | Self::UnknownApiVersion { at, .. }
            | Self::UnknownKind { at, .. }
            | Self::Decode { at, .. }
            | Self::MissingField { at, .. }
            | Self::UnknownField { at, .. } => (**at).clone(),
        }
    }
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}: ")
    }
}

/// `metallb.io/v1beta1 and metallb.io/v1beta2`: the served versions of a kind.
fn served_versions(kind: &str) -> String {
    metallb_kind(kind)
        .map(|spec| {
            spec.versions
                .iter()
                .map(|v| format!("{GROUP}/{v}"))
                .collect::<Vec<_>>()
                .join(" and ")
        })
        .unwrap_or_default()
}

fn display_name(name: &str) -> &str {
    if name.is_empty() { "(unnamed)" } else { name }
}

/// A field the typed object does not have (a warning; an error in strict
/// mode). `Display`: `config.yaml: document 1, line 5: IPAddressPool/a:
/// unknown field "spec.adresses"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnknownField {
    /// Where the field is.
    pub at: Origin,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// JSON path of the field, e.g. `spec.adresses`.
    pub path: String,
}

impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}/{}: unknown field {}",
            self.at,
            self.kind,
            self.name,
            crate::gofmt::quote(&self.path)
        )
    }
}

/// Something the loader did that is worth knowing: an object skipped, left
/// out of the configuration, or replaced. `Display`: `origin: message`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    /// Where the object is.
    pub at: Origin,
    /// What happened, e.g. `skipping v1 Service web: not a configuration kind`.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// One object that was read (configuration kinds and status kinds, whether
/// or not in the configured namespace; not the skipped kinds).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadedObject {
    /// Where the object starts.
    pub at: Origin,
    /// `apiVersion` as written (`metallb.io/v1beta1` for a v1beta1 BGPPeer,
    /// although it is converted to v1beta2 in [`Resources`]).
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// The namespace it is in (the configured one when it had none); `None`
    /// for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object as written, after removing map entries whose value is
    /// `null` (what the API server's schema validation sees).
    pub value: Value,
    /// Whether it is part of [`Loaded::resources`] (false for status kinds,
    /// other namespaces).
    pub in_configuration: bool,
}

/// The result of loading: the objects MetalLB would read, plus diagnostics.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// What `parse` reads.
    pub resources: Resources,
    /// Every object read, in input order (for schema checks).
    pub objects: Vec<LoadedObject>,
    /// Unknown fields (not in strict mode, where they are errors).
    pub warnings: Vec<UnknownField>,
    /// Skipped objects and other remarks.
    pub notes: Vec<Note>,
    /// Services read ([`LoadOptions::workloads`]; a missing namespace is
    /// `default`).
    pub services: Vec<Arc<Service>>,
    /// EndpointSlices read ([`LoadOptions::workloads`]).
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
}

/// Reads files, directories or text into [`Loaded`].
///
/// ```
/// use config::load::{LoadOptions, Loader};
///
/// let mut loader = Loader::new(LoadOptions::default());
/// loader
///     .add_str(
///         "pool.yaml",
///         "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: a\nspec:\n  addresses: [192.0.2.0/24]\n",
///     )
///     .unwrap();
/// let loaded = loader.finish();
/// assert_eq!(loaded.resources.pools.len(), 1);
/// ```
#[derive(Debug)]
pub struct Loader {
    opts: LoadOptions,
    entries: Vec<Entry>,
    /// (kind, namespace, name) -> index in `entries`.
    seen: HashMap<(String, String, String), usize>,
    warnings: Vec<UnknownField>,
    notes: Vec<Note>,
    total_bytes: u64,
    services: Vec<Arc<Service>>,
    endpoint_slices: Vec<Arc<EndpointSlice>>,
}

#[derive(Debug)]
struct Entry {
    object: LoadedObject,
    typed: Option<Typed>,
}

#[derive(Debug)]
enum Typed {
    Pool(Box<v1beta1::IPAddressPool>),
    Peer(Box<v1beta2::BGPPeer>),
    BfdProfile(Box<v1beta1::BFDProfile>),
    BgpAdvertisement(Box<v1beta1::BGPAdvertisement>),
    L2Advertisement(Box<v1beta1::L2Advertisement>),
    Community(Box<v1beta1::Community>),
    Secret(Box<Secret>),
    Node(Box<Node>),
    Namespace(Box<Namespace>),
    BgpExtras(Box<ConfigMap>),
}

/// Deepest directory nesting `add_path` follows (guards against symlink loops).
const MAX_DIR_DEPTH: usize = 32;

impl Loader {
    /// A loader with nothing read yet.
    pub fn new(opts: LoadOptions) -> Self {
        Self {
            opts,
            entries: Vec::new(),
            seen: HashMap::new(),
            warnings: Vec::new(),
            notes: Vec::new(),
            total_bytes: 0,
            services: Vec::new(),
            endpoint_slices: Vec::new(),
        }
    }

    /// Reads a file, or a directory: its `*.yaml`, `*.yml` and `*.json`
    /// files and subdirectories, sorted by name, skipping names that start
    /// with `.` (such as the `..data` links of mounted ConfigMaps). A file
    /// named explicitly is read whatever its extension.
    pub fn add_path(&mut self, path: &Path) -> Result<(), LoadError> {
        self.add_path_at(path, 0)
    }

    fn add_path_at(&mut self, path: &Path, depth: usize) -> Result<(), LoadError> {
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| read_error(&name, &e))?;
        if !meta.is_dir() {
            let file = std::fs::File::open(path).map_err(|e| read_error(&name, &e))?;
            return self.add_reader(&name, file);
        }
        if depth >= MAX_DIR_DEPTH {
            return Err(LoadError::Read {
                file: name,
                message: format!("directories nested deeper than {MAX_DIR_DEPTH} levels"),
            });
        }
        let mut children = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| read_error(&name, &e))? {
            let entry = entry.map_err(|e| read_error(&name, &e))?;
            let file_name = entry.file_name();
            if file_name.to_string_lossy().starts_with('.') {
                continue;
            }
            children.push((file_name, entry.path()));
        }
        children.sort();
        for (_, child) in children {
            let child_name = child.display().to_string();
            let meta = std::fs::metadata(&child).map_err(|e| read_error(&child_name, &e))?;
            if meta.is_dir() || has_config_extension(&child) {
                self.add_path_at(&child, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Reads a stream (e.g. standard input), up to the size limits.
    pub fn add_reader(&mut self, file: &str, reader: impl Read) -> Result<(), LoadError> {
        let limit = self.opts.max_file_bytes;
        let mut bytes = Vec::new();
        reader
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| read_error(file, &e))?;
        if bytes.len() as u64 > limit {
            return Err(LoadError::TooLarge {
                file: file.to_owned(),
                limit,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| LoadError::Read {
            file: file.to_owned(),
            message: format!("not UTF-8 text: {e}"),
        })?;
        self.add_str(file, &text)
    }

    /// Reads YAML (or JSON) text; `file` names it in messages.
    ///
    /// Objects of earlier documents stay loaded when a later one fails;
    /// callers normally give up on the first error.
    pub fn add_str(&mut self, file: &str, text: &str) -> Result<(), LoadError> {
        let size = text.len() as u64;
        if size > self.opts.max_file_bytes {
            return Err(LoadError::TooLarge {
                file: file.to_owned(),
                limit: self.opts.max_file_bytes,
            });
        }
        if self.total_bytes.saturating_add(size) > self.opts.max_total_bytes {
            return Err(LoadError::Read {
                file: file.to_owned(),
                message: format!(
                    "all inputs together are larger than the limit of {} bytes",
                    self.opts.max_total_bytes
                ),
            });
        }
        self.total_bytes += size;

        let starts = document_starts(text);
        let docs = parse_yaml(text).map_err(|(message, loc)| LoadError::Syntax {
            at: Box::new(Origin {
                file: file.to_owned(),
                document: loc.map(|(l, _)| document_of(&starts, l)),
                line: loc.map(|(l, _)| l),
                column: loc.map(|(_, c)| c),
            }),
            message,
        })?;
        for root in docs {
            let line = clamp(root.referenced.line());
            let mut doc = DocCtx {
                file,
                document: document_of(&starts, line),
                spans: HashMap::new(),
            };
            let mut path = String::new();
            let value = to_json(root, &mut path, &mut doc.spans);
            self.add_object(&doc, String::new(), value, None)?;
        }
        Ok(())
    }

    /// The objects read so far.
    pub fn finish(self) -> Loaded {
        let mut resources = Resources::default();
        let mut objects = Vec::with_capacity(self.entries.len());
        for entry in self.entries {
            if entry.object.in_configuration {
                match entry.typed {
                    Some(Typed::Pool(o)) => resources.pools.push(Arc::new(*o)),
                    Some(Typed::Peer(o)) => resources.peers.push(Arc::new(*o)),
                    Some(Typed::BfdProfile(o)) => resources.bfd_profiles.push(Arc::new(*o)),
                    Some(Typed::BgpAdvertisement(o)) => {
                        resources.bgp_advertisements.push(Arc::new(*o))
                    }
                    Some(Typed::L2Advertisement(o)) => {
                        resources.l2_advertisements.push(Arc::new(*o))
                    }
                    Some(Typed::Community(o)) => resources.communities.push(Arc::new(*o)),
                    Some(Typed::Secret(o)) => resources.secrets.push(Arc::new(*o)),
                    Some(Typed::Node(o)) => resources.nodes.push(Arc::new(*o)),
                    Some(Typed::Namespace(o)) => resources.namespaces.push(Arc::new(*o)),
                    Some(Typed::BgpExtras(o)) => resources.bgp_extras = Some(Arc::new(*o)),
                    None => {}
                }
            }
            objects.push(entry.object);
        }
        Loaded {
            resources,
            objects,
            warnings: self.warnings,
            notes: self.notes,
            services: self.services,
            endpoint_slices: self.endpoint_slices,
        }
    }

    /// Handles one object (a document, or an item of a List at `prefix`).
    /// `defaults` are the apiVersion and kind of a typed List's items.
    fn add_object(
        &mut self,
        doc: &DocCtx<'_>,
        prefix: String,
        mut value: Value,
        defaults: Option<(&str, &str)>,
    ) -> Result<(), LoadError> {
        let obj = ObjCtx { doc, prefix };
        let Some(map) = value.as_object_mut() else {
            return Err(obj.decode_error(
                "",
                format!(
                    "expected an object (a mapping), found {}",
                    json_type(&value)
                ),
            ));
        };
        if let Some((api_version, kind)) = defaults {
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(api_version.to_owned()));
            map.entry("kind")
                .or_insert_with(|| Value::String(kind.to_owned()));
        }
        let api_version = obj.string_field(map, "apiVersion")?;
        let kind = obj.string_field(map, "kind")?;
        let name = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();

        // Lists: `kind: List` or `FooList`, with items.
        if kind == "List" || (kind.ends_with("List") && map.contains_key("items")) {
            let item_defaults = (kind != "List").then(|| kind.trim_end_matches("List").to_owned());
            let items = match map.remove("items") {
                None => Vec::new(),
                Some(Value::Array(items)) => items,
                Some(other) => {
                    return Err(obj.decode_error(
                        "items",
                        format!("expected a list, found {}", json_type(&other)),
                    ));
                }
            };
            for (i, item) in items.into_iter().enumerate() {
                let item_prefix = obj.full(&format!("items[{i}]"));
                let defaults = item_defaults.as_deref().map(|k| (api_version.as_str(), k));
                self.add_object(doc, item_prefix, item, defaults)?;
            }
            return Ok(());
        }

        let (group, _) = split_api_version(&api_version);
        let at = obj.origin("");
        if group == GROUP {
            let Some(spec) = metallb_kind(&kind) else {
                return Err(LoadError::UnknownKind {
                    at: Box::new(at),
                    api_version,
                    kind,
                    name,
                });
            };
            if !spec
                .versions
                .iter()
                .any(|v| api_version == format!("{GROUP}/{v}"))
            {
                return Err(LoadError::UnknownApiVersion {
                    at: Box::new(at),
                    api_version,
                    kind,
                    name,
                });
            }
            return self.add_typed(&obj, api_version, kind, value, spec.has_spec);
        }
        if api_version == "v1" {
            match kind.as_str() {
                "Secret" | "Node" | "Namespace" => {
                    return self.add_typed(&obj, api_version, kind, value, false);
                }
                "ConfigMap" if name == "bgpextras" => {
                    return self.add_typed(&obj, api_version, kind, value, false);
                }
                "ConfigMap" if name == "config" => {
                    self.notes.push(Note {
                        at,
                        message: "skipping v1 ConfigMap config: MetalLB no longer reads its \
                                  configuration from a ConfigMap; convert it to metallb.io objects"
                            .to_owned(),
                    });
                    return Ok(());
                }
                _ => {}
            }
        }
        if self.opts.workloads {
            match (api_version.as_str(), kind.as_str()) {
                ("v1", "Service") => {
                    let mut svc: Box<Service> = self.decode(&obj, &kind, &value)?;
                    svc.metadata
                        .namespace
                        .get_or_insert_with(|| "default".into());
                    self.services.push(Arc::new(*svc));
                    return Ok(());
                }
                ("discovery.k8s.io/v1", "EndpointSlice") => {
                    let mut slice: Box<EndpointSlice> = self.decode(&obj, &kind, &value)?;
                    slice
                        .metadata
                        .namespace
                        .get_or_insert_with(|| "default".into());
                    self.endpoint_slices.push(Arc::new(*slice));
                    return Ok(());
                }
                _ => {}
            }
        }
        self.notes.push(Note {
            at,
            message: format!(
                "skipping {api_version} {kind} {}: not a configuration kind",
                display_name(&name)
            ),
        });
        Ok(())
    }

    /// Decodes a known kind and records it.
    fn add_typed(
        &mut self,
        obj: &ObjCtx<'_>,
        api_version: String,
        kind: String,
        value: Value,
        has_spec: bool,
    ) -> Result<(), LoadError> {
        // What the decoder sees: Go zero values for a missing metadata/spec.
        let mut decoded = value.clone();
        if let Some(map) = decoded.as_object_mut() {
            map.entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if has_spec {
                map.entry("spec")
                    .or_insert_with(|| Value::Object(Map::new()));
            }
        }
        let cluster_scoped = api_version == "v1" && (kind == "Node" || kind == "Namespace");
        let mut typed = match (api_version.as_str(), kind.as_str()) {
            (_, "IPAddressPool") => Some(Typed::Pool(self.decode(obj, &kind, &decoded)?)),
            ("metallb.io/v1beta2", "BGPPeer") => {
                Some(Typed::Peer(self.decode(obj, &kind, &decoded)?))
            }
            (_, "BGPPeer") => {
                let old: Box<v1beta1::BGPPeer> = self.decode(obj, &kind, &decoded)?;
                Some(Typed::Peer(Box::new(convert_bgp_peer(&old))))
            }
            (_, "BFDProfile") => Some(Typed::BfdProfile(self.decode(obj, &kind, &decoded)?)),
            (_, "BGPAdvertisement") => {
                Some(Typed::BgpAdvertisement(self.decode(obj, &kind, &decoded)?))
            }
            (_, "L2Advertisement") => {
                Some(Typed::L2Advertisement(self.decode(obj, &kind, &decoded)?))
            }
            (_, "Community") => Some(Typed::Community(self.decode(obj, &kind, &decoded)?)),
            (_, "ConfigurationState") => {
                self.decode::<v1beta1::ConfigurationState>(obj, &kind, &decoded)?;
                None
            }
            (_, "ServiceL2Status") => {
                self.decode::<v1beta1::ServiceL2Status>(obj, &kind, &decoded)?;
                None
            }
            (_, "ServiceBGPStatus") => {
                self.decode::<v1beta1::ServiceBGPStatus>(obj, &kind, &decoded)?;
                None
            }
            (_, "BGPSessionStatus") => {
                self.decode::<v1beta1::BGPSessionStatus>(obj, &kind, &decoded)?;
                None
            }
            (_, "NodeBGPStatus") => {
                self.decode::<v1beta1::NodeBGPStatus>(obj, &kind, &decoded)?;
                None
            }
            (_, "Secret") => Some(Typed::Secret(self.decode(obj, &kind, &decoded)?)),
            (_, "Node") => Some(Typed::Node(self.decode(obj, &kind, &decoded)?)),
            (_, "Namespace") => Some(Typed::Namespace(self.decode(obj, &kind, &decoded)?)),
            (_, "ConfigMap") => Some(Typed::BgpExtras(self.decode(obj, &kind, &decoded)?)),
            _ => None,
        };
        drop(decoded);

        let meta = value.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if name.is_empty() {
            return Err(LoadError::MissingField {
                at: Box::new(obj.origin("")),
                prefix: obj.prefix.clone(),
                field: "metadata.name".to_owned(),
            });
        }
        let at = obj.origin("");
        let is_status = typed.is_none();
        let mut in_configuration = !is_status;
        let namespace = if cluster_scoped {
            None
        } else {
            let ns = meta
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
                .unwrap_or(&self.opts.namespace)
                .to_owned();
            if let Some(t) = typed.as_mut() {
                t.set_namespace(&ns);
            }
            if ns != self.opts.namespace {
                in_configuration = false;
                self.notes.push(Note {
                    at: at.clone(),
                    message: format!(
                        "ignoring {kind}/{name} in namespace {ns}: MetalLB reads only its own \
                         namespace, {}",
                        self.opts.namespace
                    ),
                });
            }
            Some(ns)
        };
        if is_status {
            self.notes.push(Note {
                at: at.clone(),
                message: format!(
                    "ignoring {kind}/{name}: a status object written by MetalLB, not configuration"
                ),
            });
        }

        if in_configuration {
            let key = (
                kind.clone(),
                namespace.clone().unwrap_or_default(),
                name.clone(),
            );
            // Both definitions are kept: names are unique in a cluster, so
            // two in one input are a mistake, which `parse` reports with
            // MetalLB's own message where it has one (duplicate pools, BFD
            // profiles, identical BGP advertisements).
            if let Some(&previous) = self.seen.get(&key) {
                let earlier = &self.entries[previous];
                self.notes.push(Note {
                    at: at.clone(),
                    message: format!(
                        "{kind}/{name} is defined twice (first at {}); in a cluster the second would replace the first",
                        earlier.object.at
                    ),
                });
            }
            self.seen.insert(key, self.entries.len());
        }
        self.entries.push(Entry {
            object: LoadedObject {
                at,
                api_version,
                kind,
                name,
                namespace,
                value,
                in_configuration,
            },
            typed: if in_configuration { typed } else { None },
        });
        Ok(())
    }

    /// Typed decoding: type errors with path and line, unknown fields as
    /// warnings (errors in strict mode).
    fn decode<T: DeserializeOwned>(
        &mut self,
        obj: &ObjCtx<'_>,
        kind: &str,
        value: &Value,
    ) -> Result<Box<T>, LoadError> {
        let mut unknown = Vec::new();
        let result = {
            let mut record = |path: serde_ignored::Path<'_>| {
                let path = ignored_path(&path);
                if path != "apiVersion" && path != "kind" {
                    unknown.push(path);
                }
            };
            let de = serde_ignored::Deserializer::new(value, &mut record);
            serde_path_to_error::deserialize::<_, T>(de)
        };
        let typed = result.map_err(|e| {
            let path = tracked_path(e.path());
            obj.decode_error(&path, e.into_inner().to_string())
        })?;
        let name = value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        for path in unknown {
            let field = UnknownField {
                at: obj.origin(&path),
                kind: kind.to_owned(),
                name: display_name(name).to_owned(),
                path: obj.full(&path),
            };
            if self.opts.strict {
                return Err(LoadError::UnknownField {
                    at: Box::new(field.at),
                    kind: field.kind,
                    name: field.name,
                    path: field.path,
                });
            }
            self.warnings.push(field);
        }
        Ok(Box::new(typed))
    }
}

impl Typed {
    fn set_namespace(&mut self, ns: &str) {
        let meta = match self {
            Typed::Pool(o) => &mut o.metadata,
            Typed::Peer(o) => &mut o.metadata,
            Typed::BfdProfile(o) => &mut o.metadata,
            Typed::BgpAdvertisement(o) => &mut o.metadata,
            Typed::L2Advertisement(o) => &mut o.metadata,
            Typed::Community(o) => &mut o.metadata,
            Typed::Secret(o) => &mut o.metadata,
            Typed::BgpExtras(o) => &mut o.metadata,
            Typed::Node(_) | Typed::Namespace(_) => return,
        };
        if meta.namespace.as_deref().is_none_or(str::is_empty) {
            meta.namespace = Some(ns.to_owned());
        }
    }
}

fn read_error(file: &str, e: &std::io::Error) -> LoadError {
    LoadError::Read {
        file: file.to_owned(),
        message: e.to_string(),
    }
}

fn has_config_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

struct KindSpec {
    versions: &'static [&'static str],
    has_spec: bool,
}

fn metallb_kind(kind: &str) -> Option<KindSpec> {
    const V1BETA1: &[&str] = &["v1beta1"];
    let (versions, has_spec) = match kind {
        "IPAddressPool" | "L2Advertisement" | "BGPAdvertisement" | "BFDProfile" | "Community" => {
            (V1BETA1, true)
        }
        "BGPPeer" => (&["v1beta1", "v1beta2"][..], true),
        "ConfigurationState" | "ServiceL2Status" | "ServiceBGPStatus" | "BGPSessionStatus"
        | "NodeBGPStatus" => (V1BETA1, false),
        _ => return None,
    };
    Some(KindSpec { versions, has_spec })
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------
// Per-document and per-object context

/// Line and column of a value.
#[derive(Clone, Copy, Debug)]
struct Pos {
    line: u32,
    column: u32,
}

struct DocCtx<'a> {
    file: &'a str,
    document: u32,
    /// JSON path within the document -> position (of the key, for map entries).
    spans: HashMap<String, Pos>,
}

struct ObjCtx<'a> {
    doc: &'a DocCtx<'a>,
    /// Path of the object within the document: empty, or `items[3]`.
    prefix: String,
}

impl ObjCtx<'_> {
    /// The document-level path of `path` (relative to the object).
    fn full(&self, path: &str) -> String {
        join_path(&self.prefix, path)
    }

    /// The position of `path`, or of its closest ancestor that has one.
    fn origin(&self, path: &str) -> Origin {
        let mut p = self.full(path);
        let pos = loop {
            if let Some(pos) = self.doc.spans.get(&p) {
                break Some(*pos);
            }
            if p.is_empty() {
                break None;
            }
            p = parent_path(&p).to_owned();
        };
        Origin {
            file: self.doc.file.to_owned(),
            document: Some(self.doc.document),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
        }
    }

    fn decode_error(&self, path: &str, message: String) -> LoadError {
        LoadError::Decode {
            at: Box::new(self.origin(path)),
            path: self.full(path),
            message,
        }
    }

    /// A required string at the object's root (`apiVersion`, `kind`).
    fn string_field(&self, map: &Map<String, Value>, field: &str) -> Result<String, LoadError> {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            None | Some(Value::String(_)) => Err(LoadError::MissingField {
                at: Box::new(self.origin("")),
                prefix: self.prefix.clone(),
                field: field.to_owned(),
            }),
            Some(other) => {
                let message = String::deserialize(other)
                    .err()
                    .map_or_else(|| "expected a string".to_owned(), |e| e.to_string());
                Err(self.decode_error(field, message))
            }
        }
    }
}

fn join_path(prefix: &str, path: &str) -> String {
    if prefix.is_empty() {
        path.to_owned()
    } else if path.is_empty() {
        prefix.to_owned()
    } else if path.starts_with('[') {
        format!("{prefix}{path}")
    } else {
        format!("{prefix}.{path}")
    }
}

/// `spec.a[2]` -> `spec.a`, `spec.a` -> `spec`, `spec` -> ``.
fn parent_path(path: &str) -> &str {
    if path.ends_with(']')
        && let Some(i) = path.rfind('[')
    {
        return &path[..i];
    }
    match path.rfind('.') {
        Some(i) => &path[..i],
        None => "",
    }
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match path {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => join_path(&ignored_path(parent), key),
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

fn tracked_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join_path(&out, key),
            Segment::Enum { variant } => out = join_path(&out, variant),
            Segment::Unknown => out = join_path(&out, "?"),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// YAML

/// Parser options: YAML 1.2 with the resource budget.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 4_000_000,
            max_nodes: 1_000_000,
            max_aliases: 10_000,
            max_anchors: 10_000,
            max_depth: 48,
            max_documents: 10_000,
            max_total_scalar_bytes: 32 * 1024 * 1024,
            max_merge_keys: 10_000,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 200_000,
            max_replay_stack_depth: 32,
        },
        with_snippet: false,
    }
}

/// Stack for the YAML parser's thread. The deserializer recurses once per
/// nesting level, with large frames in debug builds (tens of KiB), so the
/// depth budget alone does not keep it within a test thread's 2 MiB.
const PARSER_STACK_BYTES: usize = 64 * 1024 * 1024;

type YamlError = (String, Option<(u32, u32)>);

/// Parses every non-empty document, on a thread with a large stack.
fn parse_yaml(text: &str) -> Result<Vec<Spanned<YamlNode>>, YamlError> {
    let parse = || {
        serde_saphyr::from_multiple_with_options::<Spanned<YamlNode>>(text, yaml_options())
            .map_err(|e| yaml_error(&e))
    };
    std::thread::scope(|scope| {
        match std::thread::Builder::new()
            .name("yaml-parser".to_owned())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, parse)
        {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread available: parse here, within the depth budget.
            Err(_) => parse(),
        }
    })
}

/// The line of every document start, in order (empty documents included),
/// so that a line can be mapped to its document.
fn document_starts(text: &str) -> Vec<u32> {
    use serde_saphyr::granit_parser::{Event, Parser};
    let mut starts = Vec::new();
    for event in Parser::new_from_str(text) {
        match event {
            Ok((Event::DocumentStart(..), span)) => starts.push(clamp(span.start.line() as u64)),
            Ok((Event::StreamEnd, _)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    starts
}

fn document_of(starts: &[u32], line: u32) -> u32 {
    clamp(starts.partition_point(|&s| s <= line).max(1) as u64)
}

/// Positions and counts as `u32` (inputs are far smaller than 4 GiB).
fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The parser's message without location or snippet, and the location.
fn yaml_error(err: &serde_saphyr::Error) -> YamlError {
    let mut inner = err.without_snippet();
    while let serde_saphyr::Error::AliasError { error, .. } = inner {
        inner = error.without_snippet();
    }
    let message: String = serde_saphyr::DefaultMessageFormatter
        .format_message(inner)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // Drop advice meant for the library's users; name the budget for ours.
    let message = match message.split_once(", set DuplicateKeyPolicy") {
        Some((head, _)) => head.to_owned(),
        None => message,
    };
    let message = match message.strip_prefix("budget breached: ") {
        Some(what) => format!("input exceeds the loader's resource limits: {what}"),
        None => message,
    };
    let loc = err
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (clamp(l.line()), clamp(l.column())));
    (message, loc)
}

/// A YAML value with the position of every child.
enum YamlNode {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Spanned<YamlNode>>),
    Map(Vec<(Spanned<YamlKey>, Spanned<YamlNode>)>),
}

/// A mapping key, as JSON sees it (scalars as their text).
struct YamlKey(String);

impl<'de> Deserialize<'de> for YamlNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = YamlNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<YamlNode, E> {
        Ok(YamlNode::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<YamlNode, E> {
        Ok(YamlNode::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlNode, D::Error> {
        YamlNode::deserialize(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<YamlNode, D::Error> {
        YamlNode::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<YamlNode, E> {
        Ok(YamlNode::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<YamlNode, E> {
        Ok(YamlNode::I64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<YamlNode, E> {
        Ok(YamlNode::U64(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<YamlNode, E> {
        Ok(match i64::try_from(v) {
            Ok(v) => YamlNode::I64(v),
            Err(_) => match u64::try_from(v) {
                Ok(v) => YamlNode::U64(v),
                Err(_) => YamlNode::F64(v as f64),
            },
        })
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<YamlNode, E> {
        Ok(match u64::try_from(v) {
            Ok(v) => YamlNode::U64(v),
            Err(_) => YamlNode::F64(v as f64),
        })
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<YamlNode, E> {
        Ok(YamlNode::F64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<YamlNode, E> {
        Ok(YamlNode::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<YamlNode, E> {
        Ok(YamlNode::Str(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<YamlNode, E> {
        String::from_utf8(v.to_vec())
            .map(YamlNode::Str)
            .map_err(|_| E::custom("binary values that are not UTF-8 text are not supported"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(YamlNode::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlNode, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(YamlNode::Map(entries))
    }
}

impl<'de> Deserialize<'de> for YamlKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = YamlKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar mapping key")
    }

    fn visit_unit<E: de::Error>(self) -> Result<YamlKey, E> {
        Ok(YamlKey("null".to_owned()))
    }

    fn visit_none<E: de::Error>(self) -> Result<YamlKey, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlKey, D::Error> {
        YamlKey::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<YamlKey, E> {
        Ok(YamlKey(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<YamlKey, E> {
        Ok(YamlKey(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<YamlKey, A::Error> {
        Err(de::Error::custom(
            "a mapping key must be a scalar, not a sequence",
        ))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<YamlKey, A::Error> {
        Err(de::Error::custom(
            "a mapping key must be a scalar, not a mapping",
        ))
    }
}

/// Converts to JSON, dropping map entries whose value is null (Go leaves
/// the zero value), and records the position of every path.
fn to_json(node: Spanned<YamlNode>, path: &mut String, spans: &mut HashMap<String, Pos>) -> Value {
    spans.entry(path.clone()).or_insert(Pos {
        line: clamp(node.referenced.line()),
        column: clamp(node.referenced.column()),
    });
    match node.value {
        YamlNode::Null => Value::Null,
        YamlNode::Bool(b) => Value::Bool(b),
        YamlNode::I64(v) => Value::from(v),
        YamlNode::U64(v) => Value::from(v),
        YamlNode::F64(v) => serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        YamlNode::Str(s) => Value::String(s),
        YamlNode::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(to_json(item, path, spans));
                path.truncate(len);
            }
            Value::Array(out)
        }
        YamlNode::Map(entries) => {
            let mut out = Map::new();
            for (key, value) in entries {
                if matches!(value.value, YamlNode::Null) {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.value.0);
                // Entries are located at their key.
                spans.insert(
                    path.clone(),
                    Pos {
                        line: clamp(key.referenced.line()),
                        column: clamp(key.referenced.column()),
                    },
                );
                let value = to_json(value, path, spans);
                path.truncate(len);
                out.insert(key.value.0, value);
            }
            Value::Object(out)
        }
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Loaded, LoadError> {
        load_with(LoadOptions::default(), text)
    }

    fn load_with(opts: LoadOptions, text: &str) -> Result<Loaded, LoadError> {
        let mut loader = Loader::new(opts);
        loader.add_str("config.yaml", text)?;
        Ok(loader.finish())
    }

    const POOL: &str = "\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: a
spec:
  addresses:
  - 192.0.2.0/24
";

    #[test]
    fn loads_a_pool() {
        let loaded = load(POOL).unwrap();
        assert_eq!(loaded.resources.pools.len(), 1);
        let pool = &loaded.resources.pools[0];
        assert_eq!(pool.metadata.name.as_deref(), Some("a"));
        assert_eq!(pool.metadata.namespace.as_deref(), Some("metallb-system"));
        assert_eq!(pool.spec.addresses, ["192.0.2.0/24"]);
        assert!(loaded.warnings.is_empty());
        assert!(loaded.notes.is_empty());
        let obj = &loaded.objects[0];
        assert_eq!(obj.kind, "IPAddressPool");
        assert_eq!(obj.api_version, "metallb.io/v1beta1");
        assert_eq!(obj.name, "a");
        assert_eq!(obj.at.short(), "config.yaml:1");
        assert_eq!(obj.at.document, Some(1));
        assert!(obj.in_configuration);
    }

    #[test]
    fn syntax_error_names_document_line_and_column() {
        let text = format!("{POOL}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: [x\n");
        let err = load(&text).unwrap_err();
        let LoadError::Syntax { at, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(at.file, "config.yaml");
        assert_eq!(at.document, Some(2));
        assert!(matches!(at.line, Some(12 | 13)), "{err}");
        assert!(at.column.is_some());
        assert!(
            err.to_string()
                .starts_with("config.yaml: document 2, line 1"),
            "{err}"
        );
    }

    #[test]
    fn syntax_error_after_empty_documents() {
        let text = "---\n---\n# nothing\n---\nkind: x\n  bad: indentation\n";
        let err = load(text).unwrap_err();
        let LoadError::Syntax { at, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(at.document, Some(3), "{err}");
        assert_eq!(at.line, Some(6), "{err}");
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let err = load("apiVersion: v1\nkind: Node\nkind: Node\n").unwrap_err();
        assert!(matches!(err, LoadError::Syntax { .. }), "{err:?}");
    }

    #[test]
    fn type_error_has_path_and_line() {
        let text = "\
---
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: p
spec:
  myASN: 64512
  peerPort: x
";
        let err = load(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 2, line 12: spec.peerPort: invalid type: string \"x\", expected u16"
        );
        let LoadError::Decode { at, path, .. } = err else {
            panic!()
        };
        assert_eq!(path, "spec.peerPort");
        assert_eq!(at.column, Some(3));
    }

    #[test]
    fn type_error_in_a_list_element() {
        let text = "\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: a
spec:
  addresses:
  - 192.0.2.0/24
  - {cidr: 198.51.100.0/24}
";
        let err = load(text).unwrap_err();
        let LoadError::Decode { at, path, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, "spec.addresses[1]");
        assert_eq!(at.line, Some(8), "{err}");
    }

    #[test]
    fn invalid_duration_is_a_decode_error() {
        let text = "\
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: p
spec:
  holdTime: 90x
";
        let err = load(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 6: spec.holdTime: time: invalid duration \"90x\""
        );
    }

    #[test]
    fn unknown_fields_are_warnings_with_path_and_line() {
        let text = "\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: a
  labelz: {x: y}
spec:
  adresses:
  - 192.0.2.0/24
";
        let loaded = load(text).unwrap();
        let paths: Vec<_> = loaded
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.at.line))
            .collect();
        assert_eq!(
            paths,
            [("metadata.labelz", Some(5)), ("spec.adresses", Some(7))]
        );
        assert_eq!(
            loaded.warnings[1].to_string(),
            "config.yaml: document 1, line 7: IPAddressPool/a: unknown field \"spec.adresses\""
        );
        // Decoded as the zero value.
        assert!(loaded.resources.pools[0].spec.addresses.is_empty());
    }

    #[test]
    fn unknown_fields_are_errors_when_strict() {
        let text = POOL.replace("  addresses:", "  adresses:");
        let opts = LoadOptions {
            strict: true,
            ..LoadOptions::default()
        };
        let err = load_with(opts, &text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 6: IPAddressPool/a: unknown field \"spec.adresses\""
        );
        assert!(matches!(err, LoadError::UnknownField { .. }));
    }

    #[test]
    fn unknown_fields_in_nested_lists() {
        let text = "\
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: l2
spec:
  nodeSelectors:
  - matchLabels: {a: b}
    matchLabelz: {c: d}
";
        let loaded = load(text).unwrap();
        assert_eq!(loaded.warnings.len(), 1);
        assert_eq!(loaded.warnings[0].path, "spec.nodeSelectors[0].matchLabelz");
        assert_eq!(loaded.warnings[0].at.line, Some(8));
    }

    #[test]
    fn nulls_are_stripped() {
        let text = "\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: a
  labels: ~
spec:
  addresses: null
  autoAssign:
  avoidBuggyIPs: true
";
        let loaded = load(text).unwrap();
        let pool = &loaded.resources.pools[0];
        assert!(pool.spec.addresses.is_empty());
        assert_eq!(pool.spec.auto_assign, None);
        assert!(pool.spec.avoid_buggy_ips);
        assert_eq!(
            loaded.objects[0].value,
            serde_json::json!({
                "apiVersion": "metallb.io/v1beta1",
                "kind": "IPAddressPool",
                "metadata": {"name": "a"},
                "spec": {"avoidBuggyIPs": true},
            })
        );
    }

    #[test]
    fn missing_spec_is_empty() {
        let text = "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata:\n  name: l2\n";
        let loaded = load(text).unwrap();
        assert_eq!(loaded.resources.l2_advertisements.len(), 1);
        assert_eq!(
            loaded.resources.l2_advertisements[0].spec,
            v1beta1::L2AdvertisementSpec::default()
        );
        // The stored value stays as written.
        assert!(loaded.objects[0].value.get("spec").is_none());
        // Also with `spec: null`.
        let loaded = load(&format!("{text}spec:\n")).unwrap();
        assert_eq!(loaded.resources.l2_advertisements.len(), 1);
    }

    #[test]
    fn v1beta1_peer_is_converted() {
        let text = "\
apiVersion: metallb.io/v1beta1
kind: BGPPeer
metadata:
  name: p
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 192.0.2.1
  holdTime: 0s
  keepaliveTime: 30s
  nodeSelectors:
  - matchLabels: {rack: a}
";
        let loaded = load(text).unwrap();
        let peer = &loaded.resources.peers[0];
        assert_eq!(peer.spec.my_asn, 64512);
        assert_eq!(peer.spec.peer_asn, 64513);
        assert_eq!(peer.spec.address, "192.0.2.1");
        assert_eq!(peer.spec.port, 179);
        assert_eq!(peer.spec.hold_time, None);
        assert_eq!(
            peer.spec.keepalive_time.as_ref().map(|d| d.as_str()),
            Some("30s")
        );
        assert_eq!(peer.spec.node_selectors.len(), 1);
        assert_eq!(peer.metadata.namespace.as_deref(), Some("metallb-system"));
        assert_eq!(loaded.objects[0].api_version, "metallb.io/v1beta1");
    }

    #[test]
    fn other_kinds_are_skipped_with_a_note() {
        let text = format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec: [1, 2]\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n---\n{POOL}"
        );
        let loaded = load(&text).unwrap();
        let notes: Vec<_> = loaded.notes.iter().map(|n| n.message.as_str()).collect();
        assert_eq!(
            notes,
            [
                "skipping v1 Service web: not a configuration kind",
                "skipping apps/v1 Deployment d: not a configuration kind",
                "skipping v1 ConfigMap other: not a configuration kind",
            ]
        );
        assert_eq!(
            loaded.notes[1].to_string(),
            "config.yaml: document 2, line 6: skipping apps/v1 Deployment d: not a configuration kind"
        );
        assert_eq!(loaded.resources.pools.len(), 1);
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(loaded.objects[0].at.document, Some(4));
    }

    #[test]
    fn core_kinds() {
        let text = "\
apiVersion: v1
kind: Secret
metadata: {name: s}
type: kubernetes.io/basic-auth
stringData: {password: x}
---
apiVersion: v1
kind: Node
metadata: {name: n1, namespace: elsewhere, labels: {rack: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: web}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bgpextras}
data: {extras: x}
";
        let loaded = load(text).unwrap();
        let r = &loaded.resources;
        assert_eq!(r.secrets.len(), 1);
        assert_eq!(r.nodes.len(), 1);
        assert_eq!(r.namespaces.len(), 1);
        assert!(r.bgp_extras.is_some());
        assert_eq!(
            r.secrets[0].metadata.namespace.as_deref(),
            Some("metallb-system")
        );
        assert_eq!(r.nodes[0].metadata.namespace.as_deref(), Some("elsewhere"));
        assert_eq!(loaded.objects[1].namespace, None);
        assert!(loaded.notes.is_empty(), "{:?}", loaded.notes);
    }

    #[test]
    fn unknown_fields_in_core_kinds() {
        let text = "\
apiVersion: v1
kind: Secret
metadata:
  name: s
strinData:
  password: x
";
        let loaded = load(text).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert_eq!(loaded.warnings[0].path, "strinData");
        assert_eq!(loaded.warnings[0].at.line, Some(5));
    }

    #[test]
    fn other_namespaces_are_ignored() {
        let text = format!(
            "{POOL}---\n{}---\n{}",
            POOL.replace("name: a", "name: b\n  namespace: other"),
            POOL.replace("name: a", "name: c\n  namespace: metallb-system")
        );
        let loaded = load(&text).unwrap();
        let names: Vec<_> = loaded
            .resources
            .pools
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(loaded.objects.len(), 3);
        assert!(!loaded.objects[1].in_configuration);
        assert_eq!(loaded.objects[1].namespace.as_deref(), Some("other"));
        assert_eq!(
            loaded.notes[0].message,
            "ignoring IPAddressPool/b in namespace other: MetalLB reads only its own namespace, metallb-system"
        );

        // With another configured namespace, unqualified objects go there.
        let opts = LoadOptions {
            namespace: "other".to_owned(),
            ..LoadOptions::default()
        };
        let loaded = load_with(opts, &text).unwrap();
        let names: Vec<_> = loaded
            .resources
            .pools
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            loaded.resources.pools[0].metadata.namespace.as_deref(),
            Some("other")
        );
    }

    #[test]
    fn lists() {
        let text = "\
apiVersion: v1
kind: List
items:
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: a}
  spec: {addresses: [192.0.2.0/24]}
- apiVersion: v1
  kind: Service
  metadata: {name: web}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPoolList
items:
- metadata: {name: b}
  spec:
    addresses: [198.51.100.0/24]
    autoAsign: false
- metadata: {name: c}
  spec: {addresses: 203.0.113.0/24}
";
        let err = load(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 2, line 20: items[1].spec.addresses: invalid type: string \"203.0.113.0/24\", expected a sequence"
        );
        let text = text.replace(
            "{addresses: 203.0.113.0/24}",
            "{addresses: [203.0.113.0/24]}",
        );
        let loaded = load(&text).unwrap();
        assert_eq!(loaded.resources.pools.len(), 3);
        assert_eq!(loaded.notes.len(), 1);
        assert_eq!(loaded.notes[0].at.line, Some(8));
        assert_eq!(loaded.warnings.len(), 1);
        assert_eq!(loaded.warnings[0].path, "items[0].spec.autoAsign");
        assert_eq!(loaded.warnings[0].at.line, Some(18));
        assert_eq!(loaded.objects[1].at.document, Some(2));
        assert_eq!(loaded.objects[1].at.line, Some(15));
        assert_eq!(loaded.objects[1].kind, "IPAddressPool");
    }

    #[test]
    fn unknown_metallb_versions_and_kinds_are_errors() {
        let err = load(&POOL.replace("v1beta1", "v1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 1: IPAddressPool a: unknown apiVersion \"metallb.io/v1\"; IPAddressPool is served as metallb.io/v1beta1"
        );
        let err = load(&POOL.replace("IPAddressPool", "IPAdressPool")).unwrap_err();
        assert!(matches!(err, LoadError::UnknownKind { .. }), "{err:?}");
        let err = load(&POOL.replace("metallb.io/v1beta1", "metallb.io/v1beta3")).unwrap_err();
        assert!(
            matches!(err, LoadError::UnknownApiVersion { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn missing_type_meta_and_name() {
        let err = load("---\n---\nkind: IPAddressPool\nmetadata: {name: a}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 2, line 3: missing apiVersion"
        );
        let err = load("apiVersion: v1\nmetadata: {name: a}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 1: missing kind"
        );
        let err = load("apiVersion: 1\nkind: x\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 1: apiVersion: invalid type: integer `1`, expected a string"
        );
        let err = load("apiVersion: metallb.io/v1beta1\nkind: Community\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 1: missing metadata.name"
        );
        let err = load("- a\n- b\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.yaml: document 1, line 1: expected an object (a mapping), found a list"
        );
    }

    #[test]
    fn empty_documents_are_skipped() {
        let loaded = load("").unwrap();
        assert!(loaded.objects.is_empty());
        let loaded = load("# only a comment\n---\n---\n...\n").unwrap();
        assert!(loaded.objects.is_empty());
        assert!(loaded.notes.is_empty());
        let loaded = load(&format!("---\n~\n---\n{POOL}")).unwrap();
        assert_eq!(loaded.objects[0].at.document, Some(2));
        assert_eq!(loaded.objects[0].at.line, Some(4));
    }

    #[test]
    fn redefinition_is_kept_for_parse_to_report() {
        let text = format!(
            "{POOL}---\n{}",
            POOL.replace("192.0.2.0/24", "198.51.100.0/24")
        );
        let loaded = load(&text).unwrap();
        assert_eq!(loaded.resources.pools.len(), 2);
        assert!(loaded.objects[0].in_configuration && loaded.objects[1].in_configuration);
        assert!(
            loaded.notes[0].message.contains("defined twice"),
            "{:?}",
            loaded.notes
        );
        let err = crate::parse(&loaded.resources).unwrap_err();
        assert_eq!(err.message, "duplicate definition of pool \"a\"");
    }

    #[test]
    fn json_input() {
        let text = r#"{"apiVersion": "metallb.io/v1beta1", "kind": "Community",
  "metadata": {"name": "c"},
  "spec": {"communities": [{"name": "x", "value": "64512:1"}]}}"#;
        let loaded = load(text).unwrap();
        assert_eq!(
            loaded.resources.communities[0].spec.communities[0].value,
            "64512:1"
        );
    }

    #[test]
    fn alias_bomb_is_rejected() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        text.push_str("apiVersion: v1\nkind: Node\nmetadata: {name: *a11}\n");
        let start = std::time::Instant::now();
        let err = load(&text).unwrap_err();
        assert!(matches!(err, LoadError::Syntax { .. }), "{err:?}");
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn deep_nesting_is_rejected() {
        let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(load(&text), Err(LoadError::Syntax { .. })));
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&" ".repeat(i));
            text.push_str("a:\n");
        }
        assert!(matches!(load(&text), Err(LoadError::Syntax { .. })));
    }

    #[test]
    fn size_limit() {
        let opts = LoadOptions {
            max_file_bytes: 10,
            ..LoadOptions::default()
        };
        let err = load_with(opts, POOL).unwrap_err();
        assert!(matches!(err, LoadError::TooLarge { limit: 10, .. }));
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let inputs = [
            "\u{feff}apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
            "? [a, b]\n: c\n",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {1: 2, true: ~, null: x}}\n",
            "!!binary aGVsbG8=\n",
            "apiVersion: v1\nkind: List\nitems: 3\n",
            "apiVersion: v1\nkind: List\nitems: [3]\n",
            "kind: IPAddressPoolList\napiVersion: metallb.io/v1beta1\nitems: [{}]\n",
            "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: b}\nspec: {receiveInterval: 1e400}\n",
            "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: b}\nspec: {receiveInterval: -1}\n",
            "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: b}\nspec: {receiveInterval: 99999999999999999999999}\n",
            "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: b}\nspec: .nan\n",
            "&a [*a]\n",
            "*unknown\n",
            "a: !include /etc/passwd\n",
            "<<: *x\n",
            "\t\n:\n-",
            "%YAML 1.1\n---\nkind: x\n",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {password: '!!!'}\n",
        ];
        for input in inputs {
            let _ = load(input);
        }
    }
}
