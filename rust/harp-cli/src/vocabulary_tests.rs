//! The option vocabulary is the same everywhere: the docs' key tables, the CLI's `--help`, and
//! the `harp.*` keys the Java sources read all agree with `harp::config` (OPTIONS, JAVA_ONLY).

use harp::config::{EngineOption, Layer, JAVA_ONLY, OPTIONS};

fn repo_file(path: &str) -> String {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The `| `key` | default | meaning |` rows of a document's "Configuration keys" table.
fn doc_keys(doc: &str) -> Vec<(String, String)> {
    let text = repo_file(&format!("docs/{doc}"));
    let section = text
        .split("\n## Configuration keys\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{doc} has no 'Configuration keys' section"));
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<(String, String)> = section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let key = cells.get(1)?.strip_prefix("`harp.")?.strip_suffix('`')?;
            Some((
                format!("harp.{key}"),
                cells.get(2)?.trim_matches('`').to_string(),
            ))
        })
        .collect();
    assert!(!rows.is_empty(), "{doc}: no key rows");
    rows
}

#[test]
fn docs_tables_and_help_list_the_option_table() {
    let guide = doc_keys("java-guide.md");
    let yarn = doc_keys("yarn.md");
    for (doc, rows) in [("java-guide.md", &guide), ("yarn.md", &yarn)] {
        for (k, default) in rows.iter() {
            match EngineOption::find(k) {
                Some(o) => {
                    let want = o.default_value();
                    let want = if want.is_empty() {
                        "unset".into()
                    } else {
                        want
                    };
                    assert_eq!(*default, want, "{doc}: default of {k}");
                }
                None => assert!(
                    JAVA_ONLY.iter().any(|(j, _)| j == k),
                    "{doc} documents {k}, which is in neither harp::config::OPTIONS nor JAVA_ONLY"
                ),
            }
        }
    }
    let has = |rows: &[(String, String)], k: &str| rows.iter().any(|(d, _)| d == k);
    for o in OPTIONS {
        assert!(
            has(&guide, o.java),
            "docs/java-guide.md does not list {}",
            o.java
        );
    }
    for (k, layer) in JAVA_ONLY {
        match layer {
            Layer::Java => assert!(has(&guide, k), "docs/java-guide.md does not list {k}"),
            Layer::Yarn => assert!(has(&yarn, k), "docs/yarn.md does not list {k}"),
            Layer::Internal => {}
        }
    }
    use clap::CommandFactory;
    let mut cli = crate::Cli::command();
    for job in ["kmeans", "bench", "check"] {
        let help = cli
            .find_subcommand_mut(job)
            .unwrap()
            .render_long_help()
            .to_string();
        for o in OPTIONS {
            let flag = match o.unit {
                // A switch takes its value only after `=` (`--frame-mac` alone means on).
                harp::config::Unit::Switch => format!("--{}[=<{}>]", o.flag, o.unit.cli_name()),
                _ => format!("--{} <{}>", o.flag, o.unit.cli_name()),
            };
            let at = help
                .find(&flag)
                .unwrap_or_else(|| panic!("harp {job} --help lacks {flag}:\n{help}"));
            let entry = help[at..].split("\n  -").next().unwrap();
            if let Some(d) = o.default_flag_value() {
                assert!(entry.contains(&format!("[default: {d}]")), "{entry}");
            }
        }
    }
}

/// Every `"harp.…"` string literal of the Java sources under `dir`.
fn java_literals(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            java_literals(&p, out);
        } else if p.extension().is_some_and(|x| x == "java") {
            let text = std::fs::read_to_string(&p).unwrap();
            for piece in text.split("\"harp.").skip(1) {
                if let Some(end) = piece.find('"') {
                    out.push((format!("harp.{}", &piece[..end]), p.display().to_string()));
                }
            }
        }
    }
}

#[test]
fn every_harp_key_the_java_sources_read_is_in_the_table() {
    // Not job configuration keys: a JVM system property, a counter group, a credentials alias.
    let not_keys = ["harp.native.lib", "harp.progress", "harp.job.secret"];
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in [
        "java/src/main/java",
        "java/examples",
        "yarn-appmaster/src/main/java",
    ] {
        java_literals(std::path::Path::new(&format!("{root}/{dir}")), &mut found);
    }
    assert!(found.iter().any(|(k, _)| k == "harp.workers"), "{found:?}");
    for (k, file) in found {
        if k.ends_with('.') || not_keys.contains(&k.as_str()) {
            continue;
        }
        assert!(
            EngineOption::find(&k).is_some() || JAVA_ONLY.iter().any(|(j, _)| *j == k),
            "{file} reads {k}, which harp::config lists neither in OPTIONS nor in JAVA_ONLY \
             (the engine would warn about it in every job)"
        );
    }
}
