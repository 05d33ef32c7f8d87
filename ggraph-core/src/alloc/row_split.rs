//! Row split: one matrix's rows spread over several devices' memory.
//!
//! A [`RowSplitBufferType`] packs the row slices of many matrices into one
//! allocation per device; each matrix gets a [`RowSplitBuffer`], a `Buffer`
//! whose writes and reads go to the devices holding each row range. The
//! scheduler's row split pass (`sched::passes::row_split`) turns a
//! mul_mat on such a matrix into per-device partial mul_mats.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use super::weights::pack_weights;
use crate::backend::BufferType;
use crate::error::{Error, Result};
use crate::ir::TensorData;
use crate::memory::{Buffer, BufferUsage, check_range};

/// Name of the row-split buffer type.
pub const ROW_SPLIT: &str = "row-split";

/// One device's rows of a row-split matrix.
#[derive(Clone, Debug)]
pub struct RowPart {
    /// Index of the device (in the split's device order).
    pub device: usize,
    /// The matrix rows this device holds (row indices, end excluded).
    pub rows: Range<usize>,
    /// Where those rows start in the device's memory; they are packed.
    pub data: TensorData,
}

/// The rows of one matrix, spread over devices.
pub struct RowSplitBuffer {
    parts: Vec<RowPart>,
    row_bytes: u64,
    rows: usize,
    gather: String,
}

impl RowSplitBuffer {
    /// The devices' row ranges, in device order; together they cover every
    /// row once. A device whose share rounds to no rows has no part.
    pub fn parts(&self) -> &[RowPart] {
        &self.parts
    }

    /// The buffer type of the device that gathers the partial products.
    pub fn gather_buffer_type(&self) -> &str {
        &self.gather
    }

    /// Bytes of one row of the matrix (ggml's `ggml_row_size`).
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Calls `f(part, offset in the part, range in the caller's bytes)` for
    /// the pieces of `offset..offset + len`.
    fn pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&RowPart, u64, Range<usize>) -> Result<()>,
    ) -> Result<()> {
        check_range("row-split access", offset, len, self.size())?;
        let end = offset + len;
        for p in &self.parts {
            let start = p.rows.start as u64 * self.row_bytes;
            let stop = p.rows.end as u64 * self.row_bytes;
            let (a, b) = (offset.max(start), end.min(stop));
            if a < b {
                f(p, a - start, (a - offset) as usize..(b - offset) as usize)?;
            }
        }
        Ok(())
    }
}

impl Buffer for RowSplitBuffer {
    fn buffer_type_name(&self) -> &str {
        ROW_SPLIT
    }

    fn size(&self) -> u64 {
        self.rows as u64 * self.row_bytes
    }

    fn usage(&self) -> BufferUsage {
        BufferUsage::Weights
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.pieces(offset, data.len() as u64, |p, at, r| {
            p.data.buffer.write(p.data.offset + at, &data[r])
        })
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let mut pieces = Vec::new();
        self.pieces(offset, out.len() as u64, |p, at, r| {
            pieces.push((p.data.clone(), at, r));
            Ok(())
        })?;
        for (d, at, r) in pieces {
            d.buffer.read(d.offset + at, &mut out[r])?;
        }
        Ok(())
    }

    fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.pieces(offset, len, |p, at, r| {
            p.data
                .buffer
                .fill(p.data.offset + at, r.len() as u64, value)
        })
    }

    fn lost(&self) -> bool {
        self.parts.iter().any(|p| p.data.buffer.lost())
    }

    fn restore(&self) -> Result<()> {
        self.parts.iter().try_for_each(|p| p.data.buffer.restore())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Allocates row-split matrices over devices' buffer types.
pub struct RowSplitBufferType {
    devices: Vec<Arc<dyn BufferType>>,
    fractions: Vec<f64>,
    align_rows: usize,
    gather: String,
}

impl RowSplitBufferType {
    /// Rows over `devices` in proportion to `fractions` (shares, as
    /// tensor_split gives them: [1, 1] is half each), in multiples of
    /// `align_rows`; the partial products are gathered on the device of
    /// `devices[main]`.
    pub fn new(
        devices: Vec<Arc<dyn BufferType>>,
        fractions: Vec<f64>,
        align_rows: usize,
        main: usize,
    ) -> Result<RowSplitBufferType> {
        if devices.is_empty() || devices.len() != fractions.len() {
            return Err(Error::InvalidArgument(format!(
                "row split over {} devices with {} fractions",
                devices.len(),
                fractions.len()
            )));
        }
        let gather = devices
            .get(main)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "row split gathers on device {main} of {}",
                    devices.len()
                ))
            })?
            .name()
            .to_string();
        Ok(RowSplitBufferType {
            devices,
            fractions: normalise_shares(&fractions)?,
            align_rows,
            gather,
        })
    }

    /// Allocates matrices given as (name, rows, bytes per row): their row
    /// slices are packed into one allocation per device.
    pub fn alloc_matrices(
        &self,
        matrices: &[(String, usize, u64)],
    ) -> Result<Vec<Arc<RowSplitBuffer>>> {
        let splits: Vec<Vec<usize>> = matrices
            .iter()
            .map(|(_, rows, _)| split_rows(*rows, &self.fractions, self.align_rows))
            .collect();
        // per device: the slices it holds, packed
        let mut per_device: Vec<Vec<TensorData>> = Vec::with_capacity(self.devices.len());
        for (d, bt) in self.devices.iter().enumerate() {
            let sizes: Vec<(String, u64)> = matrices
                .iter()
                .zip(&splits)
                .map(|((name, _, row_bytes), s)| {
                    (format!("{name}[dev {d}]"), s[d] as u64 * row_bytes)
                })
                .collect();
            per_device.push(pack_weights(bt, &sizes)?.placements);
        }
        Ok(matrices
            .iter()
            .enumerate()
            .map(|(i, (_, rows, row_bytes))| {
                let mut start = 0;
                let parts = splits[i]
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(d, &n)| {
                        let p = RowPart {
                            device: d,
                            rows: start..start + n,
                            data: per_device[d][i].clone(),
                        };
                        start += n;
                        p
                    })
                    .collect();
                Arc::new(RowSplitBuffer {
                    parts,
                    row_bytes: *row_bytes,
                    rows: *rows,
                    gather: self.gather.clone(),
                })
            })
            .collect())
    }
}

impl BufferType for RowSplitBufferType {
    fn name(&self) -> &str {
        ROW_SPLIT
    }

    fn alignment(&self) -> u64 {
        self.devices
            .iter()
            .map(|d| d.alignment())
            .max()
            .unwrap_or(1)
    }

    fn is_host(&self) -> bool {
        false
    }

    /// Row-split memory is allocated per matrix set: use `alloc_matrices`.
    fn alloc(&self, size: u64, _usage: BufferUsage) -> Result<Arc<dyn Buffer>> {
        Err(Error::InvalidArgument(format!(
            "row-split memory holds whole matrices: allocate {size} bytes through alloc_matrices"
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Rows of an `m`-row matrix on each device for fractions `f`: multiples
/// of `align` rows except the last device's share, which takes the rest.
pub fn split_rows(m: usize, f: &[f64], align: usize) -> Vec<usize> {
    let align = align.max(1);
    let mut out = Vec::with_capacity(f.len());
    let mut given = 0;
    let mut acc = 0.0;
    for (i, share) in f.iter().enumerate() {
        acc += share;
        let end = if i + 1 == f.len() {
            m
        } else {
            (((acc * m as f64) / align as f64).round() as usize * align).min(m)
        };
        let end = end.max(given);
        out.push(end - given);
        given = end;
    }
    out
}

/// Shares scaled to sum to 1; refuses negative, infinite or all-zero
/// shares.
pub fn normalise_shares(f: &[f64]) -> Result<Vec<f64>> {
    let sum: f64 = f.iter().sum();
    if f.iter().any(|x| !x.is_finite() || *x < 0.0) || sum <= 0.0 {
        return Err(Error::InvalidArgument(format!(
            "tensor split {f:?} needs non-negative shares with a positive sum"
        )));
    }
    Ok(f.iter().map(|x| x / sum).collect())
}
