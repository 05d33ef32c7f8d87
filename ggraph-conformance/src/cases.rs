//! The cases of the suite: every op × dtype × a spread of shapes (odd
//! sizes, broadcasting, non-contiguous views, empty tensors), each with
//! its error bound.

use ggraph_core::dtype::DType;
use ggraph_core::error::Result;
use ggraph_core::ir::{
    BinaryOp, GluOp, OpKind, RopeMode, RopeParams, SortOrder, TensorId, UnaryOp,
};

use crate::case::{Case, CaseBuilder, Fill};

/// Error bound for a result stored as `dtype` computed in f32.
fn bound_for(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-6,
        DType::F16 => 1e-5,
        DType::BF16 => 1e-4,
        DType::I32 => 0.0,
        DType::Q8_0 => 1e-4,
        DType::Q4_0 | DType::Q4_1 | DType::Q4_K => 2e-3,
        DType::Q5_0 | DType::Q5_1 | DType::Q5_K => 5e-4,
        DType::Q6_K => 5e-4,
        DType::IQ4_NL | DType::IQ4_XS => 3e-3,
        DType::MXFP4 => 3e-2,
        DType::Q3_K => 2e-2,
        DType::Q2_K => 6e-2,
    }
}

/// Error bound of a matrix product with weights of type `w`: a backend may
/// round activations to f16 for f16 weights or to Q8 for quantised ones, as
/// ggml does.
fn matmul_bound(w: DType) -> f64 {
    match w {
        DType::F32 => 1e-6,
        _ => 5e-4,
    }
}

/// A convenient row length for a type: whole blocks, and odd where allowed.
fn row_len(dtype: DType) -> usize {
    match dtype.block_size() {
        1 => 67,
        32 => 96,
        _ => 256,
    }
}

struct Cases(Vec<Case>);

impl Cases {
    fn add(
        &mut self,
        op: OpKind,
        name: String,
        max_nmse: f64,
        build: impl Fn(&mut CaseBuilder) -> Result<TensorId> + Send + Sync + 'static,
    ) {
        self.0.push(Case {
            name,
            op,
            max_nmse,
            build: Box::new(build),
        });
    }
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    let mut c = Cases(Vec::new());
    get_rows_cases(&mut c);
    binary_cases(&mut c);
    unary_cases(&mut c);
    mul_mat_cases(&mut c);
    weight_layout_cases(&mut c);
    norm_cases(&mut c);
    rope_cases(&mut c);
    soft_max_cases(&mut c);
    copy_cases(&mut c);
    set_rows_cases(&mut c);
    misc_cases(&mut c);
    flash_attn_cases(&mut c);
    c.0
}

fn get_rows_cases(c: &mut Cases) {
    for t in DType::ALL {
        let n = row_len(t);
        for (rows, idx_shape) in [(10usize, vec![5usize]), (7, vec![3, 2]), (4, vec![0])] {
            let batch = idx_shape.get(1).copied().unwrap_or(1);
            let name = format!("get_rows[{t},n={n},rows={rows},idx={idx_shape:?}]");
            let bound = if t == DType::I32 { 0.0 } else { 1e-9 };
            c.add(OpKind::GetRows, name, bound, move |cb| {
                let fill = if t == DType::I32 {
                    Fill::Indices(1000)
                } else {
                    Fill::Uniform(-1.0, 1.0)
                };
                let a = cb.filled(t, &[n, rows, batch], fill)?;
                let idx = cb.filled(DType::I32, &idx_shape, Fill::Indices(rows))?;
                cb.b.get_rows(a, idx)
            });
        }
    }
}

fn binary_cases(c: &mut Cases) {
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    let pairs = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F32),
        (DType::F32, DType::F16),
        (DType::F16, DType::F16),
        (DType::BF16, DType::F32),
    ];
    let shapes: [(&str, [usize; 4], [usize; 4]); 5] = [
        ("same", [17, 5, 3, 2], [17, 5, 3, 2]),
        ("bcast_row", [17, 5, 3, 2], [17, 1, 1, 1]),
        ("bcast_mid", [17, 6, 4, 2], [17, 3, 1, 2]),
        ("bcast_col", [9, 5, 3, 1], [1, 5, 3, 1]),
        ("empty", [17, 0, 3, 1], [17, 1, 1, 1]),
    ];
    for op in ops {
        for (ta, tb) in pairs {
            for (label, sa, sb) in shapes {
                let name = format!("{op:?}[{ta},{tb},{label}]").to_lowercase();
                let kind = ggraph_core::ir::Op::Binary(op).kind();
                c.add(kind, name, bound_for(ta), move |cb| {
                    let a = cb.input(ta, &sa)?;
                    let b = if op == BinaryOp::Div {
                        cb.filled(tb, &sb, Fill::AwayFromZero(0.5, 2.0))?
                    } else {
                        cb.input(tb, &sb)?
                    };
                    cb.b.binary(op, a, b)
                });
            }
        }
        // a non-contiguous a: a transposed view
        let name = format!("{op:?}[F32,F32,transposed_a]").to_lowercase();
        c.add(
            ggraph_core::ir::Op::Binary(op).kind(),
            name,
            1e-6,
            move |cb| {
                let a0 = cb.input(DType::F32, &[6, 11, 3])?;
                let a = cb.b.transpose(a0)?;
                let b = cb.filled(DType::F32, &[11, 1, 3], Fill::AwayFromZero(0.5, 2.0))?;
                cb.b.binary(op, a, b)
            },
        );
    }
}

fn unary_cases(c: &mut Cases) {
    for t in DType::FLOATS {
        for (label, s, bias) in [("scale", 0.37f32, 0.0f32), ("scale_bias", -1.5, 0.25)] {
            c.add(
                OpKind::Scale,
                format!("{label}[{t}]"),
                bound_for(t),
                move |cb| {
                    let a = cb.input(t, &[33, 4, 3])?;
                    cb.b.scale_bias(a, s, bias)
                },
            );
        }
    }
    c.add(OpKind::Scale, "scale[F32,transposed]".into(), 1e-6, |cb| {
        let a = cb.input(DType::F32, &[5, 9])?;
        let at = cb.b.transpose(a)?;
        cb.b.scale(at, 2.5)
    });
    for u in UnaryOp::ALL {
        for t in DType::FLOATS {
            let fill = match u {
                UnaryOp::Sqrt => Fill::Uniform(0.0, 4.0),
                _ => Fill::Uniform(-3.0, 3.0),
            };
            for (label, shape) in [("odd", vec![37usize, 3, 2]), ("empty", vec![0, 3])] {
                let fill = fill.clone();
                let name = format!("unary[{u:?},{t},{label}]");
                c.add(OpKind::Unary, name, bound_for(t), move |cb| {
                    let a = cb.filled(t, &shape, fill.clone())?;
                    cb.b.unary(u, a)
                });
            }
        }
        let name = format!("unary[{u:?},F32,permuted]");
        c.add(OpKind::Unary, name, 1e-6, move |cb| {
            let fill = if u == UnaryOp::Sqrt {
                Fill::Uniform(0.0, 4.0)
            } else {
                Fill::Uniform(-3.0, 3.0)
            };
            let a = cb.filled(DType::F32, &[7, 5, 3], fill)?;
            let p = cb.b.permute(a, [1, 2, 0, 3])?;
            cb.b.unary(u, p)
        });
    }
    for op in [GluOp::Swiglu, GluOp::Geglu, GluOp::SWIGLU_OAI] {
        for t in [DType::F32, DType::F16] {
            for swapped in [false, true] {
                let name = format!("glu[{op:?},{t},swapped={swapped}]");
                c.add(OpKind::Glu, name, bound_for(t), move |cb| {
                    let a = cb.filled(t, &[2 * 45, 5, 2], Fill::Uniform(-3.0, 3.0))?;
                    cb.b.glu(op, a, swapped)
                });
            }
            let name = format!("glu_split[{op:?},{t}]");
            c.add(OpKind::Glu, name, bound_for(t), move |cb| {
                let a = cb.filled(t, &[45, 5, 2], Fill::Uniform(-3.0, 3.0))?;
                let b = cb.input(t, &[45, 5, 2])?;
                cb.b.glu_split(op, a, b)
            });
        }
    }
    // swiglu_oai's clamps: gates and values past its limit of 7
    c.add(
        OpKind::Glu,
        "glu_split[swiglu_oai,F32,clamped]".into(),
        bound_for(DType::F32),
        |cb| {
            let a = cb.filled(DType::F32, &[45, 5, 2], Fill::Uniform(-12.0, 12.0))?;
            let b = cb.filled(DType::F32, &[45, 5, 2], Fill::Uniform(-12.0, 12.0))?;
            cb.b.swiglu_oai(a, b)
        },
    );
    // add_id: each (slot, token)'s bias row picked by its expert id
    for (n, n_used, n_tokens, n_expert) in [(33usize, 2usize, 5usize, 4usize), (64, 4, 1, 32)] {
        c.add(
            OpKind::AddId,
            format!("add_id[n={n},used={n_used},tokens={n_tokens},experts={n_expert}]"),
            bound_for(DType::F32),
            move |cb| {
                let a = cb.input(DType::F32, &[n, n_used, n_tokens])?;
                let b = cb.input(DType::F32, &[n, n_expert])?;
                let ids = cb.filled(DType::I32, &[n_used, n_tokens], Fill::Indices(n_expert))?;
                cb.b.add_id(a, b, ids)
            },
        );
    }
}

/// Every type a weight may have: the floats and every quantised type.
fn weight_types() -> impl Iterator<Item = DType> {
    DType::FLOATS.into_iter().chain(DType::QUANTIZED)
}

/// Weights of whole groups of eight rows, the shapes layout buffer types
/// (the CPU's interleaved rows) take: products of one, a few and many
/// columns, rows longer than one chunk, batches, stacks of matrices and
/// experts, row lookups, and a view and a conversion of such a weight,
/// which read it in ggml's layout.
fn weight_layout_cases(c: &mut Cases) {
    for w in [
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::IQ4_NL,
        DType::MXFP4,
    ] {
        // whole blocks: Q4_K's rows take super-blocks of 256
        let row = move |k: usize| k.div_ceil(w.block_size()) * w.block_size();
        for (m, n, k) in [
            (64usize, 1usize, 256usize),
            (48, 3, 96),
            (136, 9, 2112),
            (40, 5, 2112),
        ] {
            let k = row(k);
            let name = format!("mul_mat[{w},F32,rows8,m={m},n={n},k={k}]");
            c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
                let a = cb.input(w, &[k, m])?;
                let b = cb.input(DType::F32, &[k, n])?;
                cb.b.mul_mat(a, b)
            });
        }
        let k = row(64);
        let name = format!("mul_mat[{w},F32,rows8,bcast]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 16])?;
            let b = cb.input(DType::F32, &[k, 5, 2, 3])?;
            cb.b.mul_mat(a, b)
        });
        let name = format!("mul_mat[{w},F32,rows8,view]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 24])?;
            let bytes = w.row_size(k).unwrap_or(0);
            let rows = cb.b.view_2d(a, k, 8, bytes, 8 * bytes)?;
            let b = cb.input(DType::F32, &[k, 2])?;
            cb.b.mul_mat(rows, b)
        });
        // stacks of matrices (experts): broadcast products, experts that
        // take one token, and experts shared by twelve (the GEMM panels)
        let name = format!("mul_mat[{w},F32,rows8,stack]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 16, 2])?;
            let b = cb.input(DType::F32, &[k, 3, 4])?;
            cb.b.mul_mat(a, b)
        });
        for (n_expert, n_used, tokens) in [(8usize, 2usize, 3usize), (2, 2, 12)] {
            let name = format!("mul_mat_id[{w},F32,rows8,experts={n_expert},tokens={tokens}]");
            c.add(OpKind::MulMatId, name, matmul_bound(w), move |cb| {
                let experts = cb.input(w, &[k, 24, n_expert])?;
                let b = cb.input(DType::F32, &[k, n_used, tokens])?;
                let ids = cb.filled(DType::I32, &[n_used, tokens], Fill::Indices(n_expert))?;
                cb.b.mul_mat_id(experts, b, ids)
            });
        }
        let name = format!("get_rows[{w},rows8,stack]");
        c.add(OpKind::GetRows, name, 1e-9, move |cb| {
            let a = cb.filled(w, &[k, 16, 3], Fill::Uniform(-1.0, 1.0))?;
            let idx = cb.filled(DType::I32, &[4, 3], Fill::Indices(16))?;
            cb.b.get_rows(a, idx)
        });
        let name = format!("get_rows[{w},rows8]");
        c.add(OpKind::GetRows, name, 1e-9, move |cb| {
            let a = cb.filled(w, &[row(96), 24], Fill::Uniform(-1.0, 1.0))?;
            let idx = cb.filled(DType::I32, &[6], Fill::Indices(24))?;
            cb.b.get_rows(a, idx)
        });
        let name = format!("cpy[{w},F32,rows8]");
        c.add(OpKind::Cpy, name, 1e-9, move |cb| {
            let a = cb.filled(w, &[k, 16], Fill::Uniform(-1.0, 1.0))?;
            let out = cb.input(DType::F32, &[k, 16])?;
            cb.b.cpy(a, out)
        });
    }
}

fn mul_mat_cases(c: &mut Cases) {
    for w in weight_types() {
        let k = row_len(w);
        for (m, n) in [(33usize, 1usize), (16, 7), (35, 33)] {
            let name = format!("mul_mat[{w},F32,m={m},n={n},k={k}]");
            c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
                let a = cb.input(w, &[k, m])?;
                let b = cb.input(DType::F32, &[k, n])?;
                cb.b.mul_mat(a, b)
            });
        }
        let name = format!("mul_mat[{w},F32,bcast_2x3]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 9, 2, 1])?;
            let b = cb.input(DType::F32, &[k, 5, 4, 3])?;
            cb.b.mul_mat(a, b)
        });
        let name = format!("mul_mat[{w},F32,permuted_b]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 12])?;
            let b0 = cb.input(DType::F32, &[k, 3, 6])?;
            let b = cb.b.permute(b0, [0, 2, 1, 3])?;
            cb.b.mul_mat(a, b)
        });
        let name = format!("mul_mat[{w},F32,empty]");
        c.add(OpKind::MulMat, name, matmul_bound(w), move |cb| {
            let a = cb.input(w, &[k, 12])?;
            let b = cb.input(DType::F32, &[k, 0])?;
            cb.b.mul_mat(a, b)
        });
    }
    for b_type in [DType::F16, DType::BF16] {
        let name = format!("mul_mat[F32,{b_type},m=20,n=9]");
        c.add(OpKind::MulMat, name, matmul_bound(DType::F16), move |cb| {
            let a = cb.input(DType::F32, &[64, 20])?;
            let b = cb.input(b_type, &[64, 9])?;
            cb.b.mul_mat(a, b)
        });
    }
    for w in [DType::F32, DType::F16] {
        c.add(
            OpKind::MulMat,
            format!("mul_mat[{w},F32,strided_a]"),
            matmul_bound(w),
            move |cb| {
                // a [k=6, m=5, 4] whose values are 16 bytes apart within a row
                let x = cb.input(w, &[4, 6, 5])?;
                let a = cb.b.permute(x, [2, 0, 1, 3])?;
                let b = cb.input(DType::F32, &[6, 3, 4])?;
                cb.b.mul_mat(a, b)
            },
        );
    }
    c.add(
        OpKind::MulMat,
        "mul_mat[F32,F32,kq_shape]".into(),
        1e-6,
        |cb| {
            // attention scores: k [d, n_kv, h_kv] times q [d, n_q, h] with GQA
            let k = cb.input(DType::F32, &[32, 19, 2])?;
            let q = cb.input(DType::F32, &[32, 5, 4])?;
            cb.b.mul_mat(k, q)
        },
    );
    for w in [DType::F32, DType::F16].into_iter().chain(DType::QUANTIZED) {
        let k = row_len(w);
        for n_b in [1usize, 2] {
            let name = format!("mul_mat_id[{w},F32,n_b={n_b}]");
            c.add(OpKind::MulMatId, name, matmul_bound(w), move |cb| {
                let experts = cb.input(w, &[k, 11, 4])?;
                let b = cb.input(DType::F32, &[k, n_b, 5])?;
                let ids = cb.filled(DType::I32, &[2, 5], Fill::Indices(4))?;
                cb.b.mul_mat_id(experts, b, ids)
            });
        }
        // every pair on one expert (a backend may split its rows over
        // threads), and pairs over many experts (it may hand whole experts
        // to threads)
        for (label, n_expert, n_used, tokens) in [
            ("one_expert", 1usize, 2usize, 3usize),
            ("16_experts", 16, 4, 9),
        ] {
            let name = format!("mul_mat_id[{w},F32,{label}]");
            c.add(OpKind::MulMatId, name, matmul_bound(w), move |cb| {
                let experts = cb.input(w, &[k, 11, n_expert.max(4)])?;
                let b = cb.input(DType::F32, &[k, n_used, tokens])?;
                let ids = cb.filled(DType::I32, &[n_used, tokens], Fill::Indices(n_expert))?;
                cb.b.mul_mat_id(experts, b, ids)
            });
        }
    }
}

fn norm_cases(c: &mut Cases) {
    for t in DType::FLOATS {
        for (label, shape) in [
            ("row64", vec![64usize, 5, 2]),
            ("odd", vec![17, 3]),
            ("empty", vec![8, 0]),
        ] {
            let s = shape.clone();
            c.add(
                OpKind::RmsNorm,
                format!("rms_norm[{t},{label}]"),
                bound_for(t),
                move |cb| {
                    let a = cb.input(t, &s)?;
                    cb.b.rms_norm(a, 1e-6)
                },
            );
            c.add(
                OpKind::Norm,
                format!("norm[{t},{label}]"),
                bound_for(t),
                move |cb| {
                    let a = cb.input(t, &shape)?;
                    cb.b.norm(a, 1e-5)
                },
            );
        }
    }
    c.add(
        OpKind::RmsNorm,
        "rms_norm[F32,permuted]".into(),
        1e-6,
        |cb| {
            let a = cb.input(DType::F32, &[6, 32, 3])?;
            let p = cb.b.permute(a, [1, 0, 2, 3])?;
            cb.b.rms_norm(p, 1e-5)
        },
    );
}

fn rope_cases(c: &mut Cases) {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for t in [DType::F32, DType::F16] {
            for (label, n_dims) in [("full", 64usize), ("partial", 32)] {
                let name = format!("rope[{mode:?},{t},{label}]");
                c.add(OpKind::Rope, name, bound_for(t).max(1e-6), move |cb| {
                    let a = cb.input(t, &[64, 4, 5])?;
                    let pos = cb.filled(DType::I32, &[5], Fill::Positions(3))?;
                    cb.b.rope(a, pos, n_dims, mode)
                });
            }
        }
        let name = format!("rope[{mode:?},F32,scaled_freq_factors]");
        c.add(OpKind::Rope, name, 1e-6, move |cb| {
            let a = cb.input(DType::F32, &[32, 3, 4])?;
            let pos = cb.filled(DType::I32, &[4], Fill::Positions(40))?;
            let ff = cb.filled(DType::F32, &[16], Fill::Uniform(1.0, 8.0))?;
            let p = RopeParams::new(32, mode)
                .freq_base(500000.0)
                .freq_scale(0.25);
            cb.b.rope_ext(a, pos, Some(ff), p)
        });
        let name = format!("rope[{mode:?},F32,yarn]");
        c.add(OpKind::Rope, name, 1e-6, move |cb| {
            let a = cb.input(DType::F32, &[32, 3, 4])?;
            let pos = cb.filled(DType::I32, &[4], Fill::Positions(100))?;
            let mut p = RopeParams::new(32, mode).freq_scale(0.25);
            p.ext_factor = 1.0;
            p.n_ctx_orig = 4096;
            cb.b.rope_ext(a, pos, None, p)
        });
        let name = format!("rope[{mode:?},F32,view_of_fused_qkv]");
        c.add(OpKind::Rope, name, 1e-6, move |cb| {
            // q as a strided view of a fused [3 * 32 * 2, tokens] projection
            let qkv = cb.input(DType::F32, &[3 * 32 * 2, 5])?;
            let q =
                cb.b.view_3d(qkv, [32, 2, 5], 32 * 4, 3 * 32 * 2 * 4, 32 * 2 * 4)?;
            let pos = cb.filled(DType::I32, &[5], Fill::Positions(0))?;
            cb.b.rope(q, pos, 32, mode)
        });
    }
}

fn soft_max_cases(c: &mut Cases) {
    // attention sinks (gpt-oss): one logit per head, with and without a
    // causal mask
    for masked in [false, true] {
        c.add(
            OpKind::SoftMax,
            format!("soft_max[F32,sinks,mask={masked}]"),
            1e-6,
            move |cb| {
                let a = cb.filled(DType::F32, &[21, 6, 4], Fill::Uniform(-5.0, 5.0))?;
                let sinks = cb.filled(DType::F32, &[4], Fill::Uniform(-3.0, 6.0))?;
                let m = if masked {
                    Some(cb.filled(DType::F16, &[21, 6], Fill::Causal { n_kv: 21, n_q: 6 })?)
                } else {
                    None
                };
                cb.b.soft_max_ext_sinks(a, m, sinks, 0.125, 0.0)
            },
        );
    }
    for t in DType::FLOATS {
        c.add(
            OpKind::SoftMax,
            format!("soft_max[{t},plain]"),
            bound_for(t),
            move |cb| {
                let a = cb.filled(t, &[33, 7, 2], Fill::Uniform(-5.0, 5.0))?;
                cb.b.soft_max(a)
            },
        );
    }
    for mt in [DType::F32, DType::F16] {
        c.add(
            OpKind::SoftMax,
            format!("soft_max[F32,mask={mt},causal]"),
            1e-6,
            move |cb| {
                let a = cb.filled(DType::F32, &[33, 7, 4], Fill::Uniform(-5.0, 5.0))?;
                let m = cb.filled(mt, &[33, 8], Fill::Causal { n_kv: 33, n_q: 7 })?;
                cb.b.soft_max_ext(a, Some(m), 0.125, 0.0)
            },
        );
        c.add(
            OpKind::SoftMax,
            format!("soft_max[F32,mask={mt},alibi]"),
            1e-6,
            move |cb| {
                let a = cb.filled(DType::F32, &[19, 3, 6], Fill::Uniform(-5.0, 5.0))?;
                let m = cb.filled(mt, &[19, 3], Fill::Uniform(-1.0, 0.0))?;
                cb.b.soft_max_ext(a, Some(m), 0.5, 8.0)
            },
        );
    }
    c.add(
        OpKind::SoftMax,
        "soft_max[F32,mask_per_head]".into(),
        1e-6,
        |cb| {
            let a = cb.filled(DType::F32, &[16, 3, 2, 2], Fill::Uniform(-5.0, 5.0))?;
            let m = cb.filled(DType::F32, &[16, 3, 2, 1], Fill::Uniform(-2.0, 0.0))?;
            cb.b.soft_max_ext(a, Some(m), 1.0, 0.0)
        },
    );
    c.add(
        OpKind::SoftMax,
        "soft_max[F32,permuted]".into(),
        1e-6,
        |cb| {
            let a = cb.filled(DType::F32, &[5, 24, 3], Fill::Uniform(-5.0, 5.0))?;
            let p = cb.b.permute(a, [1, 0, 2, 3])?;
            cb.b.soft_max(p)
        },
    );
}

fn copy_cases(c: &mut Cases) {
    let targets = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
        DType::Q6_K,
    ];
    for to in targets {
        let n = row_len(to);
        c.add(
            OpKind::Cpy,
            format!("cpy[F32->{to}]"),
            bound_for(to),
            move |cb| {
                let a = cb.input(DType::F32, &[n, 3, 2])?;
                let b = cb.input(to, &[n, 3, 2])?;
                cb.b.cpy(a, b)
            },
        );
        c.add(
            OpKind::Cont,
            format!("cast[F32->{to}]"),
            bound_for(to),
            move |cb| {
                let a = cb.input(DType::F32, &[n, 4])?;
                cb.b.cast(a, to)
            },
        );
        if to != DType::F32 {
            c.add(OpKind::Cont, format!("cast[{to}->F32]"), 1e-9, move |cb| {
                let a = cb.input(to, &[n, 4])?;
                cb.b.cast(a, DType::F32)
            });
        }
    }
    for (from, to) in [
        (DType::F16, DType::F32),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F16),
        (DType::I32, DType::I32),
    ] {
        c.add(
            OpKind::Cpy,
            format!("cpy[{from}->{to},transposed_src]"),
            bound_for(to),
            move |cb| {
                let fill = if from == DType::I32 {
                    Fill::Indices(1 << 20)
                } else {
                    Fill::Uniform(-1.0, 1.0)
                };
                let a0 = cb.filled(from, &[7, 13, 2], fill)?;
                let a = cb.b.transpose(a0)?;
                let b = cb.input(to, &[13, 7, 2])?;
                cb.b.cpy(a, b)
            },
        );
        c.add(
            OpKind::Cont,
            format!("cont[{from},permuted]"),
            bound_for(from),
            move |cb| {
                let fill = if from == DType::I32 {
                    Fill::Indices(1 << 20)
                } else {
                    Fill::Uniform(-1.0, 1.0)
                };
                let a0 = cb.filled(from, &[7, 5, 3, 2], fill)?;
                let a = cb.b.permute(a0, [2, 0, 3, 1])?;
                cb.b.cont(a)
            },
        );
    }
    c.add(OpKind::Cpy, "cpy[F32->F16,into_view]".into(), 1e-5, |cb| {
        // a KV-cache style write into a slice of a larger tensor
        let cache = cb.input(DType::F16, &[32, 10])?;
        let slot = cb.b.view_2d(cache, 32, 3, 32 * 2, 4 * 32 * 2)?;
        let a = cb.input(DType::F32, &[32, 3])?;
        let w = cb.b.cpy(a, slot)?;
        cb.b.expand(w)?;
        cb.b.view_2d(cache, 32, 10, 32 * 2, 0)
    });
    c.add(OpKind::Cpy, "cpy[F32->F32,empty]".into(), 0.0, |cb| {
        let a = cb.input(DType::F32, &[0, 3])?;
        let b = cb.input(DType::F32, &[0, 3])?;
        cb.b.cpy(a, b)
    });
}

fn set_rows_cases(c: &mut Cases) {
    let dsts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_K,
        DType::Q6_K,
    ];
    for dst in dsts {
        let n = row_len(dst);
        c.add(
            OpKind::SetRows,
            format!("set_rows[{dst},flat]"),
            bound_for(dst),
            move |cb| {
                let d = cb.input(dst, &[n, 10])?;
                let s = cb.input(DType::F32, &[n, 3])?;
                let idx = cb.filled(DType::I32, &[3], Fill::DistinctIndices(10))?;
                let w = cb.b.set_rows(d, s, idx)?;
                cb.b.expand(w)?;
                Ok(w)
            },
        );
        c.add(
            OpKind::SetRows,
            format!("set_rows[{dst},batched]"),
            bound_for(dst),
            move |cb| {
                let d = cb.input(dst, &[n, 6, 2])?;
                let s = cb.input(DType::F32, &[n, 3, 2])?;
                let idx = cb.filled(DType::I32, &[3, 1], Fill::DistinctIndices(6))?;
                cb.b.set_rows(d, s, idx)
            },
        );
    }
    c.add(OpKind::SetRows, "set_rows[F16,none]".into(), 1e-5, |cb| {
        let d = cb.input(DType::F16, &[16, 4])?;
        let s = cb.input(DType::F32, &[16, 0])?;
        let idx = cb.filled(DType::I32, &[0], Fill::Indices(4))?;
        cb.b.set_rows(d, s, idx)
    });
}

fn misc_cases(c: &mut Cases) {
    for t in [DType::F32, DType::F16, DType::I32] {
        for dim in 0..4 {
            c.add(
                OpKind::Concat,
                format!("concat[{t},dim={dim}]"),
                bound_for(t),
                move |cb| {
                    let mut sa = [5usize, 4, 3, 2];
                    let mut sb = sa;
                    sa[dim] = 3;
                    sb[dim] = 2;
                    let fill = if t == DType::I32 {
                        Fill::Indices(100)
                    } else {
                        Fill::Uniform(-1.0, 1.0)
                    };
                    let a = cb.filled(t, &sa, fill.clone())?;
                    let b = cb.filled(t, &sb, fill)?;
                    cb.b.concat(a, b, dim)
                },
            );
        }
    }
    c.add(
        OpKind::Concat,
        "concat[F32,dim=1,transposed_a]".into(),
        1e-9,
        |cb| {
            let a0 = cb.input(DType::F32, &[3, 5])?;
            let a = cb.b.transpose(a0)?;
            let b = cb.input(DType::F32, &[5, 2])?;
            cb.b.concat(a, b, 1)
        },
    );
    // generation (one token), a prompt over several sequences, and the
    // state joined to the tokens as LFM2's convolution layers build it
    for (d_conv, d_inner, n_t, n_s) in [
        (4usize, 64usize, 1usize, 1usize),
        (3, 37, 5, 3),
        (4, 1, 9, 2),
    ] {
        c.add(
            OpKind::SsmConv,
            format!("ssm_conv[d_conv={d_conv},d_inner={d_inner},n_t={n_t},n_s={n_s}]"),
            1e-5,
            move |cb| {
                let sx = cb.input(DType::F32, &[d_conv - 1 + n_t, d_inner, n_s])?;
                let w = cb.input(DType::F32, &[d_conv, d_inner])?;
                cb.b.ssm_conv(sx, w)
            },
        );
    }
    c.add(
        OpKind::SsmConv,
        "ssm_conv[state_then_transposed_tokens]".into(),
        1e-5,
        |cb| {
            let state = cb.input(DType::F32, &[2, 24, 2])?;
            let x = cb.input(DType::F32, &[24, 6, 2])?;
            let xt = cb.b.transpose(x)?;
            let sx = cb.b.concat(state, xt, 0)?;
            let w = cb.input(DType::F32, &[3, 24])?;
            cb.b.ssm_conv(sx, w)
        },
    );
    // Mamba-2 (one decay per head, heads in groups) for a token and for a
    // prompt of several sequences whose states lie out of order; Mamba-1
    // (a decay per state element)
    for (d_state, head_dim, n_head, n_group, n_t, n_s, mamba2) in [
        (16usize, 8usize, 4usize, 2usize, 1usize, 1usize, true),
        (32, 4, 6, 3, 5, 3, true),
        (16, 8, 2, 1, 3, 2, false),
    ] {
        c.add(
            OpKind::SsmScan,
            format!(
                "ssm_scan[d_state={d_state},head_dim={head_dim},n_head={n_head},n_group={n_group},n_t={n_t},n_s={n_s},{}]",
                if mamba2 { "mamba2" } else { "mamba1" }
            ),
            1e-4,
            move |cb| {
                let n_rs = n_s + 2;
                let st = cb.filled(DType::F32, &[d_state, head_dim, n_head, n_rs], Fill::Uniform(-1.0, 1.0))?;
                let x = cb.input(DType::F32, &[head_dim, n_head, n_t, n_s])?;
                let dt = cb.filled(DType::F32, &[n_head, n_t, n_s], Fill::Uniform(-3.0, 3.0))?;
                let a_rows = if mamba2 { 1 } else { d_state };
                let a = cb.filled(DType::F32, &[a_rows, n_head], Fill::Uniform(-2.0, -0.1))?;
                let b = cb.input(DType::F32, &[d_state, n_group, n_t, n_s])?;
                let cc = cb.input(DType::F32, &[d_state, n_group, n_t, n_s])?;
                let ids = cb.filled(DType::I32, &[n_s], Fill::DistinctIndices(n_rs))?;
                cb.b.ssm_scan(st, x, dt, a, b, cc, ids)
            },
        );
    }
    // Gated DeltaNet: one token and a prompt, a gate per head and per
    // channel (KDA), q/k heads shared by several v heads, two sequences
    // reading one q/k sequence
    for (s, h_k, h, n_t, n_s, n_s_k, per_channel) in [
        (16usize, 2usize, 2usize, 1usize, 1usize, 1usize, false),
        (32, 2, 4, 5, 2, 2, false),
        (16, 1, 3, 4, 2, 1, true),
    ] {
        c.add(
            OpKind::GatedDeltaNet,
            format!(
                "gated_delta_net[S={s},H_k={h_k},H={h},n_t={n_t},n_s={n_s},n_s_k={n_s_k},{}]",
                if per_channel { "kda" } else { "scalar_gate" }
            ),
            1e-4,
            move |cb| {
                let q = cb.filled(DType::F32, &[s, h_k, n_t, n_s_k], Fill::Uniform(-0.3, 0.3))?;
                let k = cb.filled(DType::F32, &[s, h_k, n_t, n_s_k], Fill::Uniform(-0.3, 0.3))?;
                let v = cb.input(DType::F32, &[s, h, n_t, n_s])?;
                let g_rows = if per_channel { s } else { 1 };
                let g = cb.filled(DType::F32, &[g_rows, h, n_t, n_s], Fill::Uniform(-1.0, 0.0))?;
                let beta = cb.filled(DType::F32, &[1, h, n_t, n_s], Fill::Uniform(0.0, 1.0))?;
                let st = cb.filled(DType::F32, &[s, s, h, n_s], Fill::Uniform(-0.5, 0.5))?;
                cb.b.gated_delta_net(q, k, v, g, beta, st)
            },
        );
    }
    for t in DType::FLOATS {
        c.add(
            OpKind::SumRows,
            format!("sum_rows[{t}]"),
            bound_for(t),
            move |cb| {
                let a = cb.input(t, &[67, 5, 3])?;
                cb.b.sum_rows(a)
            },
        );
    }
    for n in [1usize, 7, 64, 100] {
        for order in [SortOrder::Ascending, SortOrder::Descending] {
            c.add(
                OpKind::ArgSort,
                format!("argsort[{order:?},n={n}]"),
                0.0,
                move |cb| {
                    let a = cb.filled(DType::F32, &[n, 3, 2], Fill::Distinct)?;
                    cb.b.argsort(a, order)
                },
            );
        }
    }
    for (n, k) in [(37usize, 1usize), (37, 4), (64, 8), (8, 8)] {
        c.add(
            OpKind::TopK,
            format!("top_k[n={n},k={k}]"),
            0.0,
            move |cb| {
                let a = cb.filled(DType::F32, &[n, 5], Fill::Distinct)?;
                cb.b.top_k(a, k)
            },
        );
    }
}

fn flash_attn_cases(c: &mut Cases) {
    // attention sinks (gpt-oss): one query, a few, a tile and more, keys
    // split over the threads, F16 and F32 caches, with and without a mask
    for (kv, n_q, n_kv, masked) in [
        (DType::F16, 1usize, 40usize, true),
        (DType::F16, 5, 64, true),
        (DType::F16, 70, 90, true),
        (DType::F16, 1, 600, false),
        (DType::F32, 9, 50, true),
        (DType::F32, 3, 30, false),
    ] {
        let name = format!("flash_attn_ext[{kv},sinks,n_q={n_q},n_kv={n_kv},mask={masked}]");
        c.add(OpKind::FlashAttnExt, name, 5e-4, move |cb| {
            let q = cb.input(DType::F32, &[64, n_q, 4, 1])?;
            let k = cb.input(kv, &[64, n_kv, 2, 1])?;
            let v = cb.input(kv, &[64, n_kv, 2, 1])?;
            let sinks = cb.filled(DType::F32, &[4], Fill::Uniform(-2.0, 4.0))?;
            let m = if masked {
                Some(cb.filled(DType::F16, &[n_kv, n_q], Fill::Causal { n_kv, n_q })?)
            } else {
                None
            };
            cb.b.flash_attn_ext_sinks(q, k, v, m, sinks, 0.125)
        });
    }
    let kv_types = [
        DType::F16,
        DType::F32,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
    ];
    for kv in kv_types {
        for (n_q, n_kv) in [(1usize, 33usize), (7, 64)] {
            let d = if kv.is_quantized() { 64 } else { 40 };
            let name = format!("flash_attn_ext[{kv},d={d},n_q={n_q},n_kv={n_kv}]");
            c.add(OpKind::FlashAttnExt, name, 5e-4, move |cb| {
                let q = cb.input(DType::F32, &[d, n_q, 4, 1])?;
                let k = cb.input(kv, &[d, n_kv, 2, 1])?;
                let v = cb.input(kv, &[d, n_kv, 2, 1])?;
                let m = cb.filled(DType::F16, &[n_kv, n_q], Fill::Causal { n_kv, n_q })?;
                cb.b.flash_attn_ext(q, k, v, Some(m), 1.0 / (d as f32).sqrt(), 0.0, 0.0)
            });
        }
    }
    // several query tiles and key blocks, with whole blocks masked out
    for (n_q, n_kv) in [(70usize, 200usize), (130, 130), (1, 300)] {
        c.add(
            OpKind::FlashAttnExt,
            format!("flash_attn_ext[F16,d=64,n_q={n_q},n_kv={n_kv}]"),
            5e-4,
            move |cb| {
                let q = cb.input(DType::F32, &[64, n_q, 4, 1])?;
                let k = cb.input(DType::F16, &[64, n_kv, 2, 1])?;
                let v = cb.input(DType::F16, &[64, n_kv, 2, 1])?;
                let m = cb.filled(DType::F16, &[n_kv, n_q], Fill::Causal { n_kv, n_q })?;
                cb.b.flash_attn_ext(q, k, v, Some(m), 0.125, 0.0, 0.0)
            },
        );
    }
    // generation with head size 128, grouped heads and alibi slopes; for
    // queries 0 and 1 the second chunk of 16 keys is wholly masked, for
    // query 2 one key of it is visible
    c.add(
        OpKind::FlashAttnExt,
        "flash_attn_ext[F16,d=128,n_q=3,n_kv=40,alibi,partly_masked]".into(),
        5e-4,
        |cb| {
            let q = cb.input(DType::F32, &[128, 3, 8, 1])?;
            let k = cb.input(DType::F16, &[128, 40, 2, 1])?;
            let v = cb.input(DType::F16, &[128, 40, 2, 1])?;
            let m = cb.filled(DType::F16, &[40, 3], Fill::Causal { n_kv: 40, n_q: 26 })?;
            cb.b.flash_attn_ext(q, k, v, Some(m), 1.0 / 128f32.sqrt(), 8.0, 0.0)
        },
    );
    // generation with soft-capped scores (gemma2) at the head sizes the
    // backends have fast decode paths for, some keys masked
    for d in [64usize, 128] {
        c.add(
            OpKind::FlashAttnExt,
            format!("flash_attn_ext[F16,d={d},n_q=1,n_kv=70,softcap]"),
            5e-4,
            move |cb| {
                let q = cb.input(DType::F32, &[d, 1, 4, 1])?;
                let k = cb.input(DType::F16, &[d, 70, 2, 1])?;
                let v = cb.input(DType::F16, &[d, 70, 2, 1])?;
                let m = cb.filled(DType::F16, &[70, 1], Fill::Causal { n_kv: 70, n_q: 60 })?;
                cb.b.flash_attn_ext(q, k, v, Some(m), 1.0 / (d as f32).sqrt(), 0.0, 2.0)
            },
        );
    }
    c.add(
        OpKind::FlashAttnExt,
        "flash_attn_ext[F16,no_mask,softcap]".into(),
        5e-4,
        |cb| {
            let q = cb.input(DType::F32, &[32, 3, 2, 2])?;
            let k = cb.input(DType::F16, &[32, 20, 2, 2])?;
            let v = cb.input(DType::F16, &[16, 20, 2, 2])?;
            cb.b.flash_attn_ext(q, k, v, None, 0.3, 0.0, 20.0)
        },
    );
    c.add(
        OpKind::FlashAttnExt,
        "flash_attn_ext[F16,alibi]".into(),
        5e-4,
        |cb| {
            let q = cb.input(DType::F32, &[32, 4, 4, 1])?;
            let k = cb.input(DType::F16, &[32, 16, 4, 1])?;
            let v = cb.input(DType::F16, &[32, 16, 4, 1])?;
            let m = cb.filled(DType::F16, &[16, 4], Fill::Causal { n_kv: 16, n_q: 4 })?;
            cb.b.flash_attn_ext(q, k, v, Some(m), 0.2, 8.0, 0.0)
        },
    );
    c.add(
        OpKind::FlashAttnExt,
        "flash_attn_ext[F16,permuted_views]".into(),
        5e-4,
        |cb| {
            // as llama builds it: q [d, heads, tokens] permuted to [d, tokens, heads],
            // k and v as views of a cache [d * h_kv, n_ctx]
            let (d, h, h_kv, n_q, n_ctx, n_kv) =
                (32usize, 4usize, 2usize, 5usize, 40usize, 24usize);
            let q0 = cb.input(DType::F32, &[d, h, n_q])?;
            let q = cb.b.permute(q0, [0, 2, 1, 3])?;
            let kc = cb.input(DType::F16, &[d * h_kv, n_ctx])?;
            let vc = cb.input(DType::F16, &[d * h_kv, n_ctx])?;
            let row = d * h_kv * 2;
            let k = cb.b.view_3d(kc, [d, n_kv, h_kv], row, d * 2, 0)?;
            let v = cb.b.view_3d(vc, [d, n_kv, h_kv], row, d * 2, 0)?;
            let m = cb.filled(DType::F16, &[n_kv, n_q], Fill::Causal { n_kv, n_q })?;
            cb.b.flash_attn_ext(q, k, v, Some(m), 0.17, 0.0, 0.0)
        },
    );
    c.add(
        OpKind::FlashAttnExt,
        "flash_attn_ext[F16,empty_q]".into(),
        5e-4,
        |cb| {
            let q = cb.input(DType::F32, &[32, 0, 2, 1])?;
            let k = cb.input(DType::F16, &[32, 8, 2, 1])?;
            let v = cb.input(DType::F16, &[32, 8, 2, 1])?;
            cb.b.flash_attn_ext(q, k, v, None, 0.2, 0.0, 0.0)
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::fill_leafs;
    use crate::reference;
    use crate::suite::nmse;

    #[test]
    fn case_names_are_unique() {
        let cs = cases();
        let mut names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn every_case_builds_and_the_reference_evaluates_it() {
        for case in cases() {
            let mut cb = CaseBuilder::new();
            let out = (case.build)(&mut cb).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            cb.b.set_output(out).unwrap();
            let fills = std::mem::take(&mut cb.fills);
            let graph = cb.b.build();
            let data = fill_leafs(&graph, &fills, 1).unwrap();
            let ev = reference::evaluate(&graph, |id| Ok(data[&id].clone()))
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let v = ev.values(out);
            assert_eq!(v.len(), graph.tensor(out).nelements(), "{}", case.name);
            assert!(v.iter().all(|x| !x.is_nan()), "{}", case.name);
        }
    }

    #[test]
    fn nmse_treats_matching_infinities_as_equal() {
        assert_eq!(
            nmse(&[f32::NEG_INFINITY, 1.0], &[f64::NEG_INFINITY, 1.0]),
            0.0
        );
        assert!(nmse(&[1.0], &[f64::NAN]).is_infinite());
        assert!(nmse(&[1.0, 2.0], &[1.0]).is_infinite());
    }
}
