//! `harp.KMeans`: the engine's whole K-means loop (`harp::apps::kmeans::driver::run`) on a
//! worker of this JVM, over points the engine reads straight into native memory. Java passes a
//! job description as `key=value` lines (parsed here), an optional per-iteration callback, and
//! gets back one `double[]` (layout in [`encode`], decoded by `harp.KMeans.Result`).

use harp::apps::kmeans::driver::{
    self, AssignPath, InitMethod, Iteration, Options, Outcome, StopReason,
};
use harp::apps::kmeans::input::ByteRange;
use harp::collective::AllreduceAlgorithm;
use harp::config::apps::KMEANS;
use harp::Collectives;
use jni::objects::{JClass, JDoubleArray, JObject, JString};
use jni::sys::jlong;
use jni::{jni_sig, jni_str, Env, EnvUnowned, JValue};

use crate::convert::{jstr, new_array};
use crate::errors::{call, fail, Failure};
use crate::handles::worker;

/// The options of `harp kmeans` that a job description does not take: Hadoop commits the
/// output.
const NOT_IN_SPEC: [&str; 2] = ["output", "overwrite"];

/// Parses the job description: one `key=value` per line (blank lines and `#` comments ignored).
///
/// Keys: the names of `harp kmeans`'s options (`harp::config::apps::KMEANS`: `init`,
/// `iterations`, `threads`, `format`, `skip_columns`, `allreduce`, `precision`, `assign`,
/// `tolerance`, `empty_cluster`, `init_method`, `k`, `seed`, `dim`, `labels`,
/// `checkpoint_every`, `checkpoint_dir`, `resume` (`true`/`false`), `input`: a path the engine
/// divides across the workers), except `output` and `overwrite` (Hadoop's to handle); `job`
/// (the job's name, recorded in checkpoints); or, instead of `input`, `splits=N` followed by N
/// lines `split=START LENGTH PATH` (this worker's byte ranges, Hadoop `FileSplit` semantics).
fn options(spec: &str) -> Result<Options, Failure> {
    let mut o = Options::new(String::new(), String::new());
    let mut splits: Option<(usize, Vec<ByteRange>)> = None;
    let bad = |k: &str, v: &str| fail(format!("kmeans: {k}: bad value '{v}'"));
    for line in spec.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| fail(format!("kmeans: expected key=value, got '{line}'")))?;
        let num = || v.parse::<usize>().map_err(|_| bad(k, v));
        let named = |e: harp::Error| fail(format!("kmeans: {k}: {e}"));
        match k {
            "input" => o.input = v.to_string(),
            "init" => o.init = v.to_string(),
            "iterations" => o.iterations = num()?,
            "threads" => o.threads = num()?,
            "format" => o.format = v.parse().map_err(named)?,
            "skip_columns" => o.skip_columns = num()?,
            "allreduce" => o.allreduce = AllreduceAlgorithm::parse(v).map_err(named)?,
            "precision" => o.precision = v.parse().map_err(named)?,
            "assign" => o.assign = v.parse().map_err(named)?,
            "empty_cluster" => o.empty_cluster = v.parse().map_err(named)?,
            "tolerance" => o.tolerance = Some(v.parse::<f64>().map_err(|_| bad(k, v))?),
            "init_method" => o.init_method = v.parse().map_err(named)?,
            "k" => o.k = Some(num()?),
            "seed" => o.seed = v.parse::<u64>().map_err(|_| bad(k, v))?,
            "dim" => o.dim = Some(num()?),
            "labels" => o.labels = Some(v.to_string()),
            "checkpoint_every" => o.checkpoint_every = num()?,
            "checkpoint_dir" => o.checkpoint_dir = Some(v.to_string()),
            "resume" => o.resume = v.parse::<bool>().map_err(|_| bad(k, v))?,
            "job" => o.job = v.to_string(),
            "splits" => splits = Some((num()?, Vec::new())),
            "split" => {
                let mut f = v.splitn(3, ' ');
                let (s, l, p) = (f.next(), f.next(), f.next());
                let range = match (s.map(str::parse::<u64>), l.map(str::parse::<u64>), p) {
                    (Some(Ok(s)), Some(Ok(l)), Some(p)) if !p.is_empty() => ByteRange::new(p, s, l),
                    _ => return Err(bad(k, v)),
                };
                match &mut splits {
                    Some((_, v)) => v.push(range),
                    None => return Err(fail("kmeans: split lines must follow splits=N")),
                }
            }
            _ => {
                let known: Vec<&str> = KMEANS
                    .options
                    .iter()
                    .map(|o| o.name)
                    .filter(|n| !NOT_IN_SPEC.contains(n))
                    .chain(["job", "splits", "split"])
                    .collect();
                return Err(fail(format!(
                    "kmeans: unknown option '{k}' (known: {})",
                    known.join(", ")
                )));
            }
        }
    }
    if o.init.is_empty() && o.init_method == InitMethod::File {
        return Err(fail(
            "kmeans: no initial centroids (init, or init_method with k)",
        ));
    }
    match splits {
        Some((n, v)) if n == v.len() => o.splits = Some(v),
        Some((n, v)) => {
            return Err(fail(format!(
                "kmeans: splits={n} but {} split lines",
                v.len()
            )))
        }
        None if o.input.is_empty() => return Err(fail("kmeans: no input (input or splits)")),
        None => {}
    }
    if o.threads == 0 {
        return Err(fail("kmeans: threads must be at least 1"));
    }
    o.validate()?;
    Ok(o)
}

/// `[k, dim, points, load_s, threads, stop (0 iterations, 1 tolerance, 2 converged), assign
/// (the path used: its index in `AssignPath::ALL`, the vocabulary `kmeans-assign`), m,
/// m × (inertia, compute_s, comm_s, pool_allocations, distances (the share computed; NaN when
/// not counted)), k·dim centroids, resumed_from (the checkpoint's iteration, 0 when the run did
/// not resume)]`.
fn encode(out: &Outcome, threads: usize) -> Vec<f64> {
    let c = &out.centroids;
    let stop = match out.stop_reason {
        StopReason::Iterations => 0.0,
        StopReason::Tolerance => 1.0,
        StopReason::Converged => 2.0,
    };
    let assign = AssignPath::ALL
        .iter()
        .position(|a| *a == out.assign)
        .expect("a path of AssignPath::ALL");
    let mut v = Vec::with_capacity(9 + 5 * out.iterations.len() + c.data.len());
    v.extend([
        c.n as f64,
        c.dim as f64,
        out.points as f64,
        out.load_s,
        threads as f64,
        stop,
        assign as f64,
        out.iterations.len() as f64,
    ]);
    for it in &out.iterations {
        v.extend([
            it.inertia,
            it.compute_s,
            it.comm_s,
            it.pool_allocations as f64,
            it.distances.unwrap_or(f64::NAN),
        ]);
    }
    v.extend_from_slice(&c.data);
    v.push(out.resumed_from.unwrap_or(0) as f64);
    v
}

/// Calls `progress.iteration(i, inertia, computeSeconds, commSeconds, distances)` (`distances`
/// NaN when not counted). After a Java exception
/// the callback is not called again; the exception stays pending and is thrown when the native
/// method returns.
fn report(env: &mut Env<'_>, progress: &JObject<'_>, it: &Iteration) {
    if progress.is_null() || env.exception_check() {
        return;
    }
    let _ = env.call_method(
        progress,
        jni_str!("iteration"),
        jni_sig!("(IDDDD)V"),
        &[
            JValue::Int(it.iteration as i32),
            JValue::Double(it.inertia),
            JValue::Double(it.compute_s),
            JValue::Double(it.comm_s),
            JValue::Double(it.distances.unwrap_or(f64::NAN)),
        ],
    );
}

/// Runs K-means on worker `w` as described by `spec`; `progress` (may be null) is called after
/// every iteration on this thread. Returns the encoded outcome (see [`encode`]).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_KMeans_runEngine<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    spec: JString<'l>,
    progress: JObject<'l>,
) -> JDoubleArray<'l> {
    call(&mut env, |env, scope| {
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        let o = options(&jstr(env, &spec)?)?;
        let span = tracing::info_span!("harp", worker = %we.tag);
        let _g = span.enter();
        let out = driver::run(&we.worker, &o, |it| report(env, &progress, it))?;
        // The labels are committed once every worker has written its part (the job's own
        // output is Hadoop's to commit).
        if o.labels.is_some() {
            we.worker.barrier("kmeans-labels")?;
            driver::commit_labels(&we.worker, &o)?;
        }
        if env.exception_check() {
            return Ok(JDoubleArray::default());
        }
        new_array(env, &encode(&out, o.threads))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp::config::apps::Kind;

    /// The description takes every option of `harp kmeans` by its name in the table, but
    /// those Hadoop handles.
    #[test]
    fn the_description_takes_the_names_of_the_kmeans_table() {
        for o in KMEANS.options {
            let value = o.default.unwrap_or(match o.kind {
                Kind::Switch => "false",
                _ => "2",
            });
            let spec = format!("input=p\ninit=i.txt\n{}={value}\n", o.name);
            let unknown = match options(&spec) {
                Ok(_) => false,
                Err(f) => f.message().contains("unknown option"),
            };
            assert_eq!(unknown, NOT_IN_SPEC.contains(&o.name), "{}", o.name);
        }
        let e = options("input=p\ninit=i\nskip.columns=1\n").unwrap_err();
        assert!(e.message().contains("(known: "), "{}", e.message());
    }
}
