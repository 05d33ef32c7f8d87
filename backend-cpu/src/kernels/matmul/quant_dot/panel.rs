//! The panel path: many columns on AVX-512 VNNI, the codes of 32 rows
//! interleaved into panels that one `vpdpbusd` advances 16 rows at a time.
//! The rows are a matrix in the CPU's interleaved layout, whose groups
//! are already four bytes a row side by side and go straight into the
//! panel, or GGUF's rows of such a type, each chunk interleaved first.
//!
//! Each panel chunk is then multiplied by the columns, four at a time with
//! `vpdpbusd` (`avx512_vnni::panel_vnni`) or, where AMX is on, 16 at a
//! time on the tile unit (`panel_amx`).

use std::cell::RefCell;

use super::avx512_vnni::{interleaved_panel, panel_vnni};
use super::operands::{ACTS, PANEL_C, PANEL_R};
use super::panel_amx::{self, AMX_C, ColumnActs, PanelChunk, panel_tiles};
use crate::kernels::amx::{self, TileConfig, Unit};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved};
use crate::kernels::matmul::activation_quant::{QActs, qacts_len, quantize_acts};
use crate::kernels::matmul::operands::Cols;
use crate::kernels::matmul::quant_format::Format;
use crate::kernels::parallel::column_split;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Values per panel chunk (a multiple of 256).
const PANEL_KC: usize = 4096;

thread_local! {
    /// A task's panel codes, and the rows it decodes first.
    static PANEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Their scales and mins.
    static PANEL_SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A panel chunk of GGUF's rows, and the same interleaved.
    static ROWS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Where the panels' rows come from.
#[derive(Clone, Copy)]
enum Weights {
    /// A matrix of `k` values a row in the CPU's interleaved layout.
    Interleaved {
        layout: Interleaved,
        ptr: *const u8,
        k: usize,
    },
    /// A matrix in GGUF's rows, `stride` bytes apart, of a type the
    /// interleaved layout takes: each panel chunk's rows are interleaved
    /// as the panel is filled.
    Rows {
        layout: Interleaved,
        ptr: *const u8,
        stride: usize,
        k: usize,
    },
}

// SAFETY: the weights are only read while the call lasts.
unsafe impl Sync for Weights {}
unsafe impl Send for Weights {}

/// What multiplies a panel chunk by the columns.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PanelKernel {
    /// `vpdpbusd`, [`PANEL_C`] columns at a time.
    Vnni,
    /// AMX tiles, [`AMX_C`] columns at a time.
    Amx(Unit),
}

/// `panel_amx::panel_tiles` on `unit`.
///
/// # Safety
/// As for `panel_tiles`.
unsafe fn on_unit(
    unit: Unit,
    config: &TileConfig,
    chunk: &PanelChunk,
    x: &ColumnActs,
    blk0: usize,
    cols: usize,
    tile: &mut [[f32; PANEL_R]; AMX_C],
) {
    // SAFETY: the caller's contract.
    unsafe {
        match unit {
            Unit::Hardware(mut hw) => panel_tiles(&mut hw, config, chunk, x, blk0, cols, tile),
            #[cfg(test)]
            Unit::Emulated => {
                let mut emulated = amx::Emulated::default();
                panel_tiles(&mut emulated, config, chunk, x, blk0, cols, tile);
                if emulated.fault.is_some() {
                    tile.iter_mut().for_each(|c| c.fill(f32::NAN));
                }
            }
        }
    }
}

impl PanelKernel {
    /// AMX where `amx::active_integer` gives the tile unit, else VNNI.
    fn active() -> PanelKernel {
        amx::active_integer().map_or(PanelKernel::Vnni, |h| PanelKernel::Amx(Unit::Hardware(h)))
    }
}

/// As [`gemm`] for the `m` rows of a matrix of `k` values a row in the
/// interleaved `layout` at `a`. `f` is the weight type's format.
///
/// # Safety
/// The processor has AVX-512 VNNI; `a` holds the whole matrix (`m` a
/// multiple of eight rows), the columns `k` values and the outputs `m`.
pub(crate) unsafe fn gemm_interleaved(
    f: Format,
    layout: Interleaved,
    a: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    // SAFETY: caller's contract.
    unsafe { gemm_interleaved_with(PanelKernel::active(), f, layout, a, k, m, b, out) }
}

/// As [`gemm_interleaved`], with the products of `kernel`.
///
/// # Safety
/// As for [`gemm_interleaved`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_interleaved_with(
    kernel: PanelKernel,
    f: Format,
    layout: Interleaved,
    a: *const u8,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let weights = Weights::Interleaved { layout, ptr: a, k };
    gemm_from(kernel, f, weights, m, b, out)
}

/// As [`gemm_interleaved`] for a matrix in GGUF's rows (`stride` bytes
/// apart) of a type `layout` takes: the same panels, each chunk of rows
/// interleaved as it is filled, so the same sums.
///
/// # Safety
/// The processor has AVX-512 VNNI; `a` holds `m` rows (a multiple of
/// eight) of `k` values; the columns hold `k` values and the outputs `m`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_rows(
    f: Format,
    layout: Interleaved,
    a: *const u8,
    stride: usize,
    k: usize,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let weights = Weights::Rows {
        layout,
        ptr: a,
        stride,
        k,
    };
    gemm_from(PanelKernel::active(), f, weights, m, b, out)
}

fn gemm_from(kernel: PanelKernel, f: Format, a: Weights, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let product = Product::new(kernel, f.qb, n);
    let k = a.k();
    with_scratch(&ACTS, qacts_len(n, k, f.qb, product.acts_tile()), |buf| {
        let acts = quantize_acts(b, k, f, product.acts_tile(), 1, buf);
        let acts = &acts;
        let panels = m.div_ceil(PANEL_R);
        let tiles = n.div_ceil(product.cols);
        let (groups, per_group) = column_split(panels, tiles);
        let kc = PANEL_KC.min(k);
        team::for_each(panels * groups, |task| {
            let (p, g) = (task % panels, task / panels);
            let i0 = p * PANEL_R;
            let rows = PANEL_R.min(m - i0);
            let group = g * per_group..((g + 1) * per_group).min(tiles);
            with_panel(kc, f.qb, |panel| {
                for v0 in (0..k).step_by(kc) {
                    let len = kc.min(k - v0);
                    fill(&f, a, i0, rows, v0, len, panel);
                    for t in group.clone() {
                        let j0 = t * product.cols;
                        let nc = product.cols.min(n - j0);
                        // SAFETY: output column j0 + c holds m values; rows
                        // i0..i0+rows of the tile's columns are this task's.
                        let dst = |c: usize| unsafe {
                            std::slice::from_raw_parts_mut(out.0[j0 + c].add(i0), rows)
                        };
                        // each chunk goes on from the sums of those before
                        // it, so that the blocks add in order, as ggml's
                        let mut tile = [[0f32; PANEL_R]; AMX_C];
                        if v0 > 0 {
                            for (c, col) in tile.iter_mut().enumerate().take(nc) {
                                col[..rows].copy_from_slice(dst(c));
                            }
                        }
                        product.multiply(&f, panel, len / f.qb, acts, t, v0, nc, &mut tile);
                        for (c, col) in tile.iter().enumerate().take(nc) {
                            dst(c).copy_from_slice(&col[..rows]);
                        }
                    }
                }
            });
        });
    });
}

impl Weights {
    /// Values a row.
    fn k(self) -> usize {
        match self {
            Weights::Interleaved { k, .. } | Weights::Rows { k, .. } => k,
        }
    }
}

/// A task's panel for one chunk of values: 32 rows' codes interleaved
/// four bytes at a time, and their scales and mins (`[block][row]`).
struct Panel<'a> {
    codes: &'a mut [u8],
    dw: &'a mut [f32],
    mw: &'a mut [f32],
}

/// Runs `f` on this thread's panel for chunks of `kc` values in blocks
/// of `qb`.
fn with_panel<R>(kc: usize, qb: usize, f: impl FnOnce(&mut Panel) -> R) -> R {
    let sb = kc / qb;
    with_scratch(&PANEL, PANEL_R * kc, |codes| {
        with_scratch(&PANEL_SCALES, 2 * PANEL_R * sb, |floats| {
            let (dw, mw) = floats.split_at_mut(PANEL_R * sb);
            f(&mut Panel { codes, dw, mw })
        })
    })
}

/// Fills `panel` with rows `i0..i0 + rows` (at most 32), values
/// `v0..v0 + len` (whole blocks), of `a` in format `f`.
fn fill(f: &Format, a: Weights, i0: usize, rows: usize, v0: usize, len: usize, panel: &mut Panel) {
    let nb = len / f.qb;
    match a {
        Weights::Rows {
            layout,
            ptr,
            stride,
            k: _,
        } => {
            // the rows' blocks side by side, then interleaved in groups
            let seg = len / f.dtype.block_size() * f.dtype.type_size();
            let at = v0 / f.dtype.block_size() * f.dtype.type_size();
            with_scratch(&ROWS, 2 * PANEL_R * seg, |buf| {
                let (plain, packed) = buf.split_at_mut(PANEL_R * seg);
                for (r, dst) in plain.chunks_exact_mut(seg).take(rows).enumerate() {
                    // SAFETY: row i0 + r holds the values v0..v0 + len.
                    let src =
                        unsafe { std::slice::from_raw_parts(ptr.add((i0 + r) * stride + at), seg) };
                    dst.copy_from_slice(src);
                }
                layout.pack(&plain[..rows * seg], &mut packed[..rows * seg], seg);
                let mut groups = [std::ptr::null::<u8>(); PANEL_R / GROUP_ROWS];
                for (g, p) in groups.iter_mut().enumerate().take(rows / GROUP_ROWS) {
                    *p = packed[g * GROUP_ROWS * seg..].as_ptr();
                }
                // SAFETY: the non-null groups hold nb blocks.
                unsafe { from_groups(layout, &groups, nb, panel) };
            });
        }
        Weights::Interleaved { layout, ptr, k } => {
            let row_bytes = k / f.dtype.block_size() * f.dtype.type_size();
            let group_bytes = GROUP_ROWS * row_bytes;
            let blk0 = v0 / f.dtype.block_size();
            let mut groups = [std::ptr::null::<u8>(); PANEL_R / GROUP_ROWS];
            for (g, p) in groups.iter_mut().enumerate().take(rows / GROUP_ROWS) {
                let at = (i0 / GROUP_ROWS + g) * group_bytes + blk0 * layout.group_block_bytes();
                *p = ptr.wrapping_add(at);
            }
            // SAFETY: the non-null groups hold blocks blk0..blk0 + nb.
            unsafe { from_groups(layout, &groups, nb, panel) };
        }
    }
}

/// Fills `panel` with `nb` blocks of the interleaved `groups` (up to four
/// groups of eight rows; null past the rows).
///
/// # Safety
/// The processor has AVX-512 VNNI; the non-null groups hold `nb` blocks,
/// and the panel was made for at least `nb` blocks of 32 rows.
unsafe fn from_groups(
    layout: Interleaved,
    groups: &[*const u8; PANEL_R / GROUP_ROWS],
    nb: usize,
    panel: &mut Panel,
) {
    // SAFETY: caller's contract.
    unsafe {
        interleaved_panel(
            layout,
            groups,
            nb,
            panel.codes.as_mut_ptr(),
            panel.dw.as_mut_ptr(),
            panel.mw.as_mut_ptr(),
        )
    }
}

/// How a panel chunk is multiplied by the columns: `cols` at a time, by
/// `vpdpbusd` or on AMX tiles.
struct Product {
    cols: usize,
    amx: Option<AmxTiles>,
}

/// The tile unit and its shapes for a full group of columns and for the
/// last group (where the tiles take the format's blocks).
struct AmxTiles {
    unit: Unit,
    full_cols: usize,
    full: TileConfig,
    last: TileConfig,
}

impl Product {
    /// `kernel`'s product for `n` columns of blocks of `qb` values; VNNI
    /// where the tiles cannot take the blocks.
    fn new(kernel: PanelKernel, qb: usize, n: usize) -> Product {
        let amx = match kernel {
            PanelKernel::Vnni => None,
            PanelKernel::Amx(unit) => {
                let full_cols = AMX_C.min(n);
                let full = panel_amx::config(full_cols, qb);
                let last = match n % AMX_C {
                    0 => full,
                    cols => panel_amx::config(cols, qb),
                };
                full.zip(last).map(|(full, last)| AmxTiles {
                    unit,
                    full_cols,
                    full,
                    last,
                })
            }
        };
        let cols = if amx.is_some() { AMX_C } else { PANEL_C };
        Product { cols, amx }
    }

    /// Columns a tile of the quantised activations (AMX takes them one
    /// column after another).
    fn acts_tile(&self) -> usize {
        if self.amx.is_some() { 1 } else { PANEL_C }
    }

    /// Adds the panel's `nb` blocks from value `v0` on times the `nc`
    /// columns of tile `t` to `sums` (`[column][row]`): on VNNI block by
    /// block into the sums, with AMX as one product added at the end.
    #[allow(clippy::too_many_arguments)]
    fn multiply(
        &self,
        f: &Format,
        panel: &Panel,
        nb: usize,
        acts: &QActs,
        t: usize,
        v0: usize,
        nc: usize,
        sums: &mut [[f32; PANEL_R]; AMX_C],
    ) {
        let (k, nblk) = (acts.k(), acts.nblk());
        let blk0 = v0 / f.qb;
        let mut tile = [[0f32; PANEL_R]; AMX_C];
        match &self.amx {
            None => {
                let xcodes = acts.codes[(t * k + v0) * PANEL_C..].as_ptr();
                let xo = (t * nblk + blk0) * PANEL_C;
                let mut four = [[0f32; PANEL_R]; PANEL_C];
                four.copy_from_slice(&sums[..PANEL_C]);
                // SAFETY: the panel and the tile hold nb blocks.
                unsafe {
                    panel_vnni(
                        f,
                        nb,
                        panel.codes.as_ptr(),
                        panel.dw.as_ptr(),
                        panel.mw.as_ptr(),
                        xcodes,
                        acts.d[xo..].as_ptr(),
                        acts.bias[xo..].as_ptr(),
                        acts.sx[xo..].as_ptr(),
                        &mut four,
                    )
                };
                sums[..PANEL_C].copy_from_slice(&four);
            }
            Some(amx) => {
                let j0 = t * AMX_C;
                let config = if nc == amx.full_cols {
                    &amx.full
                } else {
                    &amx.last
                };
                let chunk = PanelChunk {
                    f,
                    nb,
                    codes: panel.codes.as_ptr(),
                    dw: panel.dw.as_ptr(),
                    mw: panel.mw.as_ptr(),
                };
                let x = ColumnActs {
                    codes: acts.codes[j0 * k..].as_ptr(),
                    k,
                    d: acts.d[j0 * nblk..].as_ptr(),
                    bias: acts.bias[j0 * nblk..].as_ptr(),
                    sx: acts.sx[j0 * nblk..].as_ptr(),
                    nblk,
                };
                // SAFETY: AMX was chosen for its unit; the configuration is
                // that of nc columns; the chunk holds nb blocks, the columns
                // blk0..blk0 + nb.
                unsafe { on_unit(amx.unit, config, &chunk, &x, blk0, nc, &mut tile) };
                for (s, t) in sums.iter_mut().zip(&tile) {
                    for (s, t) in s.iter_mut().zip(t) {
                        *s += t;
                    }
                }
            }
        }
    }
}
