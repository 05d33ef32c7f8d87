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
    // With quantised weights the CPU quantises the activations to 8 bits
    // (as ggml does): each is off by at most half a step, max|x| / 254, so
    // a dot is off by at most sum|w| times that (silu' stays below 1.1).
    let max_x = input.iter().fold(0f32, |m, v| m.max(v.abs()));
    for j in 0..4 {
        for i in 0..16 {
            let row = &wq[i * 64..(i + 1) * 64];
            let dot: f32 = (0..64).map(|k| row[k] * input[j * 64 + k]).sum();
            let want = dot / (1.0 + (-dot).exp());
            let tol = 1e-4 + 1.1 * row.iter().map(|w| w.abs()).sum::<f32>() * max_x / 254.0;
            assert!((out[j * 16 + i] - want).abs() < tol);
        }
    }
    Ok(())
}
