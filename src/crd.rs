//! The `Translation` custom resource (`midonet.org/v1`) and its CustomResourceDefinition.
//!
//! The Rust type is written by hand rather than derived: a Translation written by the
//! original Go controller has no `spec` (its list is a top-level `resources` field), and a
//! watch must never fail to decode such an object. Every field therefore has a default.
//! The CRD's structural schema is built next to the type in [`crd`] and printed by the
//! `crd` subcommand into `crds/translation.yaml`.
//!
//! A Translation in the informer's cache keeps its labels outside `metadata.labels`
//! ([`CachedLabels`]): read them with [`Translation::label`] and
//! [`Translation::labels_iter`], never `ResourceExt::labels` (`clippy.toml` refuses it).
//! Its identity is [`Translation::key`]. Every controller deletes a Translation with
//! [`delete_translation`], which deletes only the very object it names.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

pub use midonet_translators::TranslationResource;

pub const GROUP: &str = "midonet.org";
pub const VERSION: &str = "v1";
pub const KIND: &str = "Translation";
pub const PLURAL: &str = "translations";
pub const CRD_NAME: &str = "translations.midonet.org";

/// Pattern of a backend kind name.
pub const KIND_PATTERN: &str = "^[A-Z][A-Za-z0-9]*$";
/// Pattern of a parent: a lowercase UUID or the empty string.
pub const PARENT_PATTERN: &str =
    "^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$";
/// Pattern of a body: a JSON object serialised as a string.
pub const BODY_PATTERN: &str = "^\\{.*\\}$";

/// A Translation's identity: (namespace, name).
pub type TranslationKey = (String, String);

/// A Translation: an ordered list of backend resources made from one Kubernetes object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Translation {
    #[serde(default = "api_version", rename = "apiVersion")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<TranslationSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TranslationStatus>,
    /// The original Go controller's list (no `spec`). Read for migration only; never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<TranslationResource>>,
    /// The labels of a Translation in the informer's cache, moved out of `metadata.labels`
    /// ([`Self::compact_labels`]). Read labels with [`Self::label`] and [`Self::labels_iter`],
    /// which see both places. Never serialized.
    #[serde(skip)]
    pub cached_labels: CachedLabels,
    /// Whether the object as listed or watched carried `metadata.managedFields`, which the
    /// informer drops ([`Self::trim_for_cache`]): what `pusher::compaction` clears. Never
    /// serialized.
    #[serde(skip)]
    pub carries_managed_fields: bool,
}

/// Labels as the informer caches them: a `BTreeMap` allocates a node of room for eleven
/// entries for a Translation's two or three labels, where this list holds just them. The
/// keys the controllers read are not copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedLabels(Box<[(Cow<'static, str>, Box<str>)]>);

/// Label keys kept by reference in [`CachedLabels`].
const KNOWN_LABEL_KEYS: [&str; 4] = [
    midonet_translators::meta::OWNER_UID_LABEL,
    midonet_translators::meta::VERSION_LABEL,
    midonet_translators::meta::GLOBAL_LABEL,
    midonet_translators::policy::GROUP_LABEL,
];

impl CachedLabels {
    fn new(labels: BTreeMap<String, String>) -> Self {
        CachedLabels(
            labels
                .into_iter()
                .map(|(k, v)| {
                    let key = match KNOWN_LABEL_KEYS.iter().find(|known| **known == k) {
                        Some(known) => Cow::Borrowed(*known),
                        None => Cow::Owned(k),
                    };
                    (key, v.into_boxed_str())
                })
                .collect(),
        )
    }
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}
fn kind() -> String {
    KIND.to_string()
}

impl Translation {
    /// Ready=True for the current spec: the condition was set for this generation (a
    /// Translation the translators changed since it was pushed is not ready until pushed
    /// again), and the Translation is not being deleted.
    pub fn is_ready(&self) -> bool {
        self.metadata.deletion_timestamp.is_none()
            && self.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "True"
                        && (c.observed_generation.is_none()
                            || c.observed_generation == self.metadata.generation)
                })
            })
    }

    pub fn new(name: &str, namespace: &str, spec: TranslationSpec) -> Self {
        Translation {
            api_version: api_version(),
            kind: kind(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            status: None,
            resources: None,
            cached_labels: CachedLabels::default(),
            carries_managed_fields: false,
        }
    }

    /// Its (namespace, name). Every Translation the apiserver stores has both (the kind is
    /// namespaced), and so has every one the translators build; `None` only for an object
    /// made otherwise, which has no identity to act on.
    pub fn key(&self) -> Option<TranslationKey> {
        Some((
            self.metadata.namespace.clone()?,
            self.metadata.name.clone()?,
        ))
    }

    /// The value of label `key`, wherever it is kept (see [`Self::cached_labels`]).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels_iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn has_label(&self, key: &str) -> bool {
        self.label(key).is_some()
    }

    /// Every label, from `metadata.labels` and from the cache's compact list.
    pub fn labels_iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let in_metadata = self
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let cached = self.cached_labels.0.iter().map(|(k, v)| (&**k, &**v));
        in_metadata.chain(cached)
    }

    /// The labels as `metadata.labels` holds them, for a Translation sent to the apiserver.
    pub fn labels_map(&self) -> Option<BTreeMap<String, String>> {
        let all: BTreeMap<String, String> = self
            .labels_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (!all.is_empty()).then_some(all)
    }

    /// Moves `metadata.labels` into the compact [`CachedLabels`], for a Translation the
    /// informer keeps.
    pub fn compact_labels(&mut self) {
        if let Some(labels) = self.metadata.labels.take() {
            self.cached_labels = CachedLabels::new(labels);
        }
    }

    /// Trims a Translation the informer keeps: its labels moved into the compact list
    /// ([`Self::compact_labels`]), and its managedFields, which nothing reads, dropped but
    /// for the fact that there were some ([`Self::carries_managed_fields`]).
    pub fn trim_for_cache(&mut self) {
        self.compact_labels();
        self.carries_managed_fields = self
            .metadata
            .managed_fields
            .take()
            .is_some_and(|entries| !entries.is_empty());
    }

    /// The resources to push: `spec.resources`, or the legacy top-level list of a
    /// Translation written by the original controller.
    pub fn desired_resources(&self) -> &[TranslationResource] {
        match (&self.spec, &self.resources) {
            (Some(spec), _) => &spec.resources,
            (None, Some(legacy)) => legacy,
            (None, None) => &[],
        }
    }

    /// Item paths of the backend resources it asks for (entries that do not parse are
    /// skipped: they create nothing).
    pub fn desired_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.desired_resources()
            .iter()
            .filter_map(|e| midonet_translators::Resource::from_entry(e).ok())
            .map(|r| r.item_path())
    }

    /// True for a Translation written by the original Go controller.
    pub fn is_legacy(&self) -> bool {
        self.spec.is_none() && self.resources.is_some()
    }

    /// The Translation version this one belongs to: its version label; for one written by
    /// the original controller, which labels none, [`ORIGINAL_VERSION`] (a migration from
    /// the original is a bump from that version); `None` for a version-independent one.
    pub fn version(&self) -> Option<&str> {
        self.label(midonet_translators::meta::VERSION_LABEL)
            .or_else(|| self.is_legacy().then_some(ORIGINAL_VERSION))
    }
}

/// Deletes the Translation `namespace/name` only while it is the object whose UID is `uid`
/// (and, given `resource_version`, unchanged since): a Translation of that name created or
/// changed since is left to whoever did that. `Ok(true)`: deleted now (the finalizer may
/// keep it until the pusher has cleaned the backend); `Ok(false)`: gone already (404) or
/// no longer that object (409).
pub async fn delete_translation(
    kube: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
    resource_version: Option<String>,
) -> kube::Result<bool> {
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version,
        }),
        ..kube::api::DeleteParams::default()
    };
    let api: kube::Api<Translation> = kube::Api::namespaced(kube.clone(), namespace);
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// The version the original Go controller's Translations count as (see
/// [`Translation::version`]). No configured version can be it: `--translation-version`
/// takes lowercase letters, digits and '-'.
pub const ORIGINAL_VERSION: &str = "(original)";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TranslationSpec {
    /// Backend resources in push order (parents first). Deleted in reverse order.
    #[serde(default)]
    pub resources: Vec<TranslationResource>,
}

/// What the pusher has applied to the backend for this Translation.
///
/// Stored compactly: the record of pushed resources is `status.created`, one string per
/// resource; `status.pushed`, the list of objects older versions wrote, is read when
/// `created` is absent and never written. Hashes read are cut to the lengths the pusher
/// computes ([`BODY_HASH_HEX`], [`SPEC_HASH_HEX`]), which are prefixes of the longer ones
/// older versions recorded, so an old record compares equal to the same content pushed now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TranslationStatus {
    /// `metadata.generation` of the spec last pushed completely.
    pub observed_generation: Option<i64>,
    /// Content hash of the resource list last pushed completely.
    pub pushed_hash: Option<String>,
    /// Number of resources in the spec the pusher last processed.
    pub resource_count: Option<i64>,
    /// Backend resources that exist because of this Translation, in creation order.
    /// Deletion deletes exactly these, in reverse order.
    pub pushed: Vec<PushedResource>,
    pub conditions: Vec<Condition>,
    pub last_push_time: Option<String>,
}

/// Hex digits of a body hash (48 bits: a changed body goes unnoticed with a chance of
/// 2^-48 per change).
pub const BODY_HASH_HEX: usize = 12;
/// Hex digits of the hash of a whole resource list (`status.pushedHash`, 64 bits).
pub const SPEC_HASH_HEX: usize = 16;

/// One backend resource the pusher created (or confirmed) for a Translation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushedResource {
    pub kind: String,
    /// The resource's item path under the API base, e.g. `/ports/<uuid>`: what DELETE takes.
    pub path: String,
    /// Hash of the body last pushed, to detect changes.
    #[serde(default)]
    pub body_hash: String,
}

impl PushedResource {
    /// The entry of `status.created`: `<kind> <path> <bodyHash>` (no hash when none is
    /// known). Neither a kind nor an item path has a space.
    fn encode(&self) -> String {
        if self.body_hash.is_empty() {
            format!("{} {}", self.kind, self.path)
        } else {
            format!("{} {} {}", self.kind, self.path, self.body_hash)
        }
    }

    /// An entry of `status.created`; `None` for one without a kind and a path (written by
    /// hand: nothing it could name is addressable).
    fn decode(entry: &str) -> Option<PushedResource> {
        let mut parts = entry.split_whitespace();
        let (kind, path) = (parts.next()?, parts.next()?);
        Some(PushedResource {
            kind: kind.to_string(),
            path: path.to_string(),
            body_hash: shortened(parts.next().unwrap_or_default().to_string(), BODY_HASH_HEX),
        })
    }
}

/// `hash` cut to `len` characters (a longer one written by an older version).
fn shortened(mut hash: String, len: usize) -> String {
    if hash.len() > len && hash.is_char_boundary(len) {
        hash.truncate(len);
    }
    hash
}

/// The status as stored. Written: `created`; read: `created`, or when absent the older
/// `pushed`.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pushed_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created: Option<Vec<String>>,
    #[serde(default, skip_serializing)]
    pushed: Vec<PushedResource>,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_push_time: Option<String>,
}

impl Serialize for TranslationStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let created = (!self.pushed.is_empty())
            .then(|| self.pushed.iter().map(PushedResource::encode).collect());
        StatusWire {
            observed_generation: self.observed_generation,
            pushed_hash: self.pushed_hash.clone(),
            resource_count: self.resource_count,
            created,
            pushed: Vec::new(),
            conditions: self.conditions.clone(),
            last_push_time: self.last_push_time.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TranslationStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = StatusWire::deserialize(d)?;
        let pushed = match wire.created {
            Some(created) => created
                .iter()
                .filter_map(|e| PushedResource::decode(e))
                .collect(),
            None => wire
                .pushed
                .into_iter()
                .map(|p| PushedResource {
                    body_hash: shortened(p.body_hash, BODY_HASH_HEX),
                    ..p
                })
                .collect(),
        };
        Ok(TranslationStatus {
            observed_generation: wire.observed_generation,
            pushed_hash: wire.pushed_hash.map(|h| shortened(h, SPEC_HASH_HEX)),
            resource_count: wire.resource_count,
            pushed,
            conditions: wire.conditions,
            last_push_time: wire.last_push_time,
        })
    }
}

/// The `metadata.managedFields` a write other than an apply sends to clear them: `[{}]`
/// (an empty list is ignored). The apiserver then records no field manager on the object
/// until an apply.
pub fn managed_fields_reset() -> serde_json::Value {
    serde_json::json!([{}])
}

/// The JSON merge patch that makes the stored status `status`: its stored form, with the
/// older `pushed` list removed (a merge patch keeps what it does not name).
pub fn status_merge_patch(
    status: Option<&TranslationStatus>,
) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(status)?;
    if let Some(object) = value.as_object_mut() {
        object.insert("pushed".into(), serde_json::Value::Null);
    }
    Ok(serde_json::json!({ "status": value }))
}

/// A status condition, shaped like `metav1.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default)]
    pub reason: String,
    /// Empty (and not stored) when the reason says it all.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl kube::Resource for Translation {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn string_schema(description: &str, pattern: Option<&str>) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("string".into()),
        description: Some(description.into()),
        pattern: pattern.map(str::to_string),
        ..JSONSchemaProps::default()
    }
}

fn object_schema(
    description: &str,
    properties: Vec<(&str, JSONSchemaProps)>,
    required: &[&str],
) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("object".into()),
        description: Some(description.into()),
        properties: Some(
            properties
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect::<BTreeMap<_, _>>(),
        ),
        required: if required.is_empty() {
            None
        } else {
            Some(required.iter().map(|s| s.to_string()).collect())
        },
        ..JSONSchemaProps::default()
    }
}

fn array_schema(description: &str, items: JSONSchemaProps) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("array".into()),
        description: Some(description.into()),
        items: Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(
                Box::new(items),
            ),
        ),
        ..JSONSchemaProps::default()
    }
}

fn int_schema(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("integer".into()),
        format: Some("int64".into()),
        description: Some(description.into()),
        ..JSONSchemaProps::default()
    }
}

fn resource_entry_schema() -> JSONSchemaProps {
    object_schema(
        "One backend resource.",
        vec![
            (
                "kind",
                string_schema(
                    "Backend kind name, e.g. Bridge, Port, HostInterfacePort.",
                    Some(KIND_PATTERN),
                ),
            ),
            (
                "parent",
                string_schema(
                    "UUID of the parent resource (lowercase), or empty for top-level kinds.",
                    Some(PARENT_PATTERN),
                ),
            ),
            (
                "body",
                string_schema(
                    "The resource's JSON body (an object) as a string.",
                    Some(BODY_PATTERN),
                ),
            ),
        ],
        &["kind", "parent", "body"],
    )
}

fn condition_schema() -> JSONSchemaProps {
    object_schema(
        "A status condition.",
        vec![
            ("type", string_schema("Condition type, e.g. Ready.", None)),
            ("status", string_schema("True, False or Unknown.", None)),
            ("reason", string_schema("Machine-readable reason.", None)),
            ("message", string_schema("Human-readable message.", None)),
            (
                "lastTransitionTime",
                JSONSchemaProps {
                    format: Some("date-time".into()),
                    ..string_schema("When the status last changed.", None)
                },
            ),
            (
                "observedGeneration",
                int_schema("Generation the condition was computed for."),
            ),
        ],
        &["type", "status"],
    )
}

fn pushed_resource_schema() -> JSONSchemaProps {
    object_schema(
        "A backend resource created for this Translation (as older versions recorded it).",
        vec![
            ("kind", string_schema("Backend kind name.", None)),
            (
                "path",
                string_schema("Item path under the backend API base.", None),
            ),
            (
                "bodyHash",
                string_schema("Hash of the body last pushed.", None),
            ),
        ],
        &["kind", "path"],
    )
}

fn status_schema() -> JSONSchemaProps {
    object_schema(
        "What the pusher applied to the backend.",
        vec![
            (
                "observedGeneration",
                int_schema("Generation of the spec last pushed completely."),
            ),
            (
                "pushedHash",
                string_schema("Content hash of the resource list last pushed.", None),
            ),
            (
                "resourceCount",
                int_schema("Number of resources in the spec last processed."),
            ),
            (
                "created",
                array_schema(
                    "Backend resources that exist because of this Translation, in creation \
                     order: `<kind> <item path> <body hash>` each.",
                    string_schema("One backend resource.", None),
                ),
            ),
            (
                "pushed",
                array_schema(
                    "Legacy: the record of older versions, read when `created` is absent, \
                     never written.",
                    pushed_resource_schema(),
                ),
            ),
            (
                "conditions",
                array_schema("Conditions (Ready).", condition_schema()),
            ),
            (
                "lastPushTime",
                JSONSchemaProps {
                    format: Some("date-time".into()),
                    ..string_schema(
                        "When the backend was last changed for this Translation.",
                        None,
                    )
                },
            ),
        ],
        &[],
    )
}

fn openapi_schema() -> JSONSchemaProps {
    let resources = array_schema(
        "Backend resources in push order (parents first); deleted in reverse order.",
        resource_entry_schema(),
    );
    let status = status_schema();
    object_schema(
        "An ordered list of MidoNet backend resources made from one Kubernetes object.",
        vec![
            ("apiVersion", string_schema("API version.", None)),
            ("kind", string_schema("Kind.", None)),
            (
                "metadata",
                JSONSchemaProps {
                    type_: Some("object".into()),
                    ..JSONSchemaProps::default()
                },
            ),
            (
                "spec",
                object_schema(
                    "Desired backend resources.",
                    vec![("resources", resources.clone())],
                    &["resources"],
                ),
            ),
            ("status", status),
            (
                "resources",
                JSONSchemaProps {
                    description: Some(
                        "Legacy: the list as written by the original Go controller (no spec). \
                         Kept in the schema so such Translations are not pruned and can be \
                         deleted cleanly."
                            .into(),
                    ),
                    ..resources
                },
            ),
        ],
        &[],
    )
}

fn column(
    name: &str,
    type_: &str,
    json_path: &str,
    description: &str,
) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        description: Some(description.into()),
        ..CustomResourceColumnDefinition::default()
    }
}

/// The CustomResourceDefinition of `translations.midonet.org`.
pub fn crd() -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(CRD_NAME.into()),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            scope: "Namespaced".into(),
            names: CustomResourceDefinitionNames {
                kind: KIND.into(),
                list_kind: Some("TranslationList".into()),
                plural: PLURAL.into(),
                singular: Some("translation".into()),
                short_names: Some(vec!["tr".into()]),
                categories: Some(vec!["midonet".into()]),
            },
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(openapi_schema()),
                }),
                subresources: Some(CustomResourceSubresources {
                    status: Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceStatus(
                        serde_json::Map::new().into(),
                    )),
                    scale: None,
                }),
                additional_printer_columns: Some(vec![
                    column(
                        "Owner-Kind",
                        "string",
                        ".metadata.ownerReferences[0].kind",
                        "Kind of the Kubernetes object this Translation was made from.",
                    ),
                    column(
                        "Owner",
                        "string",
                        ".metadata.ownerReferences[0].name",
                        "Name of the Kubernetes object this Translation was made from.",
                    ),
                    column(
                        "Resources",
                        "integer",
                        ".status.resourceCount",
                        "Number of backend resources.",
                    ),
                    column(
                        "Synced",
                        "string",
                        ".status.conditions[?(@.type==\"Ready\")].status",
                        "Whether the backend matches the spec (Ready condition).",
                    ),
                    column(
                        "Reason",
                        "string",
                        ".status.conditions[?(@.type==\"Ready\")].reason",
                        "Reason of the Ready condition.",
                    ),
                    column(
                        "Age",
                        "date",
                        ".metadata.creationTimestamp",
                        "Age.",
                    ),
                ]),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    }
}

/// The CRD as the YAML document committed in `crds/translation.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    // k8s-openapi serialises apiVersion and kind first.
    let body = serde_yaml::to_string(&crd())?;
    Ok(format!(
        "# Generated by `midonet-kube-controllers crd`; do not edit by hand.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_labels_are_read_as_before_and_restored_for_a_write() {
        let mut tr = Translation::new("t", "ns", TranslationSpec::default());
        let labels: BTreeMap<String, String> = [
            (midonet_translators::meta::VERSION_LABEL, "1"),
            (midonet_translators::meta::OWNER_UID_LABEL, "u"),
            ("team", "blue"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        tr.metadata.labels = Some(labels.clone());
        let before: Vec<(String, String)> = tr
            .labels_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        tr.compact_labels();
        assert_eq!(tr.metadata.labels, None, "moved out of the metadata");
        let after: Vec<(String, String)> = tr
            .labels_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        assert_eq!(after, before);
        assert_eq!(
            tr.label(midonet_translators::meta::VERSION_LABEL),
            Some("1")
        );
        assert_eq!(tr.label("team"), Some("blue"));
        assert!(tr.has_label(midonet_translators::meta::OWNER_UID_LABEL));
        assert!(!tr.has_label(midonet_translators::meta::GLOBAL_LABEL));
        assert_eq!(tr.labels_map(), Some(labels));
        // Never serialized: what is sent carries the labels only where put back.
        let json = serde_json::to_value(&tr).unwrap();
        assert!(json["metadata"].get("labels").is_none(), "{json}");
        // Without any label there is nothing to put back.
        let bare = Translation::new("b", "ns", TranslationSpec::default());
        assert_eq!(bare.labels_map(), None);
    }

    #[test]
    fn legacy_translation_decodes() {
        let legacy = serde_json::json!({
            "apiVersion": "midonet.org/v1", "kind": "Translation",
            "metadata": {"name": "x", "namespace": "default"},
            "resources": [{"kind": "Bridge", "parent": "", "body": "{}"}]
        });
        let tr: Translation = serde_json::from_value(legacy).unwrap();
        assert!(tr.is_legacy());
        assert_eq!(tr.version(), Some(ORIGINAL_VERSION));
        assert_eq!(tr.desired_resources().len(), 1);
    }

    #[test]
    fn garbage_fields_default() {
        let tr: Translation = serde_json::from_value(serde_json::json!({"metadata": {}})).unwrap();
        assert!(tr.desired_resources().is_empty());
        assert!(!tr.is_legacy());
        // Neither labelled nor the original's: version-independent.
        assert_eq!(tr.version(), None);
    }

    const PORT_PATH: &str = "/ports/22222222-2222-4222-8222-222222222222";
    const HIP_PATH: &str =
        "/hosts/33333333-3333-4333-8333-333333333333/ports/22222222-2222-4222-8222-222222222222";

    fn record() -> Vec<PushedResource> {
        vec![
            PushedResource {
                kind: "Port".into(),
                path: PORT_PATH.into(),
                body_hash: "0123456789ab".into(),
            },
            // The cutover's and the sweep's entries carry no hash.
            PushedResource {
                kind: "HostInterfacePort".into(),
                path: HIP_PATH.into(),
                body_hash: String::new(),
            },
        ]
    }

    #[test]
    fn the_record_is_stored_one_string_per_resource_and_read_back() {
        let status = TranslationStatus {
            observed_generation: Some(2),
            pushed_hash: Some("0123456789abcdef".into()),
            resource_count: Some(2),
            pushed: record(),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Pushed".into(),
                ..Condition::default()
            }],
            last_push_time: Some("2026-01-01T00:00:00Z".into()),
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json["created"],
            serde_json::json!([
                format!("Port {PORT_PATH} 0123456789ab"),
                format!("HostInterfacePort {HIP_PATH}")
            ])
        );
        assert!(json.get("pushed").is_none(), "{json}");
        // An empty message is not stored.
        assert!(json["conditions"][0].get("message").is_none(), "{json}");
        let back: TranslationStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back, status);
        // Nothing pushed: no list at all.
        let empty = serde_json::to_value(TranslationStatus::default()).unwrap();
        assert_eq!(empty, serde_json::json!({"conditions": []}));
    }

    #[test]
    fn an_older_versions_record_reads_as_the_same_content_pushed_now() {
        // As older versions wrote it: objects, 16-digit body hashes, a 32-digit list hash.
        let old = serde_json::json!({
            "observedGeneration": 2,
            "pushedHash": "0123456789abcdef0123456789abcdef",
            "resourceCount": 2,
            "pushed": [
                {"kind": "Port", "path": PORT_PATH, "bodyHash": "0123456789abcdef"},
                {"kind": "HostInterfacePort", "path": HIP_PATH, "bodyHash": ""}
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Pushed",
                            "message": "2 backend resources in sync"}]
        });
        let status: TranslationStatus = serde_json::from_value(old).unwrap();
        assert_eq!(status.pushed, record());
        assert_eq!(status.pushed_hash.as_deref(), Some("0123456789abcdef"));
        assert_eq!(status.conditions[0].message, "2 backend resources in sync");
        // Written again, it takes the new form.
        let json = serde_json::to_value(&status).unwrap();
        assert!(
            json.get("pushed").is_none() && json["created"].is_array(),
            "{json}"
        );
        // Where both are there (a merge patch of an older version's), `created` is the record.
        let both = serde_json::json!({
            "created": [format!("Port {PORT_PATH} 0123456789ab")],
            "pushed": [{"kind": "Bridge", "path": "/bridges/x", "bodyHash": "ff"}]
        });
        let status: TranslationStatus = serde_json::from_value(both).unwrap();
        assert_eq!(status.pushed, record()[..1]);
        // A hand-written entry without a path names nothing.
        let odd = serde_json::json!({"created": ["Port", "", format!("Port {PORT_PATH}")]});
        let status: TranslationStatus = serde_json::from_value(odd).unwrap();
        assert_eq!(status.pushed.len(), 1);
        assert_eq!(status.pushed[0].path, PORT_PATH);
    }

    #[test]
    fn the_status_merge_patch_removes_an_older_versions_record() {
        let status = TranslationStatus {
            pushed: record(),
            ..TranslationStatus::default()
        };
        let patch = status_merge_patch(Some(&status)).unwrap();
        assert_eq!(patch["status"]["pushed"], serde_json::Value::Null);
        assert_eq!(patch["status"]["created"].as_array().map(Vec::len), Some(2));
        let mut stored = serde_json::json!({"status": {
            "pushed": [{"kind": "Bridge", "path": "/bridges/x", "bodyHash": "ff"}]
        }});
        json_patch::merge(&mut stored, &patch);
        let got: TranslationStatus = serde_json::from_value(stored["status"].clone()).unwrap();
        assert_eq!(got.pushed, record());
    }

    #[test]
    fn committed_crd_matches_generated() {
        let committed = include_str!("../crds/translation.yaml");
        let generated = crd_yaml().unwrap();
        assert_eq!(
            committed, generated,
            "crds/translation.yaml is stale: run `cargo run -- crd > crds/translation.yaml`"
        );
    }
}
