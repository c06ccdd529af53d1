//! `harp.HarpJob`: runs one of the `harp` tool's jobs (wordcount, pagerank, mds, layout,
//! components, kmeans, …: `harp_jobs::run_job`, the same arguments, checks and output as
//! `harp worker … JOB …`) as the part of a worker this JVM started. A Hadoop example is then a
//! mapper that passes its arguments through.

use jni::objects::{JClass, JObjectArray, JString};
use jni::sys::jlong;
use jni::EnvUnowned;

use crate::convert::jstr;
use crate::errors::call;
use crate::handles::worker;

/// Runs `args` (a job name and its arguments) on worker `w`; blocks until the job's part on
/// this worker is done; any failure is a `HarpException`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_HarpJob_runJob<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    args: JObjectArray<'l, JString<'l>>,
) {
    call(&mut env, |env, scope| {
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        let n = args.len(env)?;
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let s = args.get_element(env, i)?;
            v.push(jstr(env, &s)?);
        }
        harp_jobs::run_job(&we.worker, &v)?;
        Ok(())
    })
}
