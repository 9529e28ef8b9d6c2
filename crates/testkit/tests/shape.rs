//! Source policy: the size and shape of the workspace's production code
//! (docs/style.md, "Files and modules"). Every crate's `src/` (and the test
//! broker's, `tools/local-broker/src`) is parsed with `syn`, and the test fails
//! naming
//! - each file over [`MAX_FILE_LINES`] lines (all of its lines, inline unit
//!   tests included: a long test module belongs in its own `tests.rs`), and
//! - each function over [`MAX_FN_LINES`] lines, counted from its `fn` line to
//!   its closing brace (free functions, methods and trait default bodies,
//!   nested ones included).
//!
//! Test code is not production code: `tests/` folders, files that are whole
//! test modules (declared by a `#[cfg(test)] mod name;`), and the functions of
//! inline `#[cfg(test)]` modules are left out. Function bodies written inside
//! macro invocations are not seen (syn keeps them as tokens). The self-tests at
//! the end plant a 101-line function and a 501-line file and expect them named.

use proc_macro2::Span;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use syn::visit::Visit;
use testkit::source_tree::workspace_root;

/// Longest production file, in lines.
const MAX_FILE_LINES: usize = 500;

/// Longest production function, in lines from `fn` to its closing brace.
const MAX_FN_LINES: usize = 100;

/// One file or function over its limit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Offender {
    path: String,
    line: usize,
    what: String,
    lines: usize,
}

impl std::fmt::Display for Offender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} is {} lines",
            self.path, self.line, self.what, self.lines
        )
    }
}

/// The `src/` folders of the workspace's crates and of the test broker.
fn source_roots(root: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for group in ["crates", "services", "fakes", "deploy"] {
        let Ok(entries) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for entry in entries.flatten() {
            roots.push(entry.path().join("src"));
        }
    }
    for single in ["xtask", "bench", "demo", "chaos", "tools/local-broker"] {
        roots.push(root.join(single).join("src"));
    }
    roots.retain(|src| src.is_dir());
    roots.sort();
    roots
}

/// Every `.rs` file below `dir`, skipping `tests/` folders.
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path
                .file_name()
                .is_some_and(|name| name == "tests" || name == "target")
            {
                production_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Whether the attributes carry `#[cfg(test)]` (or a `cfg(all(test, …))`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && {
            let tokens = attr.meta.require_list().map(|list| list.tokens.to_string());
            tokens.is_ok_and(|tokens| tokens == "test" || tokens.starts_with("all (test"))
        }
    })
}

/// Collects a file's over-long functions and its `#[cfg(test)] mod name;` declarations.
#[derive(Default)]
struct FunctionScan {
    long: Vec<(usize, String, usize)>,
    test_module_files: Vec<String>,
}

impl FunctionScan {
    fn function(&mut self, name: &syn::Ident, fn_token: Span, close: Span) {
        let first = fn_token.start().line;
        let lines = close.end().line + 1 - first;
        if lines > MAX_FN_LINES {
            self.long.push((first, format!("fn {name}"), lines));
        }
    }
}

impl<'ast> Visit<'ast> for FunctionScan {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let close = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, close);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        let close = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, close);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.function(
                &item.sig.ident,
                item.sig.fn_token.span,
                block.brace_token.span.close(),
            );
        }
        syn::visit::visit_trait_item_fn(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        } else if item.content.is_none() {
            self.test_module_files.push(item.ident.to_string());
        }
    }
}

/// The files a module file's `mod name;` declarations live in: `lib.rs`,
/// `main.rs` and `mod.rs` declare beside themselves, `a.rs` below `a/`.
fn module_files(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = file.parent().expect("file has a folder");
    let stem = file
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default();
    let base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

/// A parsed file's over-long functions (named by `shown`) and the files of
/// its test-only modules.
fn scan_source(file: &Path, shown: &Path, text: &str) -> (Vec<Offender>, Vec<PathBuf>) {
    let shown = shown.display().to_string();
    let parsed =
        syn::parse_file(text).unwrap_or_else(|error| panic!("{shown} does not parse: {error}"));
    let mut scan = FunctionScan::default();
    scan.visit_file(&parsed);
    let offenders = scan.long.into_iter().map(|(line, what, lines)| Offender {
        path: shown.clone(),
        line,
        what,
        lines,
    });
    let test_files = scan
        .test_module_files
        .iter()
        .flat_map(|name| module_files(file, name));
    (offenders.collect(), test_files.collect())
}

/// The file itself, if it is over the limit.
fn long_file(path: &Path, text: &str) -> Option<Offender> {
    let lines = text.lines().count();
    (lines > MAX_FILE_LINES).then(|| Offender {
        path: path.display().to_string(),
        line: 1,
        what: "file".into(),
        lines,
    })
}

/// Every offender below the given source roots, paths relative to `root`.
fn offenders(root: &Path, source_roots: &[PathBuf]) -> BTreeSet<Offender> {
    let mut files = Vec::new();
    for src in source_roots {
        production_files(src, &mut files);
    }
    let mut found = Vec::new();
    let mut test_files = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source file");
        let relative = file.strip_prefix(root).unwrap_or(file);
        let (long_functions, test_modules) = scan_source(file, relative, &text);
        found.extend(
            long_functions
                .into_iter()
                .map(|offender| (file.clone(), offender)),
        );
        found.extend(long_file(relative, &text).map(|offender| (file.clone(), offender)));
        test_files.extend(test_modules);
    }
    found
        .into_iter()
        .filter(|(file, _)| !test_files.contains(file))
        .map(|(_, offender)| offender)
        .collect()
}

fn report(offenders: &BTreeSet<Offender>) -> String {
    offenders
        .iter()
        .map(|offender| format!("  {offender}\n"))
        .collect()
}

#[test]
fn no_production_file_or_function_is_over_its_limit() {
    let root = workspace_root();
    let roots = source_roots(&root);
    assert!(
        roots.len() > 10,
        "the source roots were not found: {roots:?}"
    );
    let offenders = offenders(&root, &roots);
    assert!(
        offenders.is_empty(),
        "{} production files or functions are over the limit ({MAX_FILE_LINES} lines a file, \
         {MAX_FN_LINES} a function); split them by concern:\n{}",
        offenders.len(),
        report(&offenders)
    );
}

// ------------------------------------------------------------ self-tests

/// `fn name() {` + `body_lines` statements + `}`: `body_lines + 2` lines.
fn planted_function(name: &str, body_lines: usize) -> String {
    let body: String = (0..body_lines)
        .map(|i| format!("    let _x{i} = {i};\n"))
        .collect();
    format!("fn {name}() {{\n{body}}}\n")
}

fn long_function_names(text: &str) -> Vec<String> {
    let planted = Path::new("planted.rs");
    let (offenders, _) = scan_source(planted, planted, text);
    offenders
        .into_iter()
        .map(|offender| format!("{} {}", offender.what, offender.lines))
        .collect()
}

#[test]
fn a_101_line_function_is_caught_and_a_100_line_one_is_not() {
    let source = format!(
        "{}{}",
        planted_function("fits", 98),
        planted_function("too_long", 99)
    );
    assert_eq!(long_function_names(&source), ["fn too_long 101"]);
}

#[test]
fn methods_trait_defaults_and_nested_functions_are_measured() {
    let body = planted_function("inner", 99);
    let source = format!(
        "impl S {{\n{}}}\ntrait T {{\n{}}}\nfn outer() {{\n{body}}}\n",
        planted_function("method", 99),
        planted_function("default_body", 99),
    );
    assert_eq!(
        long_function_names(&source),
        [
            "fn method 101",
            "fn default_body 101",
            "fn outer 103",
            "fn inner 101"
        ]
    );
}

#[test]
fn functions_of_an_inline_test_module_are_not_counted() {
    let source = format!(
        "#[cfg(test)]\nmod tests {{\n{}}}\n",
        planted_function("long_case", 120)
    );
    assert!(long_function_names(&source).is_empty());
}

#[test]
fn a_501_line_file_is_caught_and_a_500_line_one_is_not() {
    let fits: String = "// line\n".repeat(500);
    let too_long = format!("{fits}// one more\n");
    assert_eq!(long_file(Path::new("fits.rs"), &fits), None);
    let caught = long_file(Path::new("too_long.rs"), &too_long).expect("501 lines are caught");
    assert_eq!((caught.path.as_str(), caught.lines), ("too_long.rs", 501));
}

#[test]
fn the_tree_walk_skips_test_folders_and_test_module_files_only() {
    let dir = std::env::temp_dir().join(format!("shape-{}", uuid::Uuid::new_v4()));
    let src = dir.join("crates/planted/src");
    std::fs::create_dir_all(src.join("tests")).expect("create planted crate");
    let long_file_text = "// line\n".repeat(501);
    let lib = "//! Planted.\nmod big;\nmod more;\n#[cfg(test)]\nmod unit;\n";
    for (name, text) in [
        ("lib.rs", lib),
        ("big.rs", &long_file_text),
        ("unit.rs", &long_file_text),
    ] {
        std::fs::write(src.join(name), text).expect("write planted file");
    }
    std::fs::create_dir_all(src.join("more")).expect("create module folder");
    std::fs::write(src.join("more/mod.rs"), planted_function("long", 110))
        .expect("write planted file");
    std::fs::write(src.join("tests/case.rs"), &long_file_text).expect("write planted file");
    let found = offenders(&dir, &source_roots(&dir));
    std::fs::remove_dir_all(&dir).expect("remove planted crate");
    let named: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        named,
        [
            "crates/planted/src/big.rs:1: file is 501 lines",
            "crates/planted/src/more/mod.rs:1: fn long is 112 lines",
        ]
    );
}
