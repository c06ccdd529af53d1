//! Partitioners: which worker owns a partition id.

use std::sync::Arc;

use crate::error::{Error, Result};

/// Decides which worker owns a partition id.
#[derive(Clone, Default)]
pub enum Partitioner {
    /// `id mod workers`.
    #[default]
    Modulo,
    /// A user function from partition id to worker rank (must return < workers, and the same
    /// answer on every worker).
    Custom(Arc<dyn Fn(u32) -> usize + Send + Sync>),
    /// An explicit map (ids not in the map fall back to modulo). Built by the master-decided
    /// regroup plan, or given by the caller.
    Map(Arc<std::collections::HashMap<u32, usize>>),
}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Partitioner::Modulo => f.write_str("modulo"),
            Partitioner::Custom(_) => f.write_str("custom"),
            Partitioner::Map(m) => write!(f, "map({} ids)", m.len()),
        }
    }
}

impl Partitioner {
    /// The owner of `id` among `workers`; an out-of-range answer from a custom function is an
    /// error.
    #[inline]
    pub fn owner(&self, id: u32, workers: usize) -> Result<usize> {
        // The common case, inlined where collectives ask for every partition: a 32-bit division.
        if let (Partitioner::Modulo, Ok(w @ 1..)) = (self, u32::try_from(workers)) {
            return Ok((id % w) as usize);
        }
        self.owner_of(id, workers)
    }

    fn owner_of(&self, id: u32, workers: usize) -> Result<usize> {
        let w = match self {
            Partitioner::Modulo => id as usize % workers,
            Partitioner::Custom(f) => f(id),
            Partitioner::Map(m) => m.get(&id).copied().unwrap_or(id as usize % workers),
        };
        if w >= workers {
            return Err(Error::data(format!(
                "partitioner sent partition {id} to worker {w}, but there are only {workers} workers"
            )));
        }
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioners() {
        assert_eq!(Partitioner::Modulo.owner(7, 3).unwrap(), 1);
        assert_eq!(Partitioner::Modulo.owner(u32::MAX, 7).unwrap(), 3);
        // More workers than ids: each id is its own owner.
        let many = (u32::MAX as usize).saturating_add(9);
        assert_eq!(
            Partitioner::Modulo.owner(u32::MAX, many).unwrap(),
            u32::MAX as usize
        );
        let map = Partitioner::Map(Arc::new([(5, 2)].into_iter().collect()));
        assert_eq!((map.owner(5, 3).unwrap(), map.owner(7, 3).unwrap()), (2, 1));
        let p = Partitioner::Custom(Arc::new(|id| id as usize / 10));
        assert_eq!(p.owner(25, 3).unwrap(), 2);
        assert!(p.owner(35, 3).is_err());
    }
}
