//! Intel AMX: whether this process may use the tile unit, and its
//! operations.
//!
//! Using the tiles takes four things, any of which can be missing on a
//! processor that reports AMX (a hypervisor may hide the state, a kernel
//! may not know it): the CPUID bits, the tile state enabled by the
//! operating system in XCR0, Linux's permission for this process
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), and a tile configuration loaded
//! in every thread before its first tile instruction. [`usable`] checks
//! the first three once and runs a small product against the emulation
//! of the same instructions; a kernel loads its configuration itself
//! ([`TileUnit::configure`]) and releases the tiles when it is done.
//!
//! The kernels are written against [`TileUnit`], so the same code runs
//! on the hardware ([`Hardware`]) and, in tests on any processor, on
//! [`Emulated`], which follows the instructions' definitions in Intel's
//! manual.

use std::sync::OnceLock;

/// Tile registers.
pub(crate) const TILES: usize = 8;
/// Most rows of a tile.
pub(crate) const MAX_ROWS: usize = 16;
/// Most bytes of a tile's row.
pub(crate) const MAX_ROW_BYTES: usize = 64;

/// The shapes of the eight tiles, as `ldtilecfg` takes them (palette 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct TileConfig {
    bytes: [u8; 64],
}

impl TileConfig {
    /// A configuration giving tile `t` `shapes[t] = (rows, bytes a row)`;
    /// `(0, 0)` leaves a tile unused. `None` where a shape is larger than
    /// palette 1's 16 rows of 64 bytes.
    pub(crate) fn new(shapes: [(usize, usize); TILES]) -> Option<TileConfig> {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        for (t, &(rows, row_bytes)) in shapes.iter().enumerate() {
            if rows > MAX_ROWS || row_bytes > MAX_ROW_BYTES || (rows == 0) != (row_bytes == 0) {
                return None;
            }
            bytes[16 + 2 * t..18 + 2 * t].copy_from_slice(&(row_bytes as u16).to_le_bytes());
            bytes[48 + t] = rows as u8;
        }
        Some(TileConfig { bytes })
    }

    /// Tile `t`'s rows and bytes a row.
    pub(crate) fn shape(&self, t: usize) -> (usize, usize) {
        let row_bytes = u16::from_le_bytes([self.bytes[16 + 2 * t], self.bytes[17 + 2 * t]]);
        (self.bytes[48 + t] as usize, row_bytes as usize)
    }
}

/// The tile instructions the kernels use. The tile numbers are constants
/// (the instructions encode them).
///
/// # Safety
/// Every method has the contract of its instruction: a configuration is
/// loaded, the tiles' shapes agree, and the memory a load reads or a
/// store writes (`rows` rows of `bytes a row`, `stride` bytes apart)
/// is valid.
pub(crate) trait TileUnit {
    /// `ldtilecfg`: loads `config`, zeroing every tile.
    unsafe fn configure(&mut self, config: &TileConfig);
    /// `tilezero`.
    unsafe fn zero<const T: u8>(&mut self);
    /// `tileloadd`: tile `T`'s rows from `src`, `stride` bytes apart.
    unsafe fn load<const T: u8>(&mut self, src: *const u8, stride: usize);
    /// `tilestored`: tile `T`'s rows to `dst`, `stride` bytes apart.
    unsafe fn store<const T: u8>(&mut self, dst: *mut u8, stride: usize);
    /// `tdpbsud`: `C[m][n] += sum over k of A[m][k] * B[k / 4][4 n + k % 4]`,
    /// A's bytes signed, B's unsigned, C in 32-bit integers.
    unsafe fn dot_signed_unsigned<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tdpbf16ps`: `C[m][n] += sum over k of A[m][k] * B[k / 2][2 n + k % 2]`,
    /// A and B in BF16, C in f32.
    unsafe fn dot_bf16<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tilerelease`: back to the initial state (no configuration).
    unsafe fn release(&mut self);
}

/// The processor's tile unit. Only [`unit`] and [`usable`]'s checks make
/// one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hardware(());

impl TileUnit for Hardware {
    #[inline(always)]
    unsafe fn configure(&mut self, config: &TileConfig) {
        // SAFETY: the caller's contract; `usable` has seen the unit work.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) config.bytes.as_ptr(), options(nostack, readonly));
        }
    }

    #[inline(always)]
    unsafe fn zero<const T: u8>(&mut self) {
        // SAFETY: as for `configure`.
        unsafe { std::arch::asm!("tilezero tmm{t}", t = const T, options(nostack, nomem)) }
    }

    #[inline(always)]
    unsafe fn load<const T: u8>(&mut self, src: *const u8, stride: usize) {
        // SAFETY: as for `configure`.
        unsafe {
            std::arch::asm!(
                "tileloadd tmm{t}, [{p} + {s} * 1]",
                t = const T,
                p = in(reg) src,
                s = in(reg) stride,
                options(nostack, readonly),
            )
        }
    }

    #[inline(always)]
    unsafe fn store<const T: u8>(&mut self, dst: *mut u8, stride: usize) {
        // SAFETY: as for `configure`.
        unsafe {
            std::arch::asm!(
                "tilestored [{p} + {s} * 1], tmm{t}",
                t = const T,
                p = in(reg) dst,
                s = in(reg) stride,
                options(nostack),
            )
        }
    }

    #[inline(always)]
    unsafe fn dot_signed_unsigned<const C: u8, const A: u8, const B: u8>(&mut self) {
        // SAFETY: as for `configure`.
        unsafe {
            std::arch::asm!(
                "tdpbsud tmm{c}, tmm{a}, tmm{b}",
                c = const C,
                a = const A,
                b = const B,
                options(nostack, nomem),
            )
        }
    }

    #[inline(always)]
    unsafe fn dot_bf16<const C: u8, const A: u8, const B: u8>(&mut self) {
        // SAFETY: as for `configure`; `bf16_unit` has seen the BF16 product
        // work.
        unsafe {
            std::arch::asm!(
                "tdpbf16ps tmm{c}, tmm{a}, tmm{b}",
                c = const C,
                a = const A,
                b = const B,
                options(nostack, nomem),
            )
        }
    }

    #[inline(always)]
    unsafe fn release(&mut self) {
        // SAFETY: as for `configure`.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) }
    }
}

/// The tile unit a kernel runs on.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unit {
    Hardware(Hardware),
    /// [`Emulated`]: each task makes its own; the products of an
    /// instruction the processor would refuse come out NaN.
    #[cfg(test)]
    Emulated,
}

/// The tile unit's instructions in plain Rust, with the checks the
/// processor makes: a shape that does not agree is recorded in `fault`
/// (where the processor would raise #UD) and the instruction does
/// nothing.
#[derive(Debug)]
pub(crate) struct Emulated {
    config: Option<TileConfig>,
    tiles: [[[u8; MAX_ROW_BYTES]; MAX_ROWS]; TILES],
    /// The first instruction the processor would have refused.
    pub(crate) fault: Option<String>,
}

impl Default for Emulated {
    fn default() -> Emulated {
        Emulated {
            config: None,
            tiles: [[[0; MAX_ROW_BYTES]; MAX_ROWS]; TILES],
            fault: None,
        }
    }
}

impl Emulated {
    /// The rows, A's bytes a row and C's dwords a row of a product
    /// `C += A * B` in tiles `C`, `A` and `B`, where their shapes agree;
    /// else the fault.
    fn product_shape<const C: u8, const A: u8, const B: u8>(
        &mut self,
        what: &str,
    ) -> Option<(usize, usize, usize)> {
        let (c, a, b) = (
            self.shape(C, what)?,
            self.shape(A, what)?,
            self.shape(B, what)?,
        );
        let distinct = C != A && C != B && A != B;
        if !distinct || a.0 != c.0 || a.1 != 4 * b.0 || b.1 != c.1 || c.1 % 4 != 0 {
            self.fault.get_or_insert_with(|| {
                format!("{what} tmm{C}, tmm{A}, tmm{B} with shapes {c:?}, {a:?}, {b:?}")
            });
            return None;
        }
        Some((c.0, a.1, c.1 / 4))
    }

    fn shape(&mut self, t: u8, what: &str) -> Option<(usize, usize)> {
        let shape = self.config.map(|c| c.shape(t as usize));
        match shape {
            Some((rows, bytes)) if rows > 0 => Some((rows, bytes)),
            _ => {
                self.fault
                    .get_or_insert_with(|| format!("{what} of tile {t}, which is not configured"));
                None
            }
        }
    }
}

impl TileUnit for Emulated {
    unsafe fn configure(&mut self, config: &TileConfig) {
        self.config = Some(*config);
        self.tiles = [[[0; MAX_ROW_BYTES]; MAX_ROWS]; TILES];
    }

    unsafe fn zero<const T: u8>(&mut self) {
        if self.shape(T, "tilezero").is_some() {
            self.tiles[T as usize] = [[0; MAX_ROW_BYTES]; MAX_ROWS];
        }
    }

    unsafe fn load<const T: u8>(&mut self, src: *const u8, stride: usize) {
        let Some((rows, bytes)) = self.shape(T, "tileloadd") else {
            return;
        };
        let tile = &mut self.tiles[T as usize];
        *tile = [[0; MAX_ROW_BYTES]; MAX_ROWS];
        for (r, row) in tile.iter_mut().enumerate().take(rows) {
            // SAFETY: the caller's contract.
            let from = unsafe { std::slice::from_raw_parts(src.add(r * stride), bytes) };
            row[..bytes].copy_from_slice(from);
        }
    }

    unsafe fn store<const T: u8>(&mut self, dst: *mut u8, stride: usize) {
        let Some((rows, bytes)) = self.shape(T, "tilestored") else {
            return;
        };
        for (r, row) in self.tiles[T as usize].iter().enumerate().take(rows) {
            // SAFETY: the caller's contract.
            let to = unsafe { std::slice::from_raw_parts_mut(dst.add(r * stride), bytes) };
            to.copy_from_slice(&row[..bytes]);
        }
    }

    unsafe fn dot_signed_unsigned<const C: u8, const A: u8, const B: u8>(&mut self) {
        let Some((rows, k, cols)) = self.product_shape::<C, A, B>("tdpbsud") else {
            return;
        };
        let (ta, tb) = (self.tiles[A as usize], self.tiles[B as usize]);
        let tc = &mut self.tiles[C as usize];
        for m in 0..rows {
            for n in 0..cols {
                let at = 4 * n;
                let mut sum =
                    i32::from_le_bytes([tc[m][at], tc[m][at + 1], tc[m][at + 2], tc[m][at + 3]]);
                for k in 0..k {
                    let x = ta[m][k] as i8 as i32;
                    let w = tb[k / 4][at + k % 4] as i32;
                    sum = sum.wrapping_add(x * w);
                }
                tc[m][at..at + 4].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }

    unsafe fn dot_bf16<const C: u8, const A: u8, const B: u8>(&mut self) {
        let Some((rows, k, cols)) = self.product_shape::<C, A, B>("tdpbf16ps") else {
            return;
        };
        // BF16 inputs with denormals read as zero, as the instruction does
        let bf16 = |bytes: &[u8]| {
            let x = f32::from_bits((u16::from_le_bytes([bytes[0], bytes[1]]) as u32) << 16);
            if x.is_subnormal() { 0.0 } else { x }
        };
        let (ta, tb) = (self.tiles[A as usize], self.tiles[B as usize]);
        let tc = &mut self.tiles[C as usize];
        for m in 0..rows {
            for n in 0..cols {
                let at = 4 * n;
                let mut sum =
                    f32::from_le_bytes([tc[m][at], tc[m][at + 1], tc[m][at + 2], tc[m][at + 3]]);
                // k counts bytes of A's row: two per BF16 value
                for pair in 0..k / 4 {
                    for half in 0..2 {
                        let x = bf16(&ta[m][4 * pair + 2 * half..]);
                        let w = bf16(&tb[pair][at + 2 * half..]);
                        sum += x * w;
                    }
                }
                if sum.is_subnormal() {
                    sum = 0.0;
                }
                tc[m][at..at + 4].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }

    unsafe fn release(&mut self) {
        self.config = None;
        self.tiles = [[[0; MAX_ROW_BYTES]; MAX_ROWS]; TILES];
    }
}

/// Which products take the tiles where the processor has them
/// (`GGRAPH_CPU_AMX`): `1` every product they have, else none. BF16
/// products measured 3.6-8.5 times faster on them on an AMX processor,
/// the integer GEMMs of Q4_0 and Q8_0 level with VNNI and the K-quants
/// slower (docs/performance.md, 2026-12-05 and 2026-12-06); but off them
/// every product sums in ggml's order, as llama.cpp's do, so the tiles
/// are asked for, not taken by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    All,
    None,
}

fn choice() -> Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    *CHOICE.get_or_init(|| match std::env::var("GGRAPH_CPU_AMX").as_deref() {
        Ok("1") => Choice::All,
        _ => Choice::None,
    })
}

/// The tile unit for the integer GEMMs of quantised weights, where the
/// process may use it ([`usable`]) and `GGRAPH_CPU_AMX=1` asks for it.
pub(crate) fn active_integer() -> Option<Hardware> {
    if choice() == Choice::All {
        unit()
    } else {
        None
    }
}

/// Whether some product takes the tiles in this process (for the
/// device's description).
pub(crate) fn active() -> bool {
    match choice() {
        Choice::All => unit().is_some(),
        Choice::None => false,
    }
}

/// The tile unit with its BF16 products ([`bf16_usable`]), where
/// `GGRAPH_CPU_AMX=1` asks for the tiles.
pub(crate) fn active_bf16() -> Option<Hardware> {
    if choice() == Choice::All {
        bf16_unit()
    } else {
        None
    }
}

/// The processor's tile unit where this process may use it, asked for or
/// not (tests check the kernels on it).
pub(crate) fn unit() -> Option<Hardware> {
    usable().is_ok().then_some(Hardware(()))
}

/// As [`unit`], where the BF16 products may be used too.
pub(crate) fn bf16_unit() -> Option<Hardware> {
    bf16_usable().is_ok().then_some(Hardware(()))
}

/// Whether this process may use the tile unit's integer products: `Err`
/// says which step failed. Checked once.
pub(crate) fn usable() -> Result<(), &'static str> {
    static USABLE: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *USABLE.get_or_init(|| logged(check()))
}

/// As [`usable`] for the BF16 products (AMX-BF16).
pub(crate) fn bf16_usable() -> Result<(), &'static str> {
    static USABLE: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *USABLE.get_or_init(|| {
        usable()?;
        const AMX_BF16: u32 = 1 << 22;
        if std::arch::x86_64::__cpuid_count(7, 0).edx & AMX_BF16 == 0 {
            return logged(Err("the processor reports no AMX-BF16"));
        }
        logged(probe(&mut Hardware(()), Product::Bf16))
    })
}

fn logged(verdict: Result<(), &'static str>) -> Result<(), &'static str> {
    if let Err(why) = verdict {
        tracing::debug!("AMX tiles not used: {why}");
    }
    verdict
}

#[cfg(not(target_os = "linux"))]
fn check() -> Result<(), &'static str> {
    Err("AMX is used on x86-64 Linux only")
}

#[cfg(target_os = "linux")]
fn check() -> Result<(), &'static str> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};

    const AMX_INT8: u32 = 1 << 25;
    const AMX_TILE: u32 = 1 << 24;
    const OSXSAVE: u32 = 1 << 27;
    const XTILECFG: u64 = 1 << 17;
    const XTILEDATA: u64 = 1 << 18;
    const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;

    if __cpuid(0).eax < 0x1d {
        return Err("the processor has no tile information leaf");
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx & AMX_TILE == 0 || edx & AMX_INT8 == 0 {
        return Err("the processor reports no AMX-TILE and AMX-INT8");
    }
    if __cpuid(1).ecx & OSXSAVE == 0 {
        return Err("the operating system has not enabled XSAVE");
    }
    let xcr0 = {
        let (lo, hi): (u32, u32);
        // SAFETY: OSXSAVE is set, so `xgetbv` with ECX = 0 reads XCR0.
        unsafe {
            std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
                options(nostack, nomem));
        }
        (hi as u64) << 32 | lo as u64
    };
    if xcr0 & (XTILECFG | XTILEDATA) != XTILECFG | XTILEDATA {
        return Err("the operating system has not enabled the tile state (XCR0)");
    }
    let palettes = __cpuid_count(0x1d, 0).eax;
    let palette = __cpuid_count(0x1d, 1);
    let bytes_per_row = palette.ebx & 0xffff;
    let names = palette.ebx >> 16;
    let rows = palette.ecx & 0xffff;
    if palettes < 1
        || bytes_per_row as usize != MAX_ROW_BYTES
        || (names as usize) < TILES
        || (rows as usize) < MAX_ROWS
    {
        return Err("palette 1 is not eight tiles of 16 rows of 64 bytes");
    }
    // SAFETY: arch_prctl with an integer argument.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if granted != 0 {
        return Err("Linux refused the tile data permission (ARCH_REQ_XCOMP_PERM)");
    }
    let mut permitted = 0u64;
    // SAFETY: arch_prctl writes the permitted features to `permitted`.
    let read = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_GET_XCOMP_PERM,
            &mut permitted as *mut u64,
        )
    };
    if read != 0 || permitted & XTILEDATA == 0 {
        return Err("the tile data permission is not in ARCH_GET_XCOMP_PERM");
    }
    probe(&mut Hardware(()), Product::Int8)
}

/// The products a probe checks.
#[derive(Clone, Copy, Debug)]
enum Product {
    /// `tdpbsud`.
    Int8,
    /// `tdpbf16ps`.
    Bf16,
}

/// A 16 x 16 product of 64-byte rows on `unit`; `Err` if it differs from
/// the emulation's. The BF16 values are small integers, so every order of
/// the sums gives the same bits.
fn probe(unit: &mut impl TileUnit, product: Product) -> Result<(), &'static str> {
    let (a, b): (Vec<u8>, Vec<u8>) = match product {
        Product::Int8 => (
            (0..16 * 64).map(|i| (i * 37 % 256) as u8).collect(),
            (0..16 * 64).map(|i| (i * 101 % 256) as u8).collect(),
        ),
        Product::Bf16 => {
            let small = |i: usize, step: usize| {
                let x = (i * step % 17) as f32 - 8.0;
                ((x.to_bits() >> 16) as u16).to_le_bytes()
            };
            (
                (0..16 * 32).flat_map(|i| small(i, 7)).collect(),
                (0..16 * 32).flat_map(|i| small(i, 5)).collect(),
            )
        }
    };
    let mut shapes = [(0, 0); TILES];
    shapes[..3].fill((16, 64));
    let config = TileConfig::new(shapes).ok_or("no probe configuration")?;
    let mut emulated = Emulated::default();
    let (mut want, mut got) = ([0u8; 1024], [0u8; 1024]);
    // SAFETY: the tiles are as `probe_product` configures them.
    unsafe {
        probe_product(&mut emulated, product, &config, &a, &b, &mut want);
        probe_product(unit, product, &config, &a, &b, &mut got);
    }
    if emulated.fault.is_some() || want != got {
        return Err("a probe product on the tiles differs from the emulation");
    }
    Ok(())
}

/// # Safety
/// `config` makes tiles 0 to 2 16 rows of 64 bytes.
unsafe fn probe_product(
    unit: &mut impl TileUnit,
    product: Product,
    config: &TileConfig,
    a: &[u8],
    b: &[u8],
    c: &mut [u8; 1024],
) {
    // SAFETY: the caller's contract; a, b and c hold 1024 bytes.
    unsafe {
        unit.configure(config);
        unit.zero::<0>();
        unit.load::<1>(a.as_ptr(), 64);
        unit.load::<2>(b.as_ptr(), 64);
        match product {
            Product::Int8 => unit.dot_signed_unsigned::<0, 1, 2>(),
            Product::Bf16 => unit.dot_bf16::<0, 1, 2>(),
        }
        unit.store::<0>(c.as_mut_ptr(), 64);
        unit.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration of the first tiles' shapes, the others unused.
    fn first_tiles(first: &[(usize, usize)]) -> Result<TileConfig, &'static str> {
        let mut shapes = [(0, 0); TILES];
        shapes[..first.len()].copy_from_slice(first);
        TileConfig::new(shapes).ok_or("a configuration that fits palette 1 was refused")
    }

    #[test]
    fn a_configuration_gives_back_its_shapes_and_refuses_oversized_tiles()
    -> Result<(), &'static str> {
        let shapes = [
            (16, 64),
            (8, 32),
            (1, 4),
            (0, 0),
            (16, 64),
            (0, 0),
            (0, 0),
            (3, 12),
        ];
        let config = first_tiles(&shapes)?;
        for (t, s) in shapes.iter().enumerate() {
            assert_eq!(config.shape(t), *s);
        }
        assert_eq!(config.bytes[0], 1, "palette 1");
        let mut too_big = shapes;
        too_big[1] = (17, 64);
        assert_eq!(TileConfig::new(too_big), None);
        too_big[1] = (16, 65);
        assert_eq!(TileConfig::new(too_big), None);
        too_big[1] = (4, 0);
        assert_eq!(TileConfig::new(too_big), None);
        Ok(())
    }

    #[test]
    fn the_emulated_dot_product_is_signed_times_unsigned_over_dword_groups()
    -> Result<(), &'static str> {
        // A: 2 x 8 signed bytes; B: 2 rows of 3 columns of four unsigned
        // bytes; C = A * B with B[k][n] at row k / 4, byte 4 n + k % 4
        let a: [i8; 16] = [1, -2, 3, -4, 5, -6, 7, -128, -1, 0, 127, 2, 0, 0, 0, 1];
        let b: [u8; 24] = [
            1, 2, 3, 4, 255, 0, 0, 0, 9, 9, 9, 9, //
            5, 6, 7, 8, 0, 128, 0, 1, 10, 20, 30, 40,
        ];
        let mut c = [7i32; 6];
        let config = first_tiles(&[(2, 12), (2, 8), (2, 12)])?;
        let mut unit = Emulated::default();
        // SAFETY: the buffers hold the configured rows.
        unsafe {
            unit.configure(&config);
            unit.load::<0>(c.as_ptr() as *const u8, 12);
            unit.load::<1>(a.as_ptr() as *const u8, 8);
            unit.load::<2>(b.as_ptr(), 12);
            unit.dot_signed_unsigned::<0, 1, 2>();
            unit.store::<0>(c.as_mut_ptr() as *mut u8, 12);
        }
        assert_eq!(unit.fault, None);
        for m in 0..2 {
            for n in 0..3 {
                let want: i32 = 7
                    + (0..8)
                        .map(|k| a[m * 8 + k] as i32 * b[(k / 4) * 12 + 4 * n + k % 4] as i32)
                        .sum::<i32>();
                assert_eq!(c[m * 3 + n], want, "C[{m}][{n}]");
            }
        }
        Ok(())
    }

    #[test]
    fn the_emulation_refuses_what_the_processor_would() -> Result<(), &'static str> {
        let config = first_tiles(&[(2, 12), (2, 8), (3, 12)])?;
        let mut unit = Emulated::default();
        // SAFETY: nothing is read or written.
        unsafe {
            unit.zero::<0>();
            assert!(unit.fault.is_some(), "a tile instruction before ldtilecfg");
            unit.fault = None;
            unit.configure(&config);
            // B has three rows where A's eight bytes a row need two
            unit.dot_signed_unsigned::<0, 1, 2>();
            assert!(unit.fault.is_some(), "shapes that do not agree");
            unit.fault = None;
            unit.dot_signed_unsigned::<0, 0, 2>();
            assert!(unit.fault.is_some(), "C also a source");
        }
        Ok(())
    }

    #[test]
    fn the_hardware_agrees_with_the_emulation_where_the_tiles_are_usable() {
        // `usable` runs the probe; on a processor or system without AMX it
        // names the step that is missing
        assert_eq!(usable().is_ok(), unit().is_some());
        match unit() {
            Some(mut hw) => assert_eq!(probe(&mut hw, Product::Int8), Ok(())),
            None => assert!(usable().is_err_and(|why| !why.is_empty())),
        }
        assert_eq!(bf16_usable().is_ok(), bf16_unit().is_some());
        match bf16_unit() {
            Some(mut hw) => assert_eq!(probe(&mut hw, Product::Bf16), Ok(())),
            None => assert!(bf16_usable().is_err_and(|why| !why.is_empty())),
        }
    }

    #[test]
    fn the_emulated_bf16_product_sums_pairs_in_f32() -> Result<(), &'static str> {
        // A: 2 rows of 4 BF16 values; B: 2 rows of 3 columns of a pair;
        // C = A * B with B[k][n] at row k / 2, value 2 n + k % 2
        let bits = |x: f32| (x.to_bits() >> 16) as u16;
        let a: Vec<f32> = vec![1.0, -2.0, 0.5, 4.0, -1.5, 3.0, 0.25, -8.0];
        let b: Vec<f32> = vec![
            2.0, 1.0, -1.0, 0.5, 3.0, -2.0, //
            0.125, 4.0, 1.0, -1.0, 0.0, 6.0,
        ];
        let a16: Vec<u16> = a.iter().map(|&x| bits(x)).collect();
        let b16: Vec<u16> = b.iter().map(|&x| bits(x)).collect();
        let mut c = [0.5f32; 6];
        let config = first_tiles(&[(2, 12), (2, 8), (2, 12)])?;
        let mut unit = Emulated::default();
        // SAFETY: the buffers hold the configured rows.
        unsafe {
            unit.configure(&config);
            unit.load::<0>(c.as_ptr() as *const u8, 12);
            unit.load::<1>(a16.as_ptr() as *const u8, 8);
            unit.load::<2>(b16.as_ptr() as *const u8, 12);
            unit.dot_bf16::<0, 1, 2>();
            unit.store::<0>(c.as_mut_ptr() as *mut u8, 12);
        }
        assert_eq!(unit.fault, None);
        for m in 0..2 {
            for n in 0..3 {
                let want: f32 = 0.5
                    + (0..4)
                        .map(|k| a[m * 4 + k] * b[(k / 2) * 6 + 2 * n + k % 2])
                        .sum::<f32>();
                assert_eq!(c[m * 3 + n], want, "C[{m}][{n}]");
            }
        }
        // a denormal input reads as zero
        let tiny = f32::from_bits(1 << 16);
        assert!(tiny.is_subnormal());
        let a16 = [bits(tiny), 0, 0, 0, 0, 0, 0, 0];
        let b16 = [bits(1e30), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut c = [0f32; 6];
        // SAFETY: as above.
        unsafe {
            unit.configure(&config);
            unit.load::<1>(a16.as_ptr() as *const u8, 8);
            unit.load::<2>(b16.as_ptr() as *const u8, 12);
            unit.dot_bf16::<0, 1, 2>();
            unit.store::<0>(c.as_mut_ptr() as *mut u8, 12);
        }
        assert_eq!(
            c, [0.0; 6],
            "{tiny:e} * 1e30 with the denormal read as zero"
        );
        Ok(())
    }
}
