//! The operands of the tiled order's outer products: rows' super-blocks
//! unpacked into scratch (`outer_avx2`, `outer_vnni`), so that a tile
//! reads one row's codes as words to broadcast, and the Q8_K columns
//! transposed into bands of sixteen (`outer_vnni`; `outer_avx2` reads
//! eight columns a register and keeps bands of eight, whose groups fill
//! whole cache lines: half bands of sixteen measured up to a tenth
//! slower).

use std::cell::RefCell;

use super::{Col, QK};
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Columns a band holds.
pub(super) const BAND_COLS: usize = 16;
/// Bands' super-blocks a task of the transposition takes.
const TRANSPOSE_TASK: usize = 16;

/// One row's super-block as the tiles read it.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Unpacked {
    /// Codes in value order, unsigned (the type's offset added) or, for
    /// a kernel that keeps their signs, as they are.
    pub(super) codes: [u8; QK],
    /// The scale of each 16 values.
    pub(super) scales: [i32; 16],
    /// What each 16 values' activation sum is multiplied by and taken off
    /// `s` (the offset times the scale), or gives `m` (the mins).
    pub(super) corr: [i16; 16],
    pub(super) d: f32,
    pub(super) dmin: f32,
}

impl Default for Unpacked {
    fn default() -> Unpacked {
        Unpacked {
            codes: [0; QK],
            scales: [0; 16],
            corr: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// One super-block of a band of sixteen columns, transposed.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Band {
    /// Group `g` holds values `4g..4g + 4` of each column, column after
    /// column.
    pub(super) x: [[i8; 4 * BAND_COLS]; QK / 4],
    /// Pair `p` holds the sums of 16 values `2p` and `2p + 1` of each
    /// column, column after column.
    pub(super) sums: [[i16; 2 * BAND_COLS]; 8],
    pub(super) dx: [f32; BAND_COLS],
}

impl Default for Band {
    fn default() -> Band {
        Band {
            x: [[0; 4 * BAND_COLS]; QK / 4],
            sums: [[0; 2 * BAND_COLS]; 8],
            dx: [0.0; BAND_COLS],
        }
    }
}

thread_local! {
    static BANDS: RefCell<Vec<Band>> = const { RefCell::new(Vec::new()) };
    static ROWS: RefCell<Vec<Unpacked>> = const { RefCell::new(Vec::new()) };
}

/// `f` on the columns `cols` of `nsb` super-blocks as bands, band after
/// band, each band's super-blocks in order (transposed by the team).
///
/// # Safety
/// Each column holds `nsb` super-blocks of codes, scales and sums.
pub(super) unsafe fn with_bands<R>(cols: &[Col], nsb: usize, f: impl FnOnce(&[Band]) -> R) -> R {
    let n = cols.len();
    with_scratch(&BANDS, n.div_ceil(BAND_COLS) * nsb, |bands| {
        team::for_each_chunk_mut(bands, TRANSPOSE_TASK, |t, chunk| {
            for (e, band) in chunk.iter_mut().enumerate() {
                let (b, sb) = (
                    (t * TRANSPOSE_TASK + e) / nsb,
                    (t * TRANSPOSE_TASK + e) % nsb,
                );
                let live = &cols[b * BAND_COLS..(b * BAND_COLS + BAND_COLS).min(n)];
                // SAFETY: caller's contract.
                unsafe { transpose(live, sb, band) };
            }
        });
        f(bands)
    })
}

/// `f` on this thread's scratch of `len` unpacked super-blocks.
pub(super) fn with_rows<R>(len: usize, f: impl FnOnce(&mut [Unpacked]) -> R) -> R {
    with_scratch(&ROWS, len, f)
}

/// Super-block `sb` of up to sixteen columns as a band (missing columns
/// zero).
///
/// # Safety
/// Each column holds super-block `sb`.
unsafe fn transpose(cols: &[Col], sb: usize, out: &mut Band) {
    if cols.len() < BAND_COLS {
        *out = Band::default();
    }
    let (x, sums) = (out.x.as_flattened_mut(), out.sums.as_flattened_mut());
    // SAFETY: caller's contract.
    unsafe { transpose_columns(cols, sb, BAND_COLS, x, sums, &mut out.dx) };
}

/// Super-block `sb` of the columns `cols` (at most `width`) side by side,
/// a band `width` columns wide: each four codes to `x` (four of every
/// column, then the next four), each two sums of 16 values to `sums`
/// likewise, the scales to `dx`.
///
/// # Safety
/// Each column holds super-block `sb`.
pub(super) unsafe fn transpose_columns(
    cols: &[Col],
    sb: usize,
    width: usize,
    x: &mut [i8],
    sums: &mut [i16],
    dx: &mut [f32],
) {
    for (c, col) in cols.iter().enumerate() {
        // SAFETY: caller's contract.
        let (codes, bs) = unsafe {
            (
                std::slice::from_raw_parts(col.codes.add(sb * QK), QK),
                std::slice::from_raw_parts(col.bs16.add(sb * 16), 16),
            )
        };
        for (group, four) in x.chunks_exact_mut(4 * width).zip(codes.chunks_exact(4)) {
            group[4 * c..4 * c + 4].copy_from_slice(four);
        }
        for (pair, two) in sums.chunks_exact_mut(2 * width).zip(bs.chunks_exact(2)) {
            pair[2 * c..2 * c + 2].copy_from_slice(two);
        }
        // SAFETY: caller's contract.
        dx[c] = unsafe { *col.d.add(sb) };
    }
}
