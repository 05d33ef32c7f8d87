//! The panel path: many columns on AVX-512 VNNI, the codes of 32 rows
//! interleaved into panels that one `vpdpbusd` advances 16 rows at a time.
//! The rows are ggml's, or a matrix in the CPU's interleaved layout: its
//! Q4_0, Q8_0 and IQ4_NL groups are already four bytes a row side by side
//! and go straight into the panel; Q4_K's are rebuilt in ggml's layout a
//! chunk at a time (a few KiB, read while in cache) and decoded.

use std::cell::RefCell;

use ggraph_core::DType;

use super::avx512_vnni::{interleave16, interleaved_panel, panel_vnni, repack_panel};
use super::operands::{ACTS, PANEL_C, PANEL_R};
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

pub(crate) fn gemm(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    gemm_from(f, Weights::Rows(a), m, b, out)
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
    let weights = Weights::Interleaved { layout, ptr: a, k };
    gemm_from(f, weights, m, b, out)
}

fn gemm_from(f: Format, a: Weights, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = match a {
        Weights::Rows(rows) => rows.k,
        Weights::Interleaved { k, .. } => k,
    };
    // bytes of one row's chunk of values rebuilt in ggml's layout
    let chunk_row_bytes = |len: usize| len / f.dtype.block_size() * f.dtype.type_size();
    with_scratch(&ACTS, qacts_len(n, k, f.qb, PANEL_C), |buf| {
        let acts = quantize_acts(b, k, f, PANEL_C, 1, buf);
        let acts = &acts;
        let panels = m.div_ceil(PANEL_R);
        let tiles = n.div_ceil(PANEL_C);
        let (groups, per_group) = column_split(panels, tiles);
        let nblk = k / f.qb;
        let kc = PANEL_KC.min(k);
        let sb = kc / f.qb;
        team::for_each(panels * groups, |task| {
            let (p, g) = (task % panels, task / panels);
            let i0 = p * PANEL_R;
            let rows = PANEL_R.min(m - i0);
            // only Q4_K's interleaved rows are rebuilt in ggml's layout
            let plain_len = match a {
                Weights::Interleaved {
                    layout: Interleaved::Q4_K,
                    ..
                } => PANEL_R * chunk_row_bytes(kc),
                _ => 0,
            };
            let need =
                PANEL_R * kc + 2 * PANEL_R * sb * 4 + 16 * kc + 2 * sb * 4 + 3 * 64 + plain_len;
            with_scratch(&PANEL, need, |pb| {
                let (plain, pb) = pb.split_at_mut(plain_len);
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
                    if let Weights::Interleaved { layout, ptr, k } = a
                        && layout != Interleaved::Q4_K
                    {
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
                            )
                        };
                    } else {
                        // the panel's rows, and the first of their values there
                        let (rows_at, first) = match a {
                            Weights::Rows(a) => (
                                WeightRows {
                                    ptr: a.row(i0),
                                    ..a
                                },
                                v0,
                            ),
                            Weights::Interleaved { layout, ptr, k } => {
                                let chunk = chunk_row_bytes(len);
                                let group_bytes = GROUP_ROWS * chunk_row_bytes(k);
                                let blk0 = v0 / f.dtype.block_size();
                                for g in 0..rows / GROUP_ROWS {
                                    let at = (i0 / GROUP_ROWS + g) * group_bytes
                                        + blk0 * layout.group_block_bytes();
                                    // SAFETY: group i0 / 8 + g of the matrix
                                    // holds blocks blk0.. of its rows, which lie
                                    // side by side for its eight rows.
                                    let src = unsafe {
                                        std::slice::from_raw_parts(ptr.add(at), GROUP_ROWS * chunk)
                                    };
                                    let dst =
                                        &mut plain[g * GROUP_ROWS * chunk..][..GROUP_ROWS * chunk];
                                    layout.unpack(src, dst, chunk);
                                }
                                let rows = WeightRows {
                                    ptr: plain.as_ptr(),
                                    stride: chunk,
                                    elem_stride: f.dtype.type_size(),
                                    dtype: f.dtype,
                                    k: len,
                                };
                                (rows, 0)
                            }
                        };
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
                                    interleave16(tcodes.as_ptr(), len, pcodes.as_mut_ptr(), half)
                                };
                            }
                        }
                    }
                    let blk0 = v0 / f.qb;
                    let t_end = ((g + 1) * per_group).min(tiles);
                    for t in g * per_group..t_end {
                        let j0 = t * PANEL_C;
                        let nc = PANEL_C.min(n - j0);
                        let xcodes = acts.codes[(t * k + v0) * PANEL_C..].as_ptr();
                        let xo = (t * nblk + blk0) * PANEL_C;
                        let xd = acts.d[xo..].as_ptr();
                        let xb = acts.bias[xo..].as_ptr();
                        let xs = acts.sx[xo..].as_ptr();
                        let mut tile = [[0f32; PANEL_R]; PANEL_C];
                        // SAFETY: the panel and the tile hold nb blocks.
                        unsafe {
                            panel_vnni(
                                &f,
                                nb,
                                pcodes.as_ptr(),
                                pdw.as_ptr(),
                                pmw.as_ptr(),
                                xcodes,
                                xd,
                                xb,
                                xs,
                                &mut tile,
                            )
                        };
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
