//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS rows in GGUF's layout times
//! activations quantised to Q8_K, each dot summed as llama.cpp's CPU
//! backend sums it (its x86 kernels with AVX2), so that every output
//! equals llama.cpp's bit for bit. The integer sums are exact whichever
//! instructions form them; ggml fixes which values each float step takes,
//! in one of three orders:
//!
//! - **eight lanes** (ggml's `vec_dot` kernels, `ggml_vec_dot_q6_K_q8_K`
//!   and its kin, which ggml runs below eight columns): in
//!   each super-block, lane `l` holds the scaled products of values
//!   `4l..4l + 4` of every 32; each lane is a float accumulator,
//!   `acc = fma(dw * dx, lane, acc)`, summed at the end as
//!   `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`. Q6_K's offset of
//!   32 comes off lane `l` as `32 (s[2l] bs[2l] + s[2l + 1] bs[2l + 1])`
//!   (sub-block scales `s`, the activations' sums `bs` per 16). Q4_K's
//!   mins go to four lanes of their own, lane `i` taking sub-blocks `2i`
//!   and `2i + 1`, with `-dx * dmin`, summed as `(m0 + m2) + (m1 + m3)`
//!   and added last.
//! - **tiled** (ggml's tiled K-quant kernels, which it runs from eight
//!   columns on for rows it has not repacked): each super-block's whole
//!   integer sum `s` (and mins' sum `sm`), `r = dw * s` rounded, `r =
//!   fma(-dmin, sm, r)`, `acc = fma(r, dx, acc)`;
//! - **repacked** (ggml's `q4_K_8x8` kernels, which it runs for every Q4_K
//!   matrix of whole groups of eight rows): a row's whole integer sum and
//!   its mins' sum per step, `acc = fma(sum, dw * dx, acc)` and `accm =
//!   fma(mins, dmin * dx, accm)`, the result `acc - accm`; a step is a
//!   super-block for the columns ggml's GEMV takes (the last `n % 4`) and
//!   64 values for those its GEMM takes (the columns in fours).
//!
//! Activations are ggml's Q8_K up to one sign per super-block, which
//! flips codes and scale together and so no product.
//!
//! The portable kernels restate the sums value by value (the tests'
//! reference); the AVX2 ones take a row a call in the eight lanes and
//! the repacked order, and run the tiled order as a 4 x 8 outer product
//! (`outer_avx2`); with AVX-512 the eight lanes take four rows a call
//! (`lanes_avx512`), and with VNNI the tiled order runs as a 16 x 16
//! outer product (`outer_vnni`).

use std::cell::RefCell;

use ggraph_core::DType;
use ggraph_core::quant::f16_to_f32;

use super::activation_quant::quantize_column;
use super::operands::{Cols, ProductOf, WeightRows};
use super::quant_format::{Partner, q4k_scales_mins};
use crate::kernels::isa::Isa;
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;
use crate::team;

#[cfg(target_arch = "x86_64")]
mod lanes_avx512;
#[cfg(target_arch = "x86_64")]
mod outer_avx2;
#[cfg(target_arch = "x86_64")]
mod outer_operands;
#[cfg(target_arch = "x86_64")]
mod outer_vnni;

/// Values per super-block.
const QK: usize = 256;
/// Most columns per kernel call.
const TILE_COLS: usize = 4;
/// Rows a task takes before the columns move on: their super-blocks stay
/// in L1 or L2 while every column passes over them.
const CHUNK_ROWS: usize = 16;
/// With the tiled order, rows a task takes a chunk of
/// [`TILED_SUPER_BLOCKS`] at a time, which stays in L2 while every column
/// tile reads it.
const TILED_ROWS: usize = 64;
const TILED_SUPER_BLOCKS: usize = 8;

/// How ggml adds up a product's steps (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    EightLanes,
    Tiled,
    Repacked,
}

/// Columns from which ggml's tiled kernels take rows it has not repacked.
const TILED_MIN_N: usize = 8;

/// The float step of one column in the repacked order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A super-block (ggml's GEMV).
    SuperBlock,
    /// 64 values (ggml's GEMM, columns in fours).
    Pair,
}

/// The order ggml sums a product of `m` rows of `dtype` by `n` columns
/// in, where it is one of these (Q6_K, Q4_K).
pub(crate) fn order(dtype: DType, m: usize, n: usize) -> Option<Order> {
    match dtype {
        // ggml repacks a Q4_K matrix of whole groups of eight rows
        DType::Q4_K if m % 8 == 0 => Some(Order::Repacked),
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS
            if n >= TILED_MIN_N =>
        {
            Some(Order::Tiled)
        }
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::IQ4_XS => {
            Some(Order::EightLanes)
        }
        _ => None,
    }
}

/// The repacked order's step for column `j` of `n` in a product of `of`:
/// ggml's GEMM takes a `mul_mat`'s columns in fours (when there are more
/// than three), its GEMV the rest and every column of a `mul_mat_id`.
pub(crate) fn step(of: ProductOf, j: usize, n: usize) -> Step {
    if of == ProductOf::MulMat && n > 3 && j < n - n % 4 {
        Step::Pair
    } else {
        Step::SuperBlock
    }
}

/// One activation column in Q8_K form, from its first super-block.
#[derive(Clone, Copy)]
struct Col {
    codes: *const i8,
    /// Scale per super-block.
    d: *const f32,
    /// Sums of the codes per 16 values.
    bs16: *const i16,
}

// SAFETY: the pointers address the call's scratch, alive and unchanged
// while the tasks read it.
unsafe impl Send for Col {}
unsafe impl Sync for Col {}

/// The dots of one row with `C` columns over `nsb` super-blocks; the
/// tiled order's go on from `init` (the dots of the super-blocks before),
/// the others' take whole rows.
///
/// # Safety
/// The row holds `nsb` super-blocks of the kernel's type, every column
/// `nsb * 256` codes, `nsb` scales and `nsb * 16` sums.
type Kernel<const C: usize> = unsafe fn(*const u8, [Col; C], usize, Step, [f32; C]) -> [f32; C];

/// Four rows' dots with `C` columns over whole rows (the eight lanes on
/// AVX-512, two rows to a register).
///
/// # Safety
/// As for [`Kernel`], for each row.
type Quad<const C: usize> = unsafe fn([*const u8; 4], [Col; C], usize) -> [[f32; 4]; C];

/// The kernels of one instruction set and weight type.
struct Kernels {
    one: Kernel<1>,
    four: Kernel<TILE_COLS>,
    /// Where kernels take four rows a call, for one column and for four.
    quad_one: Option<Quad<1>>,
    quad_four: Option<Quad<TILE_COLS>>,
}

/// A four-row kernel of either width.
#[derive(Clone, Copy)]
enum QuadKernel {
    One(Quad<1>),
    Four(Quad<TILE_COLS>),
}

impl QuadKernel {
    /// The kernel on four rows and columns `j0..j0 + c` (`at` gives each),
    /// each column's four dots to `store`.
    ///
    /// # Safety
    /// As for [`Quad`].
    #[inline(always)]
    unsafe fn run(
        self,
        rows: [*const u8; 4],
        j0: usize,
        c: usize,
        at: &impl Fn(usize) -> Col,
        nsb: usize,
        store: &impl Fn(usize, [f32; 4]),
    ) {
        // SAFETY: caller's contract.
        unsafe {
            match self {
                QuadKernel::Four(four) => {
                    let cols = std::array::from_fn(|t| at(j0 + t));
                    for (t, dots) in four(rows, cols, nsb).into_iter().enumerate() {
                        store(j0 + t, dots);
                    }
                }
                QuadKernel::One(one) => {
                    for j in j0..j0 + c {
                        store(j, one(rows, [at(j)], nsb)[0]);
                    }
                }
            }
        }
    }
}

impl Kernels {
    fn new(isa: Isa, dtype: DType, order: Order) -> Kernels {
        let (quad_one, quad_four) = Kernels::quad(isa, dtype, order);
        Kernels {
            quad_one,
            quad_four,
            ..Kernels::per_row(isa, dtype, order)
        }
    }

    /// The four-row kernels: the eight lanes with AVX-512 (Q4_K's mins in
    /// four lanes of their own stay with AVX2). For one column only Q2_K's
    /// pay: the others' rows are as fast or faster one at a time with
    /// AVX2, whose decoding needs no joining of halves
    /// (docs/performance.md).
    fn quad(isa: Isa, dtype: DType, order: Order) -> (Option<Quad<1>>, Option<Quad<TILE_COLS>>) {
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx512 && order == Order::EightLanes {
            macro_rules! quad {
                ($t:expr, $one:expr) => {
                    (
                        $one.then_some(lanes_avx512::eight_lanes::<{ $t }, 1> as Quad<1>),
                        Some(lanes_avx512::eight_lanes::<{ $t }, TILE_COLS> as Quad<TILE_COLS>),
                    )
                };
            }
            return match dtype {
                DType::Q2_K => quad!(tag::Q2_K, true),
                DType::Q3_K => quad!(tag::Q3_K, false),
                DType::Q5_K => quad!(tag::Q5_K, false),
                DType::Q6_K => quad!(tag::Q6_K, false),
                DType::IQ4_XS => quad!(tag::IQ4_XS, false),
                _ => (None, None),
            };
        }
        let _ = (isa, dtype, order);
        (None, None)
    }

    /// The kernels that take one row a call.
    fn per_row(isa: Isa, dtype: DType, order: Order) -> Kernels {
        macro_rules! kernels {
            ($($k:ident)::+) => {
                Kernels {
                    one: $($k)::+::<1>,
                    four: $($k)::+::<TILE_COLS>,
                    quad_one: None,
                    quad_four: None,
                }
            };
            ($($k:ident)::+, $t:expr) => {
                Kernels {
                    one: $($k)::+::<{ $t }, 1>,
                    four: $($k)::+::<{ $t }, TILE_COLS>,
                    quad_one: None,
                    quad_four: None,
                }
            };
        }
        // the eight lanes and the repacked order
        macro_rules! lanes_or_repacked {
            ($m:ident) => {
                match (dtype, order) {
                    (_, Order::Repacked) => kernels!($m::q4k_repacked),
                    (DType::Q2_K, _) => kernels!($m::eight_lanes, tag::Q2_K),
                    (DType::Q3_K, _) => kernels!($m::eight_lanes, tag::Q3_K),
                    (DType::Q4_K, _) => kernels!($m::eight_lanes, tag::Q4_K),
                    (DType::Q5_K, _) => kernels!($m::eight_lanes, tag::Q5_K),
                    (DType::Q6_K, _) => kernels!($m::eight_lanes, tag::Q6_K),
                    _ => kernels!($m::eight_lanes, tag::IQ4_XS),
                }
            };
        }
        // the vector kernels' tiled order is an outer product
        // (`outer_product`)
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 && order != Order::Tiled {
            return match dtype {
                _ if order == Order::Repacked => kernels!(x86::q4k_repacked),
                _ => lanes_or_repacked!(x86),
            };
        }
        let _ = isa;
        match (dtype, order) {
            (DType::Q2_K, Order::Tiled) => kernels!(portable::tiled, tag::Q2_K),
            (DType::Q3_K, Order::Tiled) => kernels!(portable::tiled, tag::Q3_K),
            (DType::Q4_K, Order::Tiled) => kernels!(portable::tiled, tag::Q4_K),
            (DType::Q5_K, Order::Tiled) => kernels!(portable::tiled, tag::Q5_K),
            (DType::Q6_K, Order::Tiled) => kernels!(portable::tiled, tag::Q6_K),
            (_, Order::Tiled) => kernels!(portable::tiled, tag::IQ4_XS),
            _ => lanes_or_repacked!(portable),
        }
    }
}

/// A whole product of rows of one type by Q8_K columns: the outer
/// products of the tiled order.
///
/// # Safety
/// The processor has the kernel's instruction set; the rows hold `nsb`
/// super-blocks of the kernel's type, each column `nsb * 256` codes, `nsb`
/// scales and `nsb * 16` sums; each output column `m` values.
#[cfg(target_arch = "x86_64")]
type Outer = unsafe fn(WeightRows, usize, &[Col], usize, &Cols<f32>);

/// The outer product that runs the tiled order for `dtype` with `isa`,
/// where one does.
#[cfg(target_arch = "x86_64")]
fn outer_product(isa: Isa, dtype: DType, order: Order) -> Option<Outer> {
    macro_rules! of_type {
        ($m:ident) => {
            Some(match dtype {
                DType::Q2_K => $m::gemm::<{ tag::Q2_K }> as Outer,
                DType::Q3_K => $m::gemm::<{ tag::Q3_K }>,
                DType::Q4_K => $m::gemm::<{ tag::Q4_K }>,
                DType::Q5_K => $m::gemm::<{ tag::Q5_K }>,
                DType::Q6_K => $m::gemm::<{ tag::Q6_K }>,
                _ => $m::gemm::<{ tag::IQ4_XS }>,
            })
        };
    }
    match order {
        Order::Tiled if isa >= Isa::Avx512Vnni => of_type!(outer_vnni),
        Order::Tiled if isa >= Isa::Avx2 => of_type!(outer_avx2),
        _ => None,
    }
}

thread_local! {
    static CODES: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
    static SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SUMS: RefCell<Vec<i16>> = const { RefCell::new(Vec::new()) };
}

/// `out[j][i] = dot(a row i, b[j])` for `i < m`, rows of Q6_K or Q4_K
/// super-blocks side by side.
pub(crate) fn gemm(
    isa: Isa,
    of: ProductOf,
    a: WeightRows,
    m: usize,
    b: &Cols<f32>,
    out: &Cols<f32>,
) {
    let (k, n) = (a.k, b.0.len());
    let nsb = k / QK;
    let Some(order) = order(a.dtype, m, n) else {
        unreachable!("dispatch sends only Q6_K and Q4_K rows here");
    };
    with_scratch(&CODES, n * k, |codes| {
        with_scratch(&SCALES, n * nsb, |scales| {
            with_scratch(&SUMS, n * nsb * 16, |sums| {
                // the columns over the team: a prompt's are many
                let mut each: Vec<_> = codes
                    .chunks_exact_mut(k)
                    .zip(scales.chunks_exact_mut(nsb))
                    .zip(sums.chunks_exact_mut(nsb * 16))
                    .collect();
                team::for_each_chunk_mut(&mut each, 1, |j, column| {
                    for ((codes, d), bs) in column {
                        // SAFETY: column j holds k values.
                        let x = unsafe { std::slice::from_raw_parts(b.0[j], k) };
                        quantize_column(Partner::Q8K, x, 16, codes, |blk, scale, sum| {
                            d[blk / 16] = scale.d;
                            bs[blk] = sum as i16;
                        });
                    }
                });
                let cols: Vec<Col> = (0..n)
                    .map(|j| Col {
                        codes: codes[j * k..].as_ptr(),
                        d: scales[j * nsb..].as_ptr(),
                        bs16: sums[j * nsb * 16..].as_ptr(),
                    })
                    .collect();
                #[cfg(target_arch = "x86_64")]
                if let Some(outer) = outer_product(isa, a.dtype, order) {
                    // SAFETY: the kernel is of this processor's instruction
                    // set; the rows hold nsb super-blocks, the columns their
                    // codes, scales and sums.
                    unsafe { outer(a, m, &cols, nsb, out) };
                    return;
                }
                let kernels = Kernels::new(isa, a.dtype, order);
                // column tiles that keep to one step
                let mut tiles = Vec::new();
                let mut j = 0;
                while j < n {
                    let s = step(of, j, n);
                    let c = if s == Step::Pair || n - j >= TILE_COLS {
                        TILE_COLS.min(n - j)
                    } else {
                        1
                    };
                    tiles.push((j, c, s));
                    j += c;
                }
                // the tiled order carries its one sum a dot from chunk to
                // chunk of the rows: a task's rows stay in L2 while every
                // column tile reads them; the others take whole rows
                let (block_rows, chunk) = if order == Order::Tiled {
                    (TILED_ROWS, TILED_SUPER_BLOCKS)
                } else {
                    (CHUNK_ROWS, nsb)
                };
                let bytes = a.dtype.type_size();
                par_ranges(m, CHUNK_ROWS, |range| {
                    for first in range.clone().step_by(block_rows) {
                        let rows = first..(first + block_rows).min(range.end);
                        for sb0 in (0..nsb).step_by(chunk.max(1)) {
                            let nb = chunk.min(nsb - sb0);
                            let at = |j: usize| {
                                let c = cols[j];
                                // SAFETY: column j holds nsb super-blocks.
                                unsafe {
                                    Col {
                                        codes: c.codes.add(sb0 * QK),
                                        d: c.d.add(sb0),
                                        bs16: c.bs16.add(sb0 * 16),
                                    }
                                }
                            };
                            for &(j0, c, s) in &tiles {
                                let quad = if c == TILE_COLS {
                                    kernels.quad_four.map(QuadKernel::Four)
                                } else {
                                    kernels.quad_one.map(QuadKernel::One)
                                };
                                if let Some(quad) = quad {
                                    // whole rows (the eight lanes), four a
                                    // call
                                    for i0 in rows.clone().step_by(4) {
                                        let live = 4.min(rows.end - i0);
                                        let four =
                                            std::array::from_fn(|r| a.row(i0 + r.min(live - 1)));
                                        let store = |j: usize, dots: [f32; 4]| {
                                            for (r, v) in dots.into_iter().take(live).enumerate() {
                                                // SAFETY: output column j holds
                                                // m values; rows i0.. are this
                                                // task's.
                                                unsafe { *out.0[j].add(i0 + r) = v };
                                            }
                                        };
                                        // SAFETY: the rows hold nsb
                                        // super-blocks, the columns their
                                        // codes, scales and sums.
                                        unsafe { quad.run(four, j0, c, &at, nb, &store) };
                                    }
                                    continue;
                                }
                                for i in rows.clone() {
                                    let row = a.row(i).wrapping_add(sb0 * bytes);
                                    // SAFETY: output column j holds m values;
                                    // row i is this task's.
                                    let before = |j: usize| {
                                        if sb0 == 0 {
                                            0.0
                                        } else {
                                            unsafe { *out.0[j].add(i) }
                                        }
                                    };
                                    let call = Call { row, nb, step: s };
                                    let store = |j: usize, v: f32| {
                                        // SAFETY: as for `before`.
                                        unsafe { *out.0[j].add(i) = v }
                                    };
                                    // SAFETY: row i holds nsb super-blocks,
                                    // the columns their codes, scales and
                                    // sums.
                                    unsafe {
                                        if c == TILE_COLS {
                                            call.run(kernels.four, j0, &at, &before, &store)
                                        } else {
                                            for j in j0..j0 + c {
                                                call.run(kernels.one, j, &at, &before, &store)
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                });
            })
        })
    })
}

/// One row's chunk of a kernel call: the row from the chunk's first
/// super-block, how many, and the step.
struct Call {
    row: *const u8,
    nb: usize,
    step: Step,
}

impl Call {
    /// `kernel` on columns `j0..j0 + C` (`at` gives each from the chunk's
    /// first super-block, `before` its sum so far), each dot to `store`.
    ///
    /// # Safety
    /// As for [`Kernel`].
    #[inline(always)]
    unsafe fn run<const C: usize>(
        &self,
        kernel: Kernel<C>,
        j0: usize,
        at: &impl Fn(usize) -> Col,
        before: &impl Fn(usize) -> f32,
        store: &impl Fn(usize, f32),
    ) {
        let cols = std::array::from_fn(|t| at(j0 + t));
        let init = std::array::from_fn(|t| before(j0 + t));
        // SAFETY: caller's contract.
        let dots = unsafe { kernel(self.row, cols, self.nb, self.step, init) };
        for (t, v) in dots.into_iter().enumerate() {
            store(j0 + t, v);
        }
    }
}

/// Eight lanes summed as ggml's `hsum_float_8`.
fn hsum8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// Four lanes summed as ggml's Q4_K kernel sums its mins.
fn hsum4(m: [f32; 4]) -> f32 {
    (m[0] + m[2]) + (m[1] + m[3])
}

/// Bytes of a Q6_K and of a Q4_K super-block.
const Q6K_BYTES: usize = 210;
const Q4K_BYTES: usize = 144;

/// Q6_K's 6-bit codes (0..64) of one super-block, in value order.
fn q6k_codes(blk: &[u8]) -> [u8; QK] {
    let mut q = [0u8; QK];
    for h in 0..2 {
        let (ql, qh) = (&blk[64 * h..], &blk[128 + 32 * h..]);
        for l in 0..32 {
            let v = 128 * h + l;
            q[v] = (ql[l] & 15) | ((qh[l] & 3) << 4);
            q[v + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
            q[v + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[v + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

/// Q4_K's eight sub-block scales and eight mins.
fn q4k_scales(blk: &[u8]) -> ([i32; 8], [i32; 8]) {
    let words = q4k_scales_mins(blk[4..16].try_into().unwrap());
    let byte = |w: u32, i: usize| ((w >> (8 * i)) & 0xff) as i32;
    let pick = |lo: u32, hi: u32| std::array::from_fn(|s| byte(if s < 4 { lo } else { hi }, s % 4));
    (pick(words[0], words[1]), pick(words[2], words[3]))
}

/// Type tags of the kernels' const parameter.
mod tag {
    pub(super) const Q2_K: u8 = 0;
    pub(super) const Q3_K: u8 = 1;
    pub(super) const Q4_K: u8 = 2;
    pub(super) const Q5_K: u8 = 3;
    pub(super) const Q6_K: u8 = 4;
    pub(super) const IQ4_XS: u8 = 5;
}

/// Bytes of a super-block of type `T`.
const fn block_bytes(t: u8) -> usize {
    match t {
        tag::Q2_K => 84,
        tag::Q3_K => 110,
        tag::Q4_K => Q4K_BYTES,
        tag::Q5_K => 176,
        tag::Q6_K => Q6K_BYTES,
        _ => 136,
    }
}

/// Q3_K's sixteen 6-bit scales, before their offset of 32, four bytes a
/// word (ggml's `kmask` unpacking of its 12 bytes).
#[inline(always)]
fn q3k_scale_words(s: &[u8]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, t) = (word(0), word(1), word(2));
    let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    [
        (a0 & k2) | ((t & k1) << 4),
        (a1 & k2) | (((t >> 2) & k1) << 4),
        ((a0 >> 4) & k2) | (((t >> 4) & k1) << 4),
        ((a1 >> 4) & k2) | (((t >> 6) & k1) << 4),
    ]
}

/// Q3_K's sixteen scales, less 32.
fn q3k_scales(s: &[u8]) -> [i32; 16] {
    let words = q3k_scale_words(s);
    std::array::from_fn(|i| ((words[i / 4] >> (8 * (i % 4))) & 0xff) as i32 - 32)
}

/// IQ4_XS's eight 6-bit scales, before their offset of 32, a byte each.
#[inline(always)]
fn iq4xs_scale_word(blk: &[u8]) -> u64 {
    let high = u16::from_le_bytes([blk[2], blk[3]]) as u64;
    let low = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]) as u64;
    (0..8).fold(0, |w, ib| {
        let scale = ((low >> (4 * ib)) & 15) | (((high >> (2 * ib)) & 3) << 4);
        w | scale << (8 * ib)
    })
}

/// IQ4_XS's eight scales, less 32.
fn iq4xs_scales(blk: &[u8]) -> [i32; 8] {
    let word = iq4xs_scale_word(blk);
    std::array::from_fn(|ib| ((word >> (8 * ib)) & 0xff) as i32 - 32)
}

/// One weight super-block as ggml's kernels multiply it: each value's
/// code, the scale and min of each 16 values (mins zero where the type
/// has none), and the block's `d` and `dmin`.
struct Decoded {
    w: [i32; QK],
    sc: [i32; 16],
    mn: [i32; 16],
    d: f32,
    dmin: f32,
}

#[inline(always)]
fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn decode(t: u8, blk: &[u8]) -> Decoded {
    let mut w = [0i32; QK];
    let (mut sc, mut mn) = ([0i32; 16], [0i32; 16]);
    let (d, dmin);
    match t {
        tag::Q2_K => {
            for e in 0..QK {
                let (j, k, b) = (e / 128, e % 128 / 32, e % 32);
                w[e] = (blk[16 + 32 * j + b] >> (2 * k)) as i32 & 3;
            }
            for i in 0..16 {
                sc[i] = blk[i] as i32 & 15;
                mn[i] = blk[i] as i32 >> 4;
            }
            (d, dmin) = (half(blk, 80), half(blk, 82));
        }
        tag::Q3_K => {
            for e in 0..QK {
                let (j, k, b) = (e / 128, e % 128 / 32, e % 32);
                let low = (blk[32 + 32 * j + b] >> (2 * k)) as i32 & 3;
                let high = (blk[b] >> (4 * j + k)) as i32 & 1;
                w[e] = low - if high == 1 { 0 } else { 4 };
            }
            sc = q3k_scales(&blk[96..108]);
            (d, dmin) = (half(blk, 108), 0.0);
        }
        tag::Q4_K | tag::Q5_K => {
            let q5 = t == tag::Q5_K;
            let qs = if q5 { 48 } else { 16 };
            for e in 0..QK {
                let (j, h, b) = (e / 64, e % 64 / 32, e % 32);
                let nibble = (blk[qs + 32 * j + b] >> (4 * h)) as i32 & 15;
                let high = if q5 {
                    ((blk[16 + b] >> (2 * j + h)) as i32 & 1) << 4
                } else {
                    0
                };
                w[e] = nibble | high;
            }
            let (s32, m32) = q4k_scales(blk);
            sc = std::array::from_fn(|i| s32[i / 2]);
            mn = std::array::from_fn(|i| m32[i / 2]);
            (d, dmin) = (half(blk, 0), half(blk, 2));
        }
        tag::Q6_K => {
            let q = q6k_codes(blk);
            for e in 0..QK {
                w[e] = q[e] as i32;
            }
            sc = std::array::from_fn(|i| blk[192 + i] as i8 as i32);
            (d, dmin) = (half(blk, 208), 0.0);
        }
        _ => {
            for e in 0..QK {
                let (ib, t) = (e / 32, e % 32);
                let byte = blk[8 + 16 * ib + t % 16];
                let nibble = if t < 16 { byte & 15 } else { byte >> 4 };
                w[e] = ggraph_core::quant::IQ4_VALUES[nibble as usize] as i32;
            }
            let s32 = iq4xs_scales(blk);
            sc = std::array::from_fn(|i| s32[i / 2]);
            (d, dmin) = (half(blk, 0), 0.0);
        }
    }
    Decoded { w, sc, mn, d, dmin }
}

/// The scalar kernels: ggml's sums restated value by value (and the
/// reference the vector kernels are tested against).
mod portable {
    use super::*;

    /// The eight integer lanes of codes `w` times `x`: lane `l` holds
    /// values `4l..4l + 4` of each 32, times the scale of their 16.
    fn lanes(dec: &Decoded, x: &[i8]) -> [i32; 8] {
        let mut lanes = [0i32; 8];
        for g in 0..QK / 32 {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let v = 32 * g + 4 * l;
                let s: i32 = (v..v + 4).map(|v| dec.w[v] * x[v] as i32).sum();
                *lane += dec.sc[2 * g + l / 4] * s;
            }
        }
        lanes
    }

    /// The mins of each 16 values times the activations' sums of them.
    fn mins16(dec: &Decoded, bs: &[i16]) -> [i32; 16] {
        std::array::from_fn(|i| dec.mn[i] * bs[i] as i32)
    }

    /// Column `col`'s codes, sums per 16 and scale in super-block `sb`.
    ///
    /// # Safety
    /// The column holds super-block `sb`.
    unsafe fn column<'a>(col: &Col, sb: usize) -> (&'a [i8], &'a [i16], f32) {
        // SAFETY: caller's contract.
        unsafe {
            (
                std::slice::from_raw_parts(col.codes.add(sb * QK), QK),
                std::slice::from_raw_parts(col.bs16.add(sb * 16), 16),
                *col.d.add(sb),
            )
        }
    }

    /// Each super-block of the row, decoded, with each column's.
    ///
    /// # Safety
    /// As for [`Kernel`], the row's type being `t`.
    unsafe fn each<const C: usize>(
        t: u8,
        row: *const u8,
        cols: &[Col; C],
        nsb: usize,
        mut f: impl FnMut(usize, &Decoded, &[i8], &[i16], f32),
    ) {
        let bytes = block_bytes(t);
        for sb in 0..nsb {
            // SAFETY: caller's contract.
            let blk = unsafe { std::slice::from_raw_parts(row.add(sb * bytes), bytes) };
            let dec = decode(t, blk);
            for (c, col) in cols.iter().enumerate() {
                // SAFETY: caller's contract.
                let (x, bs, dx) = unsafe { column(col, sb) };
                f(c, &dec, x, bs, dx);
            }
        }
    }

    /// `vec_dot`'s eight lanes (the module's text), with each type's
    /// extra terms: Q6_K's offset of 32 off its lanes, Q4_K's mins in
    /// four lanes, Q2_K's mins in the eight lanes before the codes, and
    /// Q5_K's mins in one sum.
    ///
    /// # Safety
    /// As for [`Kernel`], the row's type being `T`.
    pub(super) unsafe fn eight_lanes<const T: u8, const C: usize>(
        row: *const u8,
        cols: [Col; C],
        nsb: usize,
        _: Step,
        _: [f32; C],
    ) -> [f32; C] {
        let mut acc = [[0f32; 8]; C];
        let mut accm = [[0f32; 4]; C];
        let mut summs = [0f32; C];
        // SAFETY: caller's contract.
        unsafe {
            each(T, row, &cols, nsb, |c, dec, x, bs, dx| {
                let mut l = lanes(dec, x);
                let mins = mins16(dec, bs);
                let (d, dmin) = (dx * dec.d, -dx * dec.dmin);
                match T {
                    tag::Q6_K => {
                        for (i, lane) in l.iter_mut().enumerate() {
                            let (a, b) = (2 * i, 2 * i + 1);
                            *lane -= 32 * (bs[a] as i32 * dec.sc[a] + bs[b] as i32 * dec.sc[b]);
                        }
                    }
                    tag::Q4_K => {
                        for (i, a) in accm[c].iter_mut().enumerate() {
                            let p: i32 = mins[4 * i..4 * i + 4].iter().sum();
                            *a = dmin.mul_add(p as f32, *a);
                        }
                    }
                    tag::Q2_K => {
                        for (i, a) in acc[c].iter_mut().enumerate() {
                            *a = dmin.mul_add((mins[2 * i] + mins[2 * i + 1]) as f32, *a);
                        }
                    }
                    tag::Q5_K => {
                        let p: i32 = mins.iter().sum();
                        summs[c] = dmin.mul_add(p as f32, summs[c]);
                    }
                    _ => {}
                }
                for (a, lane) in acc[c].iter_mut().zip(l) {
                    *a = d.mul_add(lane as f32, *a);
                }
            });
        }
        std::array::from_fn(|c| match T {
            tag::Q4_K => hsum8(acc[c]) + hsum4(accm[c]),
            tag::Q5_K => hsum8(acc[c]) + summs[c],
            _ => hsum8(acc[c]),
        })
    }

    /// The tiled kernels' steps (the module's text).
    ///
    /// # Safety
    /// As for [`Kernel`], the row's type being `T`.
    pub(super) unsafe fn tiled<const T: u8, const C: usize>(
        row: *const u8,
        cols: [Col; C],
        nsb: usize,
        _: Step,
        init: [f32; C],
    ) -> [f32; C] {
        let mut acc = init;
        // SAFETY: caller's contract.
        unsafe {
            each(T, row, &cols, nsb, |c, dec, x, bs, dx| {
                let mut s: i32 = lanes(dec, x).iter().sum();
                if T == tag::Q6_K {
                    s -= 32 * (0..16).map(|i| bs[i] as i32 * dec.sc[i]).sum::<i32>();
                }
                let mut r = dec.d * s as f32;
                if matches!(T, tag::Q2_K | tag::Q4_K | tag::Q5_K) {
                    let m: i32 = mins16(dec, bs).iter().sum();
                    r = (-dec.dmin).mul_add(m as f32, r);
                }
                acc[c] = r.mul_add(dx, acc[c]);
            });
        }
        acc
    }

    /// ggml's repacked Q4_K steps (the module's text).
    ///
    /// # Safety
    /// As for [`Kernel`], the row's type being Q4_K.
    pub(super) unsafe fn q4k_repacked<const C: usize>(
        row: *const u8,
        cols: [Col; C],
        nsb: usize,
        step: Step,
        _: [f32; C],
    ) -> [f32; C] {
        let mut acc = [0f32; C];
        let mut accm = [0f32; C];
        let per = if step == Step::Pair { 2 } else { 8 };
        // SAFETY: caller's contract.
        unsafe {
            each(tag::Q4_K, row, &cols, nsb, |c, dec, x, bs, dx| {
                for first in (0..8).step_by(per) {
                    let (mut s, mut mins) = (0i32, 0i32);
                    for g in first..first + per {
                        let dot: i32 = (32 * g..32 * g + 32).map(|v| dec.w[v] * x[v] as i32).sum();
                        s += dec.sc[2 * g] * dot;
                        mins += dec.mn[2 * g] * (bs[2 * g] as i32 + bs[2 * g + 1] as i32);
                    }
                    acc[c] = (s as f32).mul_add(dec.d * dx, acc[c]);
                    accm[c] = (mins as f32).mul_add(dec.dmin * dx, accm[c]);
                }
            });
        }
        std::array::from_fn(|c| acc[c] - accm[c])
    }
}

/// The same sums with AVX2: `vpmaddubsw` per 32 values, the sub-block
/// scales applied and pairs summed by `vpmaddwd`, as ggml's kernels.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::*;
    use crate::kernels::math::{f16_at, hsum256};
    use crate::kernels::matmul::row_streaming::{PREFETCH_BYTES, prefetch_lines};

    /// Q6_K's 6-bit codes of one super-block, 32 values a register.
    ///
    /// # Safety
    /// AVX2 is available; `blk` holds a Q6_K super-block.
    #[inline(always)]
    unsafe fn q6k_codes(blk: *const u8) -> [__m256i; 8] {
        // SAFETY: caller's contract.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let m30 = _mm256_set1_epi8(0x30);
            let mut u = [_mm256_setzero_si256(); 8];
            for h in 0..2 {
                let ql0 = _mm256_loadu_si256(blk.add(64 * h) as *const __m256i);
                let ql1 = _mm256_loadu_si256(blk.add(64 * h + 32) as *const __m256i);
                let qh = _mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i);
                u[4 * h] = _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                );
                u[4 * h + 1] = _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                );
                u[4 * h + 2] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                    _mm256_and_si256(qh, m30),
                );
                u[4 * h + 3] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                );
            }
            u
        }
    }

    /// The sum of eight 32-bit lanes (of four with `_128`).
    ///
    /// # Safety
    /// AVX2 is available.
    #[inline(always)]
    unsafe fn hsum_i32(t: __m256i) -> i32 {
        // SAFETY: the caller's AVX2.
        unsafe {
            hsum_i32_128(_mm_add_epi32(
                _mm256_castsi256_si128(t),
                _mm256_extracti128_si256::<1>(t),
            ))
        }
    }

    #[inline(always)]
    unsafe fn hsum_i32_128(s: __m128i) -> i32 {
        // SAFETY: the caller's AVX2.
        unsafe {
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
        }
    }

    /// Q4_K's codes (32 a register, value order), sub-block scales as
    /// 16-bit lanes, and mins as eight 16-bit values.
    ///
    /// # Safety
    /// AVX2 is available; `blk` holds a Q4_K super-block.
    #[inline(always)]
    unsafe fn q4k_parts(blk: *const u8) -> ([__m256i; 8], [__m256i; 8], __m128i) {
        // SAFETY: caller's contract.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let mut u = [_mm256_setzero_si256(); 8];
            for j in 0..4 {
                let v = _mm256_loadu_si256(blk.add(16 + 32 * j) as *const __m256i);
                u[2 * j] = _mm256_and_si256(v, m4);
                u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
            }
            let [sc_lo, sc_hi, mn_lo, mn_hi] = q4k_scales_mins(&*(blk.add(4) as *const [u8; 12]));
            let sc8 = _mm_set_epi32(0, 0, sc_hi as i32, sc_lo as i32);
            // scale g over all sixteen 16-bit lanes
            let s = std::array::from_fn(|g| {
                _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc8, _mm_set1_epi8(g as i8)))
            });
            let mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32));
            (u, s, mn)
        }
    }

    /// The sums per 32 values of a column's super-block, as 16-bit values.
    ///
    /// # Safety
    /// AVX2 is available; `bs16` holds 16 sums.
    #[inline(always)]
    unsafe fn sums32(bs16: *const i16) -> __m128i {
        // SAFETY: caller's contract.
        unsafe {
            let bs = _mm256_loadu_si256(bs16 as *const __m256i);
            _mm_hadd_epi16(
                _mm256_castsi256_si128(bs),
                _mm256_extracti128_si256::<1>(bs),
            )
        }
    }

    /// The four 32-bit lanes' sums of each of four registers.
    ///
    /// # Safety
    /// AVX2 is available.
    #[inline(always)]
    unsafe fn sums_of_four(t: [__m256i; 4]) -> [i32; 4] {
        let mut out = [0i32; 4];
        // SAFETY: the caller's AVX2; four lanes into four values.
        unsafe {
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
            let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, s);
        }
        out
    }

    /// # Safety
    /// AVX2, FMA and F16C are available; as for [`Kernel`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4k_repacked<const C: usize>(
        row: *const u8,
        cols: [Col; C],
        nsb: usize,
        step: Step,
        _: [f32; C],
    ) -> [f32; C] {
        // SAFETY: caller's contract; every read is inside super-block sb.
        unsafe {
            let mut acc = [0f32; C];
            let mut accm = [0f32; C];
            for sb in 0..nsb {
                let blk = row.add(sb * Q4K_BYTES);
                one_column_ahead::<C>(blk, Q4K_BYTES);
                let (u, s, mn) = q4k_parts(blk);
                let (d, dmin) = (f16_at(blk), f16_at(blk.add(2)));
                for c in 0..C {
                    let col = &cols[c];
                    let dx = *col.d.add(sb);
                    let x = col.codes.add(sb * QK);
                    // per pair of sub-blocks: the scaled sums and the mins'
                    let t: [__m256i; 4] = std::array::from_fn(|p| {
                        let x0 = _mm256_loadu_si256(x.add(64 * p) as *const __m256i);
                        let x1 = _mm256_loadu_si256(x.add(64 * p + 32) as *const __m256i);
                        _mm256_add_epi32(
                            _mm256_madd_epi16(s[2 * p], _mm256_maddubs_epi16(u[2 * p], x0)),
                            _mm256_madd_epi16(s[2 * p + 1], _mm256_maddubs_epi16(u[2 * p + 1], x1)),
                        )
                    });
                    let pairs = sums_of_four(t);
                    let m = _mm_madd_epi16(mn, sums32(col.bs16.add(sb * 16)));
                    let mut mins = [0i32; 4];
                    _mm_storeu_si128(mins.as_mut_ptr() as *mut __m128i, m);
                    let (dd, dm) = (d * dx, dmin * dx);
                    if step == Step::Pair {
                        for p in 0..4 {
                            acc[c] = (pairs[p] as f32).mul_add(dd, acc[c]);
                            accm[c] = (mins[p] as f32).mul_add(dm, accm[c]);
                        }
                    } else {
                        let whole: i32 = pairs.iter().sum();
                        let whole_mins: i32 = mins.iter().sum();
                        acc[c] = (whole as f32).mul_add(dd, acc[c]);
                        accm[c] = (whole_mins as f32).mul_add(dm, accm[c]);
                    }
                }
            }
            std::array::from_fn(|c| acc[c] - accm[c])
        }
    }

    /// A super-block of any of the six types as the kernels read it: its
    /// codes 32 a register (signed for Q3_K and IQ4_XS), its scales and
    /// mins per 16 as 16-bit values, `d` and `dmin`.
    pub(super) struct Parts {
        pub(super) u: [__m256i; 8],
        /// The scale of each 16 values, as 16-bit values.
        pub(super) sc: __m256i,
        pub(super) mins: __m256i,
        pub(super) d: f32,
        pub(super) dmin: f32,
    }

    /// # Safety
    /// AVX2 and F16C are available; `blk` holds a super-block of type `T`.
    #[inline(always)]
    pub(super) unsafe fn parts<const T: u8>(blk: *const u8) -> Parts {
        // SAFETY: caller's contract.
        unsafe {
            let bytes = std::slice::from_raw_parts(blk, block_bytes(T));
            let mut u = [_mm256_setzero_si256(); 8];
            // the scale of each 16 values as signed bytes, the mins as 16-bit
            // values: built in registers (stores of single bytes read back
            // whole would stall)
            let sc8;
            let mut mins = _mm256_setzero_si256();
            let (d, dmin);
            let low = |v: __m256i, mask: i8| _mm256_and_si256(v, _mm256_set1_epi8(mask));
            let shr = |v: __m256i, n: i32| _mm256_srl_epi16(v, _mm_cvtsi32_si128(n));
            match T {
                tag::Q2_K | tag::Q3_K => {
                    let qs = if T == tag::Q2_K { 16 } else { 32 };
                    let hm = _mm256_loadu_si256(blk as *const __m256i);
                    for j in 0..2 {
                        let q = _mm256_loadu_si256(blk.add(qs + 32 * j) as *const __m256i);
                        for k in 0..4 {
                            let g = 4 * j + k;
                            let c = low(shr(q, 2 * k as i32), 3);
                            u[g] = if T == tag::Q2_K {
                                c
                            } else {
                                // low two bits, less 4 where the high bit is clear
                                let h = low(shr(hm, (4 * j + k) as i32), 1);
                                _mm256_sub_epi8(
                                    _mm256_or_si256(c, _mm256_slli_epi16::<2>(h)),
                                    _mm256_set1_epi8(4),
                                )
                            };
                        }
                    }
                    if T == tag::Q2_K {
                        let b = _mm_loadu_si128(blk as *const __m128i);
                        let m4 = _mm_set1_epi8(15);
                        sc8 = _mm_and_si128(b, m4);
                        mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m4));
                        (d, dmin) = (f16_at(blk.add(80)), f16_at(blk.add(82)));
                    } else {
                        let [w0, w1, w2, w3] = q3k_scale_words(&bytes[96..108]);
                        let w = _mm_set_epi32(w3 as i32, w2 as i32, w1 as i32, w0 as i32);
                        sc8 = _mm_sub_epi8(w, _mm_set1_epi8(32));
                        (d, dmin) = (f16_at(blk.add(108)), 0.0);
                    }
                }
                tag::Q4_K => {
                    for j in 0..4 {
                        let q = _mm256_loadu_si256(blk.add(16 + 32 * j) as *const __m256i);
                        u[2 * j] = low(q, 15);
                        u[2 * j + 1] = low(shr(q, 4), 15);
                    }
                    (sc8, mins) = q4k_scale_bytes(blk);
                    (d, dmin) = (f16_at(blk.add(0)), f16_at(blk.add(2)));
                }
                tag::Q6_K => {
                    u = q6k_codes(blk);
                    sc8 = _mm_loadu_si128(blk.add(192) as *const __m128i);
                    (d, dmin) = (f16_at(blk.add(208)), 0.0);
                }
                tag::Q5_K => {
                    let qh = _mm256_loadu_si256(blk.add(16) as *const __m256i);
                    for j in 0..4 {
                        let q = _mm256_loadu_si256(blk.add(48 + 32 * j) as *const __m256i);
                        for h in 0..2 {
                            let nib = low(shr(q, 4 * h as i32), 15);
                            let hb = _mm256_slli_epi16::<4>(low(shr(qh, (2 * j + h) as i32), 1));
                            u[2 * j + h] = _mm256_or_si256(nib, hb);
                        }
                    }
                    (sc8, mins) = q4k_scale_bytes(blk);
                    (d, dmin) = (f16_at(blk.add(0)), f16_at(blk.add(2)));
                }
                _ => {
                    let values = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        ggraph_core::quant::IQ4_VALUES.as_ptr() as *const __m128i,
                    ));
                    for (ib, u) in u.iter_mut().enumerate() {
                        let v = _mm_loadu_si128(blk.add(8 + 16 * ib) as *const __m128i);
                        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
                        *u = _mm256_shuffle_epi8(values, low(both, 15));
                    }
                    let w = _mm_cvtsi64_si128(iq4xs_scale_word(bytes) as i64);
                    let s = _mm_sub_epi8(w, _mm_set1_epi8(32));
                    // a scale a 32 values as one a 16: each byte twice
                    sc8 = _mm_unpacklo_epi8(s, s);
                    (d, dmin) = (f16_at(blk.add(0)), 0.0);
                }
            }
            Parts {
                u,
                sc: _mm256_cvtepi8_epi16(sc8),
                mins,
                d,
                dmin,
            }
        }
    }

    /// With one column, where each row is read once, asks for the `len`
    /// bytes [`PREFETCH_BYTES`] past `at` (the hardware's prefetch alone
    /// left the one-column kernels waiting on their loads, a row at a
    /// time: docs/performance.md).
    #[inline(always)]
    fn one_column_ahead<const C: usize>(at: *const u8, len: usize) {
        if C == 1 {
            prefetch_lines(at.wrapping_add(PREFETCH_BYTES), len);
        }
    }

    /// Q4_K's and Q5_K's scale of each 16 values as bytes, and their mins
    /// as 16-bit values.
    ///
    /// # Safety
    /// SSE4.1 and AVX2 are available; `blk` holds a Q4_K or Q5_K
    /// super-block.
    #[inline(always)]
    unsafe fn q4k_scale_bytes(blk: *const u8) -> (__m128i, __m256i) {
        // SAFETY: caller's contract.
        unsafe {
            let [s0, s1, m0, m1] = q4k_scales_mins(&*(blk.add(4) as *const [u8; 12]));
            let s = _mm_set_epi32(0, 0, s1 as i32, s0 as i32);
            let m = _mm_set_epi32(0, 0, m1 as i32, m0 as i32);
            (
                _mm_unpacklo_epi8(s, s),
                _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m)),
            )
        }
    }

    /// The shuffle that takes 16-bit scales `2i` and `2i + 1` of each half
    /// over all eight lanes of the low half and of the high half.
    ///
    /// # Safety
    /// AVX2 is available.
    #[inline(always)]
    unsafe fn scale_pair(i: usize) -> __m256i {
        let (a, b) = (4 * i as i8, 4 * i as i8 + 1);
        let (c, d) = (a + 2, b + 2);
        // SAFETY: the caller's AVX2.
        unsafe {
            _mm256_setr_epi8(
                a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, c, d, c, d, c, d, c, d, c, d, c, d,
                c, d, c, d,
            )
        }
    }

    /// The eight lanes of a super-block's codes times each column's codes
    /// `x[c]`: a 32 values' codes and scales stay in registers while every
    /// column passes. Signed codes take the sign trick, except Q3_K's with
    /// one column: there its low two bits and its 4 where the high bit is
    /// clear take a `vpmaddubsw` each, as ggml's kernel does (measured
    /// faster: docs/performance.md; with four columns the sign trick's
    /// `|u|` serves them all).
    ///
    /// # Safety
    /// AVX2 is available; each `x[c]` holds 256 codes.
    #[inline(always)]
    unsafe fn lanes_of<const T: u8, const C: usize>(p: &Parts, x: [*const i8; C]) -> [__m256i; C] {
        // SAFETY: caller's contract.
        unsafe {
            // scales 0..8 and 8..16 each over both halves: one shuffle then
            // spreads a 32 values' two over the halves of a register
            let halves = [
                _mm256_permute2x128_si256::<0x00>(p.sc, p.sc),
                _mm256_permute2x128_si256::<0x11>(p.sc, p.sc),
            ];
            let pick = [scale_pair(0), scale_pair(1), scale_pair(2), scale_pair(3)];
            let mut t = [_mm256_setzero_si256(); C];
            for g in 0..8 {
                let s = _mm256_shuffle_epi8(halves[g / 4], pick[g % 4]);
                let u = p.u[g];
                let split = T == tag::Q3_K && C == 1;
                let w = if signed(T) && !split {
                    _mm256_sign_epi8(u, u)
                } else {
                    u
                };
                for c in 0..C {
                    let xg = _mm256_loadu_si256(x[c].add(32 * g) as *const __m256i);
                    let pairs = if split {
                        // u & 3 less u & 4: the codes, -4..4 in two's complement
                        let low = _mm256_and_si256(u, _mm256_set1_epi8(3));
                        let four = _mm256_and_si256(u, _mm256_set1_epi8(4));
                        _mm256_sub_epi16(
                            _mm256_maddubs_epi16(low, xg),
                            _mm256_maddubs_epi16(four, xg),
                        )
                    } else if signed(T) {
                        _mm256_maddubs_epi16(w, _mm256_sign_epi8(xg, u))
                    } else {
                        _mm256_maddubs_epi16(w, xg)
                    };
                    t[c] = _mm256_add_epi32(t[c], _mm256_madd_epi16(s, pairs));
                }
            }
            t
        }
    }

    pub(super) const fn signed(t: u8) -> bool {
        matches!(t, tag::Q3_K | tag::IQ4_XS)
    }

    pub(super) const fn has_mins(t: u8) -> bool {
        matches!(t, tag::Q2_K | tag::Q4_K | tag::Q5_K)
    }

    /// `vec_dot`'s eight lanes for every type (the portable kernel's
    /// text).
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available; as for [`Kernel`], the row's type
    /// being `T`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn eight_lanes<const T: u8, const C: usize>(
        row: *const u8,
        cols: [Col; C],
        nsb: usize,
        _: Step,
        _: [f32; C],
    ) -> [f32; C] {
        // SAFETY: caller's contract; every read is inside super-block sb.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); C];
            let mut accm = [_mm_setzero_ps(); C];
            let mut summs = [0f32; C];
            for sb in 0..nsb {
                one_column_ahead::<C>(row.add(sb * block_bytes(T)), block_bytes(T));
                let p = parts::<T>(row.add(sb * block_bytes(T)));
                let x = cols.map(|col| col.codes.add(sb * QK));
                let ts = lanes_of::<T, C>(&p, x);
                for (c, t) in ts.into_iter().enumerate() {
                    let col = &cols[c];
                    let dx = *col.d.add(sb);
                    let (d, dmin) = (_mm256_set1_ps(dx * p.d), -dx * p.dmin);
                    // Q6_K's offset of 32 off lane `l` as sub-blocks `2l` and
                    // `2l + 1`'s sums times their scales
                    let t = if T == tag::Q6_K {
                        let bs = _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                        _mm256_sub_epi32(t, _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, p.sc)))
                    } else {
                        t
                    };
                    if has_mins(T) {
                        let bs = _mm256_loadu_si256(col.bs16.add(sb * 16) as *const __m256i);
                        // the mins' products a 32 values (each min a 16's
                        // pair)
                        let m = _mm256_madd_epi16(p.mins, bs);
                        match T {
                            tag::Q2_K => {
                                acc[c] = _mm256_fmadd_ps(
                                    _mm256_set1_ps(dmin),
                                    _mm256_cvtepi32_ps(m),
                                    acc[c],
                                )
                            }
                            tag::Q4_K => {
                                // lane i: the 32s 2i and 2i + 1
                                let m4 = _mm_hadd_epi32(
                                    _mm256_castsi256_si128(m),
                                    _mm256_extracti128_si256::<1>(m),
                                );
                                accm[c] =
                                    _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(m4), accm[c]);
                            }
                            _ => summs[c] = dmin.mul_add(hsum_i32(m) as f32, summs[c]),
                        }
                    }
                    acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(t), acc[c]);
                }
            }
            std::array::from_fn(|c| match T {
                tag::Q4_K => {
                    let mut m = [0f32; 4];
                    _mm_storeu_ps(m.as_mut_ptr(), accm[c]);
                    hsum256(acc[c]) + hsum4(m)
                }
                tag::Q5_K => hsum256(acc[c]) + summs[c],
                _ => hsum256(acc[c]),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random super-blocks of `dtype` (scales in range, codes anywhere).
    fn random_rows(dtype: DType, m: usize, nsb: usize, seed: u64) -> Vec<u8> {
        let ts = dtype.type_size();
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let mut bytes: Vec<u8> = (0..m * nsb * ts).map(|_| next() as u8).collect();
        for blk in bytes.chunks_exact_mut(ts) {
            // finite f16 scales of modest size
            let half = |v: u32| (0x2c00 + (v % 0x0c00)) as u16;
            let (at, dmin_at) = match dtype {
                DType::Q6_K => (208, None),
                DType::Q3_K => (108, None),
                DType::Q2_K => (80, Some(82)),
                DType::IQ4_XS => (0, None),
                _ => (0, Some(2)),
            };
            blk[at..at + 2].copy_from_slice(&half(next()).to_le_bytes());
            if let Some(p) = dmin_at {
                blk[p..p + 2].copy_from_slice(&half(next()).to_le_bytes());
            }
        }
        bytes
    }

    /// Every instruction set's kernels against the portable ones, bit for
    /// bit, on each order and step, through the whole driver.
    #[test]
    fn every_instruction_set_gives_the_portable_bits() {
        let (nsb, k) = (11, 11 * QK);
        for dtype in [
            DType::Q2_K,
            DType::Q3_K,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::IQ4_XS,
        ] {
            // 70 rows: more than a task's block of unpacked rows, and a
            // last micro tile of six
            for m in [8, 7, 70] {
                let rows = random_rows(dtype, m, nsb, 7 + m as u64);
                let a = WeightRows {
                    ptr: rows.as_ptr(),
                    stride: nsb * dtype.type_size(),
                    elem_stride: dtype.type_size(),
                    dtype,
                    k,
                };
                for n in [1, 3, 4, 6, 8, 9, 21, 35] {
                    let mut x: Vec<Vec<f32>> = (0..n)
                        .map(|j| {
                            (0..k)
                                .map(|i| ((i * 7 + j * 13) % 23) as f32 * 0.37 - 4.0)
                                .collect()
                        })
                        .collect();
                    let b = Cols(x.iter_mut().map(|c| c.as_mut_ptr()).collect());
                    let run = |isa: Isa| {
                        let mut out = vec![vec![0f32; m]; n];
                        let o = Cols(out.iter_mut().map(|c| c.as_mut_ptr()).collect());
                        gemm(isa, ProductOf::MulMat, a, m, &b, &o);
                        out
                    };
                    let want = run(Isa::Portable);
                    for isa in crate::kernels::isa::all_supported() {
                        let got = run(isa);
                        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                            assert_eq!(g.to_bits(), w.to_bits(), "{dtype:?} m={m} n={n} {isa:?}");
                        }
                    }
                }
            }
        }
    }
}
