//! The panel path: many columns on AVX-512 VNNI, the codes of 32 rows
//! interleaved into panels that one `vpdpbusd` advances 16 rows at a time.

use std::cell::RefCell;

use ggraph_core::DType;

use super::avx512_vnni::{interleave16, panel_vnni, repack_panel};
use super::operands::{ACTS, PANEL_C, PANEL_R};
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

pub(crate) fn gemm(f: Format, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    let k = a.k;
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
                    // interleave the codes of the panel's rows, four bytes at a time
                    if matches!(f.dtype, DType::Q8_0 | DType::Q4_0) {
                        let mut ptrs = [std::ptr::null::<u8>(); PANEL_R];
                        for (r, q) in ptrs.iter_mut().enumerate().take(rows) {
                            *q = a.row(i0 + r);
                        }
                        // SAFETY: the non-null rows hold blocks v0 / 32 .. + nb;
                        // the panel holds nb blocks of 32 rows.
                        unsafe {
                            repack_panel(
                                f.dtype == DType::Q4_0,
                                &ptrs,
                                v0 / f.qb,
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
                                            a.row(i0 + r),
                                            v0,
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
                            // SAFETY: 16 decoded rows of len bytes (a multiple of 64);
                            // the panel holds len / 4 steps of 32 rows.
                            unsafe {
                                interleave16(tcodes.as_ptr(), len, pcodes.as_mut_ptr(), half)
                            };
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
