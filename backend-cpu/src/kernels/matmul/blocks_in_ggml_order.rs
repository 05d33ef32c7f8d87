//! Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1 rows in GGUF's layout
//! times activations quantised to Q8_0 (Q8_1 for Q4_1 and Q5_1), each dot
//! summed as ggml's x86 kernels sum it, so that every output equals
//! llama.cpp's bit for bit. The integer sums are exact whichever
//! instructions form them (`vpmaddubsw`/`vpmaddwd` on AVX2, `vpdpbusd`
//! with VNNI); ggml fixes the float steps, in one of three orders:
//!
//! - **eight lanes** (`ggml_vec_dot_q8_0_q8_0` and its Q4_0 twin for one
//!   column, tinyBLAS for more: the same order): in each block the 32 code
//!   products go to eight integer lanes, lane `t` holding values `4t..4t +
//!   4`; each lane is a float accumulator, `acc = fma(dw * dx, lane, acc)`
//!   from the first block on (`dw * dx`, a product of two f16 values, or
//!   of an f16 and a power of two, is exact in f32); the lanes are then
//!   summed as `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`;
//! - **whole blocks** (ggml's repacked Q4_0 kernels, which it runs for
//!   every Q4_0, IQ4_NL and MXFP4 matrix of whole groups of eight rows):
//!   each block's whole integer sum, `acc = fma(sum, dw * dx, acc)` from
//!   the first block on;
//! - **paired lanes** (`ggml_vec_dot_mxfp4_q8_0`, for MXFP4 matrices ggml
//!   does not repack): eight lanes as above, the even blocks in one set
//!   of accumulators and the odd in another, the two added lane by lane
//!   before the lanes are summed; an odd last block's whole sum then
//!   `fma(sum, dw * dx, dot)`.
//!
//! Q4_0's codes are its nibbles less 8, Q5_0's its nibbles and high bits
//! less 16, IQ4_NL's the IQ4 table's values at its nibbles, signed as
//! Q8_0's, MXFP4's its table's (E2M1's values doubled) with the E8M0 scale
//! halved. ggml sums Q5_0 in eight lanes for one column (`vec_dot`) and
//! for more (tinyBLAS, the same order), and never repacks it. Q4_1's and
//! Q5_1's codes are their nibbles (and high bits), unsigned, in eight
//! lanes too (`vec_dot` for every column count); their mins take one sum
//! of their own, `summs = fma(m, s, summs)` a block (`s` the activations'
//! f16 sum term), added to the lanes' sum at the end.

use std::cell::RefCell;

use ggraph_core::DType;
use ggraph_core::quant::{IQ4_VALUES, MXFP4_VALUES, e8m0_to_f32_half, f16_to_f32};

use super::activation_quant::quantize_column;
use super::operands::{Cols, WeightRows};
use super::quant_format::Partner;
#[cfg(target_arch = "x86_64")]
use super::quant_format::format;
use super::row_streaming::{
    SHORT_ROW_BYTES, STREAMED_ROW_BYTES, STREAMED_ROW_BYTES_WITH_LANE_STARTS,
};
use crate::kernels::isa::Isa;
use crate::kernels::parallel::par_ranges;
use crate::kernels::scratch::with_scratch;
use crate::team;

/// How ggml adds up the blocks' sums (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    EightLanes,
    WholeBlocks,
    PairedLanes,
}

/// The order ggml sums a product of `m` rows of `dtype` in, where it is
/// one of these (Q8_0, Q4_0, Q5_0 and IQ4_NL).
pub(crate) fn order(dtype: DType, m: usize) -> Option<Order> {
    match dtype {
        DType::Q8_0 | DType::Q5_0 | DType::Q4_1 | DType::Q5_1 => Some(Order::EightLanes),
        // ggml repacks a Q4_0 or IQ4_NL matrix of whole groups of eight
        // rows
        DType::Q4_0 | DType::IQ4_NL if m % 8 == 0 => Some(Order::WholeBlocks),
        DType::Q4_0 | DType::IQ4_NL => Some(Order::EightLanes),
        DType::MXFP4 if m % 8 == 0 => Some(Order::WholeBlocks),
        DType::MXFP4 => Some(Order::PairedLanes),
        _ => None,
    }
}

/// Rows per tile.
const TILE_ROWS: usize = 4;
/// Most columns per tile of the 256-bit kernels (the 512-bit one takes
/// four).
const TILE_COLS: usize = 3;
/// Row tiles a task takes before the columns move on: 32 rows, whose
/// blocks stay in L2 while every column passes over them.
const CHUNK_TILES: usize = 8;
/// A tile's block decoded (AVX2, eight lanes): the four rows' 32 signed
/// codes, their absolute values, and the four scales and (Q4_1, Q5_1)
/// mins in f32.
const DECODED_BLOCK: usize = 2 * TILE_ROWS * 32 + 2 * TILE_ROWS * 4;
/// Decoded tiles a task keeps at a time: what stays in L2 beside the
/// columns.
const DECODED_CHUNK_BYTES: usize = 192 << 10;
/// Columns of a decoded tile.
const DECODED_COLS: usize = 2;
/// Products of this many columns or more decode their rows' blocks once
/// (fewer decode them in the tile, as they are read).
const DECODED_FROM_COLS: usize = 4;

/// One column's activations: `k` codes, a scale per block, and per block
/// the sums of each four codes times minus the weights' offset (the
/// integer start of each lane for the VNNI kernels, whose weights are
/// unsigned: Q8_0's codes plus 128, Q4_0's nibbles).
#[derive(Clone, Copy)]
struct Acts {
    codes: *const i8,
    scales: *const f32,
    bias: *const i32,
    /// Q8_1's sum term per block (for Q4_1 and Q5_1).
    sums: *const f32,
}

// SAFETY: the pointers address the call's scratch, alive and unchanged
// while the tasks read it.
unsafe impl Send for Acts {}
unsafe impl Sync for Acts {}

/// `out[j][i] = dot(a row i, b[j])` for `i < m`, rows of Q8_0 or Q4_0
/// blocks side by side.
pub(crate) fn gemm(isa: Isa, a: WeightRows, m: usize, b: &Cols<f32>, out: &Cols<f32>) {
    let (k, n) = (a.k, b.0.len());
    let nb = k / 32;
    let Some(order) = order(a.dtype, m) else {
        unreachable!("dispatch sends only the types `order` names here");
    };
    let tiles = Tiles::new(isa, a.dtype, order);
    let offset = unsigned_offset(a.dtype);
    let partner = if has_mins(a.dtype) {
        Partner::Q8_1
    } else {
        Partner::Q8_0
    };
    with_scratch(&CODES, n * k, |codes| {
        with_scratch(&SCALES, 2 * n * nb, |scales| {
            with_scratch(&BIAS, n * k / 4, |bias| {
                let (scales, sums) = scales.split_at_mut(n * nb);
                quantize(partner, b, k, codes, scales, sums);
                let sums = &*sums;
                for (g, q) in bias.iter_mut().zip(codes.chunks_exact(4)) {
                    *g = -offset * q.iter().map(|&c| c as i32).sum::<i32>();
                }
                let acts: Vec<Acts> = (0..n)
                    .map(|j| Acts {
                        codes: codes[j * k..].as_ptr(),
                        scales: scales[j * nb..].as_ptr(),
                        bias: bias[j * k / 4..].as_ptr(),
                        sums: sums[j * nb..].as_ptr(),
                    })
                    .collect();
                let bytes = a.dtype.type_size();
                // the one-row kernels add the min terms themselves
                let (matvec, min_pass) = match one_row_matvec(isa, a.dtype, order, nb * bytes) {
                    Some(one) => (Some(one.kernel), has_mins(a.dtype) && !one.adds_mins),
                    None => (tiles.matvec, has_mins(a.dtype)),
                };
                if let (1, Some(matvec)) = (n, matvec) {
                    // the min terms of a chunk's rows while they are in
                    // cache, so with a min pass a chunk at a time
                    let chunk = if min_pass { CHUNK_TILES * TILE_ROWS } else { m };
                    return par_ranges(m, 16, |range| {
                        for c0 in range.clone().step_by(chunk) {
                            let rows = c0..(c0 + chunk).min(range.end);
                            // SAFETY: the rows of range hold nb blocks, the
                            // column k codes; the outputs of range are this
                            // task's.
                            unsafe {
                                matvec(
                                    a.row(rows.start),
                                    a.stride,
                                    rows.len(),
                                    acts[0],
                                    nb,
                                    out.0[0].add(rows.start),
                                )
                            }
                            if !min_pass {
                                continue;
                            }
                            for i0 in rows.clone().step_by(TILE_ROWS) {
                                let nr = TILE_ROWS.min(rows.end - i0);
                                let tile = std::array::from_fn(|r| a.row(i0 + r.min(nr - 1)));
                                // SAFETY: as above.
                                let terms = unsafe { min_terms(bytes, tile, &acts[..1], nb) };
                                for (r, t) in terms[0].iter().take(nr).enumerate() {
                                    // SAFETY: as above.
                                    unsafe { *out.0[0].add(i0 + r) += t };
                                }
                            }
                        }
                    });
                }
                // a task's rows in chunks that stay in L2 while every
                // column passes over them
                let decoded = tiles.decoded.filter(|_| n >= DECODED_FROM_COLS);
                let chunk_tiles = match decoded {
                    Some(_) => (DECODED_CHUNK_BYTES / (nb * DECODED_BLOCK)).clamp(1, CHUNK_TILES),
                    None => CHUNK_TILES,
                };
                let scratch_len = decoded.map_or(0, |_| chunk_tiles * nb * DECODED_BLOCK);
                par_ranges(m.div_ceil(TILE_ROWS), 4, |range| {
                    with_scratch(&DECODED, scratch_len, |scratch| {
                        let tile_rows = |t: usize| -> [*const u8; TILE_ROWS] {
                            let (i0, nr) = (t * TILE_ROWS, TILE_ROWS.min(m - t * TILE_ROWS));
                            std::array::from_fn(|r| a.row(i0 + r.min(nr - 1)))
                        };
                        for chunk in range.clone().step_by(chunk_tiles) {
                            let chunk = chunk..(chunk + chunk_tiles).min(range.end);
                            if let Some(d) = decoded {
                                for (at, t) in scratch
                                    .chunks_exact_mut(nb * DECODED_BLOCK)
                                    .zip(chunk.clone())
                                {
                                    // SAFETY: the rows hold nb blocks, the
                                    // scratch nb decoded blocks.
                                    unsafe { (d.decode)(tile_rows(t), nb, at.as_mut_ptr()) };
                                }
                            }
                            let mut j0 = 0;
                            while j0 < n {
                                let nc = match decoded {
                                    Some(_) => DECODED_COLS.min(n - j0),
                                    None => tiles.columns(n - j0),
                                };
                                let cols = &acts[j0..j0 + nc];
                                for (at, t) in chunk.clone().enumerate() {
                                    let i0 = t * TILE_ROWS;
                                    let nr = TILE_ROWS.min(m - i0);
                                    let rows = tile_rows(t);
                                    // SAFETY: every row holds nb blocks, every
                                    // column k codes, nb scales and k / 4 sums;
                                    // the scratch tile `at` the rows' decoded
                                    // blocks.
                                    let mut dots = unsafe {
                                        match decoded {
                                            Some(d) => d.run(
                                                scratch[at * nb * DECODED_BLOCK..].as_ptr(),
                                                cols,
                                                nb,
                                            ),
                                            None => tiles.run(rows, cols, nb),
                                        }
                                    };
                                    // the decoded tiles and some others add
                                    // the min terms
                                    if has_mins(a.dtype) && decoded.is_none() && !tiles.add_mins {
                                        // SAFETY: as above.
                                        let terms = unsafe { min_terms(bytes, rows, cols, nb) };
                                        for (d, t) in dots.iter_mut().zip(terms).take(nc) {
                                            for (d, t) in d.iter_mut().zip(t) {
                                                *d += t;
                                            }
                                        }
                                    }
                                    for (c, col) in dots.iter().take(nc).enumerate() {
                                        for (r, &v) in col.iter().take(nr).enumerate() {
                                            // SAFETY: output column j0 + c holds
                                            // m values; this task owns rows i0..
                                            // i0 + nr.
                                            unsafe { *out.0[j0 + c].add(i0 + r) = v };
                                        }
                                    }
                                }
                                j0 += nc;
                            }
                        }
                    })
                });
            })
        })
    })
}

thread_local! {
    static DECODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static CODES: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
    static SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static BIAS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// The columns as ggml's Q8_0 (Q8_1) quantiser writes them: codes,
/// scales and (Q8_1) sum terms.
fn quantize(
    partner: Partner,
    b: &Cols<f32>,
    k: usize,
    codes: &mut [i8],
    scales: &mut [f32],
    sums: &mut [f32],
) {
    let nb = k / 32;
    // the columns over the team: a prompt's are many
    let mut each: Vec<_> = codes
        .chunks_exact_mut(k)
        .zip(scales.chunks_exact_mut(nb))
        .zip(sums.chunks_exact_mut(nb))
        .collect();
    team::for_each_chunk_mut(&mut each, 1, |j, column| {
        for ((codes, s), t) in column {
            // SAFETY: column j holds k values.
            let x = unsafe { std::slice::from_raw_parts(b.0[j], k) };
            quantize_column(partner, x, 32, codes, |blk, scale, sum| {
                s[blk] = scale.d;
                t[blk] = scale.sum_term(partner, sum);
            });
        }
    });
}

/// Whether a weight type keeps a min a block (Q4_1, Q5_1).
fn has_mins(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_1 | DType::Q5_1)
}

/// The min terms of four Q4_1 or Q5_1 rows (`bytes` a block) with up to
/// eight columns: per row and column `fma(m, s, summs)` a block, in
/// order, the chains side by side.
///
/// # Safety
/// The rows hold `nb` blocks; the columns `nb` sum terms.
unsafe fn min_terms(
    bytes: usize,
    rows: [*const u8; TILE_ROWS],
    cols: &[Acts],
    nb: usize,
) -> [[f32; TILE_ROWS]; 8] {
    #[inline(always)]
    unsafe fn body(
        bytes: usize,
        rows: [*const u8; TILE_ROWS],
        cols: &[Acts],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; 8] {
        let mut summs = [[0f32; TILE_ROWS]; 8];
        for blk in 0..nb {
            // SAFETY: caller's contract.
            let m = rows.map(|row| unsafe {
                f16_to_f32((row.add(blk * bytes + 2) as *const u16).read_unaligned())
            });
            for (acc, col) in summs.iter_mut().zip(cols) {
                // SAFETY: caller's contract.
                let s = unsafe { *col.sums.add(blk) };
                for (a, m) in acc.iter_mut().zip(m) {
                    *a = m.mul_add(s, *a);
                }
            }
        }
        summs
    }
    // fma instructions where the processor has them, not libm's, the
    // four rows' chains in one register
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "fma,f16c")]
        unsafe fn with_fma(
            bytes: usize,
            rows: [*const u8; TILE_ROWS],
            cols: &[Acts],
            nb: usize,
        ) -> [[f32; TILE_ROWS]; 8] {
            use std::arch::x86_64::*;
            let mut summs = [_mm_setzero_ps(); 8];
            for blk in 0..nb {
                // SAFETY: caller's contract.
                let m = rows.map(|row| unsafe {
                    (row.add(blk * bytes + 2) as *const i16).read_unaligned()
                });
                let m = _mm_cvtph_ps(_mm_setr_epi16(m[0], m[1], m[2], m[3], 0, 0, 0, 0));
                for (acc, col) in summs.iter_mut().zip(cols) {
                    // SAFETY: caller's contract.
                    let s = _mm_set1_ps(unsafe { *col.sums.add(blk) });
                    *acc = _mm_fmadd_ps(m, s, *acc);
                }
            }
            summs.map(|acc| {
                let mut out = [0f32; TILE_ROWS];
                // SAFETY: four lanes into four values.
                unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
                out
            })
        }
        if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: the processor has FMA and F16C; caller's contract.
            return unsafe { with_fma(bytes, rows, cols, nb) };
        }
    }
    // SAFETY: caller's contract.
    unsafe { body(bytes, rows, cols, nb) }
}

/// A tile kernel: four rows times `C` columns over `nb` blocks.
type Tile<const C: usize> =
    unsafe fn([*const u8; TILE_ROWS], [Acts; C], usize) -> [[f32; TILE_ROWS]; C];

/// The tile kernels of one instruction set, weight format and order, for
/// one, two and three columns.
struct Tiles {
    one: Tile<1>,
    two: Tile<2>,
    three: Tile<3>,
    /// With AVX-512 VNNI, in eight lanes (two rows a register), wider
    /// tiles.
    four: Option<Tile<4>>,
    eight: Option<Tile<8>>,
    /// One column over many rows, the loop inside the kernel.
    matvec: Option<Matvec>,
    /// With AVX2 in eight lanes: each tile's blocks decoded once, for
    /// every column.
    decoded: Option<Decoded>,
    /// Whether the tile kernels add Q4_1's and Q5_1's min terms
    /// themselves.
    add_mins: bool,
}

/// Tiles whose rows' blocks are decoded once ([`DECODED_BLOCK`]) and then
/// read by every column.
#[derive(Clone, Copy)]
struct Decoded {
    /// Four rows' `nb` blocks into `nb` decoded ones.
    decode: unsafe fn([*const u8; TILE_ROWS], usize, *mut u8),
    one: unsafe fn(*const u8, [Acts; 1], usize) -> [[f32; TILE_ROWS]; 1],
    two: unsafe fn(*const u8, [Acts; 2], usize) -> [[f32; TILE_ROWS]; 2],
}

impl Decoded {
    /// The dots of a decoded tile and one or two columns, as [`Tiles::run`]
    /// gives them.
    ///
    /// # Safety
    /// `tile` holds `nb` decoded blocks; each column `nb` blocks.
    unsafe fn run(&self, tile: *const u8, cols: &[Acts], nb: usize) -> [[f32; TILE_ROWS]; 8] {
        let mut out = [[0f32; TILE_ROWS]; 8];
        // SAFETY: caller's contract.
        unsafe {
            match cols {
                [a] => out[..1].copy_from_slice(&(self.one)(tile, [*a], nb)),
                [a, b, ..] => out[..2].copy_from_slice(&(self.two)(tile, [*a, *b], nb)),
                [] => {}
            }
        }
        out
    }
}

/// `out[i] = dot(row i, col)` for `count` rows `stride` bytes apart.
type Matvec = unsafe fn(*const u8, usize, usize, Acts, usize, *mut f32);

/// A one-column kernel in eight lanes that reads rows one at a time, one
/// sequential stream.
#[derive(Clone, Copy)]
struct OneRow {
    kernel: Matvec,
    /// Whether it adds Q4_1's and Q5_1's min terms itself.
    adds_mins: bool,
}

/// The one-row kernel for rows of `row_bytes`, where one takes them: on
/// AVX2 for short rows, with VNNI also for rows up to
/// [`STREAMED_ROW_BYTES`] (those of a format whose kernel reads lane
/// starts, [`STREAMED_ROW_BYTES_WITH_LANE_STARTS`]).
fn one_row_matvec(isa: Isa, dtype: DType, order: Order, row_bytes: usize) -> Option<OneRow> {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && order == Order::EightLanes {
        use x86::{matvec_rows_avx2, matvec_rows_vnni};
        macro_rules! of {
            ($kernel:ident, $adds_mins:expr) => {
                return Some(OneRow {
                    kernel: match dtype {
                        DType::Q8_0 => $kernel::<{ format::Q8_0 }>,
                        DType::Q5_0 => $kernel::<{ format::Q5_0 }>,
                        DType::Q4_1 => $kernel::<{ format::Q4_1 }>,
                        DType::Q5_1 => $kernel::<{ format::Q5_1 }>,
                        DType::IQ4_NL => $kernel::<{ format::IQ4_NL }>,
                        DType::Q4_0 => $kernel::<{ format::Q4_0 }>,
                        _ => return None,
                    },
                    adds_mins: $adds_mins,
                })
            };
        }
        // the kernel reads lane starts only for the formats with an offset
        let streamed = match dtype {
            DType::Q5_0 | DType::Q4_0 | DType::IQ4_NL => STREAMED_ROW_BYTES_WITH_LANE_STARTS,
            _ => STREAMED_ROW_BYTES,
        };
        match row_bytes {
            ..=SHORT_ROW_BYTES => of!(matvec_rows_avx2, false),
            _ if row_bytes <= streamed && isa >= Isa::Avx512Vnni => {
                of!(matvec_rows_vnni, true)
            }
            _ => {}
        }
    }
    let _ = (isa, dtype, order, row_bytes);
    None
}

impl Tiles {
    fn new(isa: Isa, dtype: DType, order: Order) -> Tiles {
        macro_rules! pick {
            ($kernel:ident) => {{
                macro_rules! of {
                    ($c:literal) => {
                        match (dtype, order) {
                            (DType::Q8_0, _) => $kernel::<{ format::Q8_0 }, EIGHT, $c>,
                            (DType::Q5_0, _) => $kernel::<{ format::Q5_0 }, EIGHT, $c>,
                            (DType::Q4_1, _) => $kernel::<{ format::Q4_1 }, EIGHT, $c>,
                            (DType::Q5_1, _) => $kernel::<{ format::Q5_1 }, EIGHT, $c>,
                            (DType::IQ4_NL, Order::WholeBlocks) => {
                                $kernel::<{ format::IQ4_NL }, WHOLE, $c>
                            }
                            (DType::IQ4_NL, _) => $kernel::<{ format::IQ4_NL }, EIGHT, $c>,
                            (DType::MXFP4, Order::WholeBlocks) => {
                                $kernel::<{ format::MXFP4 }, WHOLE, $c>
                            }
                            (DType::MXFP4, _) => $kernel::<{ format::MXFP4 }, PAIRED, $c>,
                            (_, Order::WholeBlocks) => $kernel::<{ format::Q4_0 }, WHOLE, $c>,
                            _ => $kernel::<{ format::Q4_0 }, EIGHT, $c>,
                        }
                    };
                }
                Tiles {
                    one: of!(1),
                    two: of!(2),
                    three: of!(3),
                    four: None,
                    eight: None,
                    matvec: None,
                    decoded: None,
                    add_mins: false,
                }
            }};
        }
        #[cfg(target_arch = "x86_64")]
        {
            use x86::{tile_avx2, tile_vnni};
            if isa >= Isa::Avx512Vnni {
                // eight lanes: two rows to a 512-bit register
                macro_rules! wide {
                    ($f:expr) => {
                        Tiles {
                            one: x86::tile_vnni512::<{ $f }, 1>,
                            two: x86::tile_vnni512::<{ $f }, 2>,
                            three: x86::tile_vnni512::<{ $f }, 3>,
                            four: Some(x86::tile_vnni512::<{ $f }, 4>),
                            eight: Some(x86::tile_vnni512::<{ $f }, 8>),
                            matvec: Some(x86::matvec_vnni512::<{ $f }>),
                            decoded: None,
                            add_mins: false,
                        }
                    };
                }
                return match (dtype, order) {
                    (_, Order::WholeBlocks | Order::PairedLanes) => pick!(tile_vnni),
                    (DType::Q8_0, _) => wide!(format::Q8_0),
                    (DType::Q5_0, _) => wide!(format::Q5_0),
                    (DType::Q4_1, _) => wide!(format::Q4_1),
                    (DType::Q5_1, _) => wide!(format::Q5_1),
                    (DType::IQ4_NL, _) => wide!(format::IQ4_NL),
                    _ => wide!(format::Q4_0),
                };
            }
            if isa >= Isa::Avx2 {
                let mut tiles = Tiles {
                    add_mins: true,
                    ..pick!(tile_avx2)
                };
                if order == Order::EightLanes {
                    macro_rules! decoded {
                        ($f:expr) => {{
                            const MINS: bool = unsigned($f);
                            Decoded {
                                decode: x86::decode_tile::<{ $f }>,
                                one: x86::decoded_lanes_avx2::<1, MINS>,
                                two: x86::decoded_lanes_avx2::<2, MINS>,
                            }
                        }};
                    }
                    tiles.decoded = match dtype {
                        DType::Q8_0 => Some(decoded!(format::Q8_0)),
                        DType::Q5_0 => Some(decoded!(format::Q5_0)),
                        DType::Q4_1 => Some(decoded!(format::Q4_1)),
                        DType::Q5_1 => Some(decoded!(format::Q5_1)),
                        DType::IQ4_NL => Some(decoded!(format::IQ4_NL)),
                        DType::Q4_0 => Some(decoded!(format::Q4_0)),
                        _ => None,
                    };
                }
                return tiles;
            }
        }
        let _ = isa;
        pick!(tile_portable)
    }

    /// Columns the next tile takes of `n` left.
    fn columns(&self, n: usize) -> usize {
        match n {
            8.. if self.eight.is_some() => 8,
            4.. if self.four.is_some() => 4,
            _ => TILE_COLS.min(n),
        }
    }

    /// The dots of the four rows and `cols` (as many as [`Tiles::columns`]
    /// gives).
    ///
    /// # Safety
    /// As for [`tile_portable`].
    unsafe fn run(
        &self,
        rows: [*const u8; TILE_ROWS],
        cols: &[Acts],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; 8] {
        let mut out = [[0f32; TILE_ROWS]; 8];
        // SAFETY: caller's contract.
        unsafe {
            match (cols.len(), self.four, self.eight) {
                (8, _, Some(eight)) => out = eight(rows, std::array::from_fn(|c| cols[c]), nb),
                (4, Some(four), _) => {
                    out[..4].copy_from_slice(&four(rows, std::array::from_fn(|c| cols[c]), nb))
                }
                (1, ..) => out[..1].copy_from_slice(&(self.one)(rows, [cols[0]], nb)),
                (2, ..) => out[..2].copy_from_slice(&(self.two)(rows, [cols[0], cols[1]], nb)),
                (n, ..) => {
                    for j in (0..n).step_by(TILE_COLS) {
                        let part = (self.three)(
                            rows,
                            std::array::from_fn(|c| cols[(j + c).min(n - 1)]),
                            nb,
                        );
                        let take = TILE_COLS.min(n - j);
                        out[j..j + take].copy_from_slice(&part[..take]);
                    }
                }
            }
        }
        out
    }
}

/// What the VNNI kernels add to a weight type's codes to make them
/// unsigned: Q8_0's and IQ4_NL's values plus 128, Q4_0's and Q5_0's their
/// unsigned codes (the values plus 8 and 16).
fn unsigned_offset(dtype: DType) -> i32 {
    match dtype {
        DType::Q4_0 => 8,
        DType::Q5_0 => 16,
        DType::Q4_1 | DType::Q5_1 => 0,
        _ => 128,
    }
}

/// The weight formats the kernels read.
mod format {
    pub(super) const Q8_0: u8 = 0;
    pub(super) const Q4_0: u8 = 1;
    pub(super) const IQ4_NL: u8 = 2;
    pub(super) const Q5_0: u8 = 3;
    pub(super) const Q4_1: u8 = 4;
    pub(super) const Q5_1: u8 = 5;
    pub(super) const MXFP4: u8 = 6;
}

/// The orders as the kernels' parameter.
const EIGHT: u8 = 0;
const WHOLE: u8 = 1;
const PAIRED: u8 = 2;

/// Bytes of a block of format `F`.
const fn block_bytes(f: u8) -> usize {
    match f {
        format::Q8_0 => 34,
        format::Q5_0 => 22,
        format::Q4_1 => 20,
        format::Q5_1 => 24,
        format::MXFP4 => 17,
        _ => 18,
    }
}

/// Where a block of format `F` keeps its codes (after the scale, the min
/// of Q4_1 and Q5_1, and the high bits of Q5_0 and Q5_1).
const fn codes_at(f: u8) -> usize {
    match f {
        format::Q5_0 => 6,
        format::Q4_1 => 4,
        format::Q5_1 => 8,
        format::MXFP4 => 1,
        _ => 2,
    }
}

/// Where a block of format `F` keeps its high bits (Q5_0, Q5_1).
const fn high_bits_at(f: u8) -> usize {
    if f == format::Q5_1 { 4 } else { 2 }
}

/// Whether format `F`'s codes are unsigned as they are (Q4_1, Q5_1).
const fn unsigned(f: u8) -> bool {
    matches!(f, format::Q4_1 | format::Q5_1)
}

/// Whether format `F` has high bits (Q5_0, Q5_1).
const fn five_bits(f: u8) -> bool {
    matches!(f, format::Q5_0 | format::Q5_1)
}

/// The scale of block `blk` of `row`.
///
/// # Safety
/// The row holds block `blk` of format `F`.
#[inline(always)]
unsafe fn weight_scale<const F: u8>(row: *const u8, blk: usize) -> f32 {
    if F == format::MXFP4 {
        // SAFETY: caller's contract.
        return e8m0_to_f32_half(unsafe { *row.add(blk * block_bytes(F)) });
    }
    // SAFETY: caller's contract.
    f16_to_f32(unsafe { (row.add(blk * block_bytes(F)) as *const u16).read_unaligned() })
}

/// Code `v` of block `blk` of `row`, signed.
///
/// # Safety
/// The row holds block `blk` of format `F`; `v < 32`.
#[inline(always)]
unsafe fn weight_code<const F: u8>(row: *const u8, blk: usize, v: usize) -> i32 {
    // SAFETY: caller's contract.
    unsafe {
        let q = row.add(blk * block_bytes(F) + codes_at(F));
        if F == format::Q8_0 {
            return *(q.add(v) as *const i8) as i32;
        }
        let byte = *q.add(v % 16);
        let nibble = if v < 16 { byte & 15 } else { byte >> 4 };
        let code = if five_bits(F) {
            let qh =
                (row.add(blk * block_bytes(F) + high_bits_at(F)) as *const u32).read_unaligned();
            nibble as i32 | (((qh >> v) & 1) << 4) as i32
        } else {
            nibble as i32
        };
        if unsigned(F) {
            return code;
        }
        if F == format::Q5_0 {
            return code - 16;
        }
        if F == format::IQ4_NL {
            IQ4_VALUES[nibble as usize] as i32
        } else if F == format::MXFP4 {
            MXFP4_VALUES[nibble as usize] as i32
        } else {
            nibble as i32 - 8
        }
    }
}

/// # Safety
/// Rows hold `nb` blocks of format `F`, columns `32 * nb` codes and `nb`
/// scales.
unsafe fn tile_portable<const F: u8, const O: u8, const C: usize>(
    rows: [*const u8; TILE_ROWS],
    cols: [Acts; C],
    nb: usize,
) -> [[f32; TILE_ROWS]; C] {
    std::array::from_fn(|c| {
        std::array::from_fn(|r| {
            // even blocks' lanes, and (paired) the odd blocks'
            let mut lanes = [[0f32; 8]; 2];
            let mut acc = 0f32;
            let mut tail = None;
            for blk in 0..nb {
                // SAFETY: block blk of the row and of the column exist.
                unsafe {
                    let d = weight_scale::<F>(rows[r], blk) * *cols[c].scales.add(blk);
                    let x = cols[c].codes.add(blk * 32);
                    let lane = |t: usize| -> i32 {
                        (4 * t..4 * t + 4)
                            .map(|v| weight_code::<F>(rows[r], blk, v) * *x.add(v) as i32)
                            .sum()
                    };
                    if O == WHOLE {
                        let sum: i32 = (0..8).map(lane).sum();
                        acc = (sum as f32).mul_add(d, acc);
                    } else if O == PAIRED && blk == nb - 1 && nb % 2 == 1 {
                        tail = Some(((0..8).map(lane).sum::<i32>() as f32, d));
                    } else {
                        let set = if O == PAIRED { blk % 2 } else { 0 };
                        for (t, l) in lanes[set].iter_mut().enumerate() {
                            *l = d.mul_add(lane(t) as f32, *l);
                        }
                    }
                }
            }
            if O == WHOLE {
                return acc;
            }
            let l: [f32; 8] = if O == PAIRED {
                std::array::from_fn(|t| lanes[0][t] + lanes[1][t])
            } else {
                lanes[0]
            };
            let sum = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
            match tail {
                Some((s, d)) => s.mul_add(d, sum),
                None => sum,
            }
        })
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{
        Acts, DECODED_BLOCK, IQ4_VALUES, MXFP4_VALUES, PAIRED, TILE_ROWS, WHOLE, block_bytes,
        codes_at, e8m0_to_f32_half, five_bits, format, high_bits_at, unsigned,
    };
    use crate::kernels::math::{f16_at, hsum256, row_pair_sums};
    use crate::kernels::matmul::row_streaming::PREFETCH_BYTES;

    /// The scale of block `blk` of `row`, with F16C.
    #[inline(always)]
    unsafe fn weight_scale<const F: u8>(row: *const u8, blk: usize) -> f32 {
        if F == format::MXFP4 {
            // SAFETY: caller's contract: the row holds the block.
            return e8m0_to_f32_half(unsafe { *row.add(blk * block_bytes(F)) });
        }
        // SAFETY: caller's contract: the row holds the block; F16C.
        unsafe { f16_at(row.add(blk * block_bytes(F))) }
    }

    /// The 32 codes of block `blk` of `row`: signed (`SIGNED`), or
    /// unsigned, the codes plus the format's offset (Q8_0's and IQ4_NL's
    /// top bit flipped, Q4_0's nibbles as they are).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes<const F: u8, const SIGNED: bool>(row: *const u8, blk: usize) -> __m256i {
        // SAFETY: caller's contract: the row holds the block.
        unsafe {
            let q = row.add(blk * block_bytes(F) + codes_at(F));
            if F == format::Q8_0 {
                let w = _mm256_loadu_si256(q as *const __m256i);
                return if SIGNED {
                    w
                } else {
                    _mm256_xor_si256(w, _mm256_set1_epi8(-128))
                };
            }
            let v = _mm_loadu_si128(q as *const __m128i);
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
            let nibbles = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
            if five_bits(F) {
                // bit v of the high bits to 16 in byte v
                let qh = (row.add(blk * block_bytes(F) + high_bits_at(F)) as *const i32)
                    .read_unaligned();
                let spread = _mm256_shuffle_epi8(
                    _mm256_set1_epi32(qh),
                    _mm256_setr_epi64x(
                        0,
                        0x0101_0101_0101_0101,
                        0x0202_0202_0202_0202,
                        0x0303_0303_0303_0303,
                    ),
                );
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
                let u = _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(16)));
                return if SIGNED && !unsigned(F) {
                    _mm256_sub_epi8(u, _mm256_set1_epi8(16))
                } else {
                    u
                };
            }
            if F == format::IQ4_NL || F == format::MXFP4 {
                let table = if F == format::IQ4_NL {
                    &IQ4_VALUES
                } else {
                    &MXFP4_VALUES
                };
                let values = _mm_loadu_si128(table.as_ptr() as *const __m128i);
                let values = _mm256_broadcastsi128_si256(values);
                let w = _mm256_shuffle_epi8(values, nibbles);
                return if SIGNED {
                    w
                } else {
                    _mm256_xor_si256(w, _mm256_set1_epi8(-128))
                };
            }
            if SIGNED && !unsigned(F) {
                _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8))
            } else {
                nibbles
            }
        }
    }

    /// The whole sums of four blocks' lanes, in the four lanes of one
    /// register (integer sums: exact in any order).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block_sums(p: [__m256i; TILE_ROWS]) -> __m128i {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }

    /// The tile's results from its accumulators: eight lanes a dot summed
    /// as ggml sums them (paired: the even and odd blocks' lanes added
    /// first, and an odd last block's whole sum `tail` times its scale
    /// added last), or the whole-block sums as they are.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn results<const O: u8, const C: usize>(
        lanes: [[[__m256; TILE_ROWS]; C]; 2],
        whole: [__m128; C],
        tail: Option<[(__m128, __m128); C]>,
    ) -> [[f32; TILE_ROWS]; C] {
        let mut out = [[0f32; TILE_ROWS]; C];
        if O == WHOLE {
            for (o, w) in out.iter_mut().zip(whole) {
                // SAFETY: four floats into four.
                unsafe { _mm_storeu_ps(o.as_mut_ptr(), w) };
            }
            return out;
        }
        let [even, odd] = lanes;
        for (c, o) in out.iter_mut().enumerate() {
            for (r, o) in o.iter_mut().enumerate() {
                let l = if O == PAIRED {
                    _mm256_add_ps(even[c][r], odd[c][r])
                } else {
                    even[c][r]
                };
                // SAFETY: AVX2 is enabled here.
                *o = unsafe { hsum256(l) };
            }
            if let Some(tail) = tail {
                let (s, d) = tail[c];
                // SAFETY: four floats from and into four.
                unsafe {
                    let sums = _mm_fmadd_ps(s, d, _mm_loadu_ps(o.as_ptr()));
                    _mm_storeu_ps(o.as_mut_ptr(), sums)
                };
            }
        }
        out
    }

    /// AVX2: signed codes, each lane `|w| * (x with w's sign)` as
    /// `vpmaddubsw` and `vpmaddwd` form it (a pair reaches 2 * 128 * 127);
    /// Q4_1's and Q5_1's unsigned codes as they are, with their min terms
    /// (as `super::min_terms` forms them, while the blocks are in L1).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; as `tile_portable`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile_avx2<const F: u8, const O: u8, const C: usize>(
        rows: [*const u8; TILE_ROWS],
        cols: [Acts; C],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; C] {
        let mut lanes = [[[_mm256_setzero_ps(); TILE_ROWS]; C]; 2];
        let mut whole = [_mm_setzero_ps(); C];
        let mut summs = [_mm_setzero_ps(); C];
        let mut tail = None;
        let ones = _mm256_set1_epi16(1);
        for blk in 0..nb {
            let last_odd = O == PAIRED && blk == nb - 1 && nb % 2 == 1;
            let mut tails = [(_mm_setzero_ps(), _mm_setzero_ps()); C];
            // SAFETY: block blk of every row and column exists.
            unsafe {
                let w: [__m256i; TILE_ROWS] = rows.map(|row| codes::<F, true>(row, blk));
                // Q4_1's and Q5_1's codes are unsigned already
                let aw = w.map(|w| {
                    if unsigned(F) {
                        w
                    } else {
                        _mm256_sign_epi8(w, w)
                    }
                });
                let dw = rows.map(|row| weight_scale::<F>(row, blk));
                // their mins' chains beside the lanes, as `super::min_terms`
                // runs them
                let mins = if unsigned(F) {
                    let m = rows.map(|row| {
                        (row.add(blk * block_bytes(F) + 2) as *const i16).read_unaligned()
                    });
                    _mm_cvtph_ps(_mm_setr_epi16(m[0], m[1], m[2], m[3], 0, 0, 0, 0))
                } else {
                    _mm_setzero_ps()
                };
                for c in 0..C {
                    let x = _mm256_loadu_si256(cols[c].codes.add(blk * 32) as *const __m256i);
                    let dx = *cols[c].scales.add(blk);
                    if unsigned(F) {
                        let s = _mm_set1_ps(*cols[c].sums.add(blk));
                        summs[c] = _mm_fmadd_ps(mins, s, summs[c]);
                    }
                    let p: [__m256i; TILE_ROWS] = std::array::from_fn(|r| {
                        let pairs = if unsigned(F) {
                            _mm256_maddubs_epi16(w[r], x)
                        } else {
                            _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(x, w[r]))
                        };
                        _mm256_madd_epi16(pairs, ones)
                    });
                    if O == WHOLE || last_odd {
                        let d =
                            _mm_mul_ps(_mm_setr_ps(dw[0], dw[1], dw[2], dw[3]), _mm_set1_ps(dx));
                        let s = _mm_cvtepi32_ps(block_sums(p));
                        if O == WHOLE {
                            whole[c] = _mm_fmadd_ps(s, d, whole[c]);
                        } else {
                            tails[c] = (s, d);
                        }
                    } else {
                        let set = if O == PAIRED { blk % 2 } else { 0 };
                        for r in 0..TILE_ROWS {
                            let d = _mm256_set1_ps(dw[r] * dx);
                            let l = &mut lanes[set][c][r];
                            *l = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p[r]), *l);
                        }
                    }
                }
            }
            if last_odd {
                tail = Some(tails);
            }
        }
        let mut out = results::<O, C>(lanes, whole, tail);
        if unsigned(F) {
            for (o, summs) in out.iter_mut().zip(summs) {
                let mut terms = [0f32; TILE_ROWS];
                // SAFETY: four floats into four.
                unsafe { _mm_storeu_ps(terms.as_mut_ptr(), summs) };
                for (o, t) in o.iter_mut().zip(terms) {
                    *o += t;
                }
            }
        }
        out
    }

    /// Four rows' `nb` blocks decoded into `out` ([`super::DECODED_BLOCK`]
    /// bytes a block): the signed codes, their absolute values, the
    /// scales and Q4_1's and Q5_1's mins.
    ///
    /// # Safety
    /// AVX2 and F16C; the rows hold `nb` blocks of format `F`, `out`
    /// `nb` decoded blocks.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn decode_tile<const F: u8>(
        rows: [*const u8; TILE_ROWS],
        nb: usize,
        out: *mut u8,
    ) {
        for blk in 0..nb {
            // SAFETY: block blk of every row and of out exists.
            unsafe {
                let at = out.add(blk * DECODED_BLOCK);
                for (r, &row) in rows.iter().enumerate() {
                    let w = codes::<F, true>(row, blk);
                    _mm256_storeu_si256(at.add(32 * r) as *mut __m256i, w);
                    let aw = _mm256_sign_epi8(w, w);
                    _mm256_storeu_si256(at.add(32 * (TILE_ROWS + r)) as *mut __m256i, aw);
                    let d = weight_scale::<F>(row, blk);
                    (at.add(64 * TILE_ROWS + 4 * r) as *mut f32).write_unaligned(d);
                    if unsigned(F) {
                        let m = f16_at(row.add(blk * block_bytes(F) + 2));
                        (at.add(68 * TILE_ROWS + 4 * r) as *mut f32).write_unaligned(m);
                    }
                }
            }
        }
    }

    /// AVX2, eight lanes, a decoded tile ([`decode_tile`]) and `C` (one or
    /// two) columns: the sums of [`tile_avx2`], with every accumulator in
    /// a register (three columns' twelve spill) and each block's four
    /// scale products for a column in one multiply; with `MINS`, Q4_1's
    /// and Q5_1's min terms added as `super::min_terms` adds them.
    ///
    /// # Safety
    /// AVX2 and FMA; `tile` holds `nb` decoded blocks, each column `nb`
    /// blocks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn decoded_lanes_avx2<const C: usize, const MINS: bool>(
        tile: *const u8,
        cols: [Acts; C],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; C] {
        let mut lanes = [[_mm256_setzero_ps(); TILE_ROWS]; C];
        let mut summs = [_mm_setzero_ps(); C];
        let ones = _mm256_set1_epi16(1);
        for blk in 0..nb {
            // SAFETY: block blk of the tile and of every column exists.
            unsafe {
                let at = tile.add(blk * DECODED_BLOCK);
                let dw = _mm_loadu_ps(at.add(64 * TILE_ROWS) as *const f32);
                let x: [__m256i; C] = std::array::from_fn(|c| {
                    _mm256_loadu_si256(cols[c].codes.add(blk * 32) as *const __m256i)
                });
                let mut d = [[0f32; TILE_ROWS]; C];
                for (d, col) in d.iter_mut().zip(&cols) {
                    let dx = _mm_broadcast_ss(&*col.scales.add(blk));
                    _mm_storeu_ps(d.as_mut_ptr(), _mm_mul_ps(dw, dx));
                }
                if MINS {
                    let m = _mm_loadu_ps(at.add(68 * TILE_ROWS) as *const f32);
                    for (acc, col) in summs.iter_mut().zip(&cols) {
                        *acc = _mm_fmadd_ps(m, _mm_broadcast_ss(&*col.sums.add(blk)), *acc);
                    }
                }
                for r in 0..TILE_ROWS {
                    let w = _mm256_loadu_si256(at.add(32 * r) as *const __m256i);
                    let aw = _mm256_loadu_si256(at.add(32 * (TILE_ROWS + r)) as *const __m256i);
                    for c in 0..C {
                        let pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[c], w));
                        let p = _mm256_madd_epi16(pairs, ones);
                        let d = _mm256_broadcast_ss(&d[c][r]);
                        lanes[c][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), lanes[c][r]);
                    }
                }
            }
        }
        let mut out = [[0f32; TILE_ROWS]; C];
        for ((o, lanes), summs) in out.iter_mut().zip(lanes).zip(summs) {
            let mut terms = [0f32; TILE_ROWS];
            // SAFETY: four floats into four.
            unsafe { _mm_storeu_ps(terms.as_mut_ptr(), summs) };
            for ((o, l), t) in o.iter_mut().zip(lanes).zip(terms) {
                // SAFETY: AVX2 is enabled here.
                let dot = unsafe { hsum256(l) };
                *o = if MINS { dot + t } else { dot };
            }
        }
        out
    }

    /// AVX2, eight lanes, one column: `count` rows from `first` (`stride`
    /// bytes apart) into `out`, one row at a time, one sequential stream
    /// with no software prefetch (the short rows' mat-vec: four rows side
    /// by side were slower there, docs/performance.md). Q4_1's and Q5_1's
    /// min terms are left to the driver's pass (beside the lanes they
    /// measured slower here).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; the rows hold `nb` blocks of format `F`, the
    /// column `nb` blocks, `out` `count` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn matvec_rows_avx2<const F: u8>(
        first: *const u8,
        stride: usize,
        count: usize,
        col: Acts,
        nb: usize,
        out: *mut f32,
    ) {
        let ones = _mm256_set1_epi16(1);
        for i in 0..count {
            let row = first.wrapping_add(i * stride);
            let mut lanes = _mm256_setzero_ps();
            for blk in 0..nb {
                // SAFETY: block blk of the row and the column exists.
                unsafe {
                    let w = codes::<F, true>(row, blk);
                    let x = _mm256_loadu_si256(col.codes.add(blk * 32) as *const __m256i);
                    // Q4_1's and Q5_1's codes are unsigned already
                    let pairs = if unsigned(F) {
                        _mm256_maddubs_epi16(w, x)
                    } else {
                        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                    };
                    let p = _mm256_madd_epi16(pairs, ones);
                    let d = _mm256_set1_ps(weight_scale::<F>(row, blk) * *col.scales.add(blk));
                    lanes = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), lanes);
                }
            }
            // SAFETY: out holds count values; AVX2 is enabled here.
            unsafe { *out.add(i) = hsum256(lanes) };
        }
    }

    /// AVX-512 VNNI on 256-bit registers, eight lanes, one column: as
    /// [`matvec_rows_avx2`], the stream prefetched [`PREFETCH_BYTES`]
    /// ahead, each block's lanes from `vpdpbusd`, and Q4_1's and Q5_1's
    /// min chain beside the lanes, added after them (a row at a time
    /// measured up to twice as fast as four side by side,
    /// docs/performance.md). The lanes: Q5_0's, Q4_0's and IQ4_NL's
    /// unsigned codes started at the column's `-o * sum(x)`; Q4_1's and
    /// Q5_1's from zero; Q8_0's signed codes against the column's plus
    /// 128, less a second `vpdpbusd` of 128 against the codes, so that no
    /// lane starts are read (on long rows their loads crowded L1).
    ///
    /// # Safety
    /// AVX-512 VNNI and VL, AVX2, FMA and F16C; as [`matvec_rows_avx2`],
    /// and with mins the column's `nb` sum terms.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn matvec_rows_vnni<const F: u8>(
        first: *const u8,
        stride: usize,
        count: usize,
        col: Acts,
        nb: usize,
        out: *mut f32,
    ) {
        let bb = block_bytes(F);
        for i in 0..count {
            let row = first.wrapping_add(i * stride);
            let mut lanes = _mm256_setzero_ps();
            let mut mins = _mm_setzero_ps();
            for blk in 0..nb {
                let ahead = row.wrapping_add(PREFETCH_BYTES + blk * bb);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                // SAFETY: block blk of the row and the column exists.
                unsafe {
                    let x = _mm256_loadu_si256(col.codes.add(blk * 32) as *const __m256i);
                    let p = if F == format::Q8_0 {
                        // the codes as they are against the column's plus
                        // 128, less 128 times each lane's codes
                        let w = codes::<F, true>(row, blk);
                        let top = _mm256_set1_epi8(-128);
                        let zero = _mm256_setzero_si256();
                        _mm256_sub_epi32(
                            _mm256_dpbusd_epi32(zero, _mm256_xor_si256(x, top), w),
                            _mm256_dpbusd_epi32(zero, top, w),
                        )
                    } else if unsigned(F) {
                        // no offset: every lane starts at zero
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), codes::<F, false>(row, blk), x)
                    } else {
                        let w = codes::<F, false>(row, blk);
                        let bias = _mm256_loadu_si256(col.bias.add(blk * 8) as *const __m256i);
                        _mm256_dpbusd_epi32(bias, w, x)
                    };
                    let d = _mm256_set1_ps(weight_scale::<F>(row, blk) * *col.scales.add(blk));
                    lanes = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), lanes);
                    if unsigned(F) {
                        mins = min_step::<F>(row, blk, col, mins);
                    }
                }
            }
            // SAFETY: out holds count values; AVX2 is enabled here.
            unsafe { *out.add(i) = with_mins::<F>(hsum256(lanes), mins) };
        }
    }

    /// One block's step of Q4_1's and Q5_1's min chain, `summs = fma(m, s,
    /// summs)` (the formats with unsigned codes are those with mins).
    ///
    /// # Safety
    /// FMA and F16C; block `blk` of the row and the column's sum terms
    /// exist.
    #[inline]
    #[target_feature(enable = "fma,f16c")]
    unsafe fn min_step<const F: u8>(
        row: *const u8,
        blk: usize,
        col: Acts,
        summs: __m128,
    ) -> __m128 {
        // SAFETY: caller's contract.
        unsafe {
            let m = _mm_set_ss(f16_at(row.add(blk * block_bytes(F) + 2)));
            _mm_fmadd_ss(m, _mm_set_ss(*col.sums.add(blk)), summs)
        }
    }

    /// A row's dot: the lanes' sum, and after it the min chain where the
    /// format has mins.
    #[inline]
    #[target_feature(enable = "sse")]
    fn with_mins<const F: u8>(lanes: f32, mins: __m128) -> f32 {
        if unsigned(F) {
            lanes + _mm_cvtss_f32(mins)
        } else {
            lanes
        }
    }

    /// AVX-512 VNNI: unsigned codes against signed activations in one
    /// `vpdpbusd` a lane group, each lane started at the column's `-o *
    /// sum(x)` so that it holds the signed sum; the scales' product is
    /// formed in registers. With one column (GGUF-row Q4_0, IQ4_NL and
    /// MXFP4 matrices of whole groups, which sum in whole blocks) the rows
    /// are asked for [`PREFETCH_BYTES`] ahead (four streams left to the
    /// hardware's prefetch waited on their loads, docs/performance.md).
    ///
    /// # Safety
    /// AVX-512 VNNI and VL, AVX2, FMA and F16C; as `tile_portable`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn tile_vnni<const F: u8, const O: u8, const C: usize>(
        rows: [*const u8; TILE_ROWS],
        cols: [Acts; C],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; C] {
        let mut lanes = [[[_mm256_setzero_ps(); TILE_ROWS]; C]; 2];
        let mut whole = [_mm_setzero_ps(); C];
        let mut tail = None;
        for blk in 0..nb {
            if C == 1 {
                // one column reads each row once: ask for the rows ahead
                for row in rows {
                    let ahead = row.wrapping_add(PREFETCH_BYTES + blk * block_bytes(F));
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                }
            }
            let last_odd = O == PAIRED && blk == nb - 1 && nb % 2 == 1;
            let mut tails = [(_mm_setzero_ps(), _mm_setzero_ps()); C];
            // SAFETY: block blk of every row and column exists.
            unsafe {
                let w: [__m256i; TILE_ROWS] = rows.map(|row| codes::<F, false>(row, blk));
                let dw = rows.map(|row| _mm256_set1_ps(weight_scale::<F>(row, blk)));
                for c in 0..C {
                    let x = _mm256_loadu_si256(cols[c].codes.add(blk * 32) as *const __m256i);
                    let bias = _mm256_loadu_si256(cols[c].bias.add(blk * 8) as *const __m256i);
                    let dx = _mm256_set1_ps(*cols[c].scales.add(blk));
                    let p: [__m256i; TILE_ROWS] =
                        std::array::from_fn(|r| _mm256_dpbusd_epi32(bias, w[r], x));
                    if O == WHOLE || last_odd {
                        let d = _mm_mul_ps(
                            _mm_setr_ps(
                                _mm256_cvtss_f32(dw[0]),
                                _mm256_cvtss_f32(dw[1]),
                                _mm256_cvtss_f32(dw[2]),
                                _mm256_cvtss_f32(dw[3]),
                            ),
                            _mm256_castps256_ps128(dx),
                        );
                        let s = _mm_cvtepi32_ps(block_sums(p));
                        if O == WHOLE {
                            whole[c] = _mm_fmadd_ps(s, d, whole[c]);
                        } else {
                            tails[c] = (s, d);
                        }
                    } else {
                        let set = if O == PAIRED { blk % 2 } else { 0 };
                        for r in 0..TILE_ROWS {
                            let d = _mm256_mul_ps(dw[r], dx);
                            let l = &mut lanes[set][c][r];
                            *l = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p[r]), *l);
                        }
                    }
                }
            }
            if last_odd {
                tail = Some(tails);
            }
        }
        results::<O, C>(lanes, whole, tail)
    }

    /// AVX-512 VNNI, eight lanes, one column: `count` rows from `first`
    /// (`stride` bytes apart) into `out`, four at a time as
    /// [`tile_vnni512`] takes them, the loop inside the kernel and the
    /// next rows asked for ahead (token generation's mat-vec, where a
    /// call per tile cost as much as the tile).
    ///
    /// # Safety
    /// AVX-512 F, VNNI and VL, AVX2, FMA and F16C; the rows hold `nb`
    /// blocks of format `F`, the column `nb` blocks, `out` `count` values.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn matvec_vnni512<const F: u8>(
        first: *const u8,
        stride: usize,
        count: usize,
        col: Acts,
        nb: usize,
        out: *mut f32,
    ) {
        let row_bytes = nb * block_bytes(F);
        let mut i = 0;
        while i < count {
            let live = TILE_ROWS.min(count - i);
            let rows: [*const u8; TILE_ROWS] =
                std::array::from_fn(|r| first.wrapping_add((i + r.min(live - 1)) * stride));
            // the next group of rows, a line at a time
            for line in (0..row_bytes).step_by(64) {
                for row in rows {
                    let next = row.wrapping_add(TILE_ROWS * stride + line);
                    _mm_prefetch::<_MM_HINT_T0>(next as *const i8);
                }
            }
            // SAFETY: caller's contract.
            let dots = unsafe { tile_vnni512::<F, 1>(rows, [col], nb) };
            for (r, &v) in dots[0].iter().take(live).enumerate() {
                // SAFETY: out holds count values.
                unsafe { *out.add(i + r) = v };
            }
            i += TILE_ROWS;
        }
    }

    /// AVX-512 VNNI, eight lanes, `C` columns: two rows to a 512-bit
    /// register (the low eight lanes one row's, the high eight the
    /// next's), so that each `vpdpbusd`, conversion, scale product and
    /// multiply-add serves two dots.
    ///
    /// # Safety
    /// AVX-512 F, VNNI and VL, AVX2, FMA and F16C; as `tile_portable`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn tile_vnni512<const F: u8, const C: usize>(
        rows: [*const u8; TILE_ROWS],
        cols: [Acts; C],
        nb: usize,
    ) -> [[f32; TILE_ROWS]; C] {
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        let pair_i = |a: __m256i, b: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        // the four rows' scales spread over the halves of two registers
        let spread = [
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
            _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
        ];
        let bb = block_bytes(F);
        for blk in 0..nb {
            // SAFETY: block blk of every row and column exists.
            unsafe {
                let w = rows.map(|row| codes::<F, false>(row, blk));
                let half = |r: usize| (rows[r].add(blk * bb) as *const i16).read_unaligned();
                let dw = _mm_cvtph_ps(_mm_setr_epi16(
                    half(0),
                    half(1),
                    half(2),
                    half(3),
                    0,
                    0,
                    0,
                    0,
                ));
                let dw = _mm512_castps128_ps512(dw);
                let wp = [pair_i(w[0], w[1]), pair_i(w[2], w[3])];
                let dp = spread.map(|idx| _mm512_permutexvar_ps(idx, dw));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        cols[c].codes.add(blk * 32) as *const __m256i
                    ));
                    let bias = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        cols[c].bias.add(blk * 8) as *const __m256i,
                    ));
                    let dx = _mm512_set1_ps(*cols[c].scales.add(blk));
                    for (a, (w, d)) in acc.iter_mut().zip(wp.iter().zip(dp)) {
                        let lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, *w, x));
                        *a = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), lanes, *a);
                    }
                }
            }
        }
        // SAFETY: AVX-512 F is enabled here.
        unsafe { row_pair_sums(acc) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa;

    fn lcg(s: &mut u32) -> u32 {
        *s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        *s >> 8
    }

    #[test]
    fn every_instruction_set_sums_as_the_portable_kernel() {
        for nb in [8, 9] {
            every_kernel_sums_as_the_portable_one(nb);
        }
    }

    fn every_kernel_sums_as_the_portable_one(nb: usize) {
        let mut s = 7u32;
        for (dtype, bb) in [
            (DType::Q8_0, 34),
            (DType::Q4_0, 18),
            (DType::Q5_0, 22),
            (DType::IQ4_NL, 18),
            (DType::Q4_1, 20),
            (DType::Q5_1, 24),
            (DType::MXFP4, 17),
        ] {
            let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
                .map(|_| {
                    let mut row = vec![0u8; nb * bb];
                    for blk in row.chunks_exact_mut(bb) {
                        let d = ggraph_core::quant::f32_to_f16((lcg(&mut s) % 1000) as f32 * 1e-5);
                        blk[..2].copy_from_slice(&d.to_le_bytes());
                        if dtype == DType::MXFP4 {
                            // E8M0 exponents about 2^-8..2^8
                            blk[0] = 120 + (lcg(&mut s) % 16) as u8;
                        }
                        let codes = if dtype == DType::MXFP4 { 1 } else { 2 };
                        for v in &mut blk[codes..] {
                            // any byte: Q8_0's -128 too, which ggml's
                            // quantiser never writes but a file may hold
                            *v = lcg(&mut s) as u8;
                        }
                    }
                    row
                })
                .collect();
            let codes: Vec<Vec<i8>> = (0..8)
                .map(|_| {
                    (0..nb * 32)
                        .map(|_| ((lcg(&mut s) % 255) as i32 - 127) as i8)
                        .collect()
                })
                .collect();
            let scales: Vec<Vec<f32>> = (0..8)
                .map(|_| {
                    (0..nb)
                        .map(|_| (lcg(&mut s) % 1000) as f32 * 3e-4)
                        .collect()
                })
                .collect();
            let rp: [*const u8; TILE_ROWS] = std::array::from_fn(|r| rows[r].as_ptr());
            let offset = unsigned_offset(dtype);
            let bias: Vec<Vec<i32>> = codes
                .iter()
                .map(|q| {
                    q.chunks_exact(4)
                        .map(|g| -offset * g.iter().map(|&c| c as i32).sum::<i32>())
                        .collect()
                })
                .collect();
            // Q8_1's sum terms, which Q4_1's and Q5_1's min chains read
            let sums: Vec<Vec<f32>> = (0..8)
                .map(|_| {
                    (0..nb)
                        .map(|_| (lcg(&mut s) % 2001) as f32 * 1e-3 - 1.0)
                        .collect()
                })
                .collect();
            let cp: Vec<Acts> = (0..8)
                .map(|c| Acts {
                    codes: codes[c].as_ptr(),
                    scales: scales[c].as_ptr(),
                    bias: bias[c].as_ptr(),
                    sums: sums[c].as_ptr(),
                })
                .collect();
            let orders = [super::order(dtype, 8), super::order(dtype, 4)].map(Option::unwrap);
            for (i, &order) in orders.iter().enumerate() {
                if i == 1 && order == orders[0] {
                    continue;
                }
                for n in 1..=8 {
                    // the dots with the min terms, which the driver adds
                    // where the tiles do not
                    let whole = |level: Isa| {
                        let tiles = Tiles::new(level, dtype, order);
                        // SAFETY: nb blocks, codes, scales and sums each;
                        // the level is supported here.
                        let mut dots = unsafe { tiles.run(rp, &cp[..n], nb) };
                        if has_mins(dtype) && !tiles.add_mins {
                            // SAFETY: as above.
                            let terms = unsafe { min_terms(bb, rp, &cp[..n], nb) };
                            for (d, t) in dots.iter_mut().zip(terms).take(n) {
                                for (d, t) in d.iter_mut().zip(t) {
                                    *d += t;
                                }
                            }
                        }
                        dots
                    };
                    let want = whole(Isa::Portable);
                    for level in isa::all_supported() {
                        let got = whole(level);
                        assert_eq!(
                            got.map(|c| c.map(f32::to_bits)),
                            want.map(|c| c.map(f32::to_bits)),
                            "{dtype} {order:?} {n} columns {nb} blocks {}",
                            level.name()
                        );
                        let decoded = Tiles::new(level, dtype, order).decoded;
                        let Some(decoded) = decoded.filter(|_| n <= DECODED_COLS) else {
                            continue;
                        };
                        let mut tile = vec![0u8; nb * DECODED_BLOCK];
                        // SAFETY: as above; the tile holds nb decoded
                        // blocks.
                        let got = unsafe {
                            (decoded.decode)(rp, nb, tile.as_mut_ptr());
                            decoded.run(tile.as_ptr(), &cp[..n], nb)
                        };
                        assert_eq!(
                            got.map(|c| c.map(f32::to_bits)),
                            want.map(|c| c.map(f32::to_bits)),
                            "{dtype} {order:?} {n} columns {nb} blocks {} decoded",
                            level.name()
                        );
                    }
                }
            }
            // the one-column kernels, the rows laid one after another
            let laid = rows.concat();
            let order = super::order(dtype, 4).unwrap();
            // SAFETY: as above.
            let lanes = unsafe { Tiles::new(Isa::Portable, dtype, order).run(rp, &cp[..1], nb) }[0];
            // the one-row kernels add the min terms, as the driver adds
            // them after the others
            // SAFETY: as above, with nb sum terms.
            let terms = unsafe { min_terms(bb, rp, &cp[..1], nb) }[0];
            let with_terms: [f32; TILE_ROWS] = std::array::from_fn(|r| lanes[r] + terms[r]);
            for level in isa::all_supported() {
                let one_row = |row_bytes| {
                    let one = one_row_matvec(level, dtype, order, row_bytes);
                    let adds_mins = one.is_some_and(|one| one.adds_mins) && has_mins(dtype);
                    (
                        one.map(|one| one.kernel),
                        if adds_mins { with_terms } else { lanes },
                    )
                };
                let kernels = [
                    (Tiles::new(level, dtype, order).matvec, lanes),
                    // the short rows' kernel, and the longer rows'
                    one_row(0),
                    one_row(STREAMED_ROW_BYTES_WITH_LANE_STARTS),
                ];
                for (matvec, want) in kernels.into_iter().filter_map(|(k, w)| Some((k?, w))) {
                    let mut got = [0f32; TILE_ROWS];
                    // SAFETY: TILE_ROWS rows of nb blocks, the column nb
                    // blocks; the level is supported here.
                    unsafe {
                        matvec(
                            laid.as_ptr(),
                            nb * bb,
                            TILE_ROWS,
                            cp[0],
                            nb,
                            got.as_mut_ptr(),
                        )
                    };
                    assert_eq!(
                        got.map(f32::to_bits),
                        want.map(f32::to_bits),
                        "{dtype} one column {}",
                        level.name()
                    );
                }
            }
        }
    }
}
