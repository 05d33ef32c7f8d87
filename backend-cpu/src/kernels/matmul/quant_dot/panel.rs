//! The panel path: many columns on AVX-512 VNNI, the codes of 32 rows
//! interleaved into panels that one `vpdpbusd` advances 16 rows at a time.
//! The rows are ggml's, decoded and interleaved, or a matrix in the CPU's
//! interleaved layout, whose groups are already four bytes a row side by
//! side and go straight into the panel (Q4_K's scales and mins decoded a
//! group at a time).
//!
//! Each panel chunk is then multiplied by the columns, four at a time with
//! `vpdpbusd` (`avx512_vnni::panel_vnni`) or, where AMX is on, 16 at a
//! time on the tile unit (`panel_amx`).

use std::cell::RefCell;

use ggraph_core::DType;

use super::avx512_vnni::{interleave16, interleaved_panel, panel_vnni, repack_panel};
use super::operands::{ACTS, PANEL_C, PANEL_R};
use super::panel_amx::{self, AMX_C, ColumnActs, PanelChunk, panel_tiles};
use crate::kernels::amx::{self, Hardware, TileConfig};
use crate::kernels::interleave::{GROUP_ROWS, Interleaved};
use crate::kernels::matmul::activation_quant::{qacts_len, quantize_acts};
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::matmul::quant_format::{Format, decode};
use crate::kernels::parallel::column_split;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Values per panel chunk (a multiple of 256).
const PANEL_KC: usize = 4096;

thread_local! {
    static PANEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Where the panels' rows come from.
#[derive(Clone, Copy)]
enum Weights {
    /// ggml's rows.
    Rows(WeightRows),
    /// A matrix of `k` values a row in the CPU's interleaved layout.
    Interleaved {
        layout: Interleaved,
        ptr: *const u8,
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
    Amx(AmxUnit),
}

/// The tile unit of [`PanelKernel::Amx`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum AmxUnit {
    Hardware(Hardware),
    /// The instructions' emulation; the products of an instruction the
    /// processor would refuse come out NaN.
    #[cfg(test)]
    Emulated,
}

impl AmxUnit {
    /// `panel_amx::panel_tiles` on this unit.
    ///
    /// # Safety
    /// As for `panel_tiles`.
    unsafe fn product(
        self,
        config: &TileConfig,
        chunk: &PanelChunk,
        x: &ColumnActs,
        blk0: usize,
        cols: usize,
        tile: &mut [[f32; PANEL_R]; AMX_C],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                AmxUnit::Hardware(mut hw) => {
                    panel_tiles(&mut hw, config, chunk, x, blk0, cols, tile)
                }
                #[cfg(test)]
                AmxUnit::Emulated => {
                    let mut emulated = amx::Emulated::default();
                    panel_tiles(&mut emulated, config, chunk, x, blk0, cols, tile);
                    if emulated.fault.is_some() {
                        tile.iter_mut().for_each(|c| c.fill(f32::NAN));
                    }
                }
            }
        }
    }
}

impl PanelKernel {
    /// AMX where `amx::active` gives the tile unit, else VNNI.
    fn active() -> PanelKernel {
        amx::active().map_or(PanelKernel::Vnni, |h| {
            PanelKernel::Amx(AmxUnit::Hardware(h))
        })
    }
}

pub(crate) fn gemm(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    gemm_from(PanelKernel::active(), f, Weights::Rows(a), m, b, out)
}

/// As [`gemm`], with the products of `kernel`.
#[cfg(test)]
pub(crate) fn gemm_with(
    kernel: PanelKernel,
    f: Format,
    a: WeightRows,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    gemm_from(kernel, f, Weights::Rows(a), m, b, out)
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

fn gemm_from(kernel: PanelKernel, f: Format, a: Weights, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    // AMX's unit and tile shapes for a full group of columns and for the
    // last, where the tiles take the format's blocks
    let full_cols = AMX_C.min(n);
    let amx = match kernel {
        PanelKernel::Vnni => None,
        PanelKernel::Amx(unit) => {
            let full = panel_amx::config(full_cols, f.qb);
            let last = match n % AMX_C {
                0 => full,
                cols => panel_amx::config(cols, f.qb),
            };
            full.zip(last).map(|(full, last)| (unit, full, last))
        }
    };
    let cols_per_tile = if amx.is_some() { AMX_C } else { PANEL_C };
    // AMX takes the columns' codes one column after another
    let acts_tile = if amx.is_some() { 1 } else { PANEL_C };
    let k = match a {
        Weights::Rows(rows) => rows.k,
        Weights::Interleaved { k, .. } => k,
    };
    // bytes of one row's chunk of values in ggml's layout
    let chunk_row_bytes = |len: usize| len / f.dtype.block_size() * f.dtype.type_size();
    with_scratch(&ACTS, qacts_len(n, k, f.qb, acts_tile), |buf| {
        let acts = quantize_acts(b, k, f, acts_tile, 1, buf);
        let acts = &acts;
        let panels = m.div_ceil(PANEL_R);
        let tiles = n.div_ceil(cols_per_tile);
        let (groups, per_group) = column_split(panels, tiles);
        let nblk = k / f.qb;
        let kc = PANEL_KC.min(k);
        let sb = kc / f.qb;
        team::for_each(panels * groups, |task| {
            let (p, g) = (task % panels, task / panels);
            let i0 = p * PANEL_R;
            let rows = PANEL_R.min(m - i0);
            let need = PANEL_R * kc + 2 * PANEL_R * sb * 4 + 16 * kc + 2 * sb * 4 + 3 * 64;
            with_scratch(&PANEL, need, |pb| {
                let (pcodes, rest) = pb.split_at_mut(PANEL_R * kc);
                let pad = rest.as_ptr().align_offset(64);
                let rest = &mut rest[pad..];
                let (scales, rest) = rest.split_at_mut(2 * PANEL_R * sb * 4);
                // SAFETY: aligned f32 region.
                let scales = unsafe {
                    std::slice::from_raw_parts_mut(
                        scales.as_mut_ptr() as *mut f32,
                        2 * PANEL_R * sb,
                    )
                };
                let (pdw, pmw) = scales.split_at_mut(PANEL_R * sb);
                let (tcodes, rest) = rest.split_at_mut(16 * kc);
                let pad = rest.as_ptr().align_offset(4);
                let rest = &mut rest[pad..];
                // SAFETY: aligned f32 region.
                let tscales = unsafe {
                    std::slice::from_raw_parts_mut(rest.as_mut_ptr() as *mut f32, 2 * sb)
                };
                let (tdw, tmw) = tscales.split_at_mut(sb);
                for v0 in (0..k).step_by(kc) {
                    let len = kc.min(k - v0);
                    let nb = len / f.qb;
                    match a {
                        Weights::Interleaved { layout, ptr, k } => {
                            let group_bytes = GROUP_ROWS * chunk_row_bytes(k);
                            let blk0 = v0 / f.dtype.block_size();
                            let mut groups = [std::ptr::null::<u8>(); PANEL_R / GROUP_ROWS];
                            for (g, p) in groups.iter_mut().enumerate().take(rows / GROUP_ROWS) {
                                let at = (i0 / GROUP_ROWS + g) * group_bytes
                                    + blk0 * layout.group_block_bytes();
                                *p = ptr.wrapping_add(at);
                            }
                            // SAFETY: the non-null groups hold blocks blk0..
                            // blk0 + nb; the panel holds nb blocks of 32 rows.
                            unsafe {
                                interleaved_panel(
                                    layout,
                                    &groups,
                                    nb,
                                    pcodes.as_mut_ptr(),
                                    pdw.as_mut_ptr(),
                                    pmw.as_mut_ptr(),
                                )
                            };
                        }
                        Weights::Rows(a) => {
                            // the panel's rows, and the first of their values there
                            let (rows_at, first) = (
                                WeightRows {
                                    ptr: a.row(i0),
                                    ..a
                                },
                                v0,
                            );
                            // interleave the codes of the panel's rows, four bytes at a time
                            if matches!(f.dtype, DType::Q8_0 | DType::Q4_0) {
                                let mut ptrs = [std::ptr::null::<u8>(); PANEL_R];
                                for (r, q) in ptrs.iter_mut().enumerate().take(rows) {
                                    *q = rows_at.row(r);
                                }
                                // SAFETY: the non-null rows hold blocks v0 / 32 .. + nb;
                                // the panel holds nb blocks of 32 rows.
                                unsafe {
                                    repack_panel(
                                        f.dtype == DType::Q4_0,
                                        &ptrs,
                                        first / f.qb,
                                        nb,
                                        pcodes.as_mut_ptr(),
                                        pdw.as_mut_ptr(),
                                    )
                                };
                            } else {
                                // decode 16 rows at a time, then interleave them with
                                // 16 x 16 dword transposes
                                for half in 0..2 {
                                    for i in 0..16 {
                                        let r = half * 16 + i;
                                        let codes = &mut tcodes[i * len..(i + 1) * len];
                                        if r < rows {
                                            // SAFETY: row i0 + r < m, values v0..v0+len exist.
                                            unsafe {
                                                decode(
                                                    f,
                                                    rows_at.row(r),
                                                    first,
                                                    codes,
                                                    &mut tdw[..nb],
                                                    &mut tmw[..nb],
                                                )
                                            };
                                        } else {
                                            codes.fill(0);
                                            tdw[..nb].fill(0.0);
                                            tmw[..nb].fill(0.0);
                                        }
                                        for blk in 0..nb {
                                            pdw[blk * PANEL_R + r] = tdw[blk];
                                            pmw[blk * PANEL_R + r] = tmw[blk];
                                        }
                                    }
                                    // SAFETY: 16 decoded rows of len bytes (a multiple of 32);
                                    // the panel holds len / 4 steps of 32 rows.
                                    unsafe {
                                        interleave16(
                                            tcodes.as_ptr(),
                                            len,
                                            pcodes.as_mut_ptr(),
                                            half,
                                        )
                                    };
                                }
                            }
                        }
                    }
                    let blk0 = v0 / f.qb;
                    let t_end = ((g + 1) * per_group).min(tiles);
                    for t in g * per_group..t_end {
                        let j0 = t * cols_per_tile;
                        let nc = cols_per_tile.min(n - j0);
                        let mut tile = [[0f32; PANEL_R]; AMX_C];
                        let tile = &mut tile;
                        match amx {
                            None => {
                                let xcodes = acts.codes[(t * k + v0) * PANEL_C..].as_ptr();
                                let xo = (t * nblk + blk0) * PANEL_C;
                                let mut four = [[0f32; PANEL_R]; PANEL_C];
                                // SAFETY: the panel and the tile hold nb blocks.
                                unsafe {
                                    panel_vnni(
                                        &f,
                                        nb,
                                        pcodes.as_ptr(),
                                        pdw.as_ptr(),
                                        pmw.as_ptr(),
                                        xcodes,
                                        acts.d[xo..].as_ptr(),
                                        acts.bias[xo..].as_ptr(),
                                        acts.sx[xo..].as_ptr(),
                                        &mut four,
                                    )
                                };
                                tile[..PANEL_C].copy_from_slice(&four);
                            }
                            Some((unit, full, last)) => {
                                let config = if nc == full_cols { &full } else { &last };
                                let chunk = PanelChunk {
                                    f: &f,
                                    nb,
                                    codes: pcodes.as_ptr(),
                                    dw: pdw.as_ptr(),
                                    mw: pmw.as_ptr(),
                                };
                                let x = ColumnActs {
                                    codes: acts.codes[j0 * k..].as_ptr(),
                                    k,
                                    d: acts.d[j0 * nblk..].as_ptr(),
                                    bias: acts.bias[j0 * nblk..].as_ptr(),
                                    sx: acts.sx[j0 * nblk..].as_ptr(),
                                    nblk,
                                };
                                // SAFETY: AMX was chosen for its unit; the
                                // configuration is that of nc columns; the
                                // chunk holds nb blocks, the columns blk0..
                                // blk0 + nb.
                                unsafe { unit.product(config, &chunk, &x, blk0, nc, tile) }
                            }
                        }
                        for (c, col) in tile.iter().enumerate().take(nc) {
                            // SAFETY: output column j0 + c holds m values; rows
                            // i0..i0+rows of the tile's columns are this task's.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(out.0[j0 + c].add(i0), rows)
                            };
                            if v0 == 0 {
                                dst.copy_from_slice(&col[..rows]);
                            } else {
                                for (d, v) in dst.iter_mut().zip(col) {
                                    *d += v;
                                }
                            }
                        }
                    }
                }
            });
        });
    });
}
