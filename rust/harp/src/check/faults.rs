//! Fault injection plans for tests: which rank misbehaves at which of its operations. The
//! plan only says when; what a fault does is the caller's (a process aborts or stops itself, an
//! in-process worker aborts or is dropped).

/// A way to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The worker dies (as if killed).
    Die,
    /// The worker stops entirely: no data, no heartbeats (a silent peer).
    Stall,
    /// The worker's main thread blocks while its I/O stays alive (stuck in user code).
    Hang,
}

/// Rank and 1-based operation number of each fault, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    pub die: Option<(usize, usize)>,
    pub stall: Option<(usize, usize)>,
    pub hang: Option<(usize, usize)>,
}

impl Faults {
    /// The faults due at `rank`'s operation number `op` (1-based), in the order die, stall,
    /// hang.
    pub fn due(&self, rank: usize, op: usize) -> Vec<Fault> {
        [
            (self.die, Fault::Die),
            (self.stall, Fault::Stall),
            (self.hang, Fault::Hang),
        ]
        .into_iter()
        .filter(|(at, _)| *at == Some((rank, op)))
        .map(|(_, f)| f)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_fire_at_their_rank_and_operation_only() {
        let f = Faults {
            die: Some((1, 3)),
            stall: None,
            hang: Some((1, 3)),
        };
        assert_eq!(f.due(1, 3), vec![Fault::Die, Fault::Hang]);
        assert!(f.due(1, 2).is_empty());
        assert!(f.due(0, 3).is_empty());
        assert!(Faults::default().due(0, 1).is_empty());
    }
}
