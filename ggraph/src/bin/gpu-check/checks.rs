//! The correctness checks beside the conformance suite: the sample llama
//! graph on the device against the f64 reference, and a llama block split
//! between the CPU and the device by the scheduler.

use std::sync::Arc;

use ggraph::backend::Device;
use ggraph::{DType, Result};
use ggraph_conformance as conformance;

use crate::devices_sample::Sample;

/// The sample llama graph entirely on the device, against the f64
/// reference.
pub fn llama_block(d: &Arc<dyn Device>, samples: &[(DType, Result<Sample>)]) -> bool {
    let mut ok = true;
    for (w, sample) in samples {
        match sample
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|s| s.run(d).map_err(|e| e.to_string()))
        {
            Ok(r) => {
                let pass = r.passed();
                ok &= pass;
                println!(
                    "llama block ({w} weights, {} nodes) on {}: {:.2} ms, nmse {:.1e} vs f64 reference: {}",
                    r.nodes,
                    d.name(),
                    r.millis,
                    r.nmse,
                    if pass { "ok" } else { "FAILED" }
                );
            }
            Err(e) => {
                ok = false;
                println!("llama block ({w} weights) on {}: FAILED: {e}", d.name());
            }
        }
    }
    ok
}

/// A llama block split between the CPU and this GPU by the scheduler
/// (weights of some layers on each, copies between them), with standard
/// and flash attention, against the CPU alone and the f64 reference.
pub fn mixed_cpu_gpu_llama(d: &Arc<dyn Device>) -> bool {
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    let mut ok = true;
    for attention in [
        ggraph::model::arch::Attention::Standard,
        ggraph::model::arch::Attention::Flash,
    ] {
        match conformance::testing::mixed::mixed_llama(
            std::slice::from_ref(d),
            cpu.clone(),
            DType::Q8_0,
            attention,
        ) {
            Ok(m) => {
                println!(
                    "mixed CPU+{} llama block ({attention:?} attention) through the scheduler: {} splits, {} copies, {} nodes on the device, nmse vs CPU {:.1e}, vs f64 reference {:.1e}: {}",
                    d.name(),
                    m.splits,
                    m.copies,
                    m.device_nodes,
                    m.nmse_vs_cpu,
                    m.nmse_vs_reference,
                    if m.passed() { "PASS" } else { "FAIL" }
                );
                ok &= m.passed();
            }
            Err(e) => {
                println!("mixed CPU+{} llama block: FAILED: {e}", d.name());
                ok = false;
            }
        }
    }
    ok
}
