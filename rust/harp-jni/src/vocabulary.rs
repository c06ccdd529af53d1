//! The vocabularies shared with Java: element types, key-value key and value types, combiners, the algorithms offered to Java,
//! error kinds, collectives and the applications' Java keys (`harp::config::apps`; an earlier
//! spelling kept as an alias is canonical as its new key), each listed by the engine's own names (`harp.Native.names`) and
//! parsed by the engine's own parsers (`harp.Native.canonicalName`). Java's enums are checked
//! against these lists in both directions (`VocabularyTest`).

use harp::apps::kmeans::driver::AssignPath;
use harp::collective::{AllreduceAlgorithm, BroadcastAlgorithm, ReduceAlgorithm};
use harp::config::apps;
use harp::data::kv::{KeyType, ValueType};
use harp::wire::Op;
use harp::{Combiner, DType, Error};

use crate::errors::{fail, Failure, JNI_KINDS};

/// The algorithms offered to Java. The exhaustive `match` breaks the build when the engine
/// gains a variant, so this list cannot silently fall behind.
fn broadcast_algorithms() -> Vec<&'static str> {
    use BroadcastAlgorithm::*;
    let offered = [
        Auto,
        Chain,
        Binomial,
        OneByOne,
        NetChain,
        NetHierarchy,
        NetTree,
    ];
    for a in offered {
        match a {
            // A seeded random chain is a benchmark baseline of the CLI, not offered to Java.
            Auto | Chain | Binomial | OneByOne | ChainRandom(_) | NetChain | NetHierarchy
            | NetTree => {}
        }
    }
    offered.into_iter().map(BroadcastAlgorithm::name).collect()
}

fn allreduce_algorithms() -> Vec<&'static str> {
    use AllreduceAlgorithm::*;
    let offered = [Auto, BidirectionalExchange, RegroupAllgather];
    for a in offered {
        match a {
            Auto | BidirectionalExchange | RegroupAllgather => {}
        }
    }
    offered.into_iter().map(AllreduceAlgorithm::name).collect()
}

fn reduce_algorithms() -> Vec<&'static str> {
    use ReduceAlgorithm::*;
    let offered = [
        Auto,
        Binomial,
        Binary,
        ScatterGather,
        NetHierarchy,
        NetRing,
        Chain,
        NetChain,
    ];
    for a in offered {
        match a {
            Auto | Binomial | Binary | ScatterGather | NetHierarchy | NetRing | Chain
            | NetChain => {}
        }
    }
    offered.into_iter().map(ReduceAlgorithm::name).collect()
}

fn combiners() -> Vec<String> {
    use Combiner::*;
    let offered = [Sum, Min, Max, KeepFirst, Reject, Append];
    for c in &offered {
        match c {
            // User-defined combiners are Rust code: Java cannot name one.
            Sum | Min | Max | KeepFirst | Reject | Append | Custom(_) | KeyValue(_) => {}
        }
    }
    offered.iter().map(|c| c.name().to_string()).collect()
}

fn error_kinds() -> Vec<&'static str> {
    Error::KINDS.iter().chain(&JNI_KINDS).copied().collect()
}

/// Every operation the Java API offers (not the start-up handshake, not the network
/// measurement).
fn collectives() -> Vec<&'static str> {
    (0..=u8::MAX)
        .map_while(|v| Op::from_u8(v).ok())
        .filter(|o| !matches!(o, Op::Handshake | Op::Calibrate))
        .map(Op::name)
        .collect()
}

/// The Java keys of every application option, each once, in the order of the tables.
fn app_keys() -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for o in apps::JOBS.iter().flat_map(|j| j.options) {
        if !keys.iter().any(|k| k == o.java) {
            keys.push(o.java.to_string());
        }
    }
    keys
}

/// An application's Java key as the engine spells it: itself, or the key an alias stands for.
fn app_key(name: &str) -> Result<String, Failure> {
    let key = apps::JAVA_ALIASES
        .iter()
        .find(|(old, _)| *old == name)
        .map_or(name, |(_, new)| new);
    match apps::find_java(key) {
        Some(_) => Ok(key.to_string()),
        None => Err(fail(format!("unknown application key {name:?}"))),
    }
}

fn unknown_vocabulary(v: &str) -> Failure {
    fail(format!(
        "unknown vocabulary {v:?} (dtype, combiner, broadcast, allreduce, reduce, error-kind, collective, key, value, app-key, kmeans-assign)"
    ))
}

fn owned(v: Vec<&str>) -> Vec<String> {
    v.into_iter().map(str::to_string).collect()
}

/// The names of one vocabulary, in the engine's order.
pub fn names(vocabulary: &str) -> Result<Vec<String>, Failure> {
    Ok(match vocabulary {
        "dtype" => owned(DType::ALL.into_iter().map(DType::name).collect()),
        "combiner" => combiners(),
        "broadcast" => owned(broadcast_algorithms()),
        "allreduce" => owned(allreduce_algorithms()),
        "reduce" => owned(reduce_algorithms()),
        "error-kind" => owned(error_kinds()),
        "collective" => owned(collectives()),
        "key" => owned(KeyType::ALL.into_iter().map(KeyType::name).collect()),
        "value" => ValueType::all().into_iter().map(ValueType::name).collect(),
        "app-key" => app_keys(),
        "kmeans-assign" => owned(AssignPath::ALL.iter().map(|a| a.name()).collect()),
        _ => return Err(unknown_vocabulary(vocabulary)),
    })
}

/// The engine's own name for `name` in `vocabulary`, as its parser reads it.
pub fn canonical(vocabulary: &str, name: &str) -> Result<String, Failure> {
    Ok(match vocabulary {
        "dtype" => DType::parse(name)?.name().to_string(),
        "combiner" => Combiner::parse(name)?.name().to_string(),
        "broadcast" => BroadcastAlgorithm::parse(name)?.name().to_string(),
        "allreduce" => AllreduceAlgorithm::parse(name)?.name().to_string(),
        "reduce" => ReduceAlgorithm::parse(name)?.name().to_string(),
        "collective" => Op::parse(name)?.name().to_string(),
        "key" => KeyType::parse(name)?.name().to_string(),
        "value" => ValueType::parse(name)?.name(),
        "error-kind" if error_kinds().contains(&name) => name.to_string(),
        "error-kind" => return Err(fail(format!("unknown error kind {name:?}"))),
        "app-key" => app_key(name)?,
        "kmeans-assign" => name.parse::<AssignPath>()?.name().to_string(),
        _ => return Err(unknown_vocabulary(vocabulary)),
    })
}
