//! Java values to Rust and back (strings and primitive arrays).

use jni::objects::{JIntArray, JLongArray, JPrimitiveArray, JString, TypeArray};
use jni::Env;

use crate::errors::Failure;

/// A Java string (null is an error naming it).
pub fn jstr(env: &Env<'_>, s: &JString<'_>) -> Result<String, Failure> {
    if s.is_null() {
        return Err(crate::errors::fail("a string argument is null"));
    }
    Ok(s.try_to_string(env)?)
}

pub fn new_jstring<'l>(env: &mut Env<'l>, s: &str) -> Result<JString<'l>, Failure> {
    Ok(env.new_string(s)?)
}

/// A Java int array, or `None` for null.
pub fn ints(env: &Env<'_>, a: &JIntArray<'_>) -> Result<Option<Vec<i32>>, Failure> {
    if a.is_null() {
        return Ok(None);
    }
    let n = a.len(env)?;
    let mut v = vec![0i32; n];
    a.get_region(env, 0, &mut v)?;
    Ok(Some(v))
}

/// A new Java `long[]` holding `v` (values above `i64::MAX` saturate).
pub fn new_longs<'l>(env: &mut Env<'l>, v: &[u64]) -> Result<JLongArray<'l>, Failure> {
    let v: Vec<i64> = v
        .iter()
        .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
        .collect();
    new_array(env, &v)
}

/// A new Java array holding a copy of `v`.
pub fn new_array<'l, T: TypeArray>(
    env: &mut Env<'l>,
    v: &[T],
) -> Result<JPrimitiveArray<'l, T>, Failure> {
    let a = JPrimitiveArray::<T>::new(env, v.len())?;
    a.set_region(env, 0, v)?;
    Ok(a)
}
