//! Raw views of tensors for the kernels: a pointer, a type and a layout.
//!
//! The stream resolves every tensor of a split to a `TRef` before running
//! its kernel; the kernels then read and write through raw pointers, row by
//! row, with the conversions below. Callers guarantee that pointers cover
//! the tensor's span (the allocator and `Graph::set_data` check that) and
//! that concurrent writers touch disjoint rows.

use ggraph_core::DType;
use ggraph_core::ir::Tensor;
use ggraph_core::quant;
use half::slice::HalfFloatSliceExt;

use super::convert;
use super::interleave::Interleaved;

#[derive(Clone, Copy, Debug)]
pub struct TRef {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    pub nb: [usize; 4],
    /// A weight in the CPU's interleaved layout rather than ggml's rows:
    /// only the kernels that read that layout see one (the stream gives
    /// every other kernel ggml's rows).
    pub layout: Option<Interleaved>,
}

// SAFETY: TRef is a plain description of memory owned by a buffer that
// outlives the compute call; writes go to disjoint rows.
unsafe impl Send for TRef {}
unsafe impl Sync for TRef {}

impl TRef {
    pub fn new(ptr: *mut u8, t: &Tensor) -> TRef {
        TRef {
            ptr,
            dtype: t.dtype,
            ne: t.ne,
            nb: t.nb,
            layout: None,
        }
    }

    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    pub fn rows_packed(&self) -> bool {
        self.nb[0] == self.dtype.type_size() || self.ne[0] <= 1
    }

    /// Whether the values lie side by side in ggml's order, every
    /// dimension right after the one before (dimensions of one element
    /// aside), as `ggml_is_contiguous` says.
    pub fn is_contiguous(&self) -> bool {
        let (blck, ts) = (self.dtype.block_size(), self.dtype.type_size());
        if self.ne[0] != blck && self.nb[0] != ts {
            return false;
        }
        let mut next = ts * self.ne[0] / blck;
        for i in 1..4 {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next *= self.ne[i];
            }
        }
        true
    }

    /// (i1, i2, i3) of row `r`.
    #[inline]
    pub fn row_coords(&self, r: usize) -> (usize, usize, usize) {
        let i1 = r % self.ne[1];
        let i2 = (r / self.ne[1]) % self.ne[2];
        let i3 = r / (self.ne[1] * self.ne[2]);
        (i1, i2, i3)
    }

    #[inline]
    pub fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: in bounds for valid coordinates (caller's contract).
        unsafe {
            self.ptr
                .add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
        }
    }

    #[inline]
    pub fn elem_ptr(&self, i: [usize; 4]) -> *mut u8 {
        // SAFETY: in bounds for valid coordinates (caller's contract).
        unsafe { self.row_ptr(i[1], i[2], i[3]).add(i[0] * self.nb[0]) }
    }

    /// Reads row (i1, i2, i3) as f32 into `out` (ne[0] values).
    ///
    /// # Safety
    /// The row must be valid for reads.
    pub unsafe fn load_row(&self, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
        let n = self.ne[0];
        let p = self.row_ptr(i1, i2, i3);
        let out = &mut out[..n];
        // SAFETY (all arms): the row spans n elements at stride nb[0].
        unsafe {
            if self.rows_packed() {
                match self.dtype {
                    DType::F32 => {
                        out.copy_from_slice(std::slice::from_raw_parts(p as *const f32, n))
                    }
                    DType::F16 => {
                        let src = std::slice::from_raw_parts(p as *const half::f16, n);
                        convert::f16_to_f32(src, out);
                    }
                    DType::BF16 => {
                        let src = std::slice::from_raw_parts(p as *const half::bf16, n);
                        src.convert_to_f32_slice(out);
                    }
                    DType::I32 => {
                        let src = std::slice::from_raw_parts(p as *const i32, n);
                        for (o, s) in out.iter_mut().zip(src) {
                            *o = *s as f32;
                        }
                    }
                    q => {
                        let bytes = q.row_size(n).unwrap_or(0);
                        let src = std::slice::from_raw_parts(p as *const u8, bytes);
                        let _ = quant::dequantize_row(q, src, out);
                    }
                }
            } else {
                let s = self.nb[0];
                for (i, o) in out.iter_mut().enumerate() {
                    *o = read_scalar(self.dtype, p.add(i * s));
                }
            }
        }
    }

    /// Writes `vals` (ne[0] values) to row (i1, i2, i3), converting.
    ///
    /// # Safety
    /// The row must be valid for writes and written by no one else now.
    pub unsafe fn store_row(&self, i1: usize, i2: usize, i3: usize, vals: &[f32]) {
        let n = self.ne[0];
        let p = self.row_ptr(i1, i2, i3);
        let vals = &vals[..n];
        // SAFETY (all arms): the row spans n elements at stride nb[0].
        unsafe {
            if self.rows_packed() {
                match self.dtype {
                    DType::F32 => {
                        std::slice::from_raw_parts_mut(p as *mut f32, n).copy_from_slice(vals)
                    }
                    DType::F16 => convert::f32_to_f16(
                        vals,
                        std::slice::from_raw_parts_mut(p as *mut half::f16, n),
                    ),
                    DType::BF16 => {
                        let dst = std::slice::from_raw_parts_mut(p as *mut u16, n);
                        for (d, v) in dst.iter_mut().zip(vals) {
                            *d = quant::f32_to_bf16(*v);
                        }
                    }
                    DType::I32 => {
                        let dst = std::slice::from_raw_parts_mut(p as *mut i32, n);
                        for (d, v) in dst.iter_mut().zip(vals) {
                            *d = *v as i32;
                        }
                    }
                    q => {
                        let bytes = q.row_size(n).unwrap_or(0);
                        let dst = std::slice::from_raw_parts_mut(p, bytes);
                        let _ = quant::quantize_row(q, vals, dst);
                    }
                }
            } else {
                let s = self.nb[0];
                for (i, v) in vals.iter().enumerate() {
                    write_scalar(self.dtype, p.add(i * s), *v);
                }
            }
        }
    }

    /// Reads one I32 element.
    ///
    /// # Safety
    /// The element must be valid for reads and the type I32.
    #[inline]
    pub unsafe fn get_i32(&self, i: [usize; 4]) -> i32 {
        // SAFETY: caller's contract.
        unsafe { (self.elem_ptr(i) as *const i32).read_unaligned() }
    }

    /// Reads one element of a non-quantised type as f32.
    ///
    /// # Safety
    /// The element must be valid for reads.
    #[inline]
    pub unsafe fn get_f32(&self, i: [usize; 4]) -> f32 {
        // SAFETY: caller's contract.
        unsafe { read_scalar(self.dtype, self.elem_ptr(i)) }
    }
}

/// Reads one scalar of a non-quantised type.
///
/// # Safety
/// `p` must be valid for reads of the type's size.
#[inline]
pub unsafe fn read_scalar(dtype: DType, p: *const u8) -> f32 {
    // SAFETY: caller's contract.
    unsafe {
        match dtype {
            DType::F32 => (p as *const f32).read_unaligned(),
            DType::F16 => half::f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            DType::BF16 => quant::bf16_to_f32((p as *const u16).read_unaligned()),
            DType::I32 => (p as *const i32).read_unaligned() as f32,
            _ => f32::NAN,
        }
    }
}

/// Writes one scalar of a non-quantised type.
///
/// # Safety
/// `p` must be valid for writes of the type's size.
#[inline]
pub unsafe fn write_scalar(dtype: DType, p: *mut u8, v: f32) {
    // SAFETY: caller's contract.
    unsafe {
        match dtype {
            DType::F32 => (p as *mut f32).write_unaligned(v),
            DType::F16 => (p as *mut u16).write_unaligned(half::f16::from_f32(v).to_bits()),
            DType::BF16 => (p as *mut u16).write_unaligned(quant::f32_to_bf16(v)),
            DType::I32 => (p as *mut i32).write_unaligned(v as i32),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_ref(ne: [usize; 4], nb: [usize; 4]) -> TRef {
        TRef {
            ptr: std::ptr::null_mut(),
            dtype: DType::F32,
            ne,
            nb,
            layout: None,
        }
    }

    #[test]
    fn contiguous_as_ggml_says_it() {
        // [16, 3, 4] in order
        assert!(f32_ref([16, 3, 4, 1], [4, 64, 192, 768]).is_contiguous());
        // the same permuted to [16, 4, 3]: rows packed, the whole not
        let permuted = f32_ref([16, 4, 3, 1], [4, 192, 64, 768]);
        assert!(permuted.rows_packed() && !permuted.is_contiguous());
        // a dimension of one element has any stride
        assert!(f32_ref([16, 1, 4, 1], [4, 999, 64, 256]).is_contiguous());
    }
}
