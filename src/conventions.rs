//! Conventions of this crate that a check guards, so that none holds by habit only.
//!
//! | convention | guarded by |
//! |---|---|
//! | a cached Translation's labels are read with `Translation::label` / `labels_iter`, never `ResourceExt::labels` (the informer keeps them outside `metadata.labels`) | `clippy.toml` (`disallowed-methods`; `#[allow]` where the object is another kind) |
//! | every retry after a failure is a [`crate::retry::RetryPolicy`] | `every_backoff_in_the_crate_is_a_retry_policy` (below) |
//! | a namespace or UID that must exist is never defaulted to `""` (an object without one is skipped or refused, see `Translation::key`) | `no_namespace_or_uid_is_defaulted` (below) |
//!
//! The source checks read this crate's `src/` as text, up to each file's test module, and
//! skip comment lines: they see what a reviewer would, not what the compiler resolves, so
//! they look for the shapes these mistakes take (listed with each check).

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Hand-rolled backoffs look like one of these: a delay doubled and capped, or the
    /// `backoff` crate's schedule built by hand.
    const HAND_ROLLED_BACKOFF: [&str; 7] = [
        "* 2).min(",
        "*= 2",
        "saturating_mul(2)",
        "checked_mul(2)",
        "mul_f64(2.0)",
        "ExponentialBackoffBuilder",
        "ExponentialBackoff {",
    ];

    /// A namespace or UID defaulted to `""`.
    const DEFAULTED_IDENTITY: [&str; 5] = [
        "namespace().unwrap_or_default()",
        "uid().unwrap_or_default()",
        "namespace.as_deref().unwrap_or_default()",
        "namespace.clone().unwrap_or_default()",
        "uid.clone().unwrap_or_default()",
    ];

    /// Files that still default a namespace or UID, and how many times at most. None
    /// left; an entry added here needs the reason the value may be absent.
    const DEFAULTED_IDENTITY_LEFT: [(&str, usize); 0] = [];

    /// The lines of `text` before its test module that are not comments, with their
    /// numbers (from 1) and their white space squeezed.
    fn code_lines(text: &str) -> Vec<(usize, String)> {
        text.lines()
            .enumerate()
            .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
            .map(|(n, l)| (n + 1, l.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect()
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// (path under `src/`, line number, line) of every code line containing one of
    /// `shapes`, in this crate's `src/`.
    fn find(shapes: &[&str]) -> Vec<(String, usize, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(files.len() > 20, "{src:?}: {} files", files.len());
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let name = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            for (n, line) in code_lines(&text) {
                if shapes.iter().any(|s| line.contains(s)) {
                    found.push((name.clone(), n, line));
                }
            }
        }
        found
    }

    fn listing(found: &[(String, usize, String)]) -> String {
        found
            .iter()
            .map(|(f, n, l)| format!("src/{f}:{n}: {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_backoff_in_the_crate_is_a_retry_policy() {
        let found: Vec<_> = find(&HAND_ROLLED_BACKOFF)
            .into_iter()
            .filter(|(f, _, _)| f != "retry.rs")
            .collect();
        assert!(
            found.is_empty(),
            "a backoff outside crate::retry (use a RetryPolicy):\n{}",
            listing(&found)
        );
    }

    #[test]
    fn no_namespace_or_uid_is_defaulted() {
        let found = find(&DEFAULTED_IDENTITY);
        let over: Vec<_> = found
            .iter()
            .filter(|(f, _, _)| {
                let left = DEFAULTED_IDENTITY_LEFT
                    .iter()
                    .find(|(known, _)| *known == f.replace('\\', "/"))
                    .map_or(0, |(_, n)| *n);
                found.iter().filter(|(g, _, _)| g == f).count() > left
            })
            .cloned()
            .collect();
        assert!(
            over.is_empty(),
            "a namespace or UID defaulted to \"\" (skip or refuse the object instead):\n{}",
            listing(&over)
        );
    }

    #[test]
    fn the_checks_see_what_they_look_for() {
        let text = "fn f() {\n    delay = (delay  * 2).min(cap);\n    // x *= 2\n    let ns = tr.namespace().unwrap_or_default();\n}\n#[cfg(test)]\nx *= 2;";
        let hits = |shapes: &[&str]| -> Vec<usize> {
            code_lines(text)
                .into_iter()
                .filter(|(_, l)| shapes.iter().any(|s| l.contains(s)))
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(hits(&HAND_ROLLED_BACKOFF), [2]);
        assert_eq!(hits(&DEFAULTED_IDENTITY), [4]);
    }
}
