//! Agreement among the workers of a job (or a group) outside the collectives' own checks:
//! [`agree`] on the outcome of a local step, so that a step failing on one worker fails every
//! worker at once with the real cause, and [`same_everywhere`] for a setting every worker must
//! give alike. Both are a few allreduces through [`Collectives`], so they run wherever the
//! collectives do (the apps' input and output steps, checkpoints).

use super::Collectives;
use crate::collective::AllreduceAlgorithm;
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::Opts;

/// Fails on every worker, alike, unless every worker gave the same `value` (e.g. a directory
/// that all of them must share): one allreduce of a hash per worker. `what` names the setting.
pub fn same_everywhere(
    w: &(impl Collectives + ?Sized),
    label: &str,
    what: &str,
    value: &str,
) -> Result<()> {
    let mut mine = vec![0i64; w.size()];
    mine[w.rank()] = crate::util::fnv1a64(value.as_bytes()) as i64;
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &mine));
    w.allreduce(
        label,
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let all = t.get(0).expect("hashes").as_slice::<i64>()?;
    match all.iter().position(|&h| h != all[0]) {
        None => Ok(()),
        Some(r) => Err(Error::config(format!(
            "{what} differs between workers (rank {r}'s is not rank 0's; this worker's is \
             '{value}'): every worker must give the same one"
        ))),
    }
}

/// [`agree`] on a step that yields a value: this worker's value when every worker succeeded,
/// else the same error on every worker.
pub fn agree_on<T>(w: &(impl Collectives + ?Sized), label: &str, outcome: Result<T>) -> Result<T> {
    match outcome {
        Ok(v) => agree(w, label, Ok(())).map(|()| v),
        Err(e) => Err(agree(w, label, Err(e)).expect_err("a failure is agreed on")),
    }
}

/// Collective: every worker passes the outcome of a local step (checking an output path, say);
/// all return `Ok` when every worker succeeded, else the same error naming the first failing
/// rank and its cause. A step that fails on one worker thus fails every worker at once with the
/// real cause, instead of leaving the others waiting for it in their next collective.
/// The others get an error of the same kind as the failing worker's (`input` keeps its file
/// and line), reading `worker R failed: …`.
pub fn agree(w: &(impl Collectives + ?Sized), label: &str, outcome: Result<()>) -> Result<()> {
    let msg = match &outcome {
        Ok(()) => Vec::new(),
        Err(e) => encode_failure(e),
    };
    let p = w.size();
    let mut lens = vec![0i64; p];
    lens[w.rank()] = msg.len() as i64;
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &lens));
    w.allreduce(
        label,
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let lens = t.get(0).expect("lengths").as_slice::<i64>()?.to_vec();
    let Some(first) = lens.iter().position(|&l| l > 0) else {
        return Ok(());
    };
    // Every message, each at its rank's offset (the sum has one contributor per byte).
    let offset: usize = lens[..w.rank()].iter().map(|&l| l as usize).sum();
    let mut all = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
    all[offset..offset + msg.len()].copy_from_slice(&msg);
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &all));
    w.allreduce(
        label,
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let all = t.get(0).expect("messages").as_slice::<u8>()?;
    let at: usize = lens[..first].iter().map(|&l| l as usize).sum();
    match outcome {
        Err(e) if w.rank() == first => Err(e),
        _ => Err(decode_failure(first, &all[at..at + lens[first] as usize])),
    }
}

/// A failure as [`agree`] sends it: its kind, a NUL, and for `input` the file, a NUL, the line,
/// a NUL and the message, else the whole message.
fn encode_failure(e: &Error) -> Vec<u8> {
    let body = match e {
        Error::Input { file, line, msg } => format!("{file}\0{line}\0{msg}"),
        e => e.to_string(),
    };
    format!("{}\0{body}", e.kind()).into_bytes()
}

/// The error the other workers return for worker `first`'s failure ([`encode_failure`]): the
/// same kind where it can be rebuilt from text (input, data, io, protocol), else `config`.
fn decode_failure(first: usize, bytes: &[u8]) -> Error {
    let text = String::from_utf8_lossy(bytes);
    let (kind, body) = text.split_once('\0').unwrap_or(("config", &text));
    let said = |t: &str| format!("worker {first} failed: {t}");
    match kind {
        "input" => {
            let mut f = body.splitn(3, '\0');
            match (f.next(), f.next().and_then(|l| l.parse().ok()), f.next()) {
                (Some(file), Some(line), Some(msg)) => Error::Input {
                    file: file.to_string(),
                    line,
                    msg: format!("{msg} (read by worker {first})"),
                },
                _ => Error::config(said(body)),
            }
        }
        "data" => Error::data(said(body)),
        "protocol" => Error::Protocol(said(body)),
        "io" => Error::io(
            format!("worker {first} failed"),
            std::io::Error::other(body.to_string()),
        ),
        _ => Error::config(said(body)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::on_workers;

    #[test]
    fn agree_fails_every_worker_with_the_first_cause() {
        let r = on_workers(4, |w| {
            let mine = match w.rank() {
                2 => Err(Error::config("disk full on 2")),
                3 => Err(Error::config("also 3")),
                _ => Ok(()),
            };
            let e = agree(w, "t", mine).unwrap_err().to_string();
            // Everyone still works afterwards, and agrees on success.
            agree(w, "t2", Ok(())).unwrap();
            e
        });
        assert!(
            r[0].contains("worker 2 failed") && r[0].contains("disk full on 2"),
            "{}",
            r[0]
        );
        assert_eq!(r[0], r[1]);
        assert_eq!(r[0], r[3]);
        assert!(
            r[2].contains("disk full on 2") && !r[2].contains("worker 2"),
            "{}",
            r[2]
        );
    }

    /// The others' error has the failing worker's kind; an input error keeps file and line.
    #[test]
    fn agree_keeps_the_kind_and_an_input_errors_place() {
        for (err, kind, says) in [
            (
                Error::Input {
                    file: "pts.txt".into(),
                    line: 7,
                    msg: "bad number 'x'".into(),
                },
                "input",
                "pts.txt:7: bad number 'x' (read by worker 1)",
            ),
            (
                Error::data("cannot combine"),
                "data",
                "worker 1 failed: cannot combine",
            ),
            (
                Error::io("cannot write 'o'", std::io::Error::other("disk full")),
                "io",
                "worker 1 failed: cannot write 'o': disk full",
            ),
            (Error::config("bad k"), "config", "worker 1 failed: bad k"),
        ] {
            let err = std::sync::Arc::new(std::sync::Mutex::new(Some(err)));
            let r = on_workers(2, move |w| {
                let mine = match w.rank() {
                    1 => Err(err.lock().unwrap().take().unwrap()),
                    _ => Ok(()),
                };
                let e = agree(w, "t", mine).unwrap_err();
                (e.kind(), e.to_string())
            });
            assert_eq!(r[0], (kind, says.to_string()));
            assert_eq!(r[1].0, kind);
        }
    }
}
