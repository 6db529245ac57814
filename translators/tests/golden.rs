//! Golden tests: each `tests/golden/<case>.input.json` is translated and the result compared,
//! byte for byte, with `tests/golden/<case>.expected.json`.
//!
//! An input file holds:
//! - `translator`: `global`, `node`, `pod`, `service`, `endpoints`, `endpointslices` or
//!   `networkpolicy`;
//! - `object`: the Kubernetes object (absent for `global`);
//! - `dependency` (optional): the Pod's Node or the Endpoints' Service; for
//!   `endpointslices` (object: the Service) the list of EndpointSlices; for a NetworkPolicy
//!   `{"namespaces": [Namespace…], "pods": [Pod…]}` (its `object` may also be a list of
//!   NetworkPolicies: the output is each policy's Translation, then the group Translations
//!   they share);
//! - `config` (optional): `{tenant, version}`, default tenant `midonetkube`, version `1`;
//! - `edge` (optional): the edge settings file's content (`--edge-config`).
//!
//! Without a `config`, a case runs at version 1, whose output every cluster translated by
//! version 1 holds and which a rollback to version 1 must find unchanged; each case is also
//! run at version 2, where only the Translation names differ beside the IDs (which every
//! version seeds): `names-v2.json` holds them, per case.
//!
//! Regenerate the expected files with `UPDATE_GOLDEN=1 cargo test -p midonet-translators
//! --test golden`, then review the diff: the expected files are the specification.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use midonet_translators::naming::is_dns1123_subdomain;
use midonet_translators::{SliceView, Translated, TranslatorConfig};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    translator: String,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    dependency: Option<Value>,
    #[serde(default)]
    config: Option<Config>,
    /// The edge settings (`--edge-config`), as the file is written.
    #[serde(default)]
    edge: Option<midonet_translators::edge_spec::EdgeSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    tenant: String,
    version: String,
}

fn parse<T: serde::de::DeserializeOwned>(v: Option<Value>, what: &str) -> T {
    serde_json::from_value(v.unwrap_or_else(|| panic!("{what} is required")))
        .unwrap_or_else(|e| panic!("bad {what}: {e}"))
}

fn parse_opt<T: serde::de::DeserializeOwned>(v: Option<Value>) -> Option<T> {
    v.map(|v| serde_json::from_value(v).expect("bad dependency"))
}

/// The version a case without `config` runs at, and the one its names are also shown at.
const CASE_VERSION: &str = "1";
const READABLE_VERSION: &str = "2";

fn run(case: Case, default_version: &str) -> Translated {
    let edge = case.edge.as_ref().map(|e| {
        std::sync::Arc::new(
            e.validate()
                .unwrap_or_else(|errs| panic!("bad edge: {errs:?}")),
        )
    });
    let mut cfg = case
        .config
        .map(|c| TranslatorConfig {
            tenant: c.tenant,
            version: c.version,
            edge: None,
        })
        .unwrap_or_else(|| TranslatorConfig {
            version: default_version.to_string(),
            ..TranslatorConfig::default()
        });
    cfg.edge = edge;
    match case.translator.as_str() {
        "global" => Translated {
            translations: midonet_translators::global(&cfg),
            warnings: Vec::new(),
        },
        "node" => midonet_translators::node(&cfg, &parse::<Node>(case.object, "object")),
        "pod" => midonet_translators::pod(
            &cfg,
            &parse::<Pod>(case.object, "object"),
            parse_opt::<Node>(case.dependency).as_ref(),
        ),
        "service" => midonet_translators::service(&cfg, &parse::<Service>(case.object, "object")),
        "endpoints" => midonet_translators::endpoints(
            &cfg,
            &parse::<Endpoints>(case.object, "object"),
            parse_opt::<Service>(case.dependency).as_ref(),
        ),
        "endpointslices" => {
            let slices: Vec<EndpointSlice> = parse(case.dependency, "dependency");
            midonet_translators::endpoint_slices(
                &cfg,
                &parse::<Service>(case.object, "object"),
                slices.iter().map(SliceView::from),
            )
        }
        "networkpolicy" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct View {
                namespaces: Vec<k8s_openapi::api::core::v1::Namespace>,
                pods: Vec<Pod>,
            }
            let view: View = parse(case.dependency, "dependency");
            let cluster = midonet_translators::PolicyCluster::new(&view.namespaces, &view.pods);
            // One policy, or a list of them: each policy's Translation, then the shared
            // group Translations they use.
            let object = case.object.expect("object is required");
            let policies: Vec<NetworkPolicy> = match object {
                Value::Array(_) => serde_json::from_value(object).expect("bad object"),
                one => vec![serde_json::from_value(one).expect("bad object")],
            };
            let mut out = Translated::default();
            for np in &policies {
                let one = midonet_translators::network_policy(&cfg, np, &cluster);
                out.translations.extend(one.translations);
                out.warnings.extend(one.warnings);
            }
            out.translations.extend(midonet_translators::address_groups(
                &cfg, &policies, &cluster,
            ));
            out
        }
        other => panic!("unknown translator {other:?}"),
    }
}

/// Invariants every output must satisfy, whatever the case.
fn check_invariants(name: &str, out: &Translated) {
    for tr in &out.translations {
        assert!(
            is_dns1123_subdomain(&tr.name),
            "{name}: bad Translation name {:?}",
            tr.name
        );
        assert!(
            !tr.resources.is_empty(),
            "{name}: empty Translation {}",
            tr.name
        );
        for r in &tr.resources {
            let body: Value = serde_json::from_str(&r.body).expect("body is JSON");
            assert!(
                body.is_object(),
                "{name}: body of {} is not an object",
                r.kind
            );
        }
    }
    for w in &out.warnings {
        assert!(!w.reason.is_empty() && w.reason.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn update() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

/// Every case: its name and its input.
fn cases() -> Vec<(String, Case)> {
    let mut inputs: Vec<PathBuf> = fs::read_dir(golden_dir())
        .expect("tests/golden exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".input.json"))
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no golden cases found");
    inputs
        .iter()
        .map(|input| {
            let file = input.file_name().unwrap().to_string_lossy().to_string();
            let case: Case = serde_json::from_str(&fs::read_to_string(input).unwrap())
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            (file.trim_end_matches(".input.json").to_string(), case)
        })
        .collect()
}

/// The names each case's Translations get at version 2 (a case with its own `config`
/// keeps it): `namespace/name`, in output order. Every name is at most 253 characters and
/// says its kind and version (but the version-independent tunnel-zone memberships).
#[test]
fn names_at_version_2() {
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (case_name, case) in cases() {
        let out = run(case, READABLE_VERSION);
        check_invariants(&case_name, &out);
        for tr in &out.translations {
            let version = &tr.labels["midonet.org/translation-version"];
            let (kind, rest) = tr.name.split_once('.').unwrap();
            assert!(
                kind == "node-tunnel-endpoint" || rest.starts_with(&format!("{version}.")),
                "{case_name}: {} does not say its version",
                tr.name
            );
        }
        let list = out
            .translations
            .iter()
            .map(|t| format!("{}/{}", t.namespace, t.name))
            .collect();
        names.insert(case_name, list);
    }
    let actual = serde_json::to_string_pretty(&names).unwrap() + "\n";
    let path = golden_dir().join("names-v2.json");
    if update() {
        fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "names-v2.json differs (UPDATE_GOLDEN=1 regenerates):\n{actual}"
    );
}

#[test]
fn golden() {
    let update = update();
    let mut failures = Vec::new();
    for (case_name, case) in cases() {
        let out = run(case, CASE_VERSION);
        check_invariants(&case_name, &out);
        let actual = serde_json::to_string_pretty(&out).unwrap() + "\n";
        let expected_path = golden_dir().join(format!("{case_name}.expected.json"));
        if update {
            fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => {
                let line = expected
                    .lines()
                    .zip(actual.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(expected.lines().count().min(actual.lines().count()));
                failures.push(format!(
                    "{case_name}: differs from line {}:\n  expected: {}\n  actual:   {}",
                    line + 1,
                    expected.lines().nth(line).unwrap_or("<end>"),
                    actual.lines().nth(line).unwrap_or("<end>"),
                ));
            }
            Err(_) => failures.push(format!("{case_name}: {expected_path:?} is missing")),
        }
    }
    // An expected file without its input would silently stop being checked.
    for entry in fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(case_name) = file.strip_suffix(".expected.json") {
            if !golden_dir()
                .join(format!("{case_name}.input.json"))
                .exists()
            {
                failures.push(format!("{file} has no input file"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatches (UPDATE_GOLDEN=1 regenerates):\n{}",
        failures.join("\n")
    );
}
