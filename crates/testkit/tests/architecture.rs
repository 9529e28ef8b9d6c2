//! Architecture policy, read from the code itself:
//! - **Crate edges.** Every dependency between workspace crates (normal, dev
//!   and build, read from `cargo metadata`) must be listed in the "Allowed
//!   crate edges" table of ARCHITECTURE.md (`| crate | depends on | in tests
//!   only |`); an edge that is listed but no longer exists fails too, so the
//!   table stays true.
//! - **Services are composition roots.** No workspace crate depends on a
//!   crate under `services/` (not even in tests), except `bench` and
//!   `deploy-check`, which measure and check the services as shipped. Engines
//!   (the relay, the IM bridge) are library crates under `crates/`; a
//!   service links them, never another service, so an engine cannot reach a
//!   service's operator code (console, operator commands, admin HTTP).
//! - **No import cycles inside a crate.** The top-level modules of each crate
//!   (`src/<name>.rs` or `src/<name>/`) form a graph through their `crate::`
//!   and `super::` paths; that graph must have no cycle. A cycle means two
//!   modules cannot be understood, tested or moved apart.
//!
//! Both scanners are std-only and text-based; their own tests below show each
//! one catches what it forbids.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::source_tree::{rust_files, workspace_root};

// ---------------------------------------------------------------- crate edges

/// `cargo metadata` of the workspace (no dependencies resolved).
fn metadata(root: &Path) -> serde_json::Value {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

fn packages(metadata: &serde_json::Value) -> &Vec<serde_json::Value> {
    metadata["packages"].as_array().expect("packages")
}

/// `(from, to)` pairs between workspace packages (normal, dev and build).
fn actual_edges(metadata: &serde_json::Value) -> BTreeSet<(String, String)> {
    let ours: BTreeSet<String> = packages(metadata)
        .iter()
        .map(|package| package["name"].as_str().expect("name").to_owned())
        .collect();
    let mut edges = BTreeSet::new();
    for package in packages(metadata) {
        let from = package["name"].as_str().expect("name");
        for dependency in package["dependencies"].as_array().expect("dependencies") {
            let to = dependency["name"].as_str().expect("dependency name");
            if ours.contains(to) && to != from {
                edges.insert((from.to_owned(), to.to_owned()));
            }
        }
    }
    edges
}

/// The packages whose manifest lives under `<root>/services/`.
fn service_packages(metadata: &serde_json::Value, root: &Path) -> BTreeSet<String> {
    let services = root.join("services");
    packages(metadata)
        .iter()
        .filter(|package| {
            Path::new(package["manifest_path"].as_str().expect("manifest_path"))
                .starts_with(&services)
        })
        .map(|package| package["name"].as_str().expect("name").to_owned())
        .collect()
}

/// The crates allowed to depend on services: they measure and check the
/// services as shipped.
const MAY_USE_SERVICES: [&str; 2] = ["bench", "deploy-check"];

/// Every edge into a service from a crate other than [`MAY_USE_SERVICES`].
fn service_edge_violations(
    edges: &BTreeSet<(String, String)>,
    services: &BTreeSet<String>,
) -> Vec<String> {
    edges
        .iter()
        .filter(|(from, to)| services.contains(to) && !MAY_USE_SERVICES.contains(&from.as_str()))
        .map(|(from, to)| {
            format!("{from} -> {to}: a service is a composition root; move what {from} needs into a crate under crates/")
        })
        .collect()
}

/// The edges listed in ARCHITECTURE.md's "Allowed crate edges" table: rows of
/// `| from | to, to, … |` (backticks allowed) until the next heading.
fn allowed_edges(architecture: &str) -> BTreeSet<(String, String)> {
    let mut edges = BTreeSet::new();
    let mut inside = false;
    for line in architecture.lines() {
        if line.starts_with('#') {
            inside = line.trim_start_matches('#').trim() == "Allowed crate edges";
            continue;
        }
        if !inside || !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Some((from, targets)) = cells.split_first() else {
            continue;
        };
        let from = from.trim_matches('`');
        if from.is_empty() || from.starts_with('-') || from.eq_ignore_ascii_case("crate") {
            continue;
        }
        // Second column: normal dependencies; third: dev/build dependencies.
        for target in targets.iter().take(2).flat_map(|cell| cell.split(',')) {
            let target = target.trim().trim_matches('`');
            if !target.is_empty() && target != "—" && target != "-" {
                edges.insert((from.to_owned(), target.to_owned()));
            }
        }
    }
    edges
}

fn edge_violations(
    actual: &BTreeSet<(String, String)>,
    allowed: &BTreeSet<(String, String)>,
) -> Vec<String> {
    let mut violations: Vec<String> = actual
        .difference(allowed)
        .map(|(from, to)| format!("{from} -> {to} is not an allowed edge"))
        .collect();
    violations.extend(
        allowed
            .difference(actual)
            .map(|(from, to)| format!("{from} -> {to} is listed but no longer exists")),
    );
    violations
}

#[test]
fn crate_edges_are_the_ones_architecture_md_allows() {
    let root = workspace_root();
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let allowed = allowed_edges(&architecture);
    assert!(
        !allowed.is_empty(),
        "ARCHITECTURE.md has no \"Allowed crate edges\" table"
    );
    let violations = edge_violations(&actual_edges(&metadata(&root)), &allowed);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn no_crate_depends_on_a_service() {
    let root = workspace_root();
    let metadata = metadata(&root);
    let services = service_packages(&metadata, &root);
    assert!(
        services.contains("room-service") && services.contains("outbox-relay"),
        "services/ should hold room-service and outbox-relay; found {services:?}"
    );
    let violations = service_edge_violations(&actual_edges(&metadata), &services);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn an_edge_into_a_service_fails_unless_it_comes_from_bench_or_deploy_check() {
    let services: BTreeSet<String> = ["outbox-relay".to_owned()].into();
    let edges: BTreeSet<(String, String)> = [
        ("room-service", "outbox-relay"),
        ("bench", "outbox-relay"),
        ("deploy-check", "outbox-relay"),
        ("room-service", "relay-engine"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    let violations = service_edge_violations(&edges, &services);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("room-service -> outbox-relay"));
}

#[test]
fn an_unlisted_edge_and_a_stale_listing_both_fail() {
    let table = "## Allowed crate edges\n\n| crate | depends on | in tests only |\n|---|---|---|\n\
                 | `outbox-relay` | `outbox-schema` | `service-kit` |\n| `room-core` | — | — |\n\n## Next\n| `x` | `y` |\n";
    let allowed = allowed_edges(table);
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    let actual: BTreeSet<(String, String)> = [
        ("outbox-relay", "outbox-schema"),
        ("outbox-relay", "im-bridge"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    let violations = edge_violations(&actual, &allowed);
    assert_eq!(
        violations,
        [
            "outbox-relay -> im-bridge is not an allowed edge",
            "outbox-relay -> service-kit is listed but no longer exists",
        ]
    );
}

// ------------------------------------------------------------- module cycles

/// The `src/` directories of the workspace's crates.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for group in ["crates", "services", "fakes", "deploy"] {
        let Ok(entries) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for entry in entries.flatten() {
            let src = entry.path().join("src");
            if src.is_dir() {
                sources.push(src);
            }
        }
    }
    for single in ["xtask", "bench", "demo", "chaos"] {
        let src = root.join(single).join("src");
        if src.is_dir() {
            sources.push(src);
        }
    }
    sources.sort();
    sources
}

/// The source with `//` comments removed line by line (doc links are not imports).
fn without_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first path segment of every item a `crate::` / root `super::` path
/// names: `crate::a::B` gives `a`; `crate::{a, b::C, D}` gives `a`, `b`, `D`.
fn root_segments(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && depth == 0 && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident_at(&group[index..]);
                        if !name.is_empty() {
                            names.push(name.to_owned());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Which top-level module a name at the crate root leads to: a module itself,
/// or an item the root re-exports with `pub use module::…`.
fn root_names(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names: BTreeMap<String, String> = modules
        .iter()
        .map(|module| (module.clone(), module.clone()))
        .collect();
    for statement in without_comments(lib).split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
            .or_else(|| statement.strip_prefix("use "))
        else {
            continue;
        };
        let path = path
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        let module = ident_at(path);
        if !modules.contains(module) {
            continue;
        }
        let tail = &path[module.len()..];
        let items = tail
            .rsplit_once("::")
            .map_or(tail, |(_, last)| last)
            .trim_matches(|c| c == '{' || c == '}');
        for item in items.split(',') {
            let item = item.trim();
            let alias = item
                .split_once(" as ")
                .map_or(item, |(_, alias)| alias)
                .trim();
            let alias = alias.rsplit("::").next().unwrap_or(alias);
            if !alias.is_empty() && alias != "self" && alias != "*" {
                names.insert(alias.to_owned(), module.to_owned());
            }
        }
    }
    names
}

/// The module graph of one crate's `src/`: top-level module → modules it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let root_file = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .find(|path| path.exists());
    let module_of = |path: &Path| -> Option<String> {
        let relative = path.strip_prefix(src).ok()?;
        let first = relative.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (!matches!(name, "lib" | "main" | "bin")).then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|path| module_of(path)).collect();
    let lib = root_file
        .and_then(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default();
    let names = root_names(&lib, &modules);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let code = without_comments(&std::fs::read_to_string(path).expect("readable source"));
        let mut used = root_segments(&code, "crate::");
        // `super::` leads to the root only from a top-level module's own file.
        let top_level = path.parent() == Some(src)
            || path.file_name().is_some_and(|name| name == "mod.rs")
                && path.parent().and_then(Path::parent) == Some(src);
        if top_level {
            used.extend(root_segments(&code, "super::"));
        }
        let targets = graph.entry(module.clone()).or_default();
        for name in used {
            if let Some(target) = names.get(&name)
                && *target != module
            {
                targets.insert(target.clone());
            }
        }
    }
    graph
}

/// Every cycle's members (strongly connected components of more than one module).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: Vec<&String> = graph.keys().collect();
    let reaches = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|node| (*node, reaches(node))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for node in &nodes {
        if placed.contains(*node) || !reach[node].contains(*node) {
            continue;
        }
        let component: Vec<String> = nodes
            .iter()
            .filter(|other| reach[node].contains(**other) && reach[*other].contains(*node))
            .map(|other| (*other).clone())
            .collect();
        placed.extend(component.iter().cloned());
        found.push(component);
    }
    found
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = workspace_root();
    let mut report = Vec::new();
    for src in crate_sources(&root) {
        for cycle in cycles(&module_graph(&src)) {
            let crate_dir = src.parent().expect("crate dir");
            report.push(format!(
                "{}: {}",
                crate_dir.strip_prefix(&root).unwrap_or(crate_dir).display(),
                cycle.join(" ↔ ")
            ));
        }
    }
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn the_cycle_scanner_finds_cycles_through_grouped_and_reexported_paths() {
    let dir = std::env::temp_dir().join(format!("arch-cycles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("store")).expect("temp src");
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).expect("write");
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod store;\npub use a::Thing;\n",
    );
    // a -> b through a grouped path; b -> a through the root re-export; c -> store only.
    write("a.rs", "use crate::{b::Other, store};\npub struct Thing;\n");
    write(
        "b.rs",
        "// crate::c in a comment is not an import\nuse crate::Thing;\npub struct Other;\n",
    );
    write("c.rs", "use super::store::Store;\n");
    write("store/mod.rs", "pub mod sql;\npub struct Store;\n");
    write("store/sql.rs", "use super::Store;\n");
    let graph = module_graph(&src);
    assert_eq!(cycles(&graph), vec![vec!["a".to_owned(), "b".to_owned()]]);
    assert_eq!(
        graph["c"],
        BTreeSet::from(["store".to_owned()]),
        "nested `super::` stays inside its module"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
