//! Assembling received pieces into tables: whole pieces become partitions without a copy,
//! partial pieces are written into their partition's byte range.

use std::collections::BTreeMap;

use super::framing::{Held, In};
use crate::data::{Array, Combiner, Layout, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;

/// Puts whole received pieces into `table`, combining with partitions already there.
/// Partial pieces are written into their partition's byte range (see [`Assembler`]).
pub fn absorb(table: &mut Table, pool: &Pool, pieces: Vec<In>) -> Result<()> {
    let mut asm = Assembler::default();
    for p in pieces {
        asm.add(table, pool, p)?;
    }
    asm.finish(table)
}

/// Combines a batch received with [`recv_held`](super::framing::recv_held) into `table` in
/// batch order, exactly as [`absorb`] does with the pieces of a received batch; a whole inline
/// piece of a dense partition the table holds is folded straight from the frame
/// ([`Held::for_each_piece`]).
pub fn absorb_held(held: Held, table: &mut Table, pool: &Pool) -> Result<()> {
    let mut asm = Assembler::default();
    held.for_each_piece(table, pool, |t, piece| asm.add(t, pool, piece))?;
    asm.finish(table)
}

/// Collects partial pieces into whole partitions; whole pieces go straight into the table
/// (the received buffer becomes the partition: no copy).
///
/// A partition is allocated only once at least half of its bytes have arrived (earlier pieces
/// are held as received), so a peer announcing a huge partition and sending a few bytes of it
/// costs this worker no more than twice what it actually sent. Pieces of one partition must
/// agree on its layout and size and must not overlap.
#[derive(Default)]
pub struct Assembler {
    partial: super::IdMap<Partial>,
}

struct Partial {
    layout: Layout,
    total: u64,
    /// Bytes received so far (the pieces never overlap, so this is the covered size).
    got: u64,
    /// offset → len of every piece received (to refuse overlaps).
    ranges: BTreeMap<u64, u64>,
    /// Pieces received before the partition was allocated.
    held: Vec<In>,
    arr: Option<Array>,
}

impl Partial {
    fn overlaps(&self, o: u64, l: u64) -> bool {
        let before = self.ranges.range(..=o).next_back();
        let after = self.ranges.range(o..).next();
        before.is_some_and(|(&bo, &bl)| bo + bl > o) || after.is_some_and(|(&ao, _)| ao < o + l)
    }
}

impl Assembler {
    pub fn add(&mut self, table: &mut Table, pool: &Pool, p: In) -> Result<()> {
        let m = p.meta;
        m.layout.check_piece(m.pid, m.total, m.offset, m.len)?;
        if p.buf.len() as u64 != m.len {
            return Err(Error::Protocol(format!(
                "piece of partition {} announces {} bytes and carries {}",
                m.pid,
                m.len,
                p.buf.len()
            )));
        }
        if m.whole() {
            return table.add(m.pid, Array::received(m.pid, m.layout, p.buf)?);
        }
        if m.len == 0 {
            // Carries nothing: it neither starts nor completes a partition.
            return match self.partial.get(&m.pid) {
                Some(part) if part.layout != m.layout || part.total != m.total => {
                    Err(Error::Protocol(format!(
                        "pieces of partition {} disagree on its size",
                        m.pid
                    )))
                }
                _ => Ok(()),
            };
        }
        let part = self.partial.entry(m.pid).or_insert_with(|| Partial {
            layout: m.layout,
            total: m.total,
            got: 0,
            ranges: BTreeMap::new(),
            held: Vec::new(),
            arr: None,
        });
        if part.layout != m.layout || part.total != m.total {
            return Err(Error::Protocol(format!(
                "pieces of partition {} disagree on its size",
                m.pid
            )));
        }
        if part.overlaps(m.offset, m.len) {
            return Err(Error::Protocol(format!(
                "piece {}..+{} of partition {} overlaps a piece received before",
                m.offset, m.len, m.pid
            )));
        }
        part.ranges.insert(m.offset, m.len);
        // Cannot exceed `total`: the pieces lie inside the partition and do not overlap.
        part.got += m.len;
        if part.arr.is_none() && part.got.saturating_mul(2) >= part.total {
            let mut arr = Array::uninit_layout(pool, part.layout, part.total);
            for h in part.held.drain(..) {
                let o = h.meta.offset as usize;
                arr.bytes_mut()[o..o + h.buf.len()].copy_from_slice(&h.buf);
            }
            part.arr = Some(arr);
        }
        match part.arr.as_mut() {
            Some(arr) => {
                let o = m.offset as usize;
                arr.bytes_mut()[o..o + p.buf.len()].copy_from_slice(&p.buf);
            }
            None => part.held.push(p),
        }
        if part.got == part.total {
            let part = self.partial.remove(&m.pid).expect("present");
            let arr = part.arr.expect("allocated at half");
            arr.check_received(m.pid)?;
            table.add(m.pid, arr)?;
        }
        Ok(())
    }
    /// Bytes held in pieces of partitions not yet allocated (for tests and diagnostics).
    pub fn held_bytes(&self) -> u64 {
        self.partial
            .values()
            .flat_map(|p| &p.held)
            .map(|h| h.buf.len() as u64)
            .sum()
    }
    pub fn finish(self, _table: &mut Table) -> Result<()> {
        match self.partial.keys().min() {
            None => Ok(()),
            Some(pid) => Err(Error::Protocol(format!(
                "partition {pid} arrived incomplete"
            ))),
        }
    }
}

/// Fails unless `piece` is a range of a partition shaped like the local one (`layout`,
/// `total` bytes).
pub fn check_shape(pid: u32, layout: Layout, total: u64, piece: &In) -> Result<()> {
    layout.check_same(pid, total, piece.meta.layout, piece.meta.total)
}

/// Folds a received piece into the same range of the held partition `a` (after
/// [`check_shape`]): a whole piece by the combiner's rule for whole partitions
/// ([`Combiner::combine`]: key by key, edge concatenation, keep-first, reject, custom), a
/// segment or chunk of a dense partition range by range ([`Combiner::combine_bytes`]).
pub fn fold_into(combiner: &Combiner, a: &mut Array, piece: In) -> Result<()> {
    let m = piece.meta;
    check_shape(m.pid, a.layout(), a.bytes().len() as u64, &piece)?;
    if m.whole() {
        return combiner.combine(m.pid, a, &Array::received(m.pid, m.layout, piece.buf)?);
    }
    let dtype = a.dtype();
    let range = m.offset as usize..(m.offset + m.len) as usize;
    combiner.combine_bytes(m.pid, dtype, &mut a.bytes_mut()[range], dtype, &piece.buf)
}

/// Copies a piece into its partition's byte range, creating the partition if absent.
pub fn write_piece(table: &mut Table, pool: &Pool, piece: In) -> Result<()> {
    let m = piece.meta;
    m.layout.check_piece(m.pid, m.total, m.offset, m.len)?;
    if piece.buf.len() as u64 != m.len {
        return Err(Error::Protocol(format!(
            "piece of partition {} announces {} bytes and carries {}",
            m.pid,
            m.len,
            piece.buf.len()
        )));
    }
    if m.whole() {
        table.put(m.pid, Array::received(m.pid, m.layout, piece.buf)?);
        return Ok(());
    }
    if !m.layout.splittable() {
        return Err(Error::Protocol(format!(
            "partition {} ({:?}) arrived as a range {}..+{} of {} bytes where only whole \
             partitions are written",
            m.pid, m.layout, m.offset, m.len, m.total
        )));
    }
    if !table.contains(m.pid) {
        check_creation(&m)?;
        table.put(m.pid, Array::uninit_layout(pool, m.layout, m.total));
    }
    let a = table.get_mut(m.pid).expect("present");
    check_shape(m.pid, a.layout(), a.bytes().len() as u64, &piece)?;
    a.bytes_mut()[m.offset as usize..(m.offset + m.len) as usize].copy_from_slice(&piece.buf);
    Ok(())
}

/// Largest partition a piece may create without carrying a sizeable part of it.
const CREATE_FLOOR: u64 = 1 << 20;
/// A piece creating a larger partition must carry more than 1/CREATE_RATIO of it: a segment of
/// a partition cut among p ≤ CREATE_RATIO workers always does.
const CREATE_RATIO: u64 = 4096;

/// Refuses a piece that would make this worker allocate a partition out of proportion to the
/// bytes it carries: a partition of at most [`CREATE_FLOOR`] bytes, or one of which the piece
/// holds more than 1/[`CREATE_RATIO`] (segments of a partition among up to 4096 workers), and
/// never more than [`crate::wire::MAX_PARTITION`].
fn check_creation(m: &crate::wire::PieceMeta) -> Result<()> {
    let unit = m.layout.unit();
    let ratio_ok = m.total / CREATE_RATIO < m.len.saturating_add(unit);
    if m.total > crate::wire::MAX_PARTITION || (m.total > CREATE_FLOOR && !ratio_ok) {
        return Err(Error::Protocol(format!(
            "a piece of {} bytes would create partition {} of {} bytes (a piece creating a \
             partition larger than {CREATE_FLOOR} bytes must carry more than 1/{CREATE_RATIO} \
             of it)",
            m.len, m.pid, m.total
        )));
    }
    Ok(())
}

/// Writes reduced segments into the table (replacing what was there).
pub fn write_pieces(table: &mut Table, pool: &Pool, pieces: Vec<In>) -> Result<()> {
    for piece in pieces {
        write_piece(table, pool, piece)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Combiner, DType};
    use crate::wire::PieceMeta;

    fn piece(pool: &Pool, pid: u32, total: u64, offset: u64, bytes: &[u8]) -> In {
        In {
            meta: PieceMeta {
                pid,
                layout: Layout::dense(DType::U8),
                total,
                offset,
                len: bytes.len() as u64,
                inline: false,
            },
            buf: pool.copy_of(bytes),
        }
    }

    #[test]
    fn pieces_assemble_into_partitions() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        t.add(9, Array::from_slice(&pool, &[1u8, 1])).unwrap();
        let pieces = vec![
            piece(&pool, 7, 5, 3, &[4, 5]),
            piece(&pool, 9, 2, 0, &[10, 20]),
            piece(&pool, 7, 5, 0, &[1, 2, 3]),
        ];
        absorb(&mut t, &pool, pieces).unwrap();
        assert_eq!(
            t.get(7).unwrap().as_slice::<u8>().unwrap(),
            &[1, 2, 3, 4, 5]
        );
        assert_eq!(t.get(9).unwrap().as_slice::<u8>().unwrap(), &[11, 21]);

        let e = absorb(&mut t, &pool, vec![piece(&pool, 3, 4, 0, &[1])]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol error: partition 3 arrived incomplete"
        );
        let e = absorb(
            &mut t,
            &pool,
            vec![piece(&pool, 3, 4, 0, &[1]), piece(&pool, 3, 6, 1, &[1])],
        )
        .unwrap_err();
        assert!(e.to_string().contains("disagree on its size"), "{e}");
    }

    /// A partition is allocated once half of it has arrived, not when its first piece
    /// announces its size; overlapping pieces are refused.
    #[test]
    fn partitions_are_allocated_as_their_bytes_arrive() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        let mut asm = Assembler::default();
        // 8 bytes of a 1 TiB partition: held, nothing large allocated.
        asm.add(&mut t, &pool, piece(&pool, 5, 1 << 40, 0, &[1; 8]))
            .unwrap();
        assert_eq!(asm.held_bytes(), 8);
        assert!(pool.stats().bytes_in_use < 4096, "{:?}", pool.stats());
        let e = asm
            .add(&mut t, &pool, piece(&pool, 5, 1 << 40, 4, &[1; 8]))
            .unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        let e = Assembler::default().finish(&mut t);
        assert!(e.is_ok());
        assert!(asm
            .finish(&mut t)
            .unwrap_err()
            .to_string()
            .contains("partition 5"));

        // Four quarters, out of order: allocated at the second, complete at the fourth.
        let mut asm = Assembler::default();
        let data: Vec<u8> = (0..64).collect();
        for (i, q) in [3usize, 0, 2, 1].into_iter().enumerate() {
            let bytes = &data[q * 16..q * 16 + 16];
            asm.add(&mut t, &pool, piece(&pool, 6, 64, q as u64 * 16, bytes))
                .unwrap();
            assert_eq!(asm.held_bytes(), if i == 0 { 16 } else { 0 }, "after {i}");
        }
        assert_eq!(t.get(6).unwrap().as_slice::<u8>().unwrap(), &data[..]);
        asm.finish(&mut t).unwrap();
    }

    #[test]
    fn a_small_piece_cannot_create_a_huge_partition() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        let e =
            write_pieces(&mut t, &pool, vec![piece(&pool, 2, 1 << 40, 0, &[1; 8])]).unwrap_err();
        assert_eq!(e.kind(), "protocol");
        assert!(e.to_string().contains("would create partition 2"), "{e}");
        assert!(pool.stats().bytes_in_use < 4096);
        // A segment of a partition cut among 4096 workers may.
        let seg = vec![0u8; 1024];
        write_pieces(&mut t, &pool, vec![piece(&pool, 3, 4096 * 1024, 0, &seg)]).unwrap();
    }

    #[test]
    fn written_pieces_must_match_the_local_shape() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        write_pieces(&mut t, &pool, vec![piece(&pool, 2, 4, 2, &[7, 8])]).unwrap();
        write_pieces(&mut t, &pool, vec![piece(&pool, 2, 4, 0, &[5, 6])]).unwrap();
        assert_eq!(t.get(2).unwrap().as_slice::<u8>().unwrap(), &[5, 6, 7, 8]);
        let e = write_pieces(&mut t, &pool, vec![piece(&pool, 2, 6, 0, &[1])]).unwrap_err();
        assert_eq!(e.kind(), "data");
        assert!(e.to_string().contains("4 u8 elements"), "{e}");
    }
}
