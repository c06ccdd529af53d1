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

#[derive(Args)]
pub struct OptionsArgs {
    /// Print `KEY.java` and `KEY.default` lines (the Java build's copy of the table) instead.
    #[arg(long)]
    pub properties: bool,
}

/// `harp options`: every engine option with its CLI flag, Java job key, engine key, default
/// and meaning; then the `harp.*` keys the Java and YARN layers read themselves.
pub fn print(a: &OptionsArgs) -> Result<()> {
    print!("{}", if a.properties { properties() } else { table() });
    Ok(())
}

fn table() -> String {
    let mut s = String::from("CLI flag | Java job key | engine key | default | unit | meaning\n");
    for o in OPTIONS {
        let unit = match o.unit {
            Unit::Millis => "flag: s, keys: ms (1 ms to 365 days)",
            Unit::Bytes => "bytes (an integer, or with k, m, g, t: 64k, 16m)",
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
