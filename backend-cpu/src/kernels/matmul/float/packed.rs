//! The packed path: a tiled GEMM in the BLIS manner. The activations are
//! packed (for F16 and BF16 weights, rounded to their type as ggml rounds
//! them) `KC` values at a time into `NR`-wide panels shared by all
//! threads; each thread packs (and widens to f32) an `MC x KC` block of
//! weights into `MR`-wide panels that stay in its L2 cache, and a
//! register-blocked micro-kernel computes `MR x NR` output tiles from them.
//! Threads split the rows of the weights (and the columns too when there
//! are few rows). Quantised weights are dequantised as they are packed.

use std::cell::RefCell;

use ggraph_core::DType;

#[cfg(target_arch = "x86_64")]
use super::avx2::{kernel_avx2, pack_panel16_avx2};
#[cfg(target_arch = "x86_64")]
use super::avx512::{kernel_avx512, pack_panel32_avx512};
use super::weight_values::load_row_segment;
#[cfg(target_arch = "x86_64")]
use super::weight_values::{DT_BF16, DT_F16, DT_F32};
use crate::kernels::convert::round_to_f16;
use crate::kernels::isa::Isa;
use crate::kernels::matmul::operands::{Cols, WeightRows};
use crate::kernels::parallel::column_split;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// Cache blocking of the packed path.
#[derive(Clone, Copy)]
struct Blocking {
    /// Values of k per packed block. Each block reads and writes the whole
    /// output once, so a longer one saves output traffic.
    kc: usize,
    /// Rows of weights per packed block (a multiple of MR): one thread's
    /// `mc x kc` block of packed weights.
    mc: usize,
}

/// The AVX2 kernel's blocking, chosen from KC 256 to 4096 measured on an
/// AVX2 machine (docs/performance.md).
const BLOCKING_AVX2: Blocking = Blocking { kc: 2048, mc: 64 };
/// The other kernels' blocking (measured on the first AVX-512 machine).
const BLOCKING_OTHER: Blocking = Blocking { kc: 256, mc: 256 };
/// Floats of packed activations per block of columns (4 MiB): the shared
/// packed block of activations is at most this, whatever the column count.
const PACK_B_FLOATS: usize = 1 << 20;

/// `out[j][i] = sum_k a[i][k] * b[j][k]` for `i < m`, `j < b.len()`, with
/// the micro-kernel of `isa`.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx512Vnni => {
            packed::<32, 12>(a, m, b, out, kernel_avx512, BLOCKING_OTHER)
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => packed::<16, 6>(a, m, b, out, kernel_avx2, BLOCKING_AVX2),
        _ => packed::<8, 4>(a, m, b, out, kernel_portable::<8, 4>, BLOCKING_OTHER),
    }
}

thread_local! {
    static PACK_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PACK_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A micro-kernel: `kc` steps over an A panel (`[kc][MR]`) and a B panel
/// (`[kc][NR]`), then stores (or adds, unless `first`) the `MR x NR` tile
/// to the `NR` column pointers at `c`.
type Kernel = unsafe fn(kc: usize, a: *const f32, b: *const f32, c: *const *mut f32, first: bool);

struct SyncPtr<T>(*mut T);
// SAFETY: used only to hand disjoint or read-only regions to tasks.
unsafe impl<T> Sync for SyncPtr<T> {}
unsafe impl<T> Send for SyncPtr<T> {}

fn packed<const MR: usize, const NR: usize>(
    a: WeightRows,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
    kernel: Kernel,
    blocking: Blocking,
) {
    let n = b.0.len();
    let kc_max = blocking.kc.min(a.k);
    // columns in blocks whose packed activations fit PACK_B_FLOATS
    let nc = (PACK_B_FLOATS / kc_max / NR).max(1) * NR;
    for jc in (0..n).step_by(nc) {
        let cols = jc..(jc + nc).min(n);
        let (b, out) = (ColBlock(&b.0[cols.clone()]), ColBlock(&out.0[cols]));
        packed_columns::<MR, NR>(&a, m, b, out, kernel, blocking);
    }
}

/// A block of a `Cols`' columns.
#[derive(Clone, Copy)]
struct ColBlock<'a>(&'a [*mut f32]);

// SAFETY: as for `Cols`: the columns outlive the call, and each output
// value is written by one task.
unsafe impl Sync for ColBlock<'_> {}
unsafe impl Send for ColBlock<'_> {}

impl ColBlock<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn col(&self, j: usize) -> *mut f32 {
        self.0[j]
    }

    fn cols(&self, j: std::ops::Range<usize>) -> &[*mut f32] {
        &self.0[j]
    }
}

/// The packed GEMM of the weights times columns `b`, into `out`.
fn packed_columns<const MR: usize, const NR: usize>(
    a: &WeightRows,
    m: usize,
    b: ColBlock,
    out: ColBlock,
    kernel: Kernel,
    Blocking {
        kc: kc_max,
        mc: mc_max,
    }: Blocking,
) {
    let n = b.len();
    let k = a.k;
    let threads = team::current_threads();
    // blocks of rows: mc_max, smaller when that leaves a thread idle
    let mut mc = mc_max;
    while mc > MR && m.div_ceil(mc) < 2 * threads {
        mc -= MR;
    }
    let m_blocks = m.div_ceil(mc);
    let n_tiles = n.div_ceil(NR);
    let (n_groups, tiles_per_group) = column_split(m_blocks, n_tiles);
    let tile_floats = kc_max.min(k) * NR;

    with_scratch(&PACK_B, n_tiles * tile_floats, |bpack| {
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            team::for_each_chunk_mut(bpack, tile_floats, |t, tile| {
                pack_b_tile::<NR>(b, t, pc, kc, a.dtype, tile)
            });
            let bp = SyncPtr(bpack.as_mut_ptr());
            let bp = &bp;
            team::for_each(m_blocks * n_groups, |task| {
                let (ib, g) = (task % m_blocks, task / m_blocks);
                let i0 = ib * mc;
                let rows = mc.min(m - i0);
                let panels = rows.div_ceil(MR);
                with_scratch(&PACK_A, panels * MR * kc + MR * kc, |ap| {
                    let (apack, tmp) = ap.split_at_mut(panels * MR * kc);
                    pack_a_block::<MR>(a, i0, rows, pc, kc, apack, tmp);
                    let t_end = ((g + 1) * tiles_per_group).min(n_tiles);
                    for t in g * tiles_per_group..t_end {
                        let j0 = t * NR;
                        let nr = NR.min(n - j0);
                        // SAFETY: tile t of the packed activations.
                        let btile = unsafe { bp.0.add(t * tile_floats) } as *const f32;
                        for p in 0..panels {
                            let r0 = i0 + p * MR;
                            let mr = MR.min(m - r0);
                            let atile = apack[p * MR * kc..].as_ptr();
                            // SAFETY: the panels hold kc steps; the output
                            // tile (r0.., j0..) belongs to this task alone.
                            unsafe {
                                run_tile::<MR, NR>(
                                    kernel,
                                    kc,
                                    atile,
                                    btile,
                                    out.cols(j0..j0 + nr),
                                    r0,
                                    mr,
                                    pc == 0,
                                )
                            };
                        }
                    }
                });
            });
        }
    });
}

/// Runs the kernel on one tile, through a bounce buffer when the tile is
/// cut by the edge of the matrix.
///
/// # Safety
/// As for `Kernel`; `cols` hold at least `r0 + mr` values each.
unsafe fn run_tile<const MR: usize, const NR: usize>(
    kernel: Kernel,
    kc: usize,
    a: *const f32,
    b: *const f32,
    cols: &[*mut f32],
    r0: usize,
    mr: usize,
    first: bool,
) {
    let nr = cols.len();
    // SAFETY: caller's contract.
    unsafe {
        if mr == MR && nr == NR {
            let mut c = [std::ptr::null_mut::<f32>(); NR];
            for (cj, col) in c.iter_mut().zip(cols) {
                *cj = col.add(r0);
            }
            kernel(kc, a, b, c.as_ptr(), first);
        } else {
            let mut tile = [[0f32; MR]; NR];
            let mut c = [std::ptr::null_mut::<f32>(); NR];
            for (cj, t) in c.iter_mut().zip(tile.iter_mut()) {
                *cj = t.as_mut_ptr();
            }
            kernel(kc, a, b, c.as_ptr(), true);
            for (t, col) in tile.iter().zip(cols) {
                let dst = std::slice::from_raw_parts_mut(col.add(r0), mr);
                if first {
                    dst.copy_from_slice(&t[..mr]);
                } else {
                    for (d, v) in dst.iter_mut().zip(&t[..mr]) {
                        *d += v;
                    }
                }
            }
        }
    }
}

/// Packs activation columns `t*NR..` values `pc..pc+kc` as `[kc][NR]`,
/// zero beyond the last column. For F16 and BF16 weights (`weights`) the
/// values are rounded to that type as they are packed, as ggml rounds the
/// activations of such a product.
fn pack_b_tile<const NR: usize>(
    b: ColBlock,
    t: usize,
    pc: usize,
    kc: usize,
    weights: DType,
    dst: &mut [f32],
) {
    let n = b.len();
    for j in 0..NR {
        let col = t * NR + j;
        if col < n {
            // SAFETY: every column holds k >= pc + kc values.
            let src = unsafe { std::slice::from_raw_parts(b.col(col).add(pc), kc) };
            match weights {
                DType::F16 => {
                    let mut rounded = [0f32; 256];
                    for (c, chunk) in src.chunks(256).enumerate() {
                        let rounded = &mut rounded[..chunk.len()];
                        rounded.copy_from_slice(chunk);
                        round_to_f16(rounded);
                        for (kk, v) in rounded.iter().enumerate() {
                            dst[(c * 256 + kk) * NR + j] = *v;
                        }
                    }
                }
                DType::BF16 => {
                    for (kk, v) in src.iter().enumerate() {
                        dst[kk * NR + j] = half::bf16::from_f32(*v).to_f32();
                    }
                }
                _ => {
                    for (kk, v) in src.iter().enumerate() {
                        dst[kk * NR + j] = *v;
                    }
                }
            }
        } else {
            for kk in 0..kc {
                dst[kk * NR + j] = 0.0;
            }
        }
    }
}

/// Packs rows `i0..i0+rows`, values `pc..pc+kc`, of the weights as f32
/// panels of MR rows, `[panel][kc][MR]`, zero beyond the last row.
fn pack_a_block<const MR: usize>(
    a: &WeightRows,
    i0: usize,
    rows: usize,
    pc: usize,
    kc: usize,
    dst: &mut [f32],
    tmp: &mut [f32],
) {
    let panels = rows.div_ceil(MR);
    let direct = a.dtype == DType::F32 && a.elem_stride == 4;
    #[cfg(target_arch = "x86_64")]
    if MR == 32
        && a.dtype.is_float()
        && a.elem_stride == a.dtype.type_size()
        && crate::kernels::isa::active() >= Isa::Avx512
    {
        for p in 0..panels {
            let mut ptrs = [std::ptr::null::<u8>(); 32];
            for (r, q) in ptrs.iter_mut().enumerate() {
                if p * MR + r < rows {
                    *q = a.row(i0 + p * MR + r);
                }
            }
            let panel = &mut dst[p * MR * kc..(p + 1) * MR * kc];
            // SAFETY: the non-null rows hold pc + kc values; the panel kc * 32.
            unsafe {
                match a.dtype {
                    DType::F16 => pack_panel32_avx512::<DT_F16>(&ptrs, pc, kc, panel),
                    DType::BF16 => pack_panel32_avx512::<DT_BF16>(&ptrs, pc, kc, panel),
                    _ => pack_panel32_avx512::<DT_F32>(&ptrs, pc, kc, panel),
                }
            }
        }
        let _ = tmp;
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if MR == 16
        && a.elem_stride == a.dtype.type_size()
        && crate::kernels::isa::active() >= Isa::Avx2
    {
        for p in 0..panels {
            let mut ptrs = [std::ptr::null::<u8>(); 16];
            let quantized = a.dtype.is_quantized();
            for (r, q) in ptrs.iter_mut().enumerate() {
                let row = p * MR + r;
                if row >= rows {
                    continue;
                }
                if quantized {
                    // whole blocks, widened into a row of tmp first
                    let t = &mut tmp[r * kc..(r + 1) * kc];
                    // SAFETY: row in bounds, pc and kc whole blocks.
                    unsafe { load_row_segment(a, i0 + row, pc, t) };
                    *q = t.as_ptr() as *const u8;
                } else {
                    *q = a.row(i0 + row);
                }
            }
            let panel = &mut dst[p * MR * kc..(p + 1) * MR * kc];
            // SAFETY: the non-null rows hold pc + kc values (weights) or kc
            // (widened in tmp, read from 0); the panel kc * 16.
            unsafe {
                match a.dtype {
                    DType::F16 => pack_panel16_avx2::<DT_F16>(&ptrs, pc, kc, panel),
                    DType::BF16 => pack_panel16_avx2::<DT_BF16>(&ptrs, pc, kc, panel),
                    DType::F32 => pack_panel16_avx2::<DT_F32>(&ptrs, pc, kc, panel),
                    _ => pack_panel16_avx2::<DT_F32>(&ptrs, 0, kc, panel),
                }
            }
        }
        return;
    }
    for p in 0..panels {
        let panel = &mut dst[p * MR * kc..(p + 1) * MR * kc];
        for r in 0..MR {
            let ri = p * MR + r;
            if ri >= rows {
                for kk in 0..kc {
                    panel[kk * MR + r] = 0.0;
                }
                continue;
            }
            let src: &[f32] = if direct {
                // SAFETY: packed f32 row i0 + ri, values pc..pc+kc.
                unsafe {
                    std::slice::from_raw_parts(
                        (a.ptr.add((i0 + ri) * a.stride) as *const f32).add(pc),
                        kc,
                    )
                }
            } else {
                // SAFETY: row in bounds, pc + kc <= k.
                unsafe { load_row_segment(a, i0 + ri, pc, &mut tmp[..kc]) };
                &tmp[..kc]
            };
            for (kk, v) in src.iter().enumerate() {
                panel[kk * MR + r] = *v;
            }
        }
    }
}

/// The portable micro-kernel.
///
/// # Safety
/// As for `Kernel`.
unsafe fn kernel_portable<const MR: usize, const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *const *mut f32,
    first: bool,
) {
    let mut acc = [[0f32; MR]; NR];
    // SAFETY: caller's contract.
    unsafe {
        let a = std::slice::from_raw_parts(a, kc * MR);
        let b = std::slice::from_raw_parts(b, kc * NR);
        for kk in 0..kc {
            let av = &a[kk * MR..kk * MR + MR];
            for j in 0..NR {
                let bj = b[kk * NR + j];
                for i in 0..MR {
                    acc[j][i] += av[i] * bj;
                }
            }
        }
        for (j, row) in acc.iter().enumerate() {
            let dst = std::slice::from_raw_parts_mut(*c.add(j), MR);
            if first {
                dst.copy_from_slice(row);
            } else {
                for (d, v) in dst.iter_mut().zip(row) {
                    *d += v;
                }
            }
        }
    }
}
