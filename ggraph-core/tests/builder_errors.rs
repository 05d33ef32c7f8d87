//! Bad input to the builder is an error that names the problem, never a
//! panic, and leaves the graph as it was.

use ggraph_core::ir::{GraphBuilder, RopeMode, TensorId};
use ggraph_core::{DType, Error};
use proptest::prelude::*;

fn shape_err(r: Result<TensorId, Error>, needle: &str) {
    match r {
        Err(e @ Error::Shape { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "message '{msg}' should mention '{needle}'"
            );
        }
        other => panic!("expected a shape error mentioning '{needle}', got {other:?}"),
    }
}

fn type_err(r: Result<TensorId, Error>) {
    assert!(
        matches!(r, Err(Error::Type { .. })),
        "expected a type error, got {r:?}"
    );
}

#[test]
fn mismatched_shapes_are_errors() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[64, 8]).unwrap();
    let x = b.input("x", DType::F32, &[32, 3]).unwrap();
    let n_before = b.graph().n_tensors();
    shape_err(b.mul_mat(a, x), "ne[0]");
    shape_err(b.add(a, x), "repeat");
    shape_err(b.reshape(a, &[7, 9]), "elements");
    shape_err(b.view(a, &[64, 9], &[256], 0), "overruns");
    shape_err(b.concat(a, x, 0), "differ");
    shape_err(b.top_k(a, 65), "exceeds");
    shape_err(b.permute(a, [0, 0, 1, 2]), "permutation");
    let odd = b.input("odd", DType::F32, &[7, 2]).unwrap();
    let n_before = n_before + 1;
    shape_err(b.glu(ggraph_core::ir::GluOp::Swiglu, odd, false), "odd");
    assert_eq!(b.graph().n_tensors(), n_before, "failed ops add nothing");
}

#[test]
fn wrong_types_are_errors() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[64, 8]).unwrap();
    let ids = b.input("ids", DType::F32, &[4]).unwrap();
    let pos = b.input("pos", DType::F32, &[8]).unwrap();
    let q = b.input("q", DType::Q4_0, &[64, 8]).unwrap();
    type_err(b.get_rows(a, ids));
    let a3 = b_view(&mut b, a);
    type_err(b.rope(a3, pos, 64, RopeMode::Normal));
    type_err(b.add(q, a));
    type_err(b.silu(q));
    let i = b.input("i", DType::I32, &[64, 8]).unwrap();
    type_err(b.cast(i, DType::F32));
    type_err(b.mul_mat(i, a));
}

/// gpt-oss's ops: sinks one F32 value per head, add_id's shapes and types.
#[test]
fn sinks_and_add_id_refuse_what_does_not_fit() {
    let mut b = GraphBuilder::new();
    let scores = b.input("scores", DType::F32, &[16, 4, 8]).unwrap();
    let q = b.input("q", DType::F32, &[64, 4, 8]).unwrap();
    let k = b.input("k", DType::F16, &[64, 16, 2]).unwrap();
    let sinks = b.input("sinks", DType::F32, &[8]).unwrap();
    let short = b.input("short", DType::F32, &[7]).unwrap();
    let half = b.input("half", DType::F16, &[8]).unwrap();
    let n_before = b.graph().n_tensors();
    shape_err(
        b.soft_max_ext_sinks(scores, None, short, 1.0, 0.0),
        "per head",
    );
    type_err(b.soft_max_ext_sinks(scores, None, half, 1.0, 0.0));
    shape_err(
        b.flash_attn_ext_sinks(q, k, k, None, short, 0.125),
        "per head",
    );
    type_err(b.flash_attn_ext_sinks(q, k, k, None, half, 0.125));
    assert_eq!(b.graph().n_tensors(), n_before, "failed ops add nothing");
    assert!(b.soft_max_ext_sinks(scores, None, sinks, 1.0, 0.0).is_ok());
    assert!(b.flash_attn_ext_sinks(q, k, k, None, sinks, 0.125).is_ok());

    let a = b.input("a", DType::F32, &[32, 2, 5]).unwrap();
    let bias = b.input("bias", DType::F32, &[32, 4]).unwrap();
    let ids = b.input("ids", DType::I32, &[2, 5]).unwrap();
    let wrong_ids = b.input("wrong_ids", DType::I32, &[3, 5]).unwrap();
    let narrow = b.input("narrow", DType::F32, &[16, 4]).unwrap();
    let float_ids = b.input("float_ids", DType::F32, &[2, 5]).unwrap();
    shape_err(b.add_id(a, bias, wrong_ids), "n_used");
    shape_err(b.add_id(a, narrow, ids), "n_expert");
    type_err(b.add_id(a, bias, float_ids));
    assert!(b.add_id(a, bias, ids).is_ok());
}

fn b_view(b: &mut GraphBuilder, a: TensorId) -> TensorId {
    b.reshape(a, &[64, 1, 8]).unwrap()
}

#[test]
fn quantised_rows_must_hold_whole_blocks() {
    let mut b = GraphBuilder::new();
    assert!(b.input("w", DType::Q4_K, &[100, 3]).is_err());
    assert!(b.input("w", DType::Q8_0, &[33]).is_err());
    let w = b.input("w", DType::Q8_0, &[64, 4]).unwrap();
    assert!(b.transpose(w).is_err());
    assert!(b.view(w, &[16, 2], &[68], 0).is_err());
}

#[test]
fn unknown_ids_and_bad_dims_are_errors() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[4]).unwrap();
    assert!(b.silu(TensorId(99)).is_err());
    assert!(b.input("x", DType::F32, &[]).is_err());
    assert!(b.input("x", DType::F32, &[1, 2, 3, 4, 5]).is_err());
    assert!(b.concat(a, a, 4).is_err());
    assert!(b.expand(TensorId(7)).is_err());
    assert!(b.view(a, &[2], &[], 3).is_err(), "misaligned view offset");
}

#[test]
fn results_too_large_to_address_are_errors_not_overflows() {
    let mut b = GraphBuilder::new();
    let huge = 1usize << 40;
    let a = b.input("a", DType::F32, &[1, huge]).unwrap();
    let x = b.input("x", DType::F32, &[1, huge]).unwrap();
    // [2^40, 2^40]: 2^80 elements
    shape_err(b.mul_mat(a, x), "2^48");
    let rows = b.input("rows", DType::F32, &[huge, 1]).unwrap();
    let idx = b.input("idx", DType::I32, &[huge]).unwrap();
    shape_err(b.get_rows(rows, idx), "2^48");

    // the strides a view derives for its trailing dims overflow
    let base = b.input("base", DType::F32, &[1, 4096]).unwrap();
    shape_err(b.view(base, &[1, 4096], &[1 << 52], 0), "trailing stride");
    // the graph is unchanged by the refusals
    assert_eq!(b.build().nodes().len(), 0);
}

#[test]
fn state_space_ops_name_the_misshaped_operand() {
    let mut b = GraphBuilder::new();
    let f = |b: &mut GraphBuilder, ne: &[usize]| b.input("t", DType::F32, ne).unwrap();
    let sx = f(&mut b, &[6, 16, 2]);
    let w = f(&mut b, &[4, 16]);
    let w_wide = f(&mut b, &[4, 8]);
    let w_long = f(&mut b, &[7, 16]);
    let n_before = b.graph().n_tensors();
    shape_err(b.ssm_conv(sx, w_wide), "d_inner");
    shape_err(b.ssm_conv(sx, w_long), "n_t >= 1");
    let h = b.input("h", DType::F16, &[6, 16, 2]).unwrap();
    type_err(b.ssm_conv(h, w));
    assert_eq!(b.graph().n_tensors(), n_before + 1);
    assert!(b.ssm_conv(sx, w).is_ok());

    // d_state 8, head_dim 4, 2 heads, 3 tokens, 1 sequence
    let s = f(&mut b, &[8, 4, 2, 2]);
    let x = f(&mut b, &[4, 2, 3, 1]);
    let dt = f(&mut b, &[2, 3, 1]);
    let a = f(&mut b, &[1, 2]);
    let bc = f(&mut b, &[8, 1, 3, 1]);
    let ids = b.input("ids", DType::I32, &[1]).unwrap();
    let dt_bad = f(&mut b, &[2, 2, 1]);
    let a_bad = f(&mut b, &[3, 2]);
    let bc_bad = f(&mut b, &[8, 3, 3, 1]);
    let s_bad = f(&mut b, &[8, 5, 2, 2]);
    shape_err(b.ssm_scan(s, x, dt_bad, a, bc, bc, ids), "dt");
    shape_err(b.ssm_scan(s, x, dt, a_bad, bc, bc, ids), "A");
    shape_err(
        b.ssm_scan(s, x, dt, a, bc_bad, bc_bad, ids),
        "multiple of n_group",
    );
    shape_err(b.ssm_scan(s, x, dt, a, bc, bc_bad, ids), "B");
    shape_err(b.ssm_scan(s_bad, x, dt, a, bc, bc, ids), "s ");
    type_err(b.ssm_scan(s, x, dt, a, bc, bc, dt));
    let y = b.ssm_scan(s, x, dt, a, bc, bc, ids).unwrap();
    // y (4 x 2 x 3) then the final states (8 x 4 x 2)
    assert_eq!(b.graph().tensor(y).ne, [24 + 64, 1, 1, 1]);
}

#[test]
fn alibi_without_mask_is_an_error() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[8, 4]).unwrap();
    assert!(b.soft_max_ext(a, None, 1.0, 8.0).is_err());
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    let dim = prop_oneof![8 => 0usize..70, 1 => Just(1usize << 40), 1 => Just(usize::MAX / 3)];
    prop::collection::vec(dim, 1..5)
}

proptest! {
    /// Any op on any operands either builds or errors; never panics, and a
    /// built node's shape is consistent with its layout.
    #[test]
    fn random_ops_never_panic(
        ta in dtype(), sa in shape(), tb in dtype(), sb in shape(),
        op in 0usize..24, p in 0usize..70,
    ) {
        let mut b = GraphBuilder::new();
        let (Ok(a), Ok(x)) = (b.input("a", ta, &sa), b.input("b", tb, &sb)) else {
            return Ok(());
        };
        let r = match op {
            0 => b.mul_mat(a, x),
            1 => b.add(a, x),
            2 => b.mul(a, x),
            3 => b.get_rows(a, x),
            4 => b.concat(a, x, p % 5),
            5 => b.reshape(a, &sb),
            6 => b.permute(a, [p % 4, (p + 1) % 4, (p + 2) % 4, (p + 3) % 4]),
            7 => b.transpose(a),
            8 => b.cpy(a, x),
            9 => b.cast(a, tb),
            10 => b.set_rows(a, x, x),
            11 => b.rope(a, x, p, RopeMode::Neox),
            12 => b.soft_max_ext(a, Some(x), 0.5, 0.0),
            13 => b.flash_attn_ext(a, x, x, None, 1.0, 0.0, 0.0),
            14 => b.mul_mat_id(a, x, x),
            15 => b.top_k(a, p),
            16 => b.argsort(a, ggraph_core::ir::SortOrder::Ascending),
            17 => b.swiglu(a),
            18 => b.rms_norm(a, 1e-5),
            19 => b.view(a, &sb, &[p * 4], p * 4),
            20 => b.sum_rows(a),
            21 => b.swiglu_split(a, x),
            22 => b.scale(a, 2.0),
            _ => b.div(a, x),
        };
        if let Ok(id) = r {
            let t = b.tensor(id).unwrap();
            prop_assert!(t.nelements() == t.ne.iter().product::<usize>());
            let _ = t.nbytes();
            prop_assert!(b.expand(id).is_ok());
        }
    }
}
