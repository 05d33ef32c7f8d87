//! A runtime stream with what kernel launches need: tensor addresses in
//! this device's memory, an error word on the device that kernels reading
//! indices flag bad ones in (checked when the stream synchronises), and
//! scratch memory for converted operands.

use std::ffi::c_void;
use std::sync::Arc;

use ggraph_core::ir::{Graph, TensorId};
use ggraph_core::{Error, Result};

use crate::buffer::GpuBuffer;
use crate::gpu::Gpu;
use crate::kernel_args::{
    Arg, ERR_ADD_ID, ERR_GET_ROWS, ERR_MUL_MAT_ID, ERR_SET_ROWS, ERR_SSM_SCAN, KTensor,
};
use crate::runtime::{DevPtr, Gemm, RawStream};

/// Kernel launches in order on one stream of one device.
pub struct KernelQueue {
    gpu: Arc<Gpu>,
    stream: RawStream,
    /// One i32 on the device: error flags set by kernels.
    err_word: DevPtr,
    /// Temporary device memory for converted operands, grown when an op
    /// needs more and reused by every later op of the stream.
    scratch: DevPtr,
    scratch_bytes: u64,
}

// SAFETY: the raw handles are owned by this queue and used from one
// thread at a time (through &mut).
unsafe impl Send for KernelQueue {}

impl KernelQueue {
    pub fn new(gpu: Arc<Gpu>) -> Result<KernelQueue> {
        let stream = gpu.stream_create()?;
        let err_word = match gpu.alloc(4) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created above, never used.
                unsafe { gpu.stream_destroy(stream) };
                return Err(e);
            }
        };
        // SAFETY: 4 bytes just allocated.
        unsafe { gpu.memset(err_word, 0, 4, None)? };
        Ok(KernelQueue {
            gpu,
            stream,
            err_word,
            scratch: 0,
            scratch_bytes: 0,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The runtime's stream.
    pub fn raw(&self) -> RawStream {
        self.stream
    }

    /// The device address of the error word, for kernels that flag bad
    /// indices.
    pub fn err_ptr(&self) -> DevPtr {
        self.err_word
    }

    /// Device memory of at least `bytes` for the op being queued; valid
    /// until the next call.
    pub fn scratch(&mut self, bytes: u64) -> Result<DevPtr> {
        if bytes <= self.scratch_bytes && self.scratch != 0 {
            return Ok(self.scratch);
        }
        // earlier ops may still read the old scratch: wait for them
        self.gpu.stream_sync(self.stream)?;
        if self.scratch != 0 {
            // SAFETY: allocated below by this queue, no queued work uses it.
            unsafe { self.gpu.free(self.scratch) };
            self.scratch = 0;
            self.scratch_bytes = 0;
        }
        let size = bytes.next_power_of_two().max(1 << 20);
        self.scratch = self.gpu.alloc(size)?;
        self.scratch_bytes = size;
        Ok(self.scratch)
    }

    /// Queues one kernel.
    pub fn launch(
        &mut self,
        kernel: &'static str,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<()> {
        let mut store: Vec<Arg> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = store
            .iter_mut()
            .map(|a| match a {
                Arg::T(t) => t as *mut KTensor as *mut c_void,
                Arg::I(i) => i as *mut i32 as *mut c_void,
                Arg::F(f) => f as *mut f32 as *mut c_void,
                Arg::P(p) => p as *mut DevPtr as *mut c_void,
            })
            .collect();
        // SAFETY: the dispatcher builds arguments matching each kernel's
        // parameters from tensors resolved to this device's memory.
        unsafe {
            self.gpu
                .launch(self.stream, kernel, grid, block, shared_bytes, &mut ptrs)
        }
    }

    /// Queues a matrix product on the BLAS library.
    pub fn gemm(&mut self, g: &Gemm) -> Result<()> {
        // SAFETY: the dispatcher checked the layouts against the tensors.
        unsafe { self.gpu.gemm(self.stream, g) }
    }

    /// Device address of a tensor's first byte, checking that it lives in
    /// this device's memory.
    pub fn address(&self, graph: &Graph, id: TensorId) -> Result<DevPtr> {
        let t = graph.tensor(id);
        let (buffer, offset) = graph
            .data_of(id)
            .ok_or_else(|| Error::Unallocated(graph.display_name(id)))?;
        if offset + t.nbytes() as u64 > buffer.size() {
            return Err(Error::OutOfBounds {
                what: "tensor memory",
                offset,
                end: offset + t.nbytes() as u64,
                size: buffer.size(),
            });
        }
        match buffer.as_any().downcast_ref::<GpuBuffer>() {
            Some(b) if b.gpu().is(&self.gpu) => Ok(b.device_ptr() + offset),
            _ => Err(Error::backend(
                self.gpu.label(),
                format!(
                    "tensor '{}' lives in {} memory, which {} cannot address; copy it first",
                    graph.display_name(id),
                    buffer.buffer_type_name(),
                    self.gpu.label()
                ),
            )),
        }
    }

    /// Reads and clears the kernels' error flags.
    pub fn check_errors(&mut self) -> Result<()> {
        let mut word = [0u8; 4];
        // SAFETY: the error word is 4 bytes of this device.
        unsafe { self.gpu.dtoh(word.as_mut_ptr(), self.err_word, 4, None)? };
        let flags = i32::from_le_bytes(word);
        if flags == 0 {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { self.gpu.memset(self.err_word, 0, 4, None)? };
        let mut ops = Vec::new();
        if flags & ERR_GET_ROWS != 0 {
            ops.push("get_rows");
        }
        if flags & ERR_SET_ROWS != 0 {
            ops.push("set_rows");
        }
        if flags & ERR_MUL_MAT_ID != 0 {
            ops.push("mul_mat_id");
        }
        if flags & ERR_SSM_SCAN != 0 {
            ops.push("ssm_scan");
        }
        if flags & ERR_ADD_ID != 0 {
            ops.push("add_id");
        }
        Err(Error::InvalidArgument(format!(
            "{}: an index was outside its tensor in {} (those rows were left as zeros or unwritten)",
            self.gpu.label(),
            ops.join(", ")
        )))
    }
}

impl Drop for KernelQueue {
    fn drop(&mut self) {
        let _ = self.gpu.stream_sync(self.stream);
        // SAFETY: owned by this queue; its work is finished.
        unsafe {
            if self.scratch != 0 {
                self.gpu.free(self.scratch);
            }
            self.gpu.free(self.err_word);
            self.gpu.stream_destroy(self.stream);
        }
    }
}
