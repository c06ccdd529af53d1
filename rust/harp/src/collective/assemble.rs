//! Assembling received pieces into tables: whole pieces become partitions without a copy,
//! partial pieces are written into their partition's byte range.

use super::framing::In;
use crate::data::{Array, Layout, Table};
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

/// Collects partial pieces into whole partitions; whole pieces go straight into the table
/// (the received buffer becomes the partition: no copy).
#[derive(Default)]
pub struct Assembler {
    partial: std::collections::HashMap<u32, (Array, u64)>,
}

impl Assembler {
    pub fn add(&mut self, table: &mut Table, pool: &Pool, p: In) -> Result<()> {
        if p.meta.whole() {
            return table.add(p.meta.pid, Array::from_layout(p.meta.layout, p.buf)?);
        }
        let (arr, got) = self
            .partial
            .entry(p.meta.pid)
            .or_insert_with(|| (Array::uninit_layout(pool, p.meta.layout, p.meta.total), 0));
        if arr.layout() != p.meta.layout || arr.bytes().len() as u64 != p.meta.total {
            return Err(Error::Protocol(format!(
                "pieces of partition {} disagree on its size",
                p.meta.pid
            )));
        }
        let (o, l) = (p.meta.offset as usize, p.meta.len as usize);
        arr.bytes_mut()[o..o + l].copy_from_slice(&p.buf);
        *got += p.meta.len;
        if *got == p.meta.total {
            let (arr, _) = self.partial.remove(&p.meta.pid).expect("present");
            table.add(p.meta.pid, arr)?;
        }
        Ok(())
    }
    pub fn finish(self, _table: &mut Table) -> Result<()> {
        match self.partial.keys().next() {
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

/// Copies a piece into its partition's byte range, creating the partition if absent.
pub fn write_piece(table: &mut Table, pool: &Pool, piece: In) -> Result<()> {
    let m = piece.meta;
    if m.whole() {
        table.put(m.pid, Array::from_layout(m.layout, piece.buf)?);
        return Ok(());
    }
    if !table.contains(m.pid) {
        table.put(m.pid, Array::uninit_layout(pool, m.layout, m.total));
    }
    let a = table.get_mut(m.pid).expect("present");
    check_shape(m.pid, a.layout(), a.bytes().len() as u64, &piece)?;
    a.bytes_mut()[m.offset as usize..(m.offset + m.len) as usize].copy_from_slice(&piece.buf);
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
