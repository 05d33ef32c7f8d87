//! mul_mat and mul_mat_id: weights of any type times f32 activations.
//!
//! The work goes to one of two families of kernels, each compiled for
//! AVX-512, AVX2 and plain Rust and chosen at run time (`isa`):
//!
//! - float weights (F32, F16, BF16): `gemm`, a mat-vec for few columns and
//!   a packed, tiled GEMM for many;
//! - quantised weights (Q8_0, Q4_0, Q4_K, Q6_K): `quant_dot`, which
//!   quantises the activations to 8 bits once per call and works on the
//!   weight blocks with integer dot products.

use std::sync::OnceLock;

use crate::team;
use ggraph_core::{DType, Result};

use super::indices::check_indices;
use super::isa::{self, Isa};
use crate::kernels::tensor_ref::TRef;

/// Rows of a weight matrix: `m` rows of `k` values, `stride` bytes apart.
#[derive(Clone, Copy)]
pub(crate) struct WeightRows {
    pub ptr: *const u8,
    pub stride: usize,
    /// Bytes between values of a row (the type size when packed).
    pub elem_stride: usize,
    pub dtype: DType,
    pub k: usize,
}

/// Column pointers (k-long f32 inputs, m-long f32 outputs).
pub(crate) struct Cols<T>(pub Vec<*mut T>);

// SAFETY: the pointers address buffers alive for the whole call; output
// columns are written by exactly one task each (tiles are disjoint).
unsafe impl<T> Sync for Cols<T> {}
unsafe impl<T> Send for Cols<T> {}
unsafe impl Sync for WeightRows {}
unsafe impl Send for WeightRows {}

impl WeightRows {
    /// Start of row `i` (in bounds for `i` below the row count).
    #[inline]
    pub(crate) fn row(&self, i: usize) -> *const u8 {
        self.ptr.wrapping_add(i * self.stride)
    }
}

/// Weight bytes the one-column mat-vec kernels keep in flight ahead of
/// the ones they read. A mat-vec streams each weight once, mostly from
/// memory, so the prefetch must cover the memory latency at the rate one
/// core consumes: measured on `runner_bench --types Q8_0 --gen 128`
/// (weights twice the L3), one group of four 544-byte rows ahead (2 KiB)
/// gave 370-410 tokens/s, 4-8 KiB 505-590, 16-32 KiB less again.
pub(crate) const PREFETCH_BYTES: usize = 8 << 10;

/// How far ahead of a group of short rows (`group_bytes` apart, the
/// rows of one kernel call) the kernel prefetches: whole groups, at least
/// one, covering [`PREFETCH_BYTES`].
pub(crate) fn short_rows_ahead(group_bytes: usize) -> usize {
    let group = group_bytes.max(1);
    PREFETCH_BYTES.div_ceil(group) * group
}

/// Rows of at most this many bytes are short: read whole, they are
/// prefetched a group of rows at a time ([`short_rows_ahead`]), and on
/// AVX2 a single float column streams them one at a time.
pub(crate) const SHORT_ROW_BYTES: usize = 4096;

/// The prefetch distance of a kernel call that reads whole rows of
/// `row_bytes`, `group_bytes` per group of rows: whole groups for short
/// rows, else `along` bytes further along each row.
pub(crate) fn rows_ahead(row_bytes: usize, group_bytes: usize, along: usize) -> usize {
    if row_bytes <= SHORT_ROW_BYTES {
        short_rows_ahead(group_bytes)
    } else {
        along
    }
}

/// The prefetch distance of a one-column kernel call that reads groups
/// of rows of `group_bytes`: whole groups ahead, however long the rows.
/// Fetching the same place in the next group of rows beat fetching
/// further along each row for long rows too: Zen 5, 2 threads,
/// `cpu_mul_mat --n 1` (4096 x 14336), the two builds alternated, median
/// of 7: Q4_0 171 -> 221 GFLOP/s, Q8_0 105 -> 123, Q4_K 181 -> 249, Q6_K
/// 119 -> 183. With 8 columns the same rule cost Q6_K a quarter, so
/// kernels for several columns keep [`rows_ahead`], as do the AVX2
/// kernels (no AVX2 machine was there to measure them with this rule).
pub(crate) fn matvec_ahead(group_bytes: usize) -> usize {
    short_rows_ahead(group_bytes)
}

/// Whether a quantised one-column kernel reads rows of `row_bytes` one
/// per call (else four): rows of 2 KiB or more, so that each task streams
/// its rows in order. Four rows side by side (four streams a row apart)
/// share the column's loads but stream slower. Zen 5, 2 threads, eight
/// copies of the weights, median GFLOP/s of alternated rounds: Q4_0
/// (eight rounds) 14336 x 4096 143 -> 164, 4096 x 14336 139 -> 151; five
/// rounds, 14336 x 4096 / 4096 x 14336: Q8_0 70.0 -> 88.9 / 101.5 ->
/// 115.8, Q4_K 139.4 -> 173.7 / 206.0 -> 210.7, Q6_K 88.0 -> 109.1 /
/// 137.2 -> 165.8. Shorter rows keep four per call: the small model's
/// Q8_0 rows (544 and 1496 bytes) generated 1037 against 956 tokens/s one
/// per call (median of six).
pub(crate) fn matvec_one_row(row_bytes: usize) -> bool {
    row_bytes >= 2048
}

/// The prefetch distance of the quantised one-column kernels over rows
/// `stride` bytes apart: [`matvec_ahead`] of four rows, the distance
/// measured when four rows went per call.
pub(crate) fn matvec_prefetch(stride: usize) -> usize {
    matvec_ahead(4 * stride)
}

/// `out[0][i] = dot(a row i, ..)` for `i < m`: the rows spread over the
/// team, each task handing `kernel` groups of `R` rows (single rows at the
/// end of its range). `kernel(rows, count, results)` computes
/// `results[..count]` for the first `count` of `rows`.
pub(crate) fn matvec_rows<const R: usize>(
    a: WeightRows,
    m: usize,
    out: &Cols<f32>,
    kernel: impl Fn(&[*const u8; R], usize, &mut [f32; R]) + Sync,
) {
    super::parallel::par_ranges(m, 16, |range| {
        let mut i = range.start;
        while i < range.end {
            let r = if range.end - i >= R { R } else { 1 };
            let mut rows = [std::ptr::null::<u8>(); R];
            for (q, row) in rows.iter_mut().take(r).enumerate() {
                *row = a.row(i + q);
            }
            let mut res = [0f32; R];
            kernel(&rows, r, &mut res);
            // SAFETY: output column 0 holds m values; rows i..i + r are
            // this task's alone.
            unsafe { std::ptr::copy_nonoverlapping(res.as_ptr(), out.0[0].add(i), r) };
            i += r;
        }
    });
}

/// out[j][i] = dot(a row i, b[j]) for i < m, j < b.len().
fn gemm(a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    gemm_with(isa::active(), a, m, b, out)
}

/// As `gemm`, with the kernels of a given instruction set.
pub(crate) fn gemm_with(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    if a.dtype.is_quantized() {
        super::quant_dot::gemm(isa, a, m, b, out)
    } else {
        super::gemm::gemm(isa, a, m, b, out)
    }
}

/// Activation columns as f32, into `cols`: straight pointers when `b`
/// rows are packed f32, otherwise converted into `store`.
fn activation_cols(
    b: TRef,
    coords: impl ExactSizeIterator<Item = (usize, usize, usize)>,
    store: &mut Vec<f32>,
    cols: &mut Cols<f32>,
) {
    let k = b.ne[0];
    cols.0.clear();
    if b.dtype == DType::F32 && b.rows_packed() {
        cols.0
            .extend(coords.map(|(j, i2, i3)| b.row_ptr(j, i2, i3) as *mut f32));
        return;
    }
    store.resize(coords.len() * k, 0.0);
    for (c, (j, i2, i3)) in coords.enumerate() {
        // SAFETY: row in bounds.
        unsafe { b.load_row(j, i2, i3, &mut store[c * k..(c + 1) * k]) };
        cols.0.push(store[c * k..].as_mut_ptr());
    }
}

/// Buffers one batch of a mul_mat needs, kept across batches.
struct BatchBufs {
    store: Vec<f32>,
    b: Cols<f32>,
    out: Cols<f32>,
}

impl BatchBufs {
    fn new() -> BatchBufs {
        BatchBufs {
            store: Vec::new(),
            b: Cols(Vec::new()),
            out: Cols(Vec::new()),
        }
    }
}

/// Below this many flops per matrix, the batches of a mul_mat run in
/// parallel (each single-threaded in effect), rather than one after the
/// other with the threads splitting each.
const SMALL_BATCH_FLOPS: usize = 1 << 22;

pub fn mul_mat(dst: TRef, a: TRef, b: TRef) {
    let (m, n) = (dst.ne[0], dst.ne[1]);
    if m == 0 || n == 0 || dst.ne[2] == 0 || dst.ne[3] == 0 {
        return;
    }
    let r2 = b.ne[2] / a.ne[2];
    let r3 = b.ne[3] / a.ne[3];
    let k = a.ne[0];
    let batch = |bi: usize, bufs: &mut BatchBufs| {
        let (i2, i3) = (bi % dst.ne[2], bi / dst.ne[2]);
        let w = WeightRows {
            ptr: a.row_ptr(0, i2 / r2, i3 / r3),
            stride: a.nb[1],
            elem_stride: a.nb[0],
            dtype: a.dtype,
            k,
        };
        activation_cols(b, (0..n).map(|j| (j, i2, i3)), &mut bufs.store, &mut bufs.b);
        bufs.out.0.clear();
        bufs.out
            .0
            .extend((0..n).map(|j| dst.row_ptr(j, i2, i3) as *mut f32));
        gemm(w, m, &bufs.b, &bufs.out);
    };
    let batches = dst.ne[2] * dst.ne[3];
    if batches > 1 && 2 * m * n * k < SMALL_BATCH_FLOPS {
        team::for_each_init(batches, BatchBufs::new, |bufs, bi| batch(bi, bufs));
    } else {
        let mut bufs = BatchBufs::new();
        for bi in 0..batches {
            batch(bi, &mut bufs);
        }
    }
}

/// The (slot, token) pairs of a mul_mat_id grouped by expert: expert
/// `x`'s pairs are `pairs[start[x]..start[x + 1]]`, in token order.
struct ExpertGroups {
    start: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

impl ExpertGroups {
    /// Groups the pairs of `ids` ([n_used, n_tokens], every index checked
    /// to be below `n_expert`) by a counting sort.
    fn new(ids: TRef, n_expert: usize, n_used: usize, n_tokens: usize) -> ExpertGroups {
        // SAFETY (both loops): in-bounds index elements, each checked to
        // lie in 0..n_expert by the caller.
        let id = |e: usize, t: usize| unsafe { ids.get_i32([e, t, 0, 0]) } as usize;
        let mut start = vec![0usize; n_expert + 1];
        for t in 0..n_tokens {
            for e in 0..n_used {
                start[id(e, t) + 1] += 1;
            }
        }
        for x in 0..n_expert {
            start[x + 1] += start[x];
        }
        let mut fill = start.clone();
        let mut pairs = vec![(0, 0); n_used * n_tokens];
        for t in 0..n_tokens {
            for e in 0..n_used {
                let x = id(e, t);
                pairs[fill[x]] = (e, t);
                fill[x] += 1;
            }
        }
        ExpertGroups { start, pairs }
    }

    fn of(&self, x: usize) -> &[(usize, usize)] {
        &self.pairs[self.start[x]..self.start[x + 1]]
    }

    /// The experts with any pairs, those with the most first (so that a
    /// team taking them in turn ends on the small ones), ties by index.
    fn busy_largest_first(&self) -> Vec<usize> {
        let n_expert = self.start.len() - 1;
        let mut order: Vec<usize> = (0..n_expert).filter(|&x| !self.of(x).is_empty()).collect();
        order.sort_by_key(|&x| std::cmp::Reverse(self.of(x).len()));
        order
    }
}

pub fn mul_mat_id(dst: TRef, experts: TRef, b: TRef, ids: TRef) -> Result<()> {
    let n_expert = experts.ne[2];
    check_indices("mul_mat_id", ids, n_expert)?;
    let (m, n_used, n_tokens) = (dst.ne[0], dst.ne[1], dst.ne[2]);
    if m == 0 || n_used == 0 || n_tokens == 0 {
        return Ok(());
    }
    let n_b = b.ne[1];
    let groups = ExpertGroups::new(ids, n_expert, n_used, n_tokens);
    let order = groups.busy_largest_first();
    // each expert's rows times the columns of its pairs
    let expert = |x: usize, bufs: &mut BatchBufs| {
        let pairs = groups.of(x);
        let w = WeightRows {
            ptr: experts.row_ptr(0, x, 0),
            stride: experts.nb[1],
            elem_stride: experts.nb[0],
            dtype: experts.dtype,
            k: experts.ne[0],
        };
        activation_cols(
            b,
            pairs.iter().map(|&(e, t)| (e % n_b, t, 0)),
            &mut bufs.store,
            &mut bufs.b,
        );
        bufs.out.0.clear();
        bufs.out
            .0
            .extend(pairs.iter().map(|&(e, t)| dst.row_ptr(e, t, 0) as *mut f32));
        gemm(w, m, &bufs.b, &bufs.out);
    };
    // With experts enough to go round the team twice, each runs whole on
    // one thread, the threads taking them in turn with no wait between
    // experts; with fewer, the team splits each expert's rows. (Qwen3-
    // 30B-A3B experts, `cpu_mul_mat_id`, Zen 5, 2 threads, alternated
    // runs, rows split against whole experts: 512 tokens Q4_0 430 / 475-482
    // GFLOP/s, F16 129-175 / 242-245; 32 tokens Q4_K 249-257 / 334.)
    if order.len() >= 2 * team::current_threads() {
        team::for_each(order.len(), |i| {
            EXPERT_BUFS.with(|cell| match cell.try_borrow_mut() {
                Ok(mut bufs) => expert(order[i], &mut bufs),
                Err(_) => expert(order[i], &mut BatchBufs::new()),
            })
        });
    } else {
        let mut bufs = BatchBufs::new();
        for &x in &order {
            expert(x, &mut bufs);
        }
    }
    Ok(())
}

thread_local! {
    /// Each thread's buffers for the experts of a mul_mat_id it runs.
    static EXPERT_BUFS: std::cell::RefCell<BatchBufs> = std::cell::RefCell::new(BatchBufs::new());
}

// ---- dot products ------------------------------------------------------

type DotFn = fn(&[f32], &[f32]) -> f32;

/// The fastest dot product this processor runs.
pub fn dot_fn() -> DotFn {
    static DOT: OnceLock<DotFn> = OnceLock::new();
    *DOT.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return dot_avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return dot_avx2;
            }
        }
        dot_portable
    })
}

macro_rules! dot_body {
    ($a:expr, $b:expr, $lanes:literal, $fma:expr) => {{
        let (a, b) = ($a, $b);
        let n = a.len().min(b.len());
        let mut acc = [0f32; $lanes];
        let chunks = n / $lanes;
        for c in 0..chunks {
            let x = &a[c * $lanes..c * $lanes + $lanes];
            let y = &b[c * $lanes..c * $lanes + $lanes];
            for l in 0..$lanes {
                acc[l] = $fma(x[l], y[l], acc[l]);
            }
        }
        let mut s = 0f32;
        for v in acc {
            s += v;
        }
        for i in chunks * $lanes..n {
            s = $fma(a[i], b[i], s);
        }
        s
    }};
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_body!(a, b, 16, |x: f32, y: f32, z: f32| x * y + z)
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        dot_body!(a, b, 32, f32::mul_add)
    }
    // SAFETY: chosen only when the processor has AVX2 and FMA.
    unsafe { inner(a, b) }
}

#[cfg(target_arch = "x86_64")]
fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        dot_body!(a, b, 64, f32::mul_add)
    }
    // SAFETY: chosen only when the processor has AVX-512F.
    unsafe { inner(a, b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggraph_core::quant;

    #[test]
    fn dot_products_agree() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let got = super::dot_fn()(&a, &b) as f64;
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        let p = super::dot_portable(&a, &b) as f64;
        assert!((p - want).abs() < 1e-3);
    }

    #[test]
    fn short_rows_prefetch_whole_groups_at_least_prefetch_bytes_ahead() {
        // four 544-byte Q8_0 rows: four groups; eight 288-byte Q4_0 rows:
        // four groups; a group longer than the distance: one group
        assert_eq!(short_rows_ahead(4 * 544), 4 * 4 * 544);
        assert_eq!(short_rows_ahead(8 * 288), 4 * 8 * 288);
        assert_eq!(short_rows_ahead(16 << 10), 16 << 10);
        for group in [1, 100, 2176, 4096, 8191, 8192, 8193] {
            let ahead = short_rows_ahead(group);
            assert_eq!(ahead % group, 0);
            assert!(ahead >= PREFETCH_BYTES && ahead < PREFETCH_BYTES + group);
        }
        assert!(short_rows_ahead(0) >= PREFETCH_BYTES);
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Runs `gemm_with(isa, ..)` on an m x k weight matrix of `dtype` and
    /// n columns, returning the squared error against an f64 product of
    /// the dequantised weights and the f32 activations, relative to the
    /// sum of the squared terms (so that a dot product that happens to
    /// cancel to near zero does not inflate the figure).
    fn gemm_error(isa: Isa, dtype: DType, m: usize, n: usize, k: usize) -> f64 {
        gemm_error_rows_apart(isa, dtype, m, n, k, 0)
    }

    /// As `gemm_error`, with `pad` bytes between one weight row's end and
    /// the next row's start (a view of every row of a wider tensor).
    fn gemm_error_rows_apart(
        isa: Isa,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        pad: usize,
    ) -> f64 {
        let w = values(m * k, (m * 31 + k) as u32);
        let x = values(n * k, (n * 7 + k) as u32);
        product_error(isa, dtype, &w, &x, m, n, pad)
    }

    /// The error of `gemm_with(isa, ..)` (as `gemm_error`) for m weight
    /// rows `w` quantised to `dtype`, `pad` bytes apart, times the n
    /// columns `x`.
    fn product_error(
        isa: Isa,
        dtype: DType,
        w: &[f32],
        x: &[f32],
        m: usize,
        n: usize,
        pad: usize,
    ) -> f64 {
        let k = w.len() / m;
        let packed = quant::quantize(dtype, w).unwrap();
        let wq = quant::dequantize(dtype, &packed, m * k).unwrap();
        let row_bytes = dtype.row_size(k).unwrap();
        let stride = row_bytes + pad;
        let mut bytes = vec![0xffu8; m * stride];
        for (i, row) in packed.chunks(row_bytes).enumerate() {
            bytes[i * stride..i * stride + row_bytes].copy_from_slice(row);
        }
        let mut y = vec![f32::NAN; n * m];
        let a = WeightRows {
            ptr: bytes.as_ptr(),
            stride,
            elem_stride: dtype.type_size(),
            dtype,
            k,
        };
        let b = Cols((0..n).map(|j| x[j * k..].as_ptr() as *mut f32).collect());
        let out = Cols((0..n).map(|j| y[j * m..].as_mut_ptr()).collect());
        gemm_with(isa, a, m, &b, &out);
        let (mut num, mut den) = (0f64, 0f64);
        for j in 0..n {
            for i in 0..m {
                let terms = (0..k).map(|t| wq[i * k + t] as f64 * x[j * k + t] as f64);
                let want: f64 = terms.clone().sum();
                num += (y[j * m + i] as f64 - want).powi(2);
                den += terms.map(|v| v * v).sum::<f64>();
            }
        }
        num / den.max(1e-30)
    }

    /// Every weight type the mul_mat kernels take.
    const WEIGHT_TYPES: [DType; 7] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
        DType::Q6_K,
    ];

    /// The largest `gemm_error` a kernel may make with weights of `dtype`.
    fn nmse_bound(dtype: DType) -> f64 {
        if dtype.is_quantized() { 1e-4 } else { 1e-9 }
    }

    #[test]
    fn every_kernel_matches_the_reference_product() {
        for isa in super::isa::all_supported() {
            for dtype in WEIGHT_TYPES {
                let ks: &[usize] = match dtype.block_size() {
                    // 1100 and 4200: F16/F32 rows past the dot path's
                    // short-row size
                    1 => &[3, 67, 300, 1100, 4200],
                    32 => &[32, 96, 2112],
                    _ => &[256, 2304],
                };
                let bound = nmse_bound(dtype);
                for &k in ks {
                    // column counts on both sides of the path thresholds
                    for (m, n) in [
                        (1, 1),
                        (37, 1),
                        (33, 3),
                        (31, 4),
                        (29, 5),
                        (41, 6),
                        (19, 7),
                        (70, 8),
                        (45, 9),
                        (67, 29),
                        // row blocks of the integer GEMM, the last partial
                        (300, 12),
                    ] {
                        let e = gemm_error(isa, dtype, m, n, k);
                        assert!(
                            e <= bound,
                            "{isa:?} {dtype} m={m} n={n} k={k}: nmse {e:e} > {bound:e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn codes_at_their_extremes_do_not_saturate() {
        // every block of 16 values starts at -1 and goes on at +1, so that
        // nearly every weight code is at its largest magnitude; times
        // activations of all ones (codes of 127), the kernels' 16-bit pair
        // sums reach the most each format allows them
        let k = 2304;
        let w: Vec<f32> = (0..45 * k)
            .map(|i| if i % 16 == 0 { -1.0 } else { 1.0 })
            .collect();
        for isa in super::isa::all_supported() {
            for dtype in WEIGHT_TYPES.into_iter().filter(|t| t.is_quantized()) {
                for n in [1, 3, 8, 9, 29] {
                    let x = vec![1.0f32; n * k];
                    let e = product_error(isa, dtype, &w, &x, 45, n, 0);
                    let bound = nmse_bound(dtype);
                    assert!(e <= bound, "{isa:?} {dtype} n={n}: nmse {e:e} > {bound:e}");
                }
            }
        }
    }

    #[test]
    fn many_columns_go_in_blocks_that_match_the_reference_product() {
        // 4100 columns of 300 values: past the packed GEMM's block of
        // activations (4 MiB of packed values) for every kernel, so the
        // product is made in two blocks of columns
        for isa in super::isa::all_supported() {
            for dtype in [DType::F32, DType::F16, DType::Q4_K] {
                let k = if dtype.is_quantized() { 512 } else { 300 };
                let e = gemm_error(isa, dtype, 5, 4100, k);
                let bound = nmse_bound(dtype);
                assert!(e <= bound, "{isa:?} {dtype} k={k}: nmse {e:e} > {bound:e}");
            }
        }
    }

    #[test]
    fn weight_rows_apart_in_memory_match_the_reference_product() {
        // rows further apart than their length (a view of a wider
        // tensor): the one-column row streams, the tiles and the GEMM
        // must step by the stride, never read the gap (filled with 0xff,
        // a NaN for the float types)
        for isa in super::isa::all_supported() {
            for dtype in WEIGHT_TYPES {
                let ks: &[usize] = match dtype.block_size() {
                    1 => &[67, 300, 1100],
                    32 => &[96, 2112],
                    _ => &[256, 2304],
                };
                let bound = nmse_bound(dtype);
                for &k in ks {
                    for pad in [4, 64, 100] {
                        for (m, n) in [(37, 1), (21, 2), (19, 5), (45, 9)] {
                            let e = gemm_error_rows_apart(isa, dtype, m, n, k, pad);
                            assert!(
                                e <= bound,
                                "{isa:?} {dtype} m={m} n={n} k={k} pad={pad}: nmse {e:e} > {bound:e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
