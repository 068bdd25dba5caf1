//! Tests that hold docs/architecture.md and the import graph to the tree, so neither can drift:
//! every path the architecture names exists, every top-level module of src/ is named there, and
//! the modules of src/analysis import one another in one direction only (no circle, read from
//! their `super::`/`crate::analysis::` paths).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The repository paths a text names (`src/analysis/relay.rs`, `probes/include/wire.h`),
/// without placeholders such as `<concern>`.
fn named_paths(text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(
        r"\b(?:src|probes|tests|scripts|docs|wrappers|benches)/[A-Za-z0-9_./<>-]*[A-Za-z0-9_]",
    )
    .unwrap();
    re.find_iter(text)
        .map(|m| m.as_str().to_string())
        .filter(|p| !p.contains('<'))
        .collect()
}

#[test]
fn every_path_the_architecture_names_exists_and_every_module_is_named() {
    let doc = read(&repo().join("docs/architecture.md"));
    let named = named_paths(&doc);
    let missing: Vec<&String> = named.iter().filter(|p| !repo().join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
    let mut unnamed = Vec::new();
    for e in std::fs::read_dir(repo().join("src")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.strip_suffix(".rs").unwrap_or(&name).to_string();
        if matches!(module.as_str(), "lib" | "main") || module.ends_with("_tests") {
            continue;
        }
        let re = regex::Regex::new(&format!(r"\bsrc/{}(\.rs|/|\b)", regex::escape(&module))).unwrap();
        if !re.is_match(&doc) {
            unnamed.push(module);
        }
    }
    assert!(
        unnamed.is_empty(),
        "modules docs/architecture.md does not name: {unnamed:?}"
    );
    assert!(
        named_paths("see src/analysis/relay.rs and probes/<concern>.bpf.c.")
            .into_iter()
            .eq(["src/analysis/relay.rs".to_string()])
    );
}

/// The top-level module of src/analysis a file belongs to (`verdict` for
/// `verdict/rings.rs`), and how many `super::` reach src/analysis from it.
fn module_of(rel: &Path) -> (String, usize) {
    let parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let top = parts[0].trim_end_matches(".rs").to_string();
    let depth = match parts.last().map(String::as_str) {
        Some("mod.rs") => parts.len() - 1,
        _ => parts.len(),
    };
    (top, depth)
}

/// The code of a file without its test module (`#[cfg(test)] mod ...` and what follows).
fn without_tests(code: &str) -> &str {
    let re = regex::Regex::new(r"(?m)^#\[cfg\(test\)\]\s*\n\s*mod ").unwrap();
    re.find(code).map_or(code, |m| &code[..m.start()])
}

/// The analysis modules a file's code names: `crate::analysis::X::`, and `super::X` (with as
/// many `super::` as reach src/analysis from the file), `super::{X, ...}` lists included.
fn imports(code: &str, depth: usize, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let ident = r"[A-Za-z_][A-Za-z0-9_]*";
    let supers = "super::".repeat(depth);
    let paths = regex::Regex::new(&format!(
        r"(?:\bcrate::analysis::|\b{}(?:\{{)?)({ident})",
        regex::escape(&supers)
    ))
    .unwrap();
    let lists = regex::Regex::new(&format!(r"\b{}\{{([^}}]*)\}}", regex::escape(&supers))).unwrap();
    let mut named: BTreeSet<String> = paths.captures_iter(code).map(|c| c[1].to_string()).collect();
    for c in lists.captures_iter(code) {
        for item in c[1].split(',') {
            let head = item.trim().split("::").next().unwrap_or("").to_string();
            named.insert(head);
        }
    }
    named.retain(|m| modules.contains(m));
    named
}

/// Every circle of `graph` (module -> modules it imports), each as its modules in order.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in graph.keys() {
        // Depth-first from `start`, only through modules after it, so each circle is found once.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    found.push(path.clone());
                } else if next > start && !path.contains(next) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
}

/// Circles left on purpose, each with why. snapshot <-> verdict: a Snapshot and a Summary
/// carry their `Verdict`s, and the rules read Snapshots and Summaries; breaking it moves the
/// `Verdict` type (and its `Cause`, `Kind`, `Confidence`) below snapshot.rs.
const KNOWN_CIRCLES: &[&[&str]] = &[&["snapshot", "verdict"]];

#[test]
fn analysis_modules_import_each_other_in_one_direction() {
    let dir = repo().join("src/analysis");
    let files = rust_files("src/analysis");
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| module_of(p.strip_prefix(&dir).unwrap()).0)
        .filter(|m| m != "mod" && m != "tests")
        .collect();
    assert!(modules.len() >= 12, "{modules:?}");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let rel = p.strip_prefix(&dir).unwrap();
        let (module, depth) = module_of(rel);
        let name = rel.file_name().unwrap().to_string_lossy();
        if !modules.contains(&module) || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let code = read(p);
        let mut uses = imports(without_tests(&code), depth, &modules);
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    assert!(graph["relay"].contains("snapshot"), "{graph:?}");
    assert!(graph["receive"].contains("stage"), "{graph:?}");
    let found = circles(&graph);
    let unknown: Vec<&Vec<String>> = found
        .iter()
        .filter(|c| !KNOWN_CIRCLES.iter().any(|k| k.iter().eq(c.iter())))
        .collect();
    assert!(
        unknown.is_empty(),
        "import circles between analysis modules: {unknown:?}"
    );

    // The finder itself: a planted circle is found, a one-way chain is not.
    let planted: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(circles(&planted), [["a", "b", "c"]]);
    let m: BTreeSet<String> = ["snapshot", "stage", "relay"].map(String::from).into();
    assert_eq!(
        imports(
            "use super::{snapshot::X, stage};\nuse crate::analysis::relay::Y;",
            1,
            &m
        ),
        m
    );
    assert!(imports("use super::super::snapshot::X;", 1, &m).is_empty());
}

/// The ways around the privileged-test harness (`privileged()` in tests/common/mod.rs, which
/// checks at a test's end that scanprof released every BPF program it loaded): a root check,
/// the test mutex or a program baseline of a test's own. Each found as (line number, token).
fn harness_bypasses(code: &str) -> Vec<(usize, &'static str)> {
    const TOKENS: [&str; 4] = ["require_root(", "geteuid(", "serial()", "BpfBaseline"];
    code.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            TOKENS
                .into_iter()
                .filter(move |t| line.contains(t))
                .map(move |t| (i + 1, t))
        })
        .collect()
}

#[test]
fn every_privileged_test_goes_through_the_harness() {
    let common = repo().join("tests/common");
    let files: Vec<PathBuf> = rust_files("tests")
        .into_iter()
        .filter(|p| !p.starts_with(&common))
        .collect();
    assert!(files.len() >= 30, "{files:?}");
    let mut found = Vec::new();
    let mut harnessed = 0;
    for p in &files {
        let code = read(p);
        harnessed += code.matches("privileged()").count();
        for (line, token) in harness_bypasses(&code) {
            found.push(format!(
                "{}:{line}: {token}",
                p.strip_prefix(repo()).unwrap().display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "privileged tests start with `let test = privileged();` and end with \
         `test.assert_released(..)` (tests/common/mod.rs), not with checks of their own: {found:?}"
    );
    assert!(harnessed >= 100, "only {harnessed} calls of privileged()");
    // The finder itself.
    assert_eq!(
        harness_bypasses("fn t() {\n    require_root();\n    let _g = serial();\n}"),
        [(2, "require_root("), (3, "serial()")]
    );
}

/// The stems of the files in `dir` (under the repository) that end in `suffix`.
fn stems(dir: &str, suffix: &str) -> BTreeSet<String> {
    std::fs::read_dir(repo().join(dir))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(suffix).map(String::from)
        })
        .collect()
}

/// Every `.rs` file under `dir` (under the repository).
fn rust_files(dir: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![repo().join(dir)];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files
}

/// docs/architecture.md: "a new scanner: wrappers/<scanner>.toml ..., no code unless its rate
/// grammar needs one". The built-in profiles are exactly wrappers/*.toml, and no code names
/// one of them outside the rate grammars (src/wrappers/profile.rs and rate.rs: unicornscan's
/// mode strings are one), the tests and the lab (which stages named scanners as its fixtures):
/// what a scanner needs is in its profile. scanprof's own reference sender (`scanprof-send`)
/// is not a scanner someone adds: the sweep's default and the diagnosis name it.
#[test]
fn a_new_scanner_is_a_profile_and_no_code_names_one() {
    let files = stems("wrappers", ".toml");
    let set = crate::wrappers::ProfileSet::builtin().unwrap();
    let builtin: BTreeSet<String> = set.profiles().iter().map(|p| p.name.clone()).collect();
    assert_eq!(builtin, files, "the built-in profiles vs wrappers/*.toml");
    let scanners: Vec<&String> = files
        .iter()
        .filter(|n| *n != crate::wrappers::GENERIC_PROFILE && *n != "scanprof-send")
        .collect();
    assert!(scanners.len() >= 9, "{scanners:?}");
    let mut named = Vec::new();
    for p in rust_files("src") {
        let rel = p.strip_prefix(repo()).unwrap().to_string_lossy().into_owned();
        let file = p.file_name().unwrap().to_string_lossy();
        let grammar = ["src/wrappers/profile.rs", "src/wrappers/rate.rs"].contains(&rel.as_str());
        if grammar
            || rel.starts_with("src/lab/")
            || file == "tests.rs"
            || file.ends_with("_tests.rs")
            || file == "fixtures.rs"
        {
            continue;
        }
        let text = read(&p);
        for s in &scanners {
            if without_tests(&text).contains(&format!("\"{s}\"")) {
                named.push(format!("{rel}: \"{s}\""));
            }
        }
    }
    assert!(
        named.is_empty(),
        "code that names a scanner (its profile should say what the code does): {named:?}"
    );
}

/// Every BPF object, probes/*.bpf.c, has its attach points in docs/probes.md's first table,
/// and that table names no object that is gone.
#[test]
fn every_probe_object_has_its_rows_in_docs_probes_md() {
    let files = stems("probes", ".bpf.c");
    assert!(files.len() >= 9, "{files:?}");
    let doc = read(&repo().join("docs/probes.md"));
    let table = doc
        .split("| Object | Tracepoint |")
        .nth(1)
        .expect("docs/probes.md's table of objects and attach points");
    let objects: BTreeSet<String> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_start_matches('|').split_whitespace().next())
        .map(String::from)
        .collect();
    assert_eq!(objects, files, "docs/probes.md's objects vs probes/*.bpf.c");
}

/// A comment saying that a test fails (as of) today is true only until its bug is fixed, and
/// then it misleads: a test of a bug not fixed yet is `#[ignore = "why"]`, which says so where
/// it runs. (The phrase is built here, so that this file does not say it.)
#[test]
fn no_test_says_it_fails_today() {
    let phrase = ["fails", "today"].join(" ");
    let mut found = Vec::new();
    for p in rust_files("tests").into_iter().chain(rust_files("src")) {
        for (i, line) in read(&p).lines().enumerate() {
            if line.to_lowercase().contains(&phrase) {
                found.push(format!("{}:{}", p.strip_prefix(repo()).unwrap().display(), i + 1));
            }
        }
    }
    assert!(found.is_empty(), "comments that say a test {phrase}: {found:?}");
}

/// The one integration-test binary (issue 29): Cargo.toml builds no test target by file
/// (`autotests = false`) and declares one `[[test]]`, whose root declares tests/common and
/// every other tests/*.rs as a module. Returns (its name, its root's stem, the modules the root
/// declares).
fn the_test_binary() -> (String, String, BTreeSet<String>) {
    let cargo: toml::Table = read(&repo().join("Cargo.toml")).parse().unwrap();
    assert_eq!(
        cargo["package"].get("autotests").and_then(toml::Value::as_bool),
        Some(false),
        "Cargo.toml: `autotests = false`, or every tests/*.rs is a test binary of its own again"
    );
    let tests = cargo
        .get("test")
        .and_then(toml::Value::as_array)
        .expect("Cargo.toml declares the integration tests' `[[test]]`");
    assert_eq!(tests.len(), 1, "one integration-test binary: {tests:?}");
    let name = tests[0]["name"].as_str().unwrap().to_string();
    let path = tests[0]["path"].as_str().unwrap();
    let stem = path
        .strip_prefix("tests/")
        .and_then(|p| p.strip_suffix(".rs"))
        .unwrap_or_else(|| panic!("the test binary's root {path} is not a tests/*.rs"))
        .to_string();
    let modules = read(&repo().join(path))
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(String::from)
        .collect();
    (name, stem, modules)
}

/// A tests/*.rs file that the one test binary's root does not declare is never built nor run,
/// and nothing says so: every file is a module of it, and it declares no file that is gone.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let (_, root, declared) = the_test_binary();
    let mut files = stems("tests", ".rs");
    files.remove(&root);
    assert!(files.len() >= 30, "{files:?}");
    // tests/common/mod.rs: the helpers, declared once for every module.
    files.insert("common".into());
    assert_eq!(
        declared, files,
        "the modules tests/{root}.rs declares vs tests/*.rs"
    );
}

/// The `--test` target of every `cargo test` command in the README, docs/, scripts/, .ci/,
/// tests/, benches/ and src/: each names a test target that exists, the one test binary (a
/// file's name, as before issue 29, is no target any more: `cargo test --test privileged`
/// runs nothing, it fails). And scripts/kernel-matrix's default tests each name a test of the
/// target they give: `it|MODULE::NAME` a `fn NAME` of tests/MODULE.rs, `lib|PATH::NAME` a `fn
/// NAME` of src/.
#[test]
fn test_commands_and_the_kernel_matrix_name_tests_that_exist() {
    let (target, _, modules) = the_test_binary();
    let command = regex::Regex::new(r"cargo test\b[^`\n]*?--test[ =]([A-Za-z0-9_-]+)").unwrap();
    let this_file = repo().join("src/architecture_tests.rs");
    let mut files: Vec<PathBuf> = ["tests", "src", "benches", "docs", "scripts", ".ci"]
        .into_iter()
        .flat_map(|d| {
            std::fs::read_dir(repo().join(d))
                .into_iter()
                .flatten()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file())
                .chain(rust_files(d))
                .collect::<Vec<_>>()
        })
        .filter(|p| *p != this_file)
        .collect();
    files.push(repo().join("README.md"));
    files.sort();
    files.dedup();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for p in &files {
        let Ok(text) = std::fs::read_to_string(p) else {
            continue; // not text
        };
        for (i, line) in text.lines().enumerate() {
            for c in command.captures_iter(line) {
                seen += 1;
                if c[1] != target {
                    wrong.push(format!(
                        "{}:{}: --test {}",
                        p.strip_prefix(repo()).unwrap().display(),
                        i + 1,
                        &c[1]
                    ));
                }
            }
        }
    }
    assert!(seen >= 10, "only {seen} `cargo test --test` commands found");
    assert!(
        wrong.is_empty(),
        "commands naming a test target that does not exist (the integration tests are one binary, \
         `--test {target}`, a file's tests its module: `--test {target} privileged::`): {wrong:?}"
    );

    let matrix = read(&repo().join("scripts/kernel-matrix"));
    let list = matrix
        .split("default_tests=(")
        .nth(1)
        .and_then(|l| l.split("\n)").next())
        .expect("scripts/kernel-matrix's default_tests=( ... )");
    let src: String = rust_files("src").iter().map(|p| read(p)).collect();
    let mut missing = Vec::new();
    let mut entries = 0;
    for entry in list
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"')?.strip_suffix('"'))
    {
        entries += 1;
        let mut fields = entry.split('|');
        let (kind, name) = (fields.next().unwrap(), fields.next().unwrap_or(""));
        let (path, func) = name.rsplit_once("::").unwrap_or(("", name));
        let found = match kind {
            "lib" => src.contains(&format!("fn {func}(")),
            k if k == target => {
                modules.contains(path)
                    && read(&repo().join(format!("tests/{path}.rs"))).contains(&format!("fn {func}("))
            }
            _ => false,
        };
        if !found {
            missing.push(entry.to_string());
        }
    }
    assert!(
        entries >= 10,
        "only {entries} default tests in scripts/kernel-matrix"
    );
    assert!(
        missing.is_empty(),
        "scripts/kernel-matrix's default tests that name no test (`{target}|MODULE::NAME` or \
         `lib|PATH::NAME`): {missing:?}"
    );
}
