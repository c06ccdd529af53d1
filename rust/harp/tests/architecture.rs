//! The engine's layers are one-way: a module of `rust/harp/src` names only its own layer and
//! the layers before it in the engine table of `docs/architecture.md`.
//!
//! The layer order lives in one place, that table (its rows, bottom layer first; a row's layer
//! is the file or folder in its `where` column). This test reads the table, checks that its
//! rows are exactly the modules `lib.rs` declares, then reads every source file and checks
//! each path into the crate: `crate::x`, `$crate::x`, the entries of `crate::{x, y::z}` and a
//! `super::` that climbs out of the file's layer folder. Comments and string literals are not
//! code; test-only code (an item under `#[cfg(test)]` or `#[cfg(all(test, …))]`, e.g.
//! `mod tests`) is exempt, since tests may build their data with anything. The engine never
//! names the crates above it (`harp_jobs`, `harp_cli`, `harp_jni`, `jni`), and that
//! those crates depend on each other one way: jobs ← cli, jobs ← jni.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One row of the engine table: the layer's name and its module (file stem or folder).
#[derive(Debug, Clone)]
struct Layer {
    name: String,
    module: String,
}

/// Upward uses that are known and not yet removed: (the using module, as a layer's module or a
/// file or folder under `src/` without `.rs`; the used layer's module; why, and what removes it).
/// Every entry must still occur, so a stale entry fails the test too.
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Whether the file `rel` (under `src/`) is in `module` (`worker` holds `worker.rs` and every
/// file under `worker/`).
fn within(rel: &Path, module: &str) -> bool {
    rel == Path::new(&format!("{module}.rs")) || rel.starts_with(module)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The engine table of docs/architecture.md, bottom layer first.
fn layers() -> Vec<Layer> {
    let doc = root().join("../../docs/architecture.md");
    let text = std::fs::read_to_string(&doc).expect("read docs/architecture.md");
    let mut in_engine = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            in_engine = line.starts_with("### The engine");
            continue;
        }
        if !in_engine || !line.starts_with('|') || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || cells[1] == "layer" {
            continue;
        }
        let place = cells[2]
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("docs/architecture.md: no `file` in the row {line:?}"));
        let module = place
            .strip_suffix(".rs")
            .or_else(|| place.strip_suffix('/'))
            .unwrap_or_else(|| panic!("docs/architecture.md: {place:?} is no file or folder"));
        out.push(Layer {
            name: cells[1].to_string(),
            module: module.to_string(),
        });
    }
    assert!(
        out.len() > 3,
        "docs/architecture.md: no engine table found under '### The engine'"
    );
    out
}

/// `src` with comments and the contents of string and char literals replaced by spaces
/// (newlines kept, so line numbers still hold).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let blank = |out: &mut Vec<char>, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && {
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br#"…"#.
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            out.extend(std::iter::repeat_n(' ', j + 1 - i));
            i = j + 1;
            loop {
                if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while c[i] != '"' {
                let step = if c[i] == '\\' { 2 } else { 1 };
                for k in 0..step {
                    blank(&mut out, c[i + k]);
                }
                i += step;
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime or a label.
            out.push(' ');
            i += 1;
            while c[i] != '\'' {
                let step = if c[i] == '\\' { 2 } else { 1 };
                out.extend(std::iter::repeat_n(' ', step));
                i += step;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// `code` with every item under `#[cfg(test)]` (or `#[cfg(all(test, …))]`) blanked.
fn without_tests(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if c[i] != '#' || c.get(i + 1) != Some(&'[') {
            i += 1;
            continue;
        }
        let close = (i..c.len()).find(|&k| c[k] == ']').expect("attribute ends");
        let attr: String = c[i..=close]
            .iter()
            .filter(|ch| !ch.is_whitespace())
            .collect();
        if attr != "#[cfg(test)]" && !attr.starts_with("#[cfg(all(test,") {
            i = close + 1;
            continue;
        }
        // The item: up to its first `;` outside brackets, or its `{…}` block.
        let mut k = close + 1;
        let mut depth = 0i32;
        loop {
            match c[k] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    let mut braces = 0;
                    loop {
                        match c[k] {
                            '{' => braces += 1,
                            '}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    break;
                }
                _ => {}
            }
            k += 1;
        }
        for ch in &mut c[i..=k] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = k + 1;
    }
    c.into_iter().collect()
}

/// A path into the crate found in a file: its line and the top-level module it names.
#[derive(Debug)]
struct Use {
    line: usize,
    module: String,
}

/// Every top-level module that `code` (of the module at `path`, e.g. ["apps", "kmeans",
/// "gen"]) names through `crate::`, `$crate::` or a `super::` chain that reaches the root.
fn uses(code: &str, path: &[String]) -> Vec<Use> {
    let c: Vec<char> = code.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let word_at = |k: usize| -> String { c[k..].iter().take_while(|&&ch| ident(ch)).collect() };
    let skip_ws = |mut k: usize| {
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        k
    };
    let sep_at = |k: usize| -> Option<usize> {
        let k = skip_ws(k);
        (c.get(k) == Some(&':') && c.get(k + 1) == Some(&':')).then(|| skip_ws(k + 2))
    };
    let line_of = |k: usize| c[..k].iter().filter(|&&ch| ch == '\n').count() + 1;
    // The entries of a `{a, b::c, …}` group at `k`: their first words.
    let group = |k: usize| -> Vec<String> {
        let mut firsts = Vec::new();
        let (mut depth, mut start) = (0, true);
        for (j, &ch) in c.iter().enumerate().skip(k) {
            match ch {
                '{' => {
                    depth += 1;
                    if depth == 1 {
                        start = true;
                        continue;
                    }
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => {
                    start = true;
                    continue;
                }
                _ => {}
            }
            if depth == 1 && start && ident(ch) {
                firsts.push(word_at(j));
                start = false;
            }
        }
        firsts
    };
    // Inline (non-test) modules open at each position: `mod x { … }`.
    let mut inline = vec![0usize; c.len() + 1];
    let mut open: Vec<i32> = Vec::new();
    let mut braces = 0i32;
    let mut found = Vec::new();
    let mut i = 0;
    while i < c.len() {
        inline[i] = open.len();
        let starts_word = ident(c[i]) && (i == 0 || !ident(c[i - 1]));
        match c[i] {
            '{' => braces += 1,
            '}' => {
                braces -= 1;
                if open.last() == Some(&braces) {
                    open.pop();
                }
            }
            _ => {}
        }
        if !starts_word {
            i += 1;
            continue;
        }
        let word = word_at(i);
        let after = i + word.len();
        if word == "mod" {
            let name_at = skip_ws(after);
            let brace = skip_ws(name_at + word_at(name_at).len());
            if c.get(brace) == Some(&'{') {
                open.push(braces);
            }
        }
        let preceded_by_path = {
            let mut k = i;
            while k > 0 && c[k - 1].is_whitespace() {
                k -= 1;
            }
            k >= 2 && c[k - 1] == ':' && c[k - 2] == ':'
        };
        let mut targets: Vec<String> = Vec::new();
        if word == "crate" && !preceded_by_path {
            if let Some(k) = sep_at(after) {
                if c.get(k) == Some(&'{') {
                    targets = group(k);
                } else {
                    targets.push(word_at(k));
                }
            }
        } else if word == "super" && !preceded_by_path {
            // super::super::…::x: each step leaves one module (inline ones first).
            let mut k = i;
            let mut steps = 0;
            let mut next = None;
            while word_at(k) == "super" {
                match sep_at(k + 5) {
                    Some(n) => {
                        steps += 1;
                        next = Some(n);
                        k = n;
                    }
                    None => break,
                }
            }
            let out_of_file = steps as isize - inline[i] as isize;
            if let Some(n) = next {
                if out_of_file >= path.len() as isize {
                    if c.get(n) == Some(&'{') {
                        targets = group(n);
                    } else {
                        targets.push(word_at(n));
                    }
                }
            }
        }
        for module in targets {
            found.push(Use {
                line: line_of(i),
                module,
            });
        }
        i = after;
    }
    found
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The module path of a file under `src/`: `data/kv.rs` → [data, kv], `data/mod.rs` → [data].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

#[test]
fn the_layer_table_names_every_engine_module_once() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("read lib.rs");
    let declared: Vec<String> = code_only(&lib)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').trim().to_string())
        .collect();
    let mut table: Vec<String> = layers().into_iter().map(|l| l.module).collect();
    let mut sorted = table.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), table.len(), "a module twice in the table");
    table.sort();
    let mut declared_sorted = declared.clone();
    declared_sorted.sort();
    assert_eq!(
        table, declared_sorted,
        "docs/architecture.md's engine table (left) and the modules of lib.rs (right) differ"
    );
}

#[test]
fn every_layer_uses_only_the_layers_before_it_in_the_table() {
    let layers = layers();
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| (l.module.as_str(), i))
        .collect();
    let describe = |i: usize| format!("'{}' ({})", layers[i].name, layers[i].module);
    let src = root().join("src");
    let mut errors = Vec::new();
    let mut allowed_seen = vec![false; ALLOWED.len()];
    let mut files = 0;
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).expect("under src").to_path_buf();
        let path = module_path(&rel);
        if rel == Path::new("lib.rs") {
            continue; // the crate root, above every layer
        }
        files += 1;
        let Some(&own) = rank.get(path[0].as_str()) else {
            errors.push(format!(
                "src/{}: module '{}' is not in docs/architecture.md's engine table",
                rel.display(),
                path[0]
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        let code = without_tests(&code_only(&text));
        for u in uses(&code, &path) {
            let Some(&used) = rank.get(u.module.as_str()) else {
                continue; // a crate-root item (`crate::Result`, a re-export of lib.rs)
            };
            if used <= own {
                continue;
            }
            if let Some(k) = ALLOWED
                .iter()
                .position(|(f, m, _)| within(&rel, f) && *m == u.module)
            {
                allowed_seen[k] = true;
                continue;
            }
            errors.push(format!(
                "src/{}:{}: layer {} uses layer {}, which comes after it in \
                 docs/architecture.md's engine table: {}",
                rel.display(),
                u.line,
                describe(own),
                describe(used),
                text.lines().nth(u.line - 1).unwrap_or("").trim()
            ));
        }
    }
    assert!(files > 20, "found only {files} source files under {src:?}");
    for (k, seen) in allowed_seen.iter().enumerate() {
        if !seen {
            let (f, m, _) = ALLOWED[k];
            errors.push(format!(
                "ALLOWED lists '{f}' using '{m}', which no longer happens: remove the entry"
            ));
        }
    }
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
}

#[test]
fn the_engine_never_names_the_crates_above_it() {
    let src = root().join("src");
    let mut errors = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in code_only(&text).lines().enumerate() {
            for name in ["harp_jobs", "harp_cli", "harp_jni", "jni::"] {
                let hit = line.match_indices(name).any(|(at, _)| {
                    !line[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|ch| ch.is_alphanumeric() || ch == '_')
                });
                if hit {
                    errors.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("read Cargo.toml");
    for name in ["harp-jobs", "harp-cli", "harp-jni", "jni"] {
        if manifest.lines().any(|l| {
            l.trim_start().starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}."))
        }) {
            errors.push(format!("rust/harp/Cargo.toml depends on {name}"));
        }
    }
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
}

/// The crates on top of the engine depend one way: `harp-jobs` (the jobs) on the engine alone;
/// `harp-cli` (the tool) and `harp-jni` (the JNI shell) on the jobs, never on each other.
#[test]
fn the_crates_on_top_depend_one_way() {
    let rust = root().join("..");
    let deps = |krate: &str| -> Vec<String> {
        let path = rust.join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).expect("read a manifest");
        let section = text
            .split("\n[dependencies]\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{} has no [dependencies]", path.display()));
        let section = section.split("\n[").next().unwrap();
        section
            .lines()
            .filter_map(|l| l.split(['=', '.', ' ']).next())
            .filter(|n| n.starts_with("harp"))
            .map(String::from)
            .collect()
    };
    assert_eq!(deps("harp-jobs"), ["harp"]);
    assert_eq!(deps("harp-cli"), ["harp", "harp-jobs"]);
    assert_eq!(deps("harp-jni"), ["harp", "harp-jobs"]);
}

#[test]
fn the_scanner_sees_paths_and_skips_comments_strings_and_tests() {
    let src = r##"
use crate::a::X; // crate::comment
use crate::{b, c::{D, E}};
/* crate::block /* nested crate::deeper */ */
fn f<'a>(x: &'a str) -> char { let _ = "crate::string"; let _ = r#"crate::raw"#; '"' }
fn g() { super::super::h::k(); $crate::m::n!(); let _ = 'x'; }
mod inner { fn f() { super::p(); super::super::q::r(); super::super::super::s::t(); } }
#[cfg(test)]
mod tests { use crate::t::T; }
#[cfg(all(test, target_os = "linux"))]
fn only_in_tests() { crate::u::f(); }
"##;
    let path = ["x".to_string(), "y".to_string()];
    let code = without_tests(&code_only(src));
    let found: Vec<(usize, String)> = uses(&code, &path)
        .into_iter()
        .map(|u| (u.line, u.module))
        .collect();
    let want: Vec<(usize, String)> = [(2, "a"), (3, "b"), (3, "c"), (6, "h"), (6, "m"), (7, "s")]
        .into_iter()
        .map(|(l, m)| (l, m.to_string()))
        .collect();
    assert_eq!(found, want);
    // In `x/mod.rs`, one `super::` already reaches the root.
    let found: Vec<String> = uses("use super::z::Z;", &["x".to_string()])
        .into_iter()
        .map(|u| u.module)
        .collect();
    assert_eq!(found, ["z"]);
    assert!(within(Path::new("worker.rs"), "worker"));
    assert!(within(Path::new("worker/group.rs"), "worker"));
    assert!(!within(Path::new("workers.rs"), "worker"));
    assert!(within(Path::new("collective/tags.rs"), "collective/tags"));
}
