//! `harp.KvCombiner`: a key-value combiner written in Java. The engine calls
//! `byte[] combine(byte[] key, byte[] acc, byte[] other)` on whatever thread combines (a task's
//! thread or one of the engine's), attaching it to the JVM; a Java exception fails the
//! operation with the exception's class and message. This is the slow path: every combination
//! crosses JNI twice and copies the key and both values.

use harp::data::kv::{Key, KvCombiner, Value};
use harp::Error;
use jni::objects::{JByteArray, JObject, JValue};
use jni::refs::Global;
use jni::{jni_sig, jni_str, JavaVM};

pub struct JavaKvCombiner {
    vm: JavaVM,
    obj: Global<JObject<'static>>,
    name: String,
}

impl JavaKvCombiner {
    pub fn new(vm: JavaVM, obj: Global<JObject<'static>>, name: String) -> JavaKvCombiner {
        JavaKvCombiner { vm, obj, name }
    }
}

/// The bytes Java sees for a key: 8 or 4 little-endian bytes for i64/i32 keys, the bytes of a
/// str key.
fn key_bytes(key: Key<'_>) -> Vec<u8> {
    match key {
        Key::I64(v) => v.to_le_bytes().to_vec(),
        Key::I32(v) => v.to_le_bytes().to_vec(),
        Key::Str(s) => s.to_vec(),
    }
}

impl KvCombiner for JavaKvCombiner {
    fn name(&self) -> &str {
        &self.name
    }

    fn combine(
        &self,
        key: Key<'_>,
        acc: Value<'_>,
        other: Value<'_>,
        out: &mut Vec<u8>,
    ) -> harp::Result<()> {
        let failed = |what: String| {
            Error::data(format!(
                "Java combiner {} failed on key {key}: {what}",
                self.name
            ))
        };
        let got =
            self.vm
                .attach_current_thread(|env| -> Result<Option<Vec<u8>>, jni::errors::Error> {
                    let k = env.byte_array_from_slice(&key_bytes(key))?;
                    let a = env.byte_array_from_slice(acc.payload)?;
                    let b = env.byte_array_from_slice(other.payload)?;
                    let r = env
                        .call_method(
                            &self.obj,
                            jni_str!("combine"),
                            jni_sig!("([B[B[B)[B"),
                            &[JValue::Object(&k), JValue::Object(&a), JValue::Object(&b)],
                        )?
                        .l()?;
                    if r.is_null() {
                        return Ok(None);
                    }
                    let r = env.cast_local::<JByteArray>(r)?;
                    Ok(Some(env.convert_byte_array(&r)?))
                });
        match got {
            Ok(Some(bytes)) => {
                out.extend_from_slice(&bytes);
                Ok(())
            }
            Ok(None) => Err(failed("it returned null".into())),
            Err(jni::errors::Error::CaughtJavaException { name, msg, .. }) => {
                Err(failed(format!("{name}: {msg}")))
            }
            Err(e) => Err(failed(e.to_string())),
        }
    }
}
