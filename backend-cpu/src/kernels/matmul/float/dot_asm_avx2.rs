//! The float dot tiles of the few-column path (`dot`) whose loops need all
//! sixteen ymm registers, written in `asm!` so that the registers are
//! assigned by hand.
//!
//! Twelve accumulators plus either three rows and one column (3 x 4) or
//! three columns and one row (4 x 3) take all sixteen. LLVM's schedule of
//! the same loops hoists the next step's loads and spills an accumulator,
//! which puts a store and a reload on that accumulator's dependency chain.
//! (These tiles measured faster than the 2 x 4 tile LLVM keeps in
//! registers; docs/performance.md.)
//!
//! Each loop runs over whole cache lines of the weights, a line per
//! iteration, with no software prefetch: the rows are long sequential
//! streams that the hardware prefetchers follow. (A fetch into L2 2 KiB
//! ahead made F32 with eight columns slower.)

use std::arch::asm;
use std::arch::x86_64::__m256;

use super::weight_values::{DT_F16, DT_F32};

/// The instructions that load weight row `$row`'s 8 values at byte offset
/// `$d` of the step into `$dst`, widened to f32, for the weight dtype
/// named first.
macro_rules! load_w {
    (F32, $dst:literal, $row:literal, $d:literal) => {
        concat!(
            "vmovups ",
            $dst,
            ", ymmword ptr [",
            $row,
            " + {i}*4 + ",
            $d,
            "]\n"
        )
    };
    (F16, $dst:literal, $row:literal, $d:literal) => {
        concat!(
            "vcvtph2ps ",
            $dst,
            ", xmmword ptr [",
            $row,
            " + {i}*2 + ",
            $d,
            "]\n"
        )
    };
    (BF16, $dst:literal, $row:literal, $d:literal) => {
        concat!(
            "vpmovzxwd ",
            $dst,
            ", xmmword ptr [",
            $row,
            " + {i}*2 + ",
            $d,
            "]\n",
            "vpslld ",
            $dst,
            ", ",
            $dst,
            ", 16\n",
        )
    };
}

/// The instruction that loads column `$col`'s 8 values at byte offset `$x`
/// of the step into `$dst`.
macro_rules! load_x {
    ($dst:literal, $col:literal, $x:literal) => {
        concat!(
            "vmovups ",
            $dst,
            ", ymmword ptr [",
            $col,
            " + {i}*4 + ",
            $x,
            "]\n"
        )
    };
}

/// One 8-value step of the 3 x 4 tile: the three rows into `{w0}`..`{w2}`,
/// then each column into `{x}` and its three FMAs.
macro_rules! step_3x4 {
    ($dt:tt, $d:literal, $x:literal) => {
        concat!(
            load_w!($dt, "{w0}", "{r0}", $d),
            load_w!($dt, "{w1}", "{r1}", $d),
            load_w!($dt, "{w2}", "{r2}", $d),
            load_x!("{x}", "{c0}", $x),
            "vfmadd231ps {a00}, {w0}, {x}\n",
            "vfmadd231ps {a10}, {w1}, {x}\n",
            "vfmadd231ps {a20}, {w2}, {x}\n",
            load_x!("{x}", "{c1}", $x),
            "vfmadd231ps {a01}, {w0}, {x}\n",
            "vfmadd231ps {a11}, {w1}, {x}\n",
            "vfmadd231ps {a21}, {w2}, {x}\n",
            load_x!("{x}", "{c2}", $x),
            "vfmadd231ps {a02}, {w0}, {x}\n",
            "vfmadd231ps {a12}, {w1}, {x}\n",
            "vfmadd231ps {a22}, {w2}, {x}\n",
            load_x!("{x}", "{c3}", $x),
            "vfmadd231ps {a03}, {w0}, {x}\n",
            "vfmadd231ps {a13}, {w1}, {x}\n",
            "vfmadd231ps {a23}, {w2}, {x}\n",
        )
    };
}

/// One 8-value step of the 4 x 3 tile: the three columns into
/// `{x0}`..`{x2}`, then each row into `{w}` and its three FMAs.
macro_rules! step_4x3 {
    ($dt:tt, $d:literal, $x:literal) => {
        concat!(
            load_x!("{x0}", "{c0}", $x),
            load_x!("{x1}", "{c1}", $x),
            load_x!("{x2}", "{c2}", $x),
            load_w!($dt, "{w}", "{r0}", $d),
            "vfmadd231ps {a00}, {w}, {x0}\n",
            "vfmadd231ps {a01}, {w}, {x1}\n",
            "vfmadd231ps {a02}, {w}, {x2}\n",
            load_w!($dt, "{w}", "{r1}", $d),
            "vfmadd231ps {a10}, {w}, {x0}\n",
            "vfmadd231ps {a11}, {w}, {x1}\n",
            "vfmadd231ps {a12}, {w}, {x2}\n",
            load_w!($dt, "{w}", "{r2}", $d),
            "vfmadd231ps {a20}, {w}, {x0}\n",
            "vfmadd231ps {a21}, {w}, {x1}\n",
            "vfmadd231ps {a22}, {w}, {x2}\n",
            load_w!($dt, "{w}", "{r3}", $d),
            "vfmadd231ps {a30}, {w}, {x0}\n",
            "vfmadd231ps {a31}, {w}, {x1}\n",
            "vfmadd231ps {a32}, {w}, {x2}\n",
        )
    };
}

/// The steps of one cache line of weights for each dtype: (row byte
/// offset, column byte offset) per step, and the values per line.
macro_rules! line {
    ($step:ident, F32) => {
        concat!(
            $step!(F32, "0", "0"),
            $step!(F32, "32", "32"),
            "add {i}, 16\n"
        )
    };
    ($step:ident, $dt:tt) => {
        concat!(
            $step!($dt, "0", "0"),
            $step!($dt, "16", "32"),
            $step!($dt, "32", "64"),
            $step!($dt, "48", "96"),
            "add {i}, 32\n",
        )
    };
}

/// `acc[r][c] += row r * column c` over values `kk..k1`, 3 rows by 4
/// columns.
///
/// # Safety
/// AVX2, FMA and F16C are available; `kk < k1`, both whole cache lines of
/// the weight dtype (16 values for F32, 32 for F16 and BF16), and the rows
/// and columns hold values up to `k1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn lines_3x4<const DT: u8>(
    rows: &[*const u8; 3],
    cols: &[*const f32; 4],
    kk: usize,
    k1: usize,
    acc: &mut [[__m256; 4]; 3],
) {
    macro_rules! run {
        ($dt:tt) => {
            asm!(
                "2:",
                line!(step_3x4, $dt),
                "cmp {i}, {end}",
                "jb 2b",
                i = inout(reg) kk => _,
                end = in(reg) k1,
                r0 = in(reg) rows[0],
                r1 = in(reg) rows[1],
                r2 = in(reg) rows[2],
                c0 = in(reg) cols[0],
                c1 = in(reg) cols[1],
                c2 = in(reg) cols[2],
                c3 = in(reg) cols[3],
                w0 = out(ymm_reg) _,
                w1 = out(ymm_reg) _,
                w2 = out(ymm_reg) _,
                x = out(ymm_reg) _,
                a00 = inout(ymm_reg) acc[0][0],
                a01 = inout(ymm_reg) acc[0][1],
                a02 = inout(ymm_reg) acc[0][2],
                a03 = inout(ymm_reg) acc[0][3],
                a10 = inout(ymm_reg) acc[1][0],
                a11 = inout(ymm_reg) acc[1][1],
                a12 = inout(ymm_reg) acc[1][2],
                a13 = inout(ymm_reg) acc[1][3],
                a20 = inout(ymm_reg) acc[2][0],
                a21 = inout(ymm_reg) acc[2][1],
                a22 = inout(ymm_reg) acc[2][2],
                a23 = inout(ymm_reg) acc[2][3],
                options(nostack, readonly),
            )
        };
    }
    // SAFETY: caller's contract; the loop reads the rows and columns below
    // k1 and writes only registers.
    unsafe {
        match DT {
            DT_F32 => run!(F32),
            DT_F16 => run!(F16),
            _ => run!(BF16),
        }
    }
}

/// `acc[r][c] += row r * column c` over values `kk..k1`, 4 rows by 3
/// columns.
///
/// # Safety
/// As for [`lines_3x4`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn lines_4x3<const DT: u8>(
    rows: &[*const u8; 4],
    cols: &[*const f32; 3],
    kk: usize,
    k1: usize,
    acc: &mut [[__m256; 3]; 4],
) {
    macro_rules! run {
        ($dt:tt) => {
            asm!(
                "2:",
                line!(step_4x3, $dt),
                "cmp {i}, {end}",
                "jb 2b",
                i = inout(reg) kk => _,
                end = in(reg) k1,
                r0 = in(reg) rows[0],
                r1 = in(reg) rows[1],
                r2 = in(reg) rows[2],
                r3 = in(reg) rows[3],
                c0 = in(reg) cols[0],
                c1 = in(reg) cols[1],
                c2 = in(reg) cols[2],
                x0 = out(ymm_reg) _,
                x1 = out(ymm_reg) _,
                x2 = out(ymm_reg) _,
                w = out(ymm_reg) _,
                a00 = inout(ymm_reg) acc[0][0],
                a01 = inout(ymm_reg) acc[0][1],
                a02 = inout(ymm_reg) acc[0][2],
                a10 = inout(ymm_reg) acc[1][0],
                a11 = inout(ymm_reg) acc[1][1],
                a12 = inout(ymm_reg) acc[1][2],
                a20 = inout(ymm_reg) acc[2][0],
                a21 = inout(ymm_reg) acc[2][1],
                a22 = inout(ymm_reg) acc[2][2],
                a30 = inout(ymm_reg) acc[3][0],
                a31 = inout(ymm_reg) acc[3][1],
                a32 = inout(ymm_reg) acc[3][2],
                options(nostack, readonly),
            )
        };
    }
    // SAFETY: as in lines_3x4.
    unsafe {
        match DT {
            DT_F32 => run!(F32),
            DT_F16 => run!(F16),
            _ => run!(BF16),
        }
    }
}
