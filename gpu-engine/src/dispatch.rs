//! From a node of the graph to kernel launches on a [`KernelQueue`]:
//! resolves every tensor to a [`KTensor`] (device address, shape, byte
//! strides, type) and picks the kernel and launch shape. Op semantics live
//! in the kernels, which follow the CPU backend op by op.

use ggraph_core::DType;
use ggraph_core::ir::{AlibiBases, Graph, Op, RopeMode, Tensor, TensorId, contiguous_strides};
use ggraph_core::{Error, Result};

use crate::kernel_args::{Arg, KTensor};
use crate::queue::KernelQueue;
use crate::runtime::Gemm;

/// Threads per block of the elementwise kernels.
const ELEMWISE_BLOCK: u32 = 256;
/// Most blocks an elementwise launch uses (the kernels loop over the rest).
const ELEMWISE_MAX_BLOCKS: u64 = 8192;
/// Columns up to which mul_mat uses the mat-vec kernel.
pub const MMV_MAX_COLS: usize = 8;
/// Warps (rows) per block of the mat-vec kernels (`MMV_WARPS` in
/// kernels/ggraph.cu).
const MMV_WARPS: u32 = 4;

fn ktensor(t: &Tensor, data: u64) -> KTensor {
    let c = |v: usize| v as i64;
    KTensor {
        data,
        ne: t.ne.map(c),
        nb: t.nb.map(c),
        dtype: t.dtype.ggml_id() as i32,
        pad: 0,
    }
}

/// A tensor of `dtype` and shape `ne` with packed values at `data` (scratch
/// memory the dispatcher converts into).
fn packed(data: u64, dtype: DType, ne: [usize; 4]) -> KTensor {
    KTensor {
        data,
        ne: ne.map(|v| v as i64),
        nb: contiguous_strides(dtype, ne).map(|v| v as i64),
        dtype: dtype.ggml_id() as i32,
        pad: 0,
    }
}

/// A placeholder for an absent optional operand (never read).
fn absent() -> KTensor {
    KTensor {
        ne: [1; 4],
        ..KTensor::default()
    }
}

fn elementwise_grid(n: u64) -> [u32; 3] {
    let blocks = n
        .div_ceil(ELEMWISE_BLOCK as u64)
        .clamp(1, ELEMWISE_MAX_BLOCKS);
    [blocks as u32, 1, 1]
}

/// A block of 32..=256 threads for a row of `n` values.
fn row_block(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 256) as u32
}

fn grid_dim(what: &str, v: usize, max: usize) -> Result<u32> {
    if v > max {
        return Err(Error::InvalidArgument(format!(
            "{what}: {v} exceeds the GPU grid limit {max}"
        )));
    }
    Ok(v as u32)
}

pub(crate) fn run_node(s: &mut KernelQueue, graph: &Graph, id: TensorId) -> Result<()> {
    let t = graph.tensor(id);
    if t.is_empty() {
        return Ok(());
    }
    let kt = |s: &KernelQueue, i: TensorId| -> Result<KTensor> {
        Ok(ktensor(graph.tensor(i), s.address(graph, i)?))
    };
    // an optional operand and whether it is there (the kernels' `has_*`)
    let optional = |s: &KernelQueue, i: Option<TensorId>| -> Result<(KTensor, i32)> {
        Ok(match i {
            Some(i) => (kt(s, i)?, 1),
            None => (absent(), 0),
        })
    };
    let src = |i: usize| t.src[i];
    let dst = kt(s, id)?;
    let n = t.nelements() as u64;
    let block = [ELEMWISE_BLOCK, 1, 1];
    match &t.op {
        Op::Leaf | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose | Op::Transfer => Ok(()),
        Op::GetRows => {
            let (a, idx) = (kt(s, src(0))?, kt(s, src(1))?);
            let err = s.err_ptr();
            s.launch(
                "k_get_rows",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::T(idx), Arg::P(err)],
            )
        }
        Op::Binary(op) => {
            let (a, b) = (kt(s, src(0))?, kt(s, src(1))?);
            let code = match op {
                ggraph_core::ir::BinaryOp::Add => 0,
                ggraph_core::ir::BinaryOp::Sub => 1,
                ggraph_core::ir::BinaryOp::Mul => 2,
                ggraph_core::ir::BinaryOp::Div => 3,
            };
            s.launch(
                "k_binary",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::T(b), Arg::I(code)],
            )
        }
        Op::Scale { scale, bias } => {
            let a = kt(s, src(0))?;
            s.launch(
                "k_scale",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::F(*scale), Arg::F(*bias)],
            )
        }
        Op::Unary(u) => {
            let a = kt(s, src(0))?;
            let code = ggraph_core::ir::UnaryOp::ALL
                .iter()
                .position(|x| x == u)
                .unwrap_or(0) as i32;
            s.launch(
                "k_unary",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::I(code)],
            )
        }
        Op::Glu { op, swapped } => {
            let a = kt(s, src(0))?;
            let (b, has_b) = match t.src.get(1) {
                Some(&b) => (kt(s, b)?, 1),
                None => (absent(), 0),
            };
            let (code, alpha, limit) = match *op {
                ggraph_core::ir::GluOp::Swiglu => (0, 0.0, 0.0),
                ggraph_core::ir::GluOp::Geglu => (1, 0.0, 0.0),
                ggraph_core::ir::GluOp::SwigluOai { alpha, limit } => (2, alpha, limit),
            };
            s.launch(
                "k_glu",
                elementwise_grid(n),
                block,
                0,
                &[
                    Arg::T(dst),
                    Arg::T(a),
                    Arg::T(b),
                    Arg::I(has_b),
                    Arg::I(code),
                    Arg::I(*swapped as i32),
                    Arg::F(alpha),
                    Arg::F(limit),
                ],
            )
        }
        Op::AddId => {
            let (a, b, ids) = (kt(s, src(0))?, kt(s, src(1))?, kt(s, src(2))?);
            let err = s.err_ptr();
            s.launch(
                "k_add_id",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::T(b), Arg::T(ids), Arg::P(err)],
            )
        }
        Op::Cpy | Op::Cont => {
            let a = kt(s, src(0))?;
            copy_values(s, dst, a, t.dtype)
        }
        Op::SetRows => {
            let (sr, idx) = (kt(s, src(1))?, kt(s, src(2))?);
            let st = graph.tensor(src(1));
            if st.is_empty() {
                return Ok(());
            }
            let err = s.err_ptr();
            if t.dtype.is_quantized() {
                let blocks = (t.ne[0] / t.dtype.block_size()) as u64 * st.nrows() as u64;
                s.launch(
                    "k_set_rows_q",
                    elementwise_grid(blocks),
                    [64, 1, 1],
                    0,
                    &[Arg::T(dst), Arg::T(sr), Arg::T(idx), Arg::P(err)],
                )
            } else {
                s.launch(
                    "k_set_rows",
                    elementwise_grid(st.nelements() as u64),
                    block,
                    0,
                    &[Arg::T(dst), Arg::T(sr), Arg::T(idx), Arg::P(err)],
                )
            }
        }
        Op::Concat { dim } => {
            let (a, b) = (kt(s, src(0))?, kt(s, src(1))?);
            s.launch(
                "k_concat",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(a), Arg::T(b), Arg::I(*dim as i32)],
            )
        }
        Op::SsmConv => {
            let (sx, c) = (kt(s, src(0))?, kt(s, src(1))?);
            s.launch(
                "k_ssm_conv",
                elementwise_grid(n),
                block,
                0,
                &[Arg::T(dst), Arg::T(sx), Arg::T(c)],
            )
        }
        Op::SsmScan => {
            let srcs = (0..7).map(|i| kt(s, src(i))).collect::<Result<Vec<_>>>()?;
            // a thread per state row: head_dim x n_head x n_s
            let x = graph.tensor(src(1));
            let threads = (x.ne[0] * x.ne[1] * x.ne[3]) as u64;
            let err = s.err_ptr();
            let mut args = vec![Arg::T(dst)];
            args.extend(srcs.into_iter().map(Arg::T));
            args.push(Arg::P(err));
            s.launch("k_ssm_scan", elementwise_grid(threads), block, 0, &args)
        }
        Op::GatedDeltaNet => {
            let srcs = (0..6).map(|i| kt(s, src(i))).collect::<Result<Vec<_>>>()?;
            // a thread per state column: S x n_head x n_s
            let v = graph.tensor(src(2));
            let threads = (v.ne[0] * v.ne[1] * v.ne[3]) as u64;
            let mut args = vec![Arg::T(dst)];
            args.extend(srcs.into_iter().map(Arg::T));
            s.launch(
                "k_gated_delta_net",
                elementwise_grid(threads),
                block,
                0,
                &args,
            )
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            let a = kt(s, src(0))?;
            let kernel = if matches!(t.op, Op::RmsNorm { .. }) {
                "k_rms_norm"
            } else {
                "k_norm"
            };
            s.launch(
                kernel,
                [t.nrows() as u32, 1, 1],
                [row_block(t.ne[0]), 1, 1],
                0,
                &[Arg::T(dst), Arg::T(a), Arg::F(*eps)],
            )
        }
        Op::SumRows => {
            let a = kt(s, src(0))?;
            s.launch(
                "k_sum_rows",
                [t.nrows() as u32, 1, 1],
                [row_block(graph.tensor(src(0)).ne[0]), 1, 1],
                0,
                &[Arg::T(dst), Arg::T(a)],
            )
        }
        Op::SoftMax {
            scale, max_bias, ..
        } => {
            let a = kt(s, src(0))?;
            let (mask, sinks) = t.mask_and_sinks();
            let (mask, has_mask) = optional(s, mask)?;
            let (sinks, has_sinks) = optional(s, sinks)?;
            let alibi = AlibiBases::new(*max_bias, t.ne[2]);
            s.launch(
                "k_soft_max",
                [t.nrows() as u32, 1, 1],
                [row_block(t.ne[0]), 1, 1],
                0,
                &[
                    Arg::T(dst),
                    Arg::T(a),
                    Arg::T(mask),
                    Arg::I(has_mask),
                    Arg::T(sinks),
                    Arg::I(has_sinks),
                    Arg::F(*scale),
                    Arg::F(*max_bias),
                    Arg::F(alibi.m0),
                    Arg::F(alibi.m1),
                    Arg::I(alibi.n_head_log2 as i32),
                ],
            )
        }
        Op::Rope(p) => {
            let (a, pos) = (kt(s, src(0))?, kt(s, src(1))?);
            let (ff, has_ff) = match t.src.get(2) {
                Some(&f) => (kt(s, f)?, 1),
                None => (absent(), 0),
            };
            let half = p.n_dims / 2;
            let per_row = half + (t.ne[0] - p.n_dims).div_ceil(2);
            let [low, high] = p.yarn_corr_dims();
            let mode = match p.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 2,
            };
            s.launch(
                "k_rope",
                elementwise_grid((per_row * t.nrows()) as u64),
                block,
                0,
                &[
                    Arg::T(dst),
                    Arg::T(a),
                    Arg::T(pos),
                    Arg::T(ff),
                    Arg::I(has_ff),
                    Arg::I(p.n_dims as i32),
                    Arg::I(mode),
                    Arg::F(p.freq_base),
                    Arg::F(p.freq_scale),
                    Arg::F(p.ext_factor),
                    Arg::F(p.attn_factor),
                    Arg::F(low),
                    Arg::F(high),
                ],
            )
        }
        Op::ArgSort { .. } | Op::TopK { .. } => {
            let ta = graph.tensor(src(0));
            let a = kt(s, src(0))?;
            let descending = match t.op {
                Op::ArgSort { order } => order == ggraph_core::ir::SortOrder::Descending,
                _ => true,
            };
            let npad = ta.ne[0].next_power_of_two().max(1);
            s.launch(
                "k_argsort",
                [ta.nrows() as u32, 1, 1],
                [npad.clamp(32, 256) as u32, 1, 1],
                (npad * 8) as u32,
                &[
                    Arg::T(dst),
                    Arg::T(a),
                    Arg::I(npad as i32),
                    Arg::I(descending as i32),
                ],
            )
        }
        Op::MulMat => mul_mat(s, graph, id, dst),
        Op::MulMatId => {
            let (a, b, ids) = (kt(s, src(0))?, kt(s, src(1))?, kt(s, src(2))?);
            let err = s.err_ptr();
            let grid = [
                t.ne[0].div_ceil(MMV_WARPS as usize) as u32,
                grid_dim("mul_mat_id experts used", t.ne[1], 65535)?,
                grid_dim("mul_mat_id tokens", t.ne[2], 65535)?,
            ];
            s.launch(
                "k_mul_mat_id",
                grid,
                [32 * MMV_WARPS, 1, 1],
                0,
                &[Arg::T(dst), Arg::T(a), Arg::T(b), Arg::T(ids), Arg::P(err)],
            )
        }
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
            ..
        } => {
            let (q, k, v) = (kt(s, src(0))?, kt(s, src(1))?, kt(s, src(2))?);
            let (mask, sinks) = t.mask_and_sinks();
            let (mask, has_mask) = optional(s, mask)?;
            let (sinks, has_sinks) = optional(s, sinks)?;
            let tq = graph.tensor(src(0));
            let alibi = AlibiBases::new(*max_bias, tq.ne[2]);
            let grid = [
                tq.ne[1] as u32,
                grid_dim("flash_attn_ext heads", tq.ne[2], 65535)?,
                grid_dim("flash_attn_ext sequences", tq.ne[3], 65535)?,
            ];
            s.launch(
                "k_flash_attn",
                grid,
                [32, 1, 1],
                0,
                &[
                    Arg::T(dst),
                    Arg::T(q),
                    Arg::T(k),
                    Arg::T(v),
                    Arg::T(mask),
                    Arg::I(has_mask),
                    Arg::T(sinks),
                    Arg::I(has_sinks),
                    Arg::F(*scale),
                    Arg::F(*max_bias),
                    Arg::F(*softcap),
                    Arg::F(alibi.m0),
                    Arg::F(alibi.m1),
                    Arg::I(alibi.n_head_log2 as i32),
                ],
            )
        }
    }
}

/// cpy / cont: values of `a` in logical order into `dst` (converting).
fn copy_values(s: &mut KernelQueue, dst: KTensor, a: KTensor, dtype: DType) -> Result<()> {
    let n: i64 = dst.ne.iter().product();
    if n == 0 {
        return Ok(());
    }
    if dtype.is_quantized() {
        let blocks = (dst.ne[0] / dtype.block_size() as i64) * dst.ne[1] * dst.ne[2] * dst.ne[3];
        s.launch(
            "k_cpy_q",
            elementwise_grid(blocks as u64),
            [64, 1, 1],
            0,
            &[Arg::T(dst), Arg::T(a)],
        )
    } else {
        s.launch(
            "k_cpy",
            elementwise_grid(n as u64),
            [ELEMWISE_BLOCK, 1, 1],
            0,
            &[Arg::T(dst), Arg::T(a)],
        )
    }
}

/// mul_mat: the mat-vec kernels for a few columns, the BLAS library for
/// float weights and (converted to F16) quantised ones where the layouts
/// allow, the tiled kernel otherwise.
fn mul_mat(s: &mut KernelQueue, graph: &Graph, id: TensorId, dst: KTensor) -> Result<()> {
    let t = graph.tensor(id);
    let (ta, tb) = (graph.tensor(t.src[0]), graph.tensor(t.src[1]));
    let a = ktensor(ta, s.address(graph, t.src[0])?);
    let b = ktensor(tb, s.address(graph, t.src[1])?);
    let (m, n) = (t.ne[0], t.ne[1]);
    let batches = t.ne[2] * t.ne[3];
    if m == 0 || n == 0 || batches == 0 {
        return Ok(());
    }
    let z = grid_dim("mul_mat batches", batches, 65535)?;
    if ta.ne[0] == 0 {
        // an empty sum: zeros
        let bytes = t.nbytes() as u64;
        // SAFETY: dst is a tensor of this device (resolved above).
        return unsafe { s.gpu().memset(dst.data, 0, bytes as usize, None) };
    }
    // the mat-vec kernels read F32 activations with packed values
    if n <= MMV_MAX_COLS && tb.dtype == DType::F32 && tb.nb[0] == 4 {
        let grid = [m.div_ceil(MMV_WARPS as usize) as u32, 1, z];
        let kernel = if ta.dtype.is_quantized() {
            "k_mul_mat_vec_q"
        } else {
            "k_mul_mat_vec"
        };
        return s.launch(
            kernel,
            grid,
            [32 * MMV_WARPS, 1, 1],
            0,
            &[Arg::T(dst), Arg::T(a), Arg::T(b)],
        );
    }
    if s.gpu().has_blas()
        && (blas_mul_mat(s, ta, tb, t, a, b, dst)?
            || dequantized_blas_mul_mat(s, ta, tb, t, a, b, dst)?)
    {
        return Ok(());
    }
    let grid = [
        m.div_ceil(64) as u32,
        grid_dim("mul_mat columns", n.div_ceil(64), 65535)?,
        z,
    ];
    s.launch(
        "k_mul_mat_tiled",
        grid,
        [256, 1, 1],
        0,
        &[Arg::T(dst), Arg::T(a), Arg::T(b)],
    )
}

/// mul_mat of quantised weights on the BLAS library, as ggml's CUDA
/// backend does where its integer kernels do not apply: the activations
/// converted to F16 once, then the weights to F16 a slice of rows at a
/// time in scratch memory (`Gpu::dequant_slice_bytes`), each slice one
/// F16 GEMM into its rows of the result. `Ok(false)` (the caller uses the
/// tiled kernel) for other weights, batched products, and results the
/// library cannot write.
fn dequantized_blas_mul_mat(
    s: &mut KernelQueue,
    ta: &Tensor,
    tb: &Tensor,
    t: &Tensor,
    a: KTensor,
    b: KTensor,
    dst: KTensor,
) -> Result<bool> {
    if !ta.dtype.is_quantized() || t.ne[2] * t.ne[3] != 1 || ta.ne[2] * ta.ne[3] != 1 {
        return Ok(false);
    }
    let (m, n, k) = (t.ne[0], t.ne[1], ta.ne[0]);
    let fits = |v: usize| v <= i32::MAX as usize;
    let Some(ldc) = elems(t.nb[1], 4) else {
        return Ok(false);
    };
    if !(fits(m) && fits(n) && fits(k)) || t.nb[0] != 4 || ldc < m as i64 {
        return Ok(false);
    }
    let f16 = DType::F16;
    let rows_per_slice = (s.gpu().dequant_slice_bytes() / (2 * k)).clamp(1, m);
    let slice_bytes = (rows_per_slice * k * 2).next_multiple_of(256) as u64;
    let columns_bytes = (k * n * 2) as u64;
    let weights = s.scratch(slice_bytes + columns_bytes)?;
    let columns = weights + slice_bytes;
    copy_values(s, packed(columns, f16, tb.ne), b, f16)?;
    for r0 in (0..m).step_by(rows_per_slice) {
        let rows = rows_per_slice.min(m - r0);
        let slice = KTensor {
            data: a.data + (r0 * ta.nb[1]) as u64,
            ne: [k as i64, rows as i64, 1, 1],
            ..a
        };
        let out = packed(weights, f16, [k, rows, 1, 1]);
        s.launch(
            "k_dequant_f16",
            elementwise_grid((rows * k.div_ceil(32)) as u64),
            [ELEMWISE_BLOCK, 1, 1],
            0,
            &[Arg::T(out), Arg::T(slice)],
        )?;
        s.gemm(&Gemm {
            m: rows as i32,
            n: n as i32,
            k: k as i32,
            a: weights,
            a_type: f16,
            lda: k as i32,
            stride_a: 0,
            b: columns,
            b_type: f16,
            ldb: k as i32,
            stride_b: 0,
            c: dst.data + (r0 * 4) as u64,
            ldc: ldc as i32,
            stride_c: 0,
            batch: 1,
        })?;
    }
    Ok(true)
}

/// `v / size` when it divides evenly and fits an i32.
fn elems(v: usize, size: usize) -> Option<i64> {
    (v % size == 0 && v / size <= i32::MAX as usize).then_some((v / size) as i64)
}

/// mul_mat on the BLAS library: F32, F16 or BF16 weights with packed
/// rows, f32 results. Activations of another type or layout are first
/// converted into scratch memory. `Ok(false)` when the layouts do not fit
/// (the caller uses the tiled kernel).
fn blas_mul_mat(
    s: &mut KernelQueue,
    ta: &Tensor,
    tb: &Tensor,
    t: &Tensor,
    a: KTensor,
    b: KTensor,
    dst: KTensor,
) -> Result<bool> {
    let w = ta.dtype;
    if !matches!(w, DType::F32 | DType::F16 | DType::BF16) {
        return Ok(false);
    }
    let es = w.type_size();
    let (m, n, k) = (t.ne[0], t.ne[1], ta.ne[0]);
    if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
        return Ok(false);
    }
    if ta.nb[0] != es || t.nb[0] != 4 {
        return Ok(false);
    }
    let (Some(lda), Some(sa2), Some(sa3)) = (
        elems(ta.nb[1], es),
        elems(ta.nb[2], es),
        elems(ta.nb[3], es),
    ) else {
        return Ok(false);
    };
    let (Some(ldc), Some(sc2), Some(sc3)) =
        (elems(t.nb[1], 4), elems(t.nb[2], 4), elems(t.nb[3], 4))
    else {
        return Ok(false);
    };
    if lda < k as i64 || ldc < m as i64 {
        return Ok(false);
    }
    // activations: used in place when they already are the weights' type
    // with packed rows, else converted to a contiguous copy
    let direct = tb.dtype == w
        && tb.nb[0] == es
        && elems(tb.nb[1], es).is_some_and(|v| v >= k as i64)
        && elems(tb.nb[2], es).is_some()
        && elems(tb.nb[3], es).is_some();
    let (b_ptr, ldb, sb2, sb3) = if direct {
        (
            b.data,
            (tb.nb[1] / es) as i64,
            (tb.nb[2] / es) as i64,
            (tb.nb[3] / es) as i64,
        )
    } else {
        let ne = tb.ne;
        let bytes = (ne.iter().product::<usize>() * es) as u64;
        let ptr = s.scratch(bytes)?;
        copy_values(s, packed(ptr, w, ne), b, w)?;
        let (k_, n1, n2) = (ne[0] as i64, ne[1] as i64, ne[2] as i64);
        (ptr, k_, k_ * n1, k_ * n1 * n2)
    };
    let r2 = tb.ne[2] / ta.ne[2].max(1);
    let r3 = tb.ne[3] / ta.ne[3].max(1);
    let gemm = |a_off: i64, b_off: i64, c_off: i64, batch: usize| Gemm {
        m: m as i32,
        n: n as i32,
        k: k as i32,
        a: a.data + (a_off * es as i64) as u64,
        a_type: w,
        lda: lda as i32,
        stride_a: sa2,
        b: b_ptr + (b_off * es as i64) as u64,
        b_type: w,
        ldb: ldb as i32,
        stride_b: sb2,
        c: dst.data + (c_off * 4) as u64,
        ldc: ldc as i32,
        stride_c: sc2,
        batch: batch as i32,
    };
    for i3 in 0..t.ne[3] {
        let (a3, b3, c3) = ((i3 / r3) as i64 * sa3, i3 as i64 * sb3, i3 as i64 * sc3);
        if r2 == 1 {
            // one strided batch over dim 2
            s.gemm(&gemm(a3, b3, c3, t.ne[2]))?;
        } else {
            for i2 in 0..t.ne[2] {
                let g = gemm(
                    a3 + (i2 / r2) as i64 * sa2,
                    b3 + i2 as i64 * sb2,
                    c3 + i2 as i64 * sc2,
                    1,
                );
                s.gemm(&g)?;
            }
        }
    }
    Ok(true)
}
