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
