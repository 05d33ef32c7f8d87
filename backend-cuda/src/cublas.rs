//! Matrix products on cuBLAS: one handle per device, created on the first
//! product and used under a lock.

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cublas::sys as cb;
use ggraph_core::DType;
use ggraph_gpu::{Call, CallError, Gemm, RawStream};

/// The cuBLAS handle of one device, once created.
#[derive(Default)]
pub struct Cublas {
    handle: Mutex<Option<Handle>>,
}

struct Handle(cb::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one at a time (it
// is only used under the mutex).
unsafe impl Send for Handle {}

fn data_type(t: DType) -> cb::cudaDataType {
    match t {
        DType::F16 => cb::cudaDataType::CUDA_R_16F,
        DType::BF16 => cb::cudaDataType::CUDA_R_16BF,
        _ => cb::cudaDataType::CUDA_R_32F,
    }
}

fn failed(call: &'static str, r: cb::cublasStatus_t) -> CallError {
    CallError::Failed {
        call,
        code: format!("{r:?}"),
    }
}

impl Cublas {
    /// Queues `g` on `stream` (`C = Aᵀ · B` per batch, f32 results).
    ///
    /// # Safety
    /// cuBLAS is present, the device's context is current and the
    /// matrices lie in its memory.
    pub unsafe fn gemm(&self, stream: RawStream, g: &Gemm) -> Call {
        let mut guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let mut handle: cb::cublasHandle_t = std::ptr::null_mut();
            // SAFETY: caller's contract.
            let r = unsafe { cb::cublasCreate_v2(&mut handle) };
            if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(failed("cublasCreate", r));
            }
            *guard = Some(Handle(handle));
        }
        let handle = guard.as_ref().map(|h| h.0).expect("created above");
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: caller's contract; the handle is used under the lock.
        let r = unsafe {
            let r = cb::cublasSetStream_v2(handle, stream as cb::cudaStream_t);
            if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                r
            } else {
                cb::cublasGemmStridedBatchedEx(
                    handle,
                    cb::cublasOperation_t::CUBLAS_OP_T,
                    cb::cublasOperation_t::CUBLAS_OP_N,
                    g.m,
                    g.n,
                    g.k,
                    &alpha as *const f32 as *const c_void,
                    g.a as *const c_void,
                    data_type(g.a_type),
                    g.lda,
                    g.stride_a,
                    g.b as *const c_void,
                    data_type(g.b_type),
                    g.ldb,
                    g.stride_b,
                    &beta as *const f32 as *const c_void,
                    g.c as *mut c_void,
                    cb::cudaDataType::CUDA_R_32F,
                    g.ldc,
                    g.stride_c,
                    g.batch,
                    cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
        };
        if r != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(failed("cuBLAS gemm", r));
        }
        Ok(())
    }
}
