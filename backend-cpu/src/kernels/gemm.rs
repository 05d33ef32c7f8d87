//! Float mul_mat: F32, F16 or BF16 weights times f32 activation columns.
//!
//! Two paths:
//!
//! - **dot** (few columns): each weight row is read once, straight from
//!   the buffer (F16/BF16 widened in registers), and dotted with every
//!   column of a small tile of activations. This is the mat-vec of token
//!   generation: it streams the weights at memory bandwidth.
//! - **packed** (many columns): a tiled GEMM in the BLIS manner. The
//!   activations are packed `KC` values at a time into `NR`-wide panels
//!   shared by all threads; each thread packs (and widens to f32) an
//!   `MC x KC` block of weights into `MR`-wide panels that stay in its L2
//!   cache, and a register-blocked micro-kernel computes `MR x NR` output
//!   tiles from them. Threads split the rows of the weights (and the
//!   columns too when there are few rows).
//!
//! Micro-kernels exist for AVX-512 (32 x 12), AVX2 (16 x 6) and plain
//! Rust (8 x 4); `Isa` picks one at run time.

use super::scratch::with_scratch;
use std::cell::RefCell;

use crate::team;
use ggraph_core::DType;

use super::isa::Isa;
use super::matmul::{Cols, SHORT_ROW_BYTES, WeightRows};
use crate::kernels::tensor_ref::read_scalar;

/// Column counts up to this use the dot path.
pub(crate) const DOT_MAX_N: usize = 8;

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

/// The AVX2 kernel's blocking: 4096 x 14336 x 512 on Zen 3, 2 threads,
/// GFLOP/s (F16, F32, BF16 alike): KC 256 / MC 256 142, 512 / 256 162,
/// 1024 / 64 173, 2048 / 64 182, 4096 / 32 186.
const BLOCKING_AVX2: Blocking = Blocking { kc: 2048, mc: 64 };
/// The other kernels' blocking (measured on the first AVX-512 machine).
const BLOCKING_OTHER: Blocking = Blocking { kc: 256, mc: 256 };
/// Floats of packed activations per block of columns (4 MiB): the shared
/// packed block of activations is at most this, whatever the column count.
const PACK_B_FLOATS: usize = 1 << 20;

/// `out[j][i] = sum_k a[i][k] * b[j][k]` for `i < m`, `j < b.len()`.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    if a.k == 0 {
        for &o in &out.0 {
            // SAFETY: every output column holds m values.
            unsafe { std::slice::from_raw_parts_mut(o, m) }.fill(0.0);
        }
        return;
    }
    let rows_packed = a.elem_stride == a.dtype.type_size();
    if n <= DOT_MAX_N && rows_packed {
        dot_path(isa, a, m, b, out);
    } else {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx512Vnni => {
                packed::<32, 12>(a, m, b, out, x86::kernel_avx512, BLOCKING_OTHER)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => packed::<16, 6>(a, m, b, out, x86::kernel_avx2, BLOCKING_AVX2),
            _ => packed::<8, 4>(a, m, b, out, kernel_portable::<8, 4>, BLOCKING_OTHER),
        }
    }
}

// ---- scratch -------------------------------------------------------------

thread_local! {
    static PACK_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PACK_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

// ---- weight row access ------------------------------------------------------

/// Converts values `k0..k0 + out.len()` of weight row `i` to f32.
///
/// # Safety
/// Row `i` must be in bounds and `k0 + out.len() <= a.k`; for quantised
/// weights (packed blocks), `k0` and `out.len()` are whole blocks.
pub(crate) unsafe fn load_row_segment(a: &WeightRows, i: usize, k0: usize, out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let len = out.len();
    // SAFETY (all arms): caller's contract; rows span k values at elem_stride.
    unsafe {
        let row = a.ptr.add(i * a.stride);
        if a.dtype.is_quantized() {
            // whole blocks (the packed path's chunks are block-aligned)
            let (bs, ts) = (a.dtype.block_size(), a.dtype.type_size());
            let src = std::slice::from_raw_parts(row.add(k0 / bs * ts), len.div_ceil(bs) * ts);
            let _ = ggraph_core::quant::dequantize_row(a.dtype, src, out);
            return;
        }
        if a.elem_stride == a.dtype.type_size() {
            let p = row.add(k0 * a.elem_stride);
            match a.dtype {
                DType::F32 => out.copy_from_slice(std::slice::from_raw_parts(p as *const f32, len)),
                DType::F16 => super::convert::f16_to_f32(
                    std::slice::from_raw_parts(p as *const half::f16, len),
                    out,
                ),
                DType::BF16 => std::slice::from_raw_parts(p as *const half::bf16, len)
                    .convert_to_f32_slice(out),
                _ => {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = read_scalar(a.dtype, p.add(j * a.elem_stride));
                    }
                }
            }
        } else {
            for (j, o) in out.iter_mut().enumerate() {
                *o = read_scalar(a.dtype, row.add((k0 + j) * a.elem_stride));
            }
        }
    }
}

// ---- packed path ------------------------------------------------------------

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
    let (n_groups, tiles_per_group) = super::parallel::column_split(m_blocks, n_tiles);
    let tile_floats = kc_max.min(k) * NR;

    with_scratch(&PACK_B, n_tiles * tile_floats, |bpack| {
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            team::for_each_chunk_mut(bpack, tile_floats, |t, tile| {
                pack_b_tile::<NR>(b, t, pc, kc, tile)
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
/// zero beyond the last column.
fn pack_b_tile<const NR: usize>(b: ColBlock, t: usize, pc: usize, kc: usize, dst: &mut [f32]) {
    let n = b.len();
    for j in 0..NR {
        let col = t * NR + j;
        if col < n {
            // SAFETY: every column holds k >= pc + kc values.
            let src = unsafe { std::slice::from_raw_parts(b.col(col).add(pc), kc) };
            for (kk, v) in src.iter().enumerate() {
                dst[kk * NR + j] = *v;
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
        && super::isa::active() >= Isa::Avx512
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
                    DType::F16 => x86::pack_panel32_avx512::<DT_F16>(&ptrs, pc, kc, panel),
                    DType::BF16 => x86::pack_panel32_avx512::<DT_BF16>(&ptrs, pc, kc, panel),
                    _ => x86::pack_panel32_avx512::<DT_F32>(&ptrs, pc, kc, panel),
                }
            }
        }
        let _ = tmp;
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if MR == 16 && a.elem_stride == a.dtype.type_size() && super::isa::active() >= Isa::Avx2 {
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
                    DType::F16 => x86::pack_panel16_avx2::<DT_F16>(&ptrs, pc, kc, panel),
                    DType::BF16 => x86::pack_panel16_avx2::<DT_BF16>(&ptrs, pc, kc, panel),
                    DType::F32 => x86::pack_panel16_avx2::<DT_F32>(&ptrs, pc, kc, panel),
                    _ => x86::pack_panel16_avx2::<DT_F32>(&ptrs, 0, kc, panel),
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

// ---- dot path ---------------------------------------------------------------

/// Weight dtype codes for the const-generic dot kernels.
pub(crate) const DT_F32: u8 = 0;
pub(crate) const DT_F16: u8 = 1;
pub(crate) const DT_BF16: u8 = 2;

/// A dot tile: values `k0..k0 + kc` of R rows times C columns, added to
/// (or, when `first`, stored in) `acc`: one 16-float slot per (row,
/// column), `acc[(r * C + c) * 16..]`, whose lanes sum to the dot. Each
/// row's cache line `ahead` bytes on is prefetched (on AVX2, none when
/// `ahead` is 0).
type DotTile = unsafe fn(
    rows: *const *const u8,
    k0: usize,
    cols: *const *const f32,
    kc: usize,
    acc: *mut f32,
    first: bool,
    ahead: usize,
);

/// Values of k per chunk of the AVX-512 dot path with more than four
/// columns (the columns' chunk stays in L1/L2; 1024 measured best for 8
/// columns, against 256 to 4096, on the first AVX-512 machine).
const DOT_KC: usize = 1024;
/// Rows per block of the dot path (their partial sums stay in L1/L2), a
/// multiple of every tile's row count.
const DOT_RB: usize = 60;

/// The dot tile kernel for `r` rows and `c` columns (c <= 8) of this
/// weight dtype, or None to use the portable loop.
fn dot_tile_fn(isa: Isa, dtype: DType, c: usize) -> Option<(usize, DotTile)> {
    #[cfg(target_arch = "x86_64")]
    {
        // 32 zmm registers: up to 16 accumulators
        macro_rules! pick {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some((4, x86::$f::<4, 1, $dt> as DotTile)),
                    2 => Some((4, x86::$f::<4, 2, $dt> as DotTile)),
                    3 => Some((4, x86::$f::<4, 3, $dt> as DotTile)),
                    4 => Some((4, x86::$f::<4, 4, $dt> as DotTile)),
                    5 => Some((3, x86::$f::<3, 5, $dt> as DotTile)),
                    6 => Some((3, x86::$f::<3, 6, $dt> as DotTile)),
                    7 => Some((2, x86::$f::<2, 7, $dt> as DotTile)),
                    _ => Some((2, x86::$f::<2, 8, $dt> as DotTile)),
                }
            };
        }
        // 16 ymm registers: at most 12 accumulators, so that a row, a
        // column and a product stay in registers too
        macro_rules! pick16 {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some((4, x86::$f::<4, 1, $dt> as DotTile)),
                    2 => Some((4, x86::$f::<4, 2, $dt> as DotTile)),
                    // 4 x 3 and 3 x 4 need all 16 and run in asm (see
                    // `dot_asm_avx2`)
                    3 => Some((4, x86::$f::<4, 3, $dt> as DotTile)),
                    4 => Some((3, x86::$f::<3, 4, $dt> as DotTile)),
                    5 => Some((2, x86::$f::<2, 5, $dt> as DotTile)),
                    6 => Some((2, x86::$f::<2, 6, $dt> as DotTile)),
                    7 => Some((1, x86::$f::<1, 7, $dt> as DotTile)),
                    _ => Some((1, x86::$f::<1, 8, $dt> as DotTile)),
                }
            };
        }
        return match (isa, dtype) {
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F32) => pick!(dot_tile_avx512, DT_F32),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F16) => pick!(dot_tile_avx512, DT_F16),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::BF16) => pick!(dot_tile_avx512, DT_BF16),
            (Isa::Avx2, DType::F32) => pick16!(dot_tile_avx2, DT_F32),
            (Isa::Avx2, DType::F16) => pick16!(dot_tile_avx2, DT_F16),
            (Isa::Avx2, DType::BF16) => pick16!(dot_tile_avx2, DT_BF16),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (isa, dtype, c);
        None
    }
}

/// `out[i] = dot(row i, col)` for `i < count`, rows `k` values long from
/// `first`, `stride` bytes apart: one column over a task's consecutive
/// rows, each dot summed and stored by the kernel.
type RowStream = unsafe fn(
    first: *const u8,
    stride: usize,
    count: usize,
    k: usize,
    col: *const f32,
    out: *mut f32,
);

/// The row-stream kernel for one column over rows of `row_bytes` of this
/// weight dtype, where it beats the dot tiles: AVX-512, four rows at a
/// time with the dots summed in registers; AVX2, rows of at most
/// `SHORT_ROW_BYTES`. (Long rows on AVX2 go four side by side with
/// prefetch: 4096 x 14336 F16 one column, 26-30 GFLOP/s against 21-26
/// streamed.)
fn row_stream_fn(isa: Isa, dtype: DType, row_bytes: usize) -> Option<RowStream> {
    #[cfg(target_arch = "x86_64")]
    {
        if isa >= Isa::Avx512 {
            return match dtype {
                DType::F32 => Some(x86::rows4_avx512::<DT_F32> as RowStream),
                DType::F16 => Some(x86::rows4_avx512::<DT_F16> as RowStream),
                DType::BF16 => Some(x86::rows4_avx512::<DT_BF16> as RowStream),
                _ => None,
            };
        }
        if isa != Isa::Avx2 || row_bytes > SHORT_ROW_BYTES {
            return None;
        }
        return match dtype {
            DType::F32 => Some(x86::row_stream_avx2::<DT_F32> as RowStream),
            DType::F16 => Some(x86::row_stream_avx2::<DT_F16> as RowStream),
            DType::BF16 => Some(x86::row_stream_avx2::<DT_BF16> as RowStream),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = dtype;
        None
    }
}

/// The tile kernel for single rows (the remainder after whole row groups).
fn dot_row_fn(isa: Isa, dtype: DType, c: usize) -> Option<DotTile> {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! one {
            ($f:ident, $dt:expr) => {
                match c {
                    1 => Some(x86::$f::<1, 1, $dt> as DotTile),
                    2 => Some(x86::$f::<1, 2, $dt> as DotTile),
                    3 => Some(x86::$f::<1, 3, $dt> as DotTile),
                    4 => Some(x86::$f::<1, 4, $dt> as DotTile),
                    5 => Some(x86::$f::<1, 5, $dt> as DotTile),
                    6 => Some(x86::$f::<1, 6, $dt> as DotTile),
                    7 => Some(x86::$f::<1, 7, $dt> as DotTile),
                    _ => Some(x86::$f::<1, 8, $dt> as DotTile),
                }
            };
        }
        return match (isa, dtype) {
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F32) => one!(dot_tile_avx512, DT_F32),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::F16) => one!(dot_tile_avx512, DT_F16),
            (Isa::Avx512 | Isa::Avx512Vnni, DType::BF16) => one!(dot_tile_avx512, DT_BF16),
            (Isa::Avx2, DType::F32) => one!(dot_tile_avx2, DT_F32),
            (Isa::Avx2, DType::F16) => one!(dot_tile_avx2, DT_F16),
            (Isa::Avx2, DType::BF16) => one!(dot_tile_avx2, DT_BF16),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (isa, dtype, c);
        None
    }
}

fn dot_path(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let row_bytes = a.k * a.dtype.type_size();
    if let (1, Some(stream)) = (b.0.len(), row_stream_fn(isa, a.dtype, row_bytes)) {
        super::parallel::par_ranges(m, 16, |range| {
            // SAFETY: the rows of range hold k values each, the column k;
            // the outputs of range are this task's alone.
            unsafe {
                stream(
                    a.row(range.start),
                    a.stride,
                    range.len(),
                    a.k,
                    b.0[0],
                    out.0[0].add(range.start),
                )
            }
        });
        return;
    }
    super::parallel::par_ranges(m, 16, |range| {
        with_scratch(&DOT_ACC, DOT_RB * 8 * 16, |acc| {
            dot_range(isa, &a, b, out, range, acc)
        });
    });
}

thread_local! {
    static DOT_ACC: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows `range` of the dot path, with `acc` as the partial sums.
///
/// Rows go in blocks of `DOT_RB` (the partial sums' extent), and the
/// columns in groups: eight with AVX-512's 32 registers, four with AVX2's
/// 16. Each group dots a strip of rows in turn, so that the later groups
/// read the strip from cache; on AVX-512 with more than four columns, in
/// chunks of `DOT_KC` values.
fn dot_range(
    isa: Isa,
    a: &WeightRows,
    b: &Cols<f32>,
    out: &Cols<f32>,
    range: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    let n = b.0.len();
    let k = a.k;
    if dot_tile_fn(isa, a.dtype, 1).is_none() {
        dot_range_portable(a, b, out, range);
        return;
    }
    let groups = n.div_ceil(if isa >= Isa::Avx512 { 8 } else { 4 });
    let per_group = n.div_ceil(groups);
    // AVX2 (and AVX-512 up to four columns): whole rows, each one long
    // stream that the hardware prefetchers follow, and with several
    // groups, a strip of rows as tall as the tiles that every group reads
    // in turn while it is in L1/L2. (4096 x 14336 F16, Zen 3, 2 threads,
    // 3 x 4 tiles: n=4 110 GFLOP/s against 87 in 1024-value chunks, n=8
    // 137 against 120.) AVX-512 with five to eight columns: chunks whose
    // columns stay in L1. (Zen 5, 2 threads, three alternated rounds,
    // whole rows against chunks: n=4 F32 74-77 / 65-71, F16 162-169 /
    // 137-158, BF16 161-166 / 142-159; n=3 F32 62-66 / 56-72, F16 and BF16
    // level; n=5 F16 178-186 / 197-210, BF16 175-181 / 201-204.)
    let (chunk, strip) = if isa >= Isa::Avx512 && n > 4 {
        (DOT_KC, DOT_RB)
    } else if groups == 1 {
        (k, DOT_RB)
    } else {
        let tile_rows = |c: usize| dot_tile_fn(isa, a.dtype, c).map_or(1, |(r, _)| r);
        let (r_first, r_last) = (
            tile_rows(per_group),
            tile_rows(n - (groups - 1) * per_group),
        );
        (k, lcm(r_first, r_last))
    };
    for i0 in range.clone().step_by(DOT_RB) {
        let i1 = (i0 + DOT_RB).min(range.end);
        for k0 in (0..k).step_by(chunk) {
            let kc = chunk.min(k - k0);
            for s0 in (i0..i1).step_by(strip) {
                let s1 = (s0 + strip).min(i1);
                for j0 in (0..n).step_by(per_group) {
                    let c = per_group.min(n - j0);
                    let slots = &mut acc[dot_slot(j0, c, s0 - i0, 0)..];
                    dot_tiles(isa, a, &b.0[j0..j0 + c], s0..s1, k0, kc, slots);
                }
            }
        }
        // AVX2 tiles fill 8 lanes of a slot, AVX-512 tiles 16
        let lanes = if isa >= Isa::Avx512 { 16 } else { 8 };
        for i in i0..i1 {
            for j0 in (0..n).step_by(per_group) {
                let c = per_group.min(n - j0);
                for jj in 0..c {
                    let at = dot_slot(j0, c, i - i0, jj);
                    let v = lane_sum(&acc[at..at + lanes]);
                    // SAFETY: output column j0 + jj has m values.
                    unsafe { *out.0[j0 + jj].add(i) = v };
                }
            }
        }
    }
}

/// Values `k0..k0 + kc` of weight rows `rows` times the columns `cols`
/// (at most 8), added to (or, from k0 = 0, stored in) `slots`: the rows'
/// slots, row-major, from the first row's.
fn dot_tiles(
    isa: Isa,
    a: &WeightRows,
    cols: &[*mut f32],
    rows: std::ops::Range<usize>,
    k0: usize,
    kc: usize,
    slots: &mut [f32],
) {
    let c = cols.len();
    let (Some((r, tile)), Some(row1)) = (dot_tile_fn(isa, a.dtype, c), dot_row_fn(isa, a.dtype, c))
    else {
        return;
    };
    let mut col_ptrs = [std::ptr::null::<f32>(); 8];
    for (cp, p) in col_ptrs.iter_mut().zip(cols) {
        *cp = *p as *const f32;
    }
    let row_bytes = a.k * a.dtype.type_size();
    let mut i = rows.start;
    while i < rows.end {
        let (rr, f) = if rows.end - i >= r {
            (r, tile)
        } else {
            (1, row1)
        };
        let mut row_ptrs = [std::ptr::null::<u8>(); 8];
        for (q, row) in row_ptrs.iter_mut().enumerate().take(rr) {
            *row = a.row(i + q);
        }
        let slot = slots[(i - rows.start) * c * 16..].as_mut_ptr();
        // short whole rows: fetch rows PREFETCH_BYTES on; long ones on
        // AVX2: none (0), the hardware prefetchers follow the streams
        // (4096 x 14336, 2 threads, n=1: F16 39 -> 45 GFLOP/s, F32 20.5
        // -> 24.7 without); chunks: the same chunk of the rows of the
        // tiles that come next, whole tiles covering PREFETCH_BYTES of
        // chunk (rather than this row's next chunk, which is read only
        // after the whole strip: Zen 5, 4096 x 14336, n=8, ten alternated
        // rounds, median: F32 135 -> 143 GFLOP/s, F16 240 -> 255, BF16
        // 256 -> 275; n=5 level)
        let along = kc.min(1024) * a.dtype.type_size();
        let chunk_bytes = kc * a.dtype.type_size();
        let ahead = if kc < a.k {
            super::matmul::short_rows_ahead(rr * chunk_bytes) / chunk_bytes * a.stride
        } else if row_bytes > SHORT_ROW_BYTES && isa == Isa::Avx2 {
            0
        } else {
            super::matmul::rows_ahead(row_bytes, rr * a.stride, along)
        };
        // SAFETY: rows hold k packed values, columns k f32; the slots of
        // rows i.. hold rr * c * 16 floats.
        unsafe {
            f(
                row_ptrs.as_ptr(),
                k0,
                col_ptrs.as_ptr(),
                kc,
                slot,
                k0 == 0,
                ahead,
            )
        };
        i += rr;
    }
}

fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut x: usize, mut y: usize| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    a / gcd(a, b) * b
}

/// The sum of 8 or 16 partial sums, as a tree (independent adds rather
/// than one running sum).
#[inline]
fn lane_sum(v: &[f32]) -> f32 {
    let mut w = [0f32; 16];
    w[..v.len()].copy_from_slice(v);
    let w: [f32; 8] = std::array::from_fn(|l| w[l] + w[l + 8]);
    let w: [f32; 4] = std::array::from_fn(|l| w[l] + w[l + 4]);
    (w[0] + w[2]) + (w[1] + w[3])
}

/// Index in the dot path's partial sums of the slot (16 floats) of row
/// `i` of a block and column `jj` of the group of `c` columns from `j0`:
/// each group's slots are row-major, groups one after the other.
fn dot_slot(j0: usize, c: usize, i: usize, jj: usize) -> usize {
    (j0 * DOT_RB + i * c + jj) * 16
}

/// The dot path in plain Rust: rows widened to f32, then dotted.
fn dot_range_portable(
    a: &WeightRows,
    b: &Cols<f32>,
    out: &Cols<f32>,
    range: std::ops::Range<usize>,
) {
    let dot = super::matmul::dot_fn();
    let k = a.k;
    let mut row = vec![0f32; k];
    for i in range {
        // SAFETY: row i < m.
        unsafe { load_row_segment(a, i, 0, &mut row) };
        for (j, col) in b.0.iter().enumerate() {
            // SAFETY: columns hold k values, outputs m.
            unsafe {
                let col = std::slice::from_raw_parts(*col as *const f32, k);
                *out.0[j].add(i) = dot(&row, col);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::super::dot_asm_avx2;
    use super::super::math::hsum256;
    use super::{DT_BF16, DT_F16, DT_F32};
    use ggraph_core::quant::{bf16_to_f32, f16_to_f32};

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn load_w512<const DT: u8>(p: *const u8, k: usize) -> __m512 {
        // SAFETY: caller's contract (16 values at k).
        unsafe {
            match DT {
                DT_F32 => _mm512_loadu_ps((p as *const f32).add(k)),
                DT_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(
                    (p as *const u16).add(k) as *const __m256i
                )),
                _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                    _mm256_loadu_si256((p as *const u16).add(k) as *const __m256i),
                ))),
            }
        }
    }

    #[inline(always)]
    unsafe fn scalar_w<const DT: u8>(p: *const u8, k: usize) -> f32 {
        // SAFETY: caller's contract.
        unsafe {
            match DT {
                DT_F32 => *(p as *const f32).add(k),
                DT_F16 => f16_to_f32(*(p as *const u16).add(k)),
                DT_BF16 => bf16_to_f32(*(p as *const u16).add(k)),
                _ => 0.0,
            }
        }
    }

    /// The AVX-512 dot tile (see `super::DotTile`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn dot_tile_avx512<const R: usize, const C: usize, const DT: u8>(
        rows: *const *const u8,
        k0: usize,
        cols: *const *const f32,
        kc: usize,
        acc_out: *mut f32,
        first: bool,
        ahead: usize,
    ) {
        // SAFETY: rows and columns hold k0 + kc values each; acc_out holds
        // R * C slots of 16 floats.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            if !first {
                for r in 0..R {
                    for c in 0..C {
                        acc[r][c] = _mm512_loadu_ps(acc_out.add((r * C + c) * 16));
                    }
                }
            }
            let end = k0 + kc / 16 * 16;
            let mut kk = k0;
            // the weights are read once: fetch `ahead` bytes further (see
            // `dot_range`) into L2 while this part is computed, once per
            // cache line
            let bytes = if DT == DT_F32 { 4 } else { 2 };
            while kk < end {
                let fetch = (kk * bytes) % 64 == 0;
                for r in 0..R {
                    if fetch {
                        _mm_prefetch::<_MM_HINT_T1>(
                            (*rows.add(r)).wrapping_add(kk * bytes + ahead) as *const i8,
                        );
                    }
                    let w = load_w512::<DT>(*rows.add(r), kk);
                    for c in 0..C {
                        let x = _mm512_loadu_ps((*cols.add(c)).add(kk));
                        acc[r][c] = _mm512_fmadd_ps(w, x, acc[r][c]);
                    }
                }
                kk += 16;
            }
            for r in 0..R {
                for c in 0..C {
                    let slot = acc_out.add((r * C + c) * 16);
                    _mm512_storeu_ps(slot, acc[r][c]);
                    for t in end..k0 + kc {
                        *slot += scalar_w::<DT>(*rows.add(r), t) * *(*cols.add(c)).add(t);
                    }
                }
            }
        }
    }

    /// Rows longer than this (bytes) go four side by side through the
    /// AVX-512 row stream; shorter ones one at a time, so that a task
    /// streams its rows in order. Zen 5, 2 threads: with 8 KiB rows (F16,
    /// k = 4096) one at a time streamed faster (14336 x 4096, four copies,
    /// three rounds: 40-41 -> 47-49 GFLOP/s; 8b-4l F16 generation, five
    /// alternated runs: 14.0 -> 16.5 tokens/s), and so did the small
    /// model's 1-3 KiB rows (tg128, alternated rounds: F16 386-412 ->
    /// 433-509 tokens/s with the memory probe at 36-38 GB/s, 491-529 ->
    /// 501-580 at 57-65 GB/s, ahead in 7 of 8; F32 ahead in 6 of 6); with
    /// 16 KiB rows (F32) no faster, and with 28 KiB rows (F16, k = 14336)
    /// slower (4096 x 14336: 45-61 -> 42-43 GFLOP/s): long rows side by
    /// side are long streams already.
    const FOUR_ROWS_ABOVE: usize = 12 << 10;

    /// The AVX-512 row stream (see `super::RowStream`): rows of up to
    /// [`FOUR_ROWS_ABOVE`] bytes one at a time, longer ones four at a time
    /// (single rows at the end); two accumulators per row, 32 values per
    /// step; each dot summed in registers and stored. Rows are prefetched
    /// as the dot tiles do: whole groups of four rows ahead for short rows,
    /// 1024 values further along for long ones.
    ///
    /// # Safety
    /// As for `row_stream_avx2`, with AVX-512 F/BW/VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn rows4_avx512<const DT: u8>(
        first: *const u8,
        stride: usize,
        count: usize,
        k: usize,
        col: *const f32,
        out: *mut f32,
    ) {
        let bytes = if DT == DT_F32 { 4 } else { 2 };
        let ahead = super::super::matmul::rows_ahead(k * bytes, 4 * stride, 1024 * bytes);
        let per_call = if k * bytes > FOUR_ROWS_ABOVE { 4 } else { 1 };
        // SAFETY: caller's contract; prefetches may point past the rows.
        unsafe {
            let end32 = k / 32 * 32;
            let mut i = 0;
            while i < count {
                let rows = if count - i >= per_call { per_call } else { 1 };
                let row = |r: usize| first.add((i + r) * stride);
                let mut acc = [[_mm512_setzero_ps(); 2]; 4];
                let mut kk = 0;
                while kk < end32 {
                    let x = [
                        _mm512_loadu_ps(col.add(kk)),
                        _mm512_loadu_ps(col.add(kk + 16)),
                    ];
                    for (r, a) in acc.iter_mut().enumerate().take(rows) {
                        let p = row(r);
                        // once per cache line of the row
                        for line in (0..32 * bytes).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T1>(
                                p.wrapping_add(kk * bytes + line + ahead) as *const i8
                            );
                        }
                        a[0] = _mm512_fmadd_ps(load_w512::<DT>(p, kk), x[0], a[0]);
                        a[1] = _mm512_fmadd_ps(load_w512::<DT>(p, kk + 16), x[1], a[1]);
                    }
                    kk += 32;
                }
                for (r, a) in acc.iter().enumerate().take(rows) {
                    let p = row(r);
                    let mut dot = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
                    for t in end32..k {
                        dot += scalar_w::<DT>(p, t) * *col.add(t);
                    }
                    *out.add(i + r) = dot;
                }
                i += rows;
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_w256<const DT: u8>(p: *const u8, k: usize) -> __m256 {
        // SAFETY: caller's contract (8 values at k).
        unsafe {
            match DT {
                DT_F32 => _mm256_loadu_ps((p as *const f32).add(k)),
                DT_F16 => {
                    _mm256_cvtph_ps(_mm_loadu_si128((p as *const u16).add(k) as *const __m128i))
                }
                _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128((p as *const u16).add(k) as *const __m128i),
                ))),
            }
        }
    }

    /// The row stream on AVX2 (see `super::RowStream`): 32 values per
    /// step into four accumulators, the dot summed in registers and
    /// stored, then the next row. No software prefetch: the hardware
    /// prefetchers follow the one sequential stream, and a fetch 8 KiB
    /// ahead made F32 token generation slower (`runner_bench --types F32`,
    /// small model, Zen 3: 104-127 tokens/s with it, 127-134 without).
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; `count` rows of `k` values from
    /// `first`, `stride` bytes apart, the column `k` values and the output
    /// `count` are readable (writable).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn row_stream_avx2<const DT: u8>(
        first: *const u8,
        stride: usize,
        count: usize,
        k: usize,
        col: *const f32,
        out: *mut f32,
    ) {
        // SAFETY: caller's contract.
        unsafe {
            let end32 = k / 32 * 32;
            for i in 0..count {
                let row = first.add(i * stride);
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut kk = 0;
                while kk < end32 {
                    for (u, a) in acc.iter_mut().enumerate() {
                        let w = load_w256::<DT>(row, kk + 8 * u);
                        *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(col.add(kk + 8 * u)), *a);
                    }
                    kk += 32;
                }
                while kk + 8 <= k {
                    let w = load_w256::<DT>(row, kk);
                    acc[0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(col.add(kk)), acc[0]);
                    kk += 8;
                }
                let sum =
                    _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                let mut dot = hsum256(sum);
                for t in kk..k {
                    dot += scalar_w::<DT>(row, t) * *col.add(t);
                }
                *out.add(i) = dot;
            }
        }
    }

    /// `acc[r][c] += row r * column c` over values `kk..kk + 8`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the rows and columns hold those
    /// values.
    #[inline(always)]
    unsafe fn step8<const R: usize, const C: usize, const DT: u8>(
        rows: &[*const u8; R],
        cols: &[*const f32; C],
        kk: usize,
        acc: &mut [[__m256; C]; R],
    ) {
        // SAFETY: caller's contract.
        unsafe {
            if R <= C {
                // the rows' values in registers, then one column at a
                // time: R + 1 + R * C registers
                let w: [__m256; R] = std::array::from_fn(|r| load_w256::<DT>(rows[r], kk));
                for c in 0..C {
                    let x = _mm256_loadu_ps(cols[c].add(kk));
                    for r in 0..R {
                        acc[r][c] = _mm256_fmadd_ps(w[r], x, acc[r][c]);
                    }
                }
            } else {
                // the columns' values in registers, then one row at a
                // time: C + 1 + R * C registers
                let x: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(cols[c].add(kk)));
                for r in 0..R {
                    let w = load_w256::<DT>(rows[r], kk);
                    for c in 0..C {
                        acc[r][c] = _mm256_fmadd_ps(w, x[c], acc[r][c]);
                    }
                }
            }
        }
    }

    /// As `dot_tile_avx512`, with 8-lane vectors (lanes 8..16 of each
    /// slot are zero).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_tile_avx2<const R: usize, const C: usize, const DT: u8>(
        rows: *const *const u8,
        k0: usize,
        cols: *const *const f32,
        kc: usize,
        acc_out: *mut f32,
        first: bool,
        ahead: usize,
    ) {
        // SAFETY: as for dot_tile_avx512.
        unsafe {
            // the pointers in registers, not reloaded on every step
            let rows: [*const u8; R] = std::array::from_fn(|r| *rows.add(r));
            let cols: [*const f32; C] = std::array::from_fn(|c| *cols.add(c));
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            if !first {
                for r in 0..R {
                    for c in 0..C {
                        acc[r][c] = _mm256_loadu_ps(acc_out.add((r * C + c) * 16));
                    }
                }
            }
            // one cache line of each row per outer step, fetched `ahead`
            // bytes further (see `dot_range`); the steps of a line
            // unrolled, so that the accumulators stay in registers
            let bytes = if DT == DT_F32 { 4 } else { 2 };
            let line = 64 / bytes;
            let lines_end = k0 + kc / line * line;
            let end = k0 + kc / 8 * 8;
            let mut kk = k0;
            // the tiles that need all sixteen registers, in asm
            if lines_end > k0 && (R, C) == (3, 4) {
                // SAFETY: R and C are 3 and 4, so these are the same arrays.
                let acc = &mut *(acc.as_mut_ptr() as *mut [[__m256; 4]; 3]);
                let rows = &*(rows.as_ptr() as *const [*const u8; 3]);
                let cols = &*(cols.as_ptr() as *const [*const f32; 4]);
                dot_asm_avx2::lines_3x4::<DT>(rows, cols, kk, lines_end, acc);
                kk = lines_end;
            } else if lines_end > k0 && (R, C) == (4, 3) {
                // SAFETY: R and C are 4 and 3, so these are the same arrays.
                let acc = &mut *(acc.as_mut_ptr() as *mut [[__m256; 3]; 4]);
                let rows = &*(rows.as_ptr() as *const [*const u8; 4]);
                let cols = &*(cols.as_ptr() as *const [*const f32; 3]);
                dot_asm_avx2::lines_4x3::<DT>(rows, cols, kk, lines_end, acc);
                kk = lines_end;
            }
            while kk < lines_end {
                if ahead != 0 {
                    for row in rows {
                        _mm_prefetch::<_MM_HINT_T1>(
                            row.wrapping_add(kk * bytes + ahead) as *const i8
                        );
                    }
                }
                for s in 0..64 / (8 * bytes) {
                    step8::<R, C, DT>(&rows, &cols, kk + 8 * s, &mut acc);
                }
                kk += line;
            }
            while kk < end {
                step8::<R, C, DT>(&rows, &cols, kk, &mut acc);
                kk += 8;
            }
            for r in 0..R {
                for c in 0..C {
                    let slot = acc_out.add((r * C + c) * 16);
                    _mm256_storeu_ps(slot, acc[r][c]);
                    if first {
                        _mm256_storeu_ps(slot.add(8), _mm256_setzero_ps());
                    }
                    for t in end..k0 + kc {
                        *slot += scalar_w::<DT>(rows[r], t) * *cols[c].add(t);
                    }
                }
            }
        }
    }

    /// The AVX-512 micro-kernel: a 32 x 12 tile in 24 zmm accumulators.
    ///
    /// # Safety
    /// As for `super::Kernel`, with MR = 32 and NR = 12.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn kernel_avx512(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *const *mut f32,
        first: bool,
    ) {
        const NR: usize = 12;
        // SAFETY: caller's contract.
        unsafe {
            let mut c0 = [_mm512_setzero_ps(); NR];
            let mut c1 = [_mm512_setzero_ps(); NR];
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                let a0 = _mm512_loadu_ps(ap);
                let a1 = _mm512_loadu_ps(ap.add(16));
                for j in 0..NR {
                    let bj = _mm512_set1_ps(*bp.add(j));
                    c0[j] = _mm512_fmadd_ps(a0, bj, c0[j]);
                    c1[j] = _mm512_fmadd_ps(a1, bj, c1[j]);
                }
                ap = ap.add(32);
                bp = bp.add(NR);
            }
            for j in 0..NR {
                let p = *c.add(j);
                if first {
                    _mm512_storeu_ps(p, c0[j]);
                    _mm512_storeu_ps(p.add(16), c1[j]);
                } else {
                    _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), c0[j]));
                    _mm512_storeu_ps(p.add(16), _mm512_add_ps(_mm512_loadu_ps(p.add(16)), c1[j]));
                }
            }
        }
    }

    /// The AVX2 micro-kernel: a 16 x 6 tile in 12 ymm accumulators.
    ///
    /// # Safety
    /// As for `super::Kernel`, with MR = 16 and NR = 6.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn kernel_avx2(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *const *mut f32,
        first: bool,
    ) {
        const NR: usize = 6;
        // SAFETY: caller's contract.
        unsafe {
            let mut c0 = [_mm256_setzero_ps(); NR];
            let mut c1 = [_mm256_setzero_ps(); NR];
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                let a0 = _mm256_loadu_ps(ap);
                let a1 = _mm256_loadu_ps(ap.add(8));
                for j in 0..NR {
                    let bj = _mm256_broadcast_ss(&*bp.add(j));
                    c0[j] = _mm256_fmadd_ps(a0, bj, c0[j]);
                    c1[j] = _mm256_fmadd_ps(a1, bj, c1[j]);
                }
                ap = ap.add(16);
                bp = bp.add(NR);
            }
            for j in 0..NR {
                let p = *c.add(j);
                if first {
                    _mm256_storeu_ps(p, c0[j]);
                    _mm256_storeu_ps(p.add(8), c1[j]);
                } else {
                    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c0[j]));
                    _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), c1[j]));
                }
            }
        }
    }

    /// Packs 16 rows (null rows as zeros), values `k0..k0 + kc`, as a
    /// `[kc][16]` f32 panel: eight rows by eight values at a time,
    /// transposed in registers.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; the non-null rows hold `k0 + kc`
    /// values of type `DT`; `dst` holds `kc * 16` floats.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pack_panel16_avx2<const DT: u8>(
        rows: &[*const u8; 16],
        k0: usize,
        kc: usize,
        dst: &mut [f32],
    ) {
        let k8 = kc / 8 * 8;
        // SAFETY: caller's contract.
        unsafe {
            for half in 0..2 {
                let mut kk = 0;
                while kk < k8 {
                    let mut r = [_mm256_setzero_ps(); 8];
                    for (i, v) in r.iter_mut().enumerate() {
                        let p = rows[half * 8 + i];
                        if !p.is_null() {
                            *v = load_w256::<DT>(p, k0 + kk);
                        }
                    }
                    transpose8(&mut r);
                    for (j, v) in r.iter().enumerate() {
                        _mm256_storeu_ps(dst.as_mut_ptr().add((kk + j) * 16 + half * 8), *v);
                    }
                    kk += 8;
                }
                for t in k8..kc {
                    for i in 0..8 {
                        let p = rows[half * 8 + i];
                        dst[t * 16 + half * 8 + i] = if p.is_null() {
                            0.0
                        } else {
                            scalar_w::<DT>(p, k0 + t)
                        };
                    }
                }
            }
        }
    }

    /// Transposes an 8 x 8 block held as eight rows.
    #[inline]
    #[target_feature(enable = "avx")]
    pub(crate) fn transpose8(r: &mut [__m256; 8]) {
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // u[4h + q]: rows 4h..4h + 4, values q, q + 4 of each 128-bit half
        let u: [__m256; 8] = std::array::from_fn(|i| {
            let (h, q) = (i / 4, i % 4);
            let (a, b) = (t[4 * h + q / 2], t[4 * h + q / 2 + 2]);
            if q % 2 == 0 {
                _mm256_shuffle_ps::<0x44>(a, b)
            } else {
                _mm256_shuffle_ps::<0xEE>(a, b)
            }
        });
        for j in 0..4 {
            r[j] = _mm256_permute2f128_ps::<0x20>(u[j], u[4 + j]);
            r[4 + j] = _mm256_permute2f128_ps::<0x31>(u[j], u[4 + j]);
        }
    }

    /// Transposes 16 rows of 16 floats in place (`r[i][j]` becomes
    /// `r[j][i]`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn transpose16(r: &mut [__m512; 16]) {
        let mut a = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut b = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let (a0, a1) = (_mm512_castps_pd(a[4 * i]), _mm512_castps_pd(a[4 * i + 1]));
            let (a2, a3) = (
                _mm512_castps_pd(a[4 * i + 2]),
                _mm512_castps_pd(a[4 * i + 3]),
            );
            b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
            b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
            b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
            b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
        }
        // b[4i + c] lane L holds column 4L + c of rows 4i..4i+4
        for c in 0..4 {
            let p = _mm512_shuffle_f32x4::<0x88>(b[c], b[4 + c]);
            let q = _mm512_shuffle_f32x4::<0xdd>(b[c], b[4 + c]);
            let p2 = _mm512_shuffle_f32x4::<0x88>(b[8 + c], b[12 + c]);
            let q2 = _mm512_shuffle_f32x4::<0xdd>(b[8 + c], b[12 + c]);
            r[c] = _mm512_shuffle_f32x4::<0x88>(p, p2);
            r[8 + c] = _mm512_shuffle_f32x4::<0xdd>(p, p2);
            r[4 + c] = _mm512_shuffle_f32x4::<0x88>(q, q2);
            r[12 + c] = _mm512_shuffle_f32x4::<0xdd>(q, q2);
        }
    }

    /// Packs values `k0..k0 + kc` of 32 rows (null: a row past the end,
    /// packed as zeros) as `[kc][32]` f32, widening F16/BF16.
    ///
    /// # Safety
    /// Non-null rows hold `k0 + kc` packed values; `dst` holds `kc * 32`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn pack_panel32_avx512<const DT: u8>(
        rows: &[*const u8; 32],
        k0: usize,
        kc: usize,
        dst: &mut [f32],
    ) {
        let k16 = kc / 16 * 16;
        // SAFETY: caller's contract.
        unsafe {
            for half in 0..2 {
                let mut kk = 0;
                while kk < k16 {
                    let mut r = [_mm512_setzero_ps(); 16];
                    for (i, v) in r.iter_mut().enumerate() {
                        let p = rows[half * 16 + i];
                        if !p.is_null() {
                            *v = load_w512::<DT>(p, k0 + kk);
                        }
                    }
                    transpose16(&mut r);
                    for (j, v) in r.iter().enumerate() {
                        _mm512_storeu_ps(dst.as_mut_ptr().add((kk + j) * 32 + half * 16), *v);
                    }
                    kk += 16;
                }
                for t in k16..kc {
                    for i in 0..16 {
                        let p = rows[half * 16 + i];
                        dst[t * 32 + half * 16 + i] = if p.is_null() {
                            0.0
                        } else {
                            scalar_w::<DT>(p, k0 + t)
                        };
                    }
                }
            }
        }
    }
}
