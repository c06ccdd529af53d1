//! The engine options as CLI flags, made from the engine's one option table
//! (`harp::config::OPTIONS`: flag, unit, help, default), and `harp options`, which prints that
//! table (and, for the Java build, its Java keys and defaults as a properties file).

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use harp::config::{EngineOption, Unit, JAVA_ONLY, OPTIONS};
use harp::{Config, Result};

/// Options every job has for the cluster it runs on.
#[derive(Args, Clone, Debug)]
pub struct ClusterOpts {
    #[command(flatten)]
    pub engine: EngineFlags,
    /// tokio I/O threads per worker, 1 to 64.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub io_threads: u8,
}

impl ClusterOpts {
    /// The worker configuration these flags give.
    pub fn config(&self) -> Result<Config> {
        Ok(self.engine.config.clone())
    }
}

/// One flag per row of `harp::config::OPTIONS`, parsed into a [`Config`] (each value is checked
/// while the command line is parsed, so a bad one is a usage error naming the flag).
#[derive(Clone, Debug, Default)]
pub struct EngineFlags {
    pub config: Config,
}

/// `--help` text of an option: its meaning and its default (clap's `[default: …]` form).
fn help(o: &EngineOption) -> String {
    let text = o.help.trim_end_matches('.');
    let text = match o.unit {
        Unit::Millis => format!(
            "{text} (seconds, 0.001 to {})",
            harp::config::MAX_DURATION.as_secs()
        ),
        _ => text.to_string(),
    };
    match o.default_flag_value() {
        Some(d) => format!("{text} [default: {d}]"),
        None => text,
    }
}

impl Args for EngineFlags {
    fn augment_args(cmd: Command) -> Command {
        OPTIONS.iter().fold(cmd, |cmd, o| {
            let arg = Arg::new(o.flag)
                .long(o.flag)
                .value_name(o.unit.cli_name())
                .allow_negative_numbers(true)
                .value_parser(move |v: &str| {
                    o.set_flag(&mut Config::default(), v)
                        .map(|()| v.to_string())
                        .map_err(|e| e.to_string())
                })
                .help(help(o));
            // A switch alone means on (`--frame-mac`); a value needs `=` (`--frame-mac=false`).
            let arg = match o.unit {
                Unit::Switch => arg
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
                _ => arg,
            };
            cmd.arg(arg)
        })
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for EngineFlags {
    fn from_arg_matches(m: &ArgMatches) -> std::result::Result<Self, clap::Error> {
        let mut f = EngineFlags::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> std::result::Result<(), clap::Error> {
        for o in OPTIONS {
            if let Some(v) = m.get_one::<String>(o.flag) {
                o.set_flag(&mut self.config, v).map_err(|e| {
                    clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"))
                })?;
            }
        }
        Ok(())
    }
}

/// The whole-number options that count things a job cannot do without: wherever one of these
/// names appears (any job, `harp gen`), 0 is refused as a usage error, the same for every job.
pub const AT_LEAST_ONE: &[&str] = &[
    "iterations",
    "threads",
    "inner",
    "reps",
    "partitions",
    "k",
    "n",
    "dim",
    "files",
    "clusters",
    "epochs",
    "blocks",
];

/// `cmd` and its subcommands with one rule for whole-number options (those of type `usize` or
/// `u32`): a negative value is a usage error naming the option and the smallest value allowed
/// (1 for the names in [`AT_LEAST_ONE`], else 0), not "unexpected argument '-1'"; every option
/// taking a value accepts a leading `-` digit as that value. The `harp` command line, worker
/// mode and the jobs run inside Java ([`crate::run_job`]) are all parsed through it.
pub fn whole_numbers(cmd: Command) -> Command {
    let cmd = cmd.mut_args(|a| {
        if !a.get_action().takes_values() {
            return a;
        }
        let min = match a.get_long() {
            Some(l) if AT_LEAST_ONE.contains(&l) => 1,
            _ => 0,
        };
        let t = a.get_value_parser().type_id();
        let a = a.allow_negative_numbers(true);
        if t == std::any::TypeId::of::<usize>() {
            a.value_parser(move |v: &str| whole::<usize>(v, min))
        } else if t == std::any::TypeId::of::<u32>() {
            a.value_parser(move |v: &str| whole::<u32>(v, min))
        } else {
            a
        }
    });
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    subs.into_iter()
        .fold(cmd, |cmd, name| cmd.mut_subcommand(name, whole_numbers))
}

/// A whole number of type `T`, at least `min`; the error says what is allowed.
fn whole<T: TryFrom<u64>>(v: &str, min: u64) -> std::result::Result<T, String> {
    let max = u64::MAX >> (64 - 8 * std::mem::size_of::<T>().min(8));
    let range = match max {
        u64::MAX => format!("a whole number, at least {min}"),
        max => format!("a whole number from {min} to {max}"),
    };
    let t = v.trim();
    match t.parse::<u64>() {
        Ok(n) if n >= min => T::try_from(n).map_err(|_| format!("expected {range}")),
        Ok(_) => Err(format!("expected {range}")),
        Err(_) if t.starts_with('-') && t[1..].parse::<f64>().is_ok() => Err(format!(
            "negative numbers are not allowed: expected {range}"
        )),
        Err(_) => Err(format!("expected {range}")),
    }
}

/// The job secret held in file `path` (`harp worker --secret-file`): its bytes without
/// trailing whitespace (spaces, tabs, `\r`, `\n`), so that a file written by an editor or
/// `echo` (which end it with a newline) holds the same secret as `HARP_SECRET`.
pub fn secret_file(path: &str) -> Result<Vec<u8>> {
    let mut b = std::fs::read(path)
        .map_err(|e| harp::Error::io(format!("cannot read secret file {path}"), e))?;
    let keep = b.len()
        - b.iter()
            .rev()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
    b.truncate(keep);
    Ok(b)
}

#[derive(Args)]
pub struct OptionsArgs {
    /// Print `KEY.java` and `KEY.default` lines (the Java build's copy of the table) instead.
    #[arg(long)]
    pub properties: bool,
}

/// `harp options`: every engine option with its CLI flag, Java job key, engine key, default
/// and meaning; then the `harp.*` keys the Java and YARN layers read themselves; then every
/// application job's options.
pub fn print(a: &OptionsArgs) -> Result<()> {
    print!("{}", if a.properties { properties() } else { table() });
    Ok(())
}

fn table() -> String {
    let mut s = String::from("CLI flag | Java job key | engine key | default | unit | meaning\n");
    for o in OPTIONS {
        let unit = match o.unit {
            Unit::Millis => "flag: s, keys: ms (1 ms to 365 days)",
            Unit::Bytes => "bytes (an integer, or with k, m, g, t: 64k, 16m; at most 4g)",
            u => u.name(),
        };
        s.push_str(&format!(
            "--{} | {} | {} | {} | {unit} | {}\n",
            o.flag,
            o.java,
            o.key,
            o.default_value(),
            o.help
        ));
    }
    s.push_str("\nJava and YARN job keys (not engine options):\n");
    for (k, layer) in JAVA_ONLY {
        s.push_str(&format!("{k} ({layer:?})\n"));
    }
    s.push_str("\nApplication options (harp JOB, harp::config::apps):\n");
    s.push_str("job | CLI flag | Java job key | default | meaning\n");
    for j in harp::config::apps::JOBS {
        for o in j.options {
            s.push_str(&format!(
                "{} | --{} | {} | {} | {}\n",
                j.name,
                o.flag(),
                o.java,
                o.default.unwrap_or("-"),
                o.help
            ));
        }
    }
    s
}

fn properties() -> String {
    let mut s = String::from(
        "# The engine's options (harp options --properties); generated, do not edit.\n",
    );
    for o in OPTIONS {
        s.push_str(&format!("{}.java={}\n", o.key, o.java));
        s.push_str(&format!("{}.default={}\n", o.key, o.default_value()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        c: ClusterOpts,
    }

    #[test]
    fn flags_set_the_config_and_bad_values_are_usage_errors() {
        let t = T::try_parse_from([
            "t",
            "--timeout",
            "2.5",
            "--socket-buffer=4096",
            "--tcp-congestion",
            "reno",
            "--io-threads",
            "3",
        ])
        .unwrap();
        let c = t.c.config().unwrap();
        assert_eq!(c.op_timeout, std::time::Duration::from_millis(2500));
        assert_eq!(c.send_buffer, Some(4096));
        assert_eq!(c.tcp_congestion.as_str(), "reno");
        assert_eq!(c.connect_timeout, Config::default().connect_timeout);
        assert_eq!(t.c.io_threads, 3);
        assert!(!c.frame_mac);
        let on = T::try_parse_from(["t", "--frame-mac", "--timeout", "2"]).unwrap();
        assert!(on.c.config().unwrap().frame_mac);
        let off = T::try_parse_from(["t", "--frame-mac=false"]).unwrap();
        assert!(!off.c.config().unwrap().frame_mac);
        let e = T::try_parse_from(["t", "--frame-mac=perhaps"])
            .err()
            .unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let e = T::try_parse_from(["t", "--timeout", "-1"]).err().unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(e.to_string().contains("positive number of seconds"), "{e}");
        for v in ["inf", "1e300", "1e19"] {
            let e = T::try_parse_from(["t", "--connect-timeout", v])
                .err()
                .unwrap();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            assert!(e.to_string().contains("from 0.001 to 31536000"), "{e}");
        }
        let h = help(EngineOption::by_flag("timeout").unwrap());
        assert!(
            h.contains("(seconds, 0.001 to 31536000) [default: 120]"),
            "{h}"
        );
    }

    #[test]
    fn whole_numbers_name_their_range() {
        assert_eq!(
            whole::<u32>("4294967296", 0),
            Err("expected a whole number from 0 to 4294967295".into())
        );
        assert_eq!(whole::<usize>(" 7 ", 1), Ok(7));
    }

    #[test]
    fn byte_flags_share_one_limit() {
        for flag in [
            "--chunk",
            "--event-window",
            "--socket-buffer",
            "--net-measure-bytes",
        ] {
            let e = T::try_parse_from(["t", flag, "100t"]).err().unwrap();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            assert!(
                e.to_string().contains("more than 4294967296 bytes (4g)"),
                "{e}"
            );
            T::try_parse_from(["t", flag, "4g"]).unwrap();
        }
    }

    #[test]
    fn a_secret_file_loses_its_trailing_whitespace_only() {
        let d = std::env::temp_dir().join(format!("harp-secret-{}", std::process::id()));
        for (text, want) in [
            ("abc\n", "abc"),
            ("abc\r\n", "abc"),
            (" a b \t\n\n", " a b"),
            ("abc", "abc"),
        ] {
            std::fs::write(&d, text).unwrap();
            assert_eq!(
                secret_file(d.to_str().unwrap()).unwrap(),
                want.as_bytes(),
                "{text:?}"
            );
        }
        std::fs::remove_file(&d).unwrap();
        let e = secret_file(d.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("cannot read secret file"), "{e}");
    }

    #[test]
    fn properties_name_every_java_key_with_its_default() {
        let p = properties();
        assert!(
            p.contains("op_timeout_ms.java=harp.collective.timeout.ms\n"),
            "{p}"
        );
        assert!(p.contains("connect_timeout_ms.default=60000\n"), "{p}");
        assert_eq!(
            p.lines().filter(|l| l.contains(".java=")).count(),
            OPTIONS.len()
        );
    }
}
