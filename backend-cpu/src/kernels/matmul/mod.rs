//! mul_mat and mul_mat_id: weights of any type times f32 activations.
//!
//! Layers, each importing only from those below it:
//!
//! - this module: the ops, their batches and experts;
//! - `dispatch`: the path of each product, from the instruction set, the
//!   weight type, the column count and the bytes of a weight row;
//! - the paths, each a driver and its kernels per instruction set: the
//!   types whose sums ggml adds in one fixed order follow it, so that
//!   their products equal llama.cpp's bit for bit (F32, F16 and BF16
//!   weights: `float::in_ggml_order`; Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1 and Q5_1:
//!   `blocks_in_ggml_order`; the K-quants and IQ4_XS:
//!   `kquants_in_ggml_order`; Q4_0, Q4_K, IQ4_NL and MXFP4 in the CPU's
//!   interleaved layout, which bypasses `dispatch`, and prompts of those
//!   types in GGUF's rows where ggml would repack them: `interleaved_gemm`);
//!   the others take the float paths (`float`), the integer ones
//!   (`quant_dot`, `block_gemm_avx2`) or `dequantized`;
//! - what they share: the operands, the row-streaming policy, the row
//!   loops, the quantised formats and their decoder,
//!   activation quantisation and register transposes.

mod activation_quant;
#[cfg(target_arch = "x86_64")]
mod block_gemm_avx2;
mod blocks_in_ggml_order;
mod dequantized;
mod dispatch;
mod float;
#[cfg(test)]
mod ggml_order_tests;
#[cfg(target_arch = "x86_64")]
mod interleaved_gemm;
mod kquants_in_ggml_order;
mod operands;
mod quant_dot;
mod quant_format;
#[cfg(target_arch = "x86_64")]
mod register_transpose;
mod row_streaming;
#[cfg(test)]
mod tests;

pub(crate) use float::in_ggml_order::vec_dot_f32_rows;

use ggraph_core::{DType, Result};

use crate::kernels::indices::check_indices;
use crate::kernels::interleave::Interleaved;
use crate::kernels::isa;
use crate::kernels::tensor_ref::TRef;
use crate::team;
use operands::{Cols, ProductOf, WeightRows};

/// out[j][i] = dot(a row i, b[j]) for i < m, j < b.len(), summed as ggml
/// sums the products of `of`.
fn gemm(of: ProductOf, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    dispatch::gemm(isa::active(), of, a, m, b, out)
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
    /// ggml's rows of an interleaved matrix, where its kernels cannot run.
    plain: Vec<u8>,
}

impl BatchBufs {
    fn new() -> BatchBufs {
        BatchBufs {
            store: Vec::new(),
            b: Cols(Vec::new()),
            out: Cols(Vec::new()),
            plain: Vec::new(),
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
    if let Some(layout) = a.layout {
        interleaved_mul_mat(dst, a, layout, b);
        return;
    }
    // ggml's tinyBLAS takes F32 columns only as one contiguous tensor
    let of = match a.dtype == DType::F32 && b.dtype == DType::F32 && !b.is_contiguous() {
        true => ProductOf::StridedMulMat,
        false => ProductOf::MulMat,
    };
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
        gemm(of, w, m, &bufs.b, &bufs.out);
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

/// mul_mat with a weight in the CPU's interleaved layout (the stream hands
/// one only to mul_mat, mul_mat_id and get_rows).
fn interleaved_mul_mat(dst: TRef, a: TRef, layout: Interleaved, b: TRef) {
    let n = dst.ne[1];
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let mut bufs = BatchBufs::new();
    for bi in 0..dst.ne[2] * dst.ne[3] {
        let (i2, i3) = (bi % dst.ne[2], bi / dst.ne[2]);
        activation_cols(b, (0..n).map(|j| (j, i2, i3)), &mut bufs.store, &mut bufs.b);
        bufs.out.0.clear();
        bufs.out
            .0
            .extend((0..n).map(|j| dst.row_ptr(j, i2, i3) as *mut f32));
        let matrix = a.row_ptr(0, i2 / r2, i3 / r3);
        interleaved_product(ProductOf::MulMat, layout, matrix, &a, dst.ne[0], &mut bufs);
    }
}

/// `bufs.out[j] = dot(rows, bufs.b[j])` for the `m` rows of one matrix of
/// the interleaved weight `a`, at `matrix`: the interleaved kernels on
/// AVX2, else ggml's rows rebuilt in scratch memory first.
fn interleaved_product(
    of: ProductOf,
    layout: Interleaved,
    matrix: *const u8,
    a: &TRef,
    m: usize,
    bufs: &mut BatchBufs,
) {
    #[cfg(target_arch = "x86_64")]
    if isa::active() >= isa::Isa::Avx2 {
        // SAFETY: the stream gives a layout only to a whole weight of whole
        // groups of rows, so every matrix of it is whole groups too.
        unsafe { interleaved_gemm::gemm(of, layout, matrix, a.ne[0], m, &bufs.b, &bufs.out) };
        return;
    }
    bufs.plain.resize(m * a.nb[1], 0);
    // SAFETY: the matrix spans m rows of nb[1] bytes.
    let packed = unsafe { std::slice::from_raw_parts(matrix, bufs.plain.len()) };
    layout.unpack(packed, &mut bufs.plain, a.nb[1]);
    let w = WeightRows {
        ptr: bufs.plain.as_ptr(),
        stride: a.nb[1],
        elem_stride: a.nb[0],
        dtype: a.dtype,
        k: a.ne[0],
    };
    gemm(of, w, m, &bufs.b, &bufs.out);
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
        match experts.layout {
            Some(layout) => {
                interleaved_product(ProductOf::MulMatId, layout, w.ptr, &experts, m, bufs)
            }
            None => gemm(ProductOf::MulMatId, w, m, &bufs.b, &bufs.out),
        }
    };
    // With experts enough to go round the team twice, each runs whole on
    // one thread, the threads taking them in turn with no wait between
    // experts; with fewer, the team splits each expert's rows. (Whole
    // experts measured faster than split rows on MoE expert shapes;
    // docs/performance.md.)
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
