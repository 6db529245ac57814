//! The crate's module layering (documented in `src/lib.rs`, "Layers") and its source
//! conventions, checked on the source text.
//!
//! - Every module is in exactly one layer, and uses (`crate::<module>`) only modules of
//!   lower layers: no import cycle, and no per-kind translator uses another.
//! - A file's test module is its last item: no code after the tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers as `src/lib.rs` documents them: module name → layer.
fn documented_layers(lib: &str) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! - layer ") else {
            continue;
        };
        let (n, modules) = rest.split_once(':').expect("`//! - layer N: ...`");
        let n: usize = n.trim().parse().expect("a layer number");
        for m in modules.split(',') {
            let m = m.trim().trim_matches('`');
            assert!(
                layers.insert(m.to_string(), n).is_none(),
                "{m} is in two layers"
            );
        }
    }
    layers
}

/// The modules `src/lib.rs` declares.
fn declared_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub mod ")
                .or(l.trim().strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';').to_string())
        .collect()
}

/// Every source file with the top-level module it belongs to (`model/json.rs` → `model`).
fn sources() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(src()).unwrap();
            let first = rel.components().next().unwrap().as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
            out.push((module, path));
        }
    }
    out.sort();
    out
}

/// The modules a source uses through `crate::<module>` outside comments.
fn uses(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default();
        assert!(
            !code.contains("crate::{"),
            "write one `crate::<module>` path per use, so that it can be checked: {line}"
        );
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push(module);
        }
    }
    out
}

/// What `module`'s `source` uses against the layering: one message per use of a module of
/// its own layer or above, or of none.
fn violations(layers: &BTreeMap<String, usize>, module: &str, source: &str) -> Vec<String> {
    let layer = layers[module];
    uses(source)
        .into_iter()
        .filter(|used| used != module)
        .filter_map(|used| match layers.get(&used) {
            None => Some(format!("uses crate::{used}, in no layer")),
            Some(&l) if l >= layer => Some(format!(
                "(layer {layer}) uses crate::{used} (layer {l}): only lower layers may be used"
            )),
            Some(_) => None,
        })
        .collect()
}

#[test]
fn every_module_uses_only_lower_layers() {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let layers = documented_layers(&lib);
    for m in declared_modules(&lib) {
        assert!(
            layers.contains_key(&m),
            "module {m} is in no layer (src/lib.rs)"
        );
    }
    let mut checked = 0;
    for (module, path) in sources() {
        if module == "lib" {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        checked += uses(&text).len();
        let bad = violations(&layers, &module, &text);
        assert!(bad.is_empty(), "{}: {bad:?}", path.display());
    }
    assert!(
        checked > 50,
        "only {checked} uses found: is the scan broken?"
    );
}

/// The check can fail: a per-kind translator using another, or a lower layer using a higher
/// one, is reported; comments are not code.
#[test]
fn the_check_refuses_a_cycle() {
    let layers = documented_layers(&fs::read_to_string(src().join("lib.rs")).unwrap());
    let node = "use crate::ids::sub_id;\n// crate::pod in a comment\nlet p = crate::pod::x();";
    assert_eq!(uses(node), ["ids", "pod"]);
    assert_eq!(violations(&layers, "node", node).len(), 1);
    assert_eq!(
        violations(&layers, "topology", "use crate::node::x;").len(),
        1
    );
    assert_eq!(
        violations(&layers, "topology", "use crate::nowhere::x;").len(),
        1
    );
    assert!(violations(&layers, "node", "use crate::topology::x;").is_empty());
}

/// The first line of code after the test module (`mod tests {` … `}` in column 0), if any.
fn code_after_tests(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| *l == "mod tests {")?;
    let end = start + lines[start..].iter().position(|l| *l == "}")?;
    lines[end + 1..]
        .iter()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.to_string())
}

#[test]
fn tests_come_last() {
    for (_, path) in sources() {
        let text = fs::read_to_string(&path).unwrap();
        if let Some(line) = code_after_tests(&text) {
            panic!("{}: code after the test module: {line}", path.display());
        }
    }
    let late = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n\nfn b() {}\n";
    assert_eq!(code_after_tests(late).as_deref(), Some("fn b() {}"));
}
