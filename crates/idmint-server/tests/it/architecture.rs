//! The server's import rules, checked on its sources: transports translate, they do not
//! call each other (STYLE.md, ARCHITECTURE.md).
//!
//! - no HTTP route module (`http::*` but `http::shared`) imports another `http` module
//!   but `http::shared`;
//! - the gRPC module imports no `http` module;
//! - protobuf types (`idmint_proto`) appear in the gRPC module only;
//! - only `metrics` (a reader) reaches the segment engine behind the `Node`;
//! - the `idmint` library's modules name the room an item lives in, never `lib.rs`;
//! - the modules import each other without a circle (the crate root counts as a module:
//!   a module that imports `crate::Item` re-exported by the root closes a circle through
//!   it, so modules name the module an item lives in).
//!
//! An import is any path `crate::…`, `super::…` or `CHILD::…` (a child module of the file's
//! own) outside comments and unit tests, in a `use` or inline.
//! The checker is tested on planted breaches, so it can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crates' own rules (the core's I/O, who spawns, who knows HTTP, protobuf and the wall
/// clock) and ARCHITECTURE.md's map of them.
mod crate_rules;

/// A module's path (`crate` for the root, `http::segment`, …) and its source.
type Sources = BTreeMap<String, String>;

#[test]
fn the_server_modules_keep_the_import_rules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = read_modules(&src, &src);
    for expected in ["crate", "router", "openapi", "grpc", "http::shared", "http::segment"] {
        assert!(sources.contains_key(expected), "no module {expected}: {:?}", sources.keys());
    }
    let broken = breaches(&sources);
    assert!(broken.is_empty(), "import rules broken:\n{}", broken.join("\n"));
}

#[test]
fn the_checker_finds_each_planted_breach() {
    let clean = || -> Sources {
        [
            ("crate", "mod http; mod grpc; mod error; pub use error::ApiError;"),
            ("error", "pub enum ApiError {}"),
            ("grpc", "use crate::error::ApiError; use idmint_proto::v1::Range;"),
            ("http", "pub(crate) mod segment; pub(crate) mod shared; pub(crate) mod tags;"),
            ("http::shared", "use crate::error::ApiError;"),
            ("http::segment", "use crate::http::shared::TagName; // crate::http::tags::x"),
            ("http::tags", "use crate::http::shared::{TagBody, TagName};"),
        ]
        .into_iter()
        .map(|(module, text)| (module.to_string(), text.to_string()))
        .collect()
    };
    assert_eq!(breaches(&clean()), Vec::<String>::new());
    let planted = [
        ("http::segment", "use crate::http::tags::list_tags;", "imports route module"),
        ("http::segment", "let x = super::tags::TagsBody;", "imports route module"),
        ("grpc", "use crate::http::shared::parse_count;", "gRPC module imports"),
        ("http::tags", "fn f(r: idmint_proto::v1::Range) {}", "protobuf type"),
        ("grpc", "let s = app.node.segments().lease(&tag, count);", "past the Node"),
        ("error", "use crate::ApiError;", "circle"),
        ("http::shared", "use crate::http::{segment::IdsBody};", "circle"),
    ];
    for (module, line, expected) in planted {
        let mut sources = clean();
        sources.get_mut(module).expect("module").push_str(&format!("\n{line}\n"));
        let found = breaches(&sources);
        assert!(found.iter().any(|b| b.contains(expected)), "{module}: {line} -> {found:?}");
    }
}

/// The library's rooms mirror its public modules (one per engine, the shared floor beside
/// them), and no module of it imports through `lib.rs` an item that lives elsewhere: it
/// names the room that defines the item (ARCHITECTURE.md, `idmint`).
#[test]
fn idmint_modules_import_from_where_items_live() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../idmint/src");
    let sources = read_modules(&src, &src);
    for room in [
        "segment",
        "snowflake",
        "sequence",
        "format",
        "uuid",
        "tinyid",
        "strict",
        "node",
        "clock",
        "fence",
        "marks",
        "peer",
    ] {
        assert!(sources.contains_key(room), "no module {room}: {:?}", sources.keys());
    }
    let broken = through_root(&sources);
    assert!(broken.is_empty(), "imports through lib.rs:\n{}", broken.join("\n"));
}

/// Only the fence (`crates/idmint/src/fence.rs`) asks a store for leases, renews, raises
/// their marks or releases them: a holder that did so itself could keep serving past a loss
/// the fence never saw.
#[test]
fn only_the_fence_calls_the_lease_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../idmint/src");
    let sources = read_modules(&src, &src);
    // A store's `raise_mark` takes the lease first (the snowflake cell has a method of that
    // name too, which takes a time).
    let calls = [
        ".acquire_lease(",
        ".renew_lease(",
        ".raise_mark(lease",
        ".raise_mark(&",
        ".release_lease(",
    ];
    let mut found = Vec::new();
    for (module, text) in sources.iter().filter(|(m, _)| *m != "fence") {
        let code = without_comments(text);
        found.extend(calls.iter().filter(|c| code.contains(*c)).map(|c| format!("{module}: {c}")));
    }
    assert!(found.is_empty(), "lease calls outside the fence:\n{}", found.join("\n"));
    let fence = &sources["fence"];
    let made = [".acquire_lease(", ".renew_lease(", ".raise_mark(lease", ".release_lease("];
    assert!(made.iter().all(|c| fence.contains(c)), "the fence makes no lease call");
}

#[test]
fn the_root_check_finds_a_planted_import_through_the_root() {
    let clean = || -> Sources {
        [
            ("crate", "pub mod segment; pub mod node; pub use segment::Segments;"),
            ("segment", "pub struct Segments;"),
            ("node", "use crate::segment::Segments; // crate::Segments"),
        ]
        .into_iter()
        .map(|(module, text)| (module.to_string(), text.to_string()))
        .collect()
    };
    assert_eq!(through_root(&clean()), Vec::<String>::new());
    for planted in
        ["use crate::Segments;", "use crate::{segment, Segments};", "crate::Segments::new()"]
    {
        let mut sources = clean();
        sources.get_mut("node").unwrap().push_str(&format!("\n{planted}\n"));
        assert_eq!(
            through_root(&sources),
            vec!["node imports Segments through lib.rs"],
            "{planted}"
        );
    }
}

/// Each `crate::ITEM` path (outside comments and unit tests) whose item the root only
/// re-exports.
fn through_root(sources: &Sources) -> Vec<String> {
    let (_, exported) = split_reexports(&without_comments(&sources["crate"]));
    let items: BTreeSet<String> =
        exported.iter().filter_map(|p| p.rsplit("::").next()).map(str::to_string).collect();
    let mut found = Vec::new();
    for (module, text) in sources.iter().filter(|(m, _)| *m != "crate") {
        let code = without_comments(text);
        for (at, _) in code.match_indices("crate::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for path in paths(&code[at + "crate::".len()..]) {
                let first = path.split("::").next().unwrap_or_default();
                if items.contains(first) && !sources.contains_key(first) {
                    found.push(format!("{module} imports {first} through lib.rs"));
                }
            }
        }
    }
    found
}

/// Every breach of the rules in `sources`, one line each.
fn breaches(sources: &Sources) -> Vec<String> {
    let modules: BTreeSet<&str> = sources.keys().map(String::as_str).collect();
    let route_module = |m: &str| m.starts_with("http::") && m != "http::shared";
    let mut found = Vec::new();
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in sources {
        let code = without_comments(text);
        let imports = imports(module, &code, &modules);
        for target in &imports {
            if route_module(module) && target.starts_with("http") && target != "http::shared" {
                found.push(format!("{module} imports route module {target}"));
            }
            if module == "grpc" && (target == "http" || target.starts_with("http::")) {
                found.push(format!("the gRPC module imports {target}"));
            }
        }
        if module != "grpc" && code.contains("idmint_proto") {
            found.push(format!("{module} names a protobuf type (idmint_proto)"));
        }
        // The segment engine itself is for readers (metrics: statuses, readiness); a
        // transport that took ids from it would skip the Node's rules (a formatted tag is
        // never leased, the batch bound).
        if module != "metrics" && code.contains(".segments()") {
            found.push(format!("{module} reaches past the Node to its segment engine"));
        }
        edges.insert(module, imports.into_iter().filter(|t| t != module).collect());
    }
    if let Some(circle) = find_circle(&edges) {
        found.push(format!("import circle: {}", circle.join(" -> ")));
    }
    found
}

/// The modules `code` (of `module`) imports: each `crate::…` and `super::…` path resolved
/// to the longest module it names, or the root when it names a root item.
fn imports(module: &str, code: &str, modules: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let parent = match module.rsplit_once("::") {
        Some((parent, _)) => parent.to_string(),
        None => "crate".to_string(),
    };
    // Paths from the crate root, from the parent, and from the module itself (a child
    // module named without a prefix, as the root's `pub use auth::…` does).
    let own = if module == "crate" { String::new() } else { format!("{module}::") };
    let children: Vec<String> = modules
        .iter()
        .filter_map(|m| m.strip_prefix(own.as_str()))
        .filter(|child| *child != "crate" && !child.contains("::"))
        .map(|child| format!("{child}::"))
        .collect();
    let mut prefixes =
        vec![("crate::".to_string(), String::new()), ("super::".to_string(), parent)];
    prefixes.extend(children.into_iter().map(|child| (child, module.to_string())));
    for (prefix, base) in &prefixes {
        for (at, _) in code.match_indices(prefix.as_str()) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = if prefix.starts_with("crate::") || prefix.starts_with("super::") {
                &code[at + prefix.len()..]
            } else {
                // A child module: the path starts with its name.
                &code[at..]
            };
            for path in paths(rest) {
                let full = match base.as_str() {
                    "" | "crate" => path,
                    base => format!("{base}::{path}"),
                };
                found.insert(resolve(&full, modules));
            }
        }
    }
    found
}

/// The paths written after `crate::` at the start of `rest`: one, or each of a `{…}` group
/// (one level of nesting is enough for this crate's imports).
fn paths(rest: &str) -> Vec<String> {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    if let Some(group) = rest.strip_prefix('{') {
        let end = group.find('}').unwrap_or(group.len());
        return group[..end]
            .split(',')
            .map(|item| item.trim().chars().take_while(|&c| word(c)).collect::<String>())
            .filter(|item| !item.is_empty())
            .map(|item| item.trim_end_matches(':').to_string())
            .collect();
    }
    let path: String = rest.chars().take_while(|&c| word(c)).collect();
    let mut path = path.trim_end_matches(':').to_string();
    // `crate::http::{segment::IdsBody, …}`: the group's items extend the path.
    let after = &rest[path.len()..];
    if let Some(group) = after.strip_prefix("::") {
        let items = paths(group);
        if !items.is_empty() {
            return items.into_iter().map(|item| format!("{path}::{item}")).collect();
        }
    }
    if path.is_empty() {
        path = "crate".to_string();
    }
    vec![path]
}

/// The longest module `path` names; `crate` when it names an item of the root.
fn resolve(path: &str, modules: &BTreeSet<&str>) -> String {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|prefix| modules.contains(prefix.as_str()))
        .unwrap_or_else(|| "crate".to_string())
}

/// A circle of imports, if there is one (depth-first search).
fn find_circle(edges: &BTreeMap<&str, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        edges: &BTreeMap<&str, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|m| m == module) {
            let mut circle = stack[at..].to_vec();
            circle.push(module.to_string());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        stack.push(module.to_string());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, stack, done) {
                return Some(circle);
            }
        }
        stack.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|module| visit(module, edges, &mut Vec::new(), &mut done))
}

/// `text` without `//` comments (doc comments included: their links are not imports) and
/// without its unit tests (from `#[cfg(test)]` on: their `super::` is the file's module, not
/// its parent). A `//` inside a string literal cuts the rest of its line, which only loses
/// code that names no module.
fn without_comments(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |at| &text[..at]);
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `.rs` file under `dir` as its module path relative to `src`.
fn read_modules(src: &Path, dir: &Path) -> Sources {
    let mut sources = Sources::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources.extend(read_modules(src, &path));
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> =
            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let module = match parts.as_slice() {
            [only] if only == "lib" => "crate".to_string(),
            [dirs @ .., last] if last == "mod" => dirs.join("::"),
            all => all.join("::"),
        };
        sources.insert(module, std::fs::read_to_string(&path).unwrap());
    }
    sources
}

/// No crate of the workspace has an import circle among its modules. Here a module's
/// re-exports (`pub use`) and module declarations are its public face, not imports; a path
/// through a re-export counts as an import of the module that defines the item; a module's
/// own submodules are its parts (the root's are the crate), so only imports of a module
/// outside it count. The server's own rule above is stricter (its root counts as a module).
#[test]
fn no_crate_has_an_import_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut circles = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        if let Some(circle) = circle_through_reexports(&read_modules(&src, &src)) {
            circles.push(format!("{}: {}", src.display(), circle.join(" -> ")));
        }
    }
    assert!(checked >= 8, "only {checked} crates found under {}", crates.display());
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

#[test]
fn the_workspace_check_finds_a_planted_circle() {
    let clean = || -> Sources {
        [
            (
                "crate",
                "mod a; mod b; pub use a::Alpha; pub use b::{Beta, Gamma};\npub trait Root {}",
            ),
            ("a", "use crate::Root; pub struct Alpha;"),
            ("b", "use crate::Alpha; pub struct Beta; pub struct Gamma;"),
        ]
        .into_iter()
        .map(|(module, text)| (module.to_string(), text.to_string()))
        .collect()
    };
    assert_eq!(circle_through_reexports(&clean()), None);
    let mut planted = clean();
    planted.get_mut("a").unwrap().push_str("\nfn f(_: crate::Gamma) {}\n");
    assert_eq!(
        circle_through_reexports(&planted),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
}

/// A circle among `sources`' modules, re-exports resolved to the module defining the item.
fn circle_through_reexports(sources: &Sources) -> Option<Vec<String>> {
    let modules: BTreeSet<&str> = sources.keys().map(String::as_str).collect();
    let mut reexports: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut codes = BTreeMap::new();
    for (module, text) in sources {
        let (code, exported) = split_reexports(&without_comments(text));
        for path in exported {
            let full = if module == "crate" { path.clone() } else { format!("{module}::{path}") };
            let item = path.rsplit("::").next().unwrap_or_default().to_string();
            reexports.insert((module.clone(), item), resolve(&full, &modules));
        }
        codes.insert(module.as_str(), code);
    }
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &codes {
        let mut targets = BTreeSet::new();
        for target in imports_with_items(module, code, &modules) {
            let (target, item) = target;
            let target = match item.and_then(|i| reexports.get(&(target.clone(), i))) {
                Some(source) => source.clone(),
                None => target,
            };
            // A module's own submodules are its parts (`memory` and `memory::workers`), not
            // modules it imports.
            let own_part = *module == "crate" || target.starts_with(&format!("{module}::"));
            if target != *module && !own_part {
                targets.insert(target);
            }
        }
        edges.insert(module, targets);
    }
    find_circle(&edges)
}

/// `code` without its `pub use …;` statements, and the paths those re-export (one level of
/// `{…}` groups expanded; `self` paths resolved to the group's module).
fn split_reexports(code: &str) -> (String, Vec<String>) {
    let mut rest = String::new();
    let mut exported = Vec::new();
    let mut text = code;
    while let Some(at) = ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .filter_map(|p| text.find(p).map(|i| (i, p.len())))
        .min()
    {
        let (start, len) = at;
        let end = text[start..].find(';').map_or(text.len(), |e| start + e + 1);
        rest.push_str(&text[..start]);
        let statement: String =
            text[start + len..end].chars().filter(|c| !c.is_whitespace()).collect();
        exported.extend(paths(statement.trim_end_matches(';')));
        text = &text[end..];
    }
    rest.push_str(text);
    let exported = exported.into_iter().map(|p| p.trim_end_matches("::self").to_string()).collect();
    (rest, exported)
}

/// [`imports`], with the first segment after the module each path names (an item, perhaps
/// re-exported there).
fn imports_with_items(
    module: &str,
    code: &str,
    modules: &BTreeSet<&str>,
) -> BTreeSet<(String, Option<String>)> {
    let mut found = BTreeSet::new();
    for target in imports(module, code, modules) {
        found.insert((target, None));
    }
    // The paths again, keeping the item named after the module.
    let parent = match module.rsplit_once("::") {
        Some((parent, _)) => parent.to_string(),
        None => "crate".to_string(),
    };
    for (prefix, base) in [("crate::", String::new()), ("super::", parent)] {
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for path in paths(&code[at + prefix.len()..]) {
                let full = match base.as_str() {
                    "" | "crate" => path,
                    base => format!("{base}::{path}"),
                };
                let target = resolve(&full, modules);
                let inside = if target == "crate" {
                    full.as_str()
                } else {
                    full.strip_prefix(target.as_str()).unwrap_or("").trim_start_matches("::")
                };
                let item = inside.split("::").next().filter(|i| !i.is_empty());
                found.remove(&(target.clone(), None));
                found.insert((target, item.map(str::to_string)));
            }
        }
    }
    found
}
