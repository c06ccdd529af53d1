//! `harp.DenseCombiner`: a combiner of dense partitions written in Java. The engine calls
//! `void combine(ByteBuffer into, ByteBuffer from, String dtype)` on the Java side's
//! `harp.DenseCombinerBridge`, which hands the user's combiner the two partitions as direct
//! buffers over their native memory (no copy; `from` read-only) and the element type. It runs on
//! whatever thread combines (a task's thread or one of the engine's), attached to the JVM; a
//! Java exception fails the operation with its class and message and becomes the cause of the
//! `HarpException` the caller gets, as for `harp.KvCombiner` ([`crate::kv_combiner::call_java`]).

use harp::data::CustomCombiner;
use harp::{Array, Error, Layout};
use jni::objects::{JObject, JValue};
use jni::refs::Global;
use jni::{jni_sig, jni_str, JavaVM};

use crate::kv_combiner::call_java;

pub struct JavaDenseCombiner {
    vm: JavaVM,
    /// The `harp.DenseCombinerBridge` around the user's combiner.
    bridge: Global<JObject<'static>>,
    name: String,
    /// True when element i of the result depends only on element i of both partitions: the
    /// engine may then split large partitions into ranges and combine range by range.
    elementwise: bool,
    /// The rank of the worker whose table it combines (see `JavaKvCombiner`).
    rank: usize,
}

impl JavaDenseCombiner {
    pub fn new(
        vm: JavaVM,
        bridge: Global<JObject<'static>>,
        name: String,
        elementwise: bool,
        rank: usize,
    ) -> JavaDenseCombiner {
        JavaDenseCombiner {
            vm,
            bridge,
            name,
            elementwise,
            rank,
        }
    }
}

impl CustomCombiner for JavaDenseCombiner {
    fn name(&self) -> &str {
        &self.name
    }

    fn elementwise(&self) -> bool {
        self.elementwise
    }

    fn combine(&self, acc: &mut Array, other: &Array) -> harp::Result<()> {
        let failed =
            |what: String| Error::data(format!("Java combiner {} failed: {what}", self.name));
        let (layout, len) = (acc.layout(), acc.bytes().len());
        let Layout::Dense { dtype } = layout else {
            return Err(Error::data(format!(
                "Java combiner {} combines dense arrays, not {}",
                self.name,
                layout.describe(len as u64)
            )));
        };
        if other.layout() != layout || other.bytes().len() != len {
            return Err(Error::data(format!(
                "Java combiner {}: cannot combine {} with {}",
                self.name,
                layout.describe(len as u64),
                other.layout().describe(other.bytes().len() as u64)
            )));
        }
        let into_ptr = acc.bytes_mut().as_mut_ptr();
        // The bridge hands Java a read-only view of `from`: nothing writes through this pointer.
        let from_ptr = other.as_ptr() as *mut u8;
        call_java(&self.vm, self.rank, failed, |env| {
            // SAFETY: both buffers live, unmoved, for the duration of this call, which is the
            // only time Java may use the views (docs/jni-contract.md, `DenseCombiner`).
            let into = unsafe { env.new_direct_byte_buffer(into_ptr, len) }?;
            let from = unsafe { env.new_direct_byte_buffer(from_ptr, len) }?;
            let dt = env.new_string(dtype.name())?;
            env.call_method(
                &self.bridge,
                jni_str!("combine"),
                jni_sig!("(Ljava/nio/ByteBuffer;Ljava/nio/ByteBuffer;Ljava/lang/String;)V"),
                &[
                    JValue::Object(&into),
                    JValue::Object(&from),
                    JValue::Object(&dt),
                ],
            )?;
            Ok(())
        })
    }
}
