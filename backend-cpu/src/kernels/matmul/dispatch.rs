//! Which path computes a product: the first rule of [`RULES`] that fits
//! its instruction set, weight type and row layout, column count and
//! bytes per weight row.

use std::cell::RefCell;
use std::ops::RangeInclusive;

use ggraph_core::DType;

#[cfg(target_arch = "x86_64")]
use super::interleaved_gemm;
use super::operands::{Cols, ProductOf, WeightRows};
use super::quant_format::format;
use super::{activation_quant, blocks_in_ggml_order, dequantized, float, kquants_in_ggml_order};
#[cfg(target_arch = "x86_64")]
use crate::kernels::amx;
use crate::kernels::interleave::GROUP_ROWS;
#[cfg(target_arch = "x86_64")]
use crate::kernels::interleave::Interleaved;
use crate::kernels::isa::Isa;
use crate::kernels::scratch::with_scratch;
use Path::*;
use Rows::{Any, Groups, Packed};
use Weights::{Float, Only, Quantized};

/// A way to compute a product: a driver and its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// Rows of no values: every output is zero.
    Zeros,
    /// Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1 rows, each dot
    /// summed in ggml's order (`blocks_in_ggml_order`).
    BlocksInGgmlOrder,
    /// Q6_K and Q4_K rows, each dot summed in ggml's order
    /// (`kquants_in_ggml_order`).
    KQuantsInGgmlOrder,
    /// Whole groups of eight rows of a type ggml repacks, in GGUF's
    /// layout: ggml sums them in its repacked order, which the kernels of
    /// the CPU's interleaved layout follow, so each task interleaves the
    /// rows it reaches into its scratch and runs those
    /// (`interleaved_gemm::gemm_rows`).
    RowsInterleaved,
    /// F32, F16 and BF16 rows, each dot summed in ggml's order
    /// (`float::in_ggml_order`).
    FloatsInGgmlOrder,
    /// The packed, tiled float GEMM (`float::packed`), for float rows not
    /// packed; quantised weights are dequantised as they are packed.
    FloatPacked,
    /// BF16 weights on AMX tiles (`float::bf16_tiles`): what the packed
    /// GEMM would take, where the tiles are asked for and usable.
    Bf16Tiles,
    /// Quantised rows no integer kernel reads, dequantised to f32 first
    /// and then chosen for again (`dequantized`).
    Dequantized,
}

/// Which weight types a rule takes.
#[derive(Clone, Copy)]
enum Weights {
    /// Any type that is not quantised.
    Float,
    /// Any quantised type.
    Quantized,
    /// These types.
    Only(&'static [DType]),
}

/// Which weight rows a rule takes.
#[derive(Clone, Copy)]
enum Rows {
    /// Values (whole blocks, when quantised) side by side.
    Packed,
    /// Any stride between values.
    Any,
    /// Packed, and whole groups of eight rows (the matrices ggml
    /// repacks).
    Groups,
}

/// One row of the table: the products it fits, and their path.
struct Rule {
    isa: RangeInclusive<Isa>,
    weights: Weights,
    rows: Rows,
    cols: RangeInclusive<usize>,
    row_bytes: RangeInclusive<usize>,
    path: Path,
}

const fn rule(
    isa: RangeInclusive<Isa>,
    weights: Weights,
    rows: Rows,
    cols: RangeInclusive<usize>,
    row_bytes: RangeInclusive<usize>,
    path: Path,
) -> Rule {
    Rule {
        isa,
        weights,
        rows,
        cols,
        row_bytes,
        path,
    }
}

/// BF16 products of more columns than this go to the AMX tiles where
/// they are asked for.
const TILES_ABOVE_N: usize = 8;

const ANY_ISA: RangeInclusive<Isa> = Isa::Portable..=Isa::Avx512Vnni;
/// The levels the interleaved layout's kernels run on.
const AVX2_ON: RangeInclusive<Isa> = Isa::Avx2..=Isa::Avx512Vnni;
const VNNI: RangeInclusive<Isa> = Isa::Avx512Vnni..=Isa::Avx512Vnni;
/// The 32-value block types ggml repacks (in whole groups of eight
/// rows).
const REPACKED_BLOCKS: &[DType] = &[DType::Q4_0, DType::IQ4_NL, DType::MXFP4];
/// The 32-value block formats summed in ggml's order.
const IN_ORDER: &[DType] = &[
    DType::Q8_0,
    DType::Q4_0,
    DType::Q5_0,
    DType::IQ4_NL,
    DType::Q4_1,
    DType::Q5_1,
    DType::MXFP4,
];
/// The K-quant formats (and IQ4_XS) summed in ggml's order.
const K_IN_ORDER: &[DType] = &[
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_XS,
];

const ANY_COLS: RangeInclusive<usize> = 1..=usize::MAX;

const ANY_BYTES: RangeInclusive<usize> = 0..=usize::MAX;
/// Rows of no values.
const EMPTY: RangeInclusive<usize> = 0..=0;

/// The paths, first fit first.
#[rustfmt::skip]
const RULES: &[Rule] = &[
    //   ISAs          weights         rows    columns               row bytes         path
    // rows of no values, of any type
    rule(ANY_ISA,      Float,          Any,    ANY_COLS,             EMPTY,            Zeros),
    rule(ANY_ISA,      Quantized,      Any,    ANY_COLS,             EMPTY,            Zeros),
    // float weights: packed rows sum in ggml's order
    rule(ANY_ISA,      Float,          Packed, ANY_COLS,             ANY_BYTES,        FloatsInGgmlOrder),
    rule(ANY_ISA,      Float,          Any,    ANY_COLS,             ANY_BYTES,        FloatPacked),
    // quantised weights: every type sums in ggml's order; where ggml
    // repacks a matrix, its products of several columns take the
    // interleaved layout's kernels, each group interleaved as it is
    // reached (fewer columns measured slower there: interleaving a group
    // costs more than a few columns' dots of it, docs/performance.md);
    // rows not packed are dequantised
    rule(AVX2_ON,      Only(&[DType::Q4_K]), Groups, 6..=usize::MAX, ANY_BYTES,       RowsInterleaved),
    rule(VNNI,         Only(REPACKED_BLOCKS), Groups, 8..=usize::MAX, ANY_BYTES,      RowsInterleaved),
    rule(ANY_ISA,      Only(IN_ORDER), Packed, ANY_COLS,             ANY_BYTES,        BlocksInGgmlOrder),
    rule(ANY_ISA,      Only(K_IN_ORDER), Packed, ANY_COLS,           ANY_BYTES,        KQuantsInGgmlOrder),
    rule(ANY_ISA,      Quantized,      Any,    ANY_COLS,             ANY_BYTES,        Dequantized),
];

/// What the table looks at.
struct Product {
    isa: Isa,
    dtype: DType,
    packed: bool,
    /// Whole groups of eight rows.
    groups: bool,
    cols: usize,
    row_bytes: usize,
}

impl Rule {
    fn fits(&self, p: &Product) -> bool {
        let weights = match self.weights {
            Float => !p.dtype.is_quantized(),
            Quantized => p.dtype.is_quantized(),
            Only(types) => types.contains(&p.dtype),
        };
        let rows = match self.rows {
            Packed => p.packed,
            Groups => p.packed && p.groups,
            Any => true,
        };
        weights
            && rows
            && self.isa.contains(&p.isa)
            && self.cols.contains(&p.cols)
            && self.row_bytes.contains(&p.row_bytes)
    }
}

/// The path for the `m` rows of weights `a` times `n` columns with the
/// kernels of `isa`.
pub(super) fn path(isa: Isa, a: &WeightRows, m: usize, n: usize) -> Path {
    let product = Product {
        isa,
        dtype: a.dtype,
        packed: a.elem_stride == a.dtype.type_size(),
        groups: m % GROUP_ROWS == 0,
        cols: n,
        row_bytes: a.k / a.dtype.block_size() * a.dtype.type_size(),
    };
    let path = RULES
        .iter()
        .find(|r| r.fits(&product))
        .map(|r| r.path)
        .expect("the last rules take any float and any quantised weights");
    // the tiles are not an instruction-set level of their own: where they
    // are asked for, they take BF16 products of more than
    // `TILES_ABOVE_N` columns, which then no longer sum in ggml's order
    #[cfg(target_arch = "x86_64")]
    if matches!(path, FloatPacked | FloatsInGgmlOrder)
        && n > TILES_ABOVE_N
        && isa >= Isa::Avx512
        && float::bf16_tiles::takes(a)
        && amx::active_bf16().is_some()
    {
        return Bf16Tiles;
    }
    path
}

/// `out[j][i] = dot(a row i, b[j])` for `i < m`, `j < b.len()`, with the
/// kernels of `isa`, in the order ggml sums the products of `of`.
pub(super) fn gemm(
    isa: Isa,
    of: ProductOf,
    a: WeightRows,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let n = b.0.len();
    if m == 0 || n == 0 {
        return;
    }
    match path(isa, &a, m, n) {
        Zeros => {
            for &o in &out.0 {
                // SAFETY: every output column holds m values.
                unsafe { std::slice::from_raw_parts_mut(o, m) }.fill(0.0);
            }
        }
        FloatsInGgmlOrder => {
            with_rounded_columns(a, b, |b| float::in_ggml_order::gemm(isa, of, a, m, b, out))
        }
        // the packed GEMM rounds F16 and BF16 weights' activations itself,
        // as it packs them
        FloatPacked => float::packed::gemm(isa, a, m, b, out),
        #[cfg(target_arch = "x86_64")]
        Bf16Tiles => {
            let unit = amx::active_bf16().map(amx::Unit::Hardware);
            if !unit.is_some_and(|unit| float::bf16_tiles::gemm(unit, a, m, b, out)) {
                float::packed::gemm(isa, a, m, b, out)
            }
        }
        Dequantized => with_rounded_columns(a, b, |b| {
            dequantized::with_f32_rows(a, m, |rows| gemm(isa, of, rows, m, b, out))
        }),
        BlocksInGgmlOrder => blocks_in_ggml_order::gemm(isa, a, m, b, out),
        KQuantsInGgmlOrder => kquants_in_ggml_order::gemm(isa, of, a, m, b, out),
        #[cfg(target_arch = "x86_64")]
        RowsInterleaved => {
            let kernels = interleaved_gemm::Kernels::of(isa);
            match Interleaved::of(a.dtype, &[a.k, m]) {
                // SAFETY: the rule's instruction sets run the kernels; m
                // rows (whole groups: the rule) of k values a.stride
                // apart; the columns hold k values, the outputs m.
                Some(layout) => unsafe {
                    interleaved_gemm::gemm_rows(
                        kernels, of, layout, a.ptr, a.stride, a.k, m, b, out,
                    )
                },
                // the rule takes only types the layout takes: should one
                // not be, the portable kernels sum in the same order
                None => gemm(Isa::Portable, of, a, m, b, out),
            }
        }
    }
}

/// Runs `f` on the columns rounded as ggml rounds them for `a`'s type
/// before a product (its `vec_dot_type`): to F16 for F16 weights, to BF16
/// for BF16 weights, and for quantised weights multiplied in floats (the
/// paths below AVX2, rows not packed) to the codes and scales the integer
/// paths use (Q4_1 and Q5_1 rows not packed keep one difference: their
/// min term uses `d * sum(q)` in f32, where ggml keeps it as f16). F32
/// weights take the columns as they are.
fn with_rounded_columns(a: WeightRows, b: &Cols<f32>, f: impl FnOnce(&Cols<f32>)) {
    let k = a.k;
    let round: &dyn Fn(&mut [f32]) = match a.dtype {
        _ if k == 0 => return f(b),
        DType::F16 => &|out| activation_quant::columns_as_half(b, k, false, out),
        DType::BF16 => &|out| activation_quant::columns_as_half(b, k, true, out),
        t => match format(t) {
            Some(fmt) => &move |out| activation_quant::rounded_columns(b, k, fmt.partner, out),
            None => return f(b),
        },
    };
    // in this thread's scratch: 64-byte aligned, and no allocation per call
    with_scratch(&ROUNDED, b.0.len() * k, |out| {
        round(out);
        let cols = Cols(out.chunks_exact_mut(k).map(|c| c.as_mut_ptr()).collect());
        f(&cols)
    })
}

thread_local! {
    static ROUNDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}
