//! Per-frame integrity (`--frame-mac`) with real `harp` processes on loopback: the local
//! launcher passes the flag to every worker and the check against the sequential model passes;
//! in hosts-file mode, workers started with different settings both fail at start-up, naming
//! the setting, well before the connect timeout.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn harp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harp"));
    c.env("HARP_LOG", "warn");
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_checked_job_with_frame_macs_matches_the_model() {
    let o = harp()
        .args(["check", "--workers", "3", "--seed", "7", "--rounds", "2"])
        .args(["--timeout", "60", "--frame-mac"])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let n = 2 * harp::check::CHECKS_PER_ROUND;
    assert!(
        out.contains(&format!("{n} results verified on 3 workers")),
        "{out}"
    );
}

#[test]
fn workers_with_different_frame_mac_settings_fail_at_start_up() {
    let dir = std::env::temp_dir().join(format!("harp-test-integrity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ls: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
    drop(ls);
    let hosts = dir.join("hosts");
    let mut f = std::fs::File::create(&hosts).unwrap();
    for p in &ports {
        writeln!(f, "127.0.0.1:{p}").unwrap();
    }
    let start = Instant::now();
    let kids: Vec<_> = (0..2)
        .map(|r| {
            harp()
                .args(["worker", "--hosts", hosts.to_str().unwrap()])
                .args(["--rank", &r.to_string(), "--job", "mac"])
                .args(["bench", "barrier", "--reps", "1", "--connect-timeout", "30"])
                .args(if r == 1 {
                    &["--frame-mac"][..]
                } else {
                    &[][..]
                })
                .env("HARP_SECRET", "s3cret-s3cret-s3cret")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        let (_, err) = text(o);
        assert!(!o.status.success(), "rank {r} must fail: {err}");
        let (theirs, mine) = if r == 0 { ("on", "off") } else { ("off", "on") };
        let want = format!(
            "rank {r}: start-up failed: rank {} has per-frame integrity (frame_mac, --frame-mac, \
             harp.frame.mac) {theirs} and this worker has it {mine}",
            1 - r
        );
        assert!(err.contains(&want), "rank {r}: {err}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "refused at once, not at the 30 s connect timeout: {:?}",
        start.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
