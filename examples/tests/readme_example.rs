//! The README's usage example, kept compiling and correct.

use ggraph::backend::Device;
use ggraph::{DType, GraphBuilder, exec};
use ggraph_cpu::CpuDevice;

#[test]
fn the_readme_example_runs() -> ggraph::Result<()> {
    let weights: Vec<f32> = (0..64 * 16).map(|i| ((i % 7) as f32 - 3.0) / 8.0).collect();
    let input: Vec<f32> = (0..64 * 4).map(|i| ((i % 5) as f32 - 2.0) / 4.0).collect();

    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::Q8_0, &[64, 16])?;
    let x = b.input("x", DType::F32, &[64, 4])?;
    let y = b.mul_mat(w, x)?;
    let y = b.silu(y)?;
    b.set_output(y)?;
    let mut graph = b.build();

    let cpu = CpuDevice::new();
    let _memory = exec::alloc_one_buffer(&mut graph, &cpu.buffer_type())?;
    graph.write_f32(w, &weights)?;
    graph.write_f32(x, &input)?;
    exec::compute_on(cpu.as_ref(), &graph)?;
    let out = graph.read_f32(y)?;
    assert_eq!(out.len(), 16 * 4);

    // the same by hand, from the dequantised weights
    let wq = ggraph::quant::dequantize(
        DType::Q8_0,
        &ggraph::quant::quantize(DType::Q8_0, &weights)?,
        64 * 16,
    )?;
    for j in 0..4 {
        for i in 0..16 {
            let dot: f32 = (0..64).map(|k| wq[i * 64 + k] * input[j * 64 + k]).sum();
            let want = dot / (1.0 + (-dot).exp());
            assert!((out[j * 16 + i] - want).abs() < 1e-4);
        }
    }
    Ok(())
}
