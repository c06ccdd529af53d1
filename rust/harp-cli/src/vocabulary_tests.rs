//! The option vocabulary is the same everywhere: the docs' key tables, the CLI's `--help`, and
//! the `harp.*` keys the Java sources read all agree with `harp::config` (OPTIONS, JAVA_ONLY,
//! and the applications' tables in `harp::config::apps`).

use harp::config::{apps, EngineOption, Layer, JAVA_ONLY, OPTIONS};

/// Whether `harp::config` names Java key `k` outside [`OPTIONS`]: a Java-layer key or an
/// application's.
fn java_layer_key(k: &str) -> bool {
    JAVA_ONLY.iter().any(|(j, _)| *j == k) || apps::find_java(k).is_some()
}

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
                    java_layer_key(k),
                    "{doc} documents {k}, which is in none of harp::config's OPTIONS, JAVA_ONLY \
                     and apps"
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
            EngineOption::find(&k).is_some() || java_layer_key(&k),
            "{file} reads {k}, which harp::config lists in none of OPTIONS, JAVA_ONLY and apps \
             (the engine would warn about it in every job)"
        );
    }
}

/// Every application job of the command line takes exactly the options of its table in
/// `harp::config::apps`, with the table's help, default and kind, besides the cluster's.
#[test]
fn every_app_job_takes_the_options_of_its_table() {
    use clap::CommandFactory;
    let cli = crate::Cli::command();
    let cluster: Vec<&str> = OPTIONS
        .iter()
        .map(|o| o.flag)
        .chain(["io-threads", "workers"])
        .collect();
    for job in apps::JOBS {
        let cmd = cli
            .find_subcommand(job.name)
            .unwrap_or_else(|| panic!("harp has no job {}", job.name));
        assert_eq!(
            cmd.get_about().map(|a| a.to_string()).as_deref(),
            Some(job.about)
        );
        let mut flags = Vec::new();
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long().filter(|l| !cluster.contains(l)) else {
                continue;
            };
            flags.push(long.to_string());
            let o = job
                .options
                .iter()
                .find(|o| o.flag() == long)
                .unwrap_or_else(|| panic!("harp {} --{long} is not in its table", job.name));
            let what = format!("harp {} --{long}", job.name);
            assert_eq!(
                a.get_help().map(|h| h.to_string()).as_deref(),
                Some(o.short_help()),
                "{what}"
            );
            let default: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let want: Vec<String> = o.default.map(String::from).into_iter().collect();
            match o.kind {
                apps::Kind::Switch => assert!(!a.get_action().takes_values(), "{what}"),
                apps::Kind::Required => assert!(a.is_required_set(), "{what}"),
                apps::Kind::Value => {
                    assert!(
                        a.get_action().takes_values() && !a.is_required_set(),
                        "{what}"
                    );
                    assert_eq!(default, want, "{what}");
                }
            }
        }
        let mut want: Vec<String> = job.options.iter().map(|o| o.flag()).collect();
        flags.sort();
        want.sort();
        assert_eq!(flags, want, "harp {}", job.name);
    }
}
