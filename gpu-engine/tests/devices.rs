//! Device, buffer and stream behaviour of the GPU engine, on the host
//! emulator (a runtime whose device memory is host memory).

use std::sync::Arc;

use ggraph_core::backend::{BufferType, BufferUsage, Device, MemorySource, copy_between};
use ggraph_core::ir::{GraphBuilder, TensorData};
use ggraph_core::{DType, Error, exec};
use ggraph_cpu::CpuDevice;
use ggraph_gpu::emulator::EmuRuntime;
use ggraph_gpu::{GpuDevice, PinnedBuffer};

#[test]
fn device_memory_is_one_driver_allocation_per_buffer() {
    let rt = EmuRuntime::new(0, 64 << 20, true);
    let dev = GpuDevice::new(rt.clone(), "emu");
    let mut b = GraphBuilder::new();
    let mut x = b.input("x", DType::F32, &[64, 8]).unwrap();
    for _ in 0..10 {
        x = b.silu(x).unwrap();
    }
    b.set_output(x).unwrap();
    let mut g = b.build();
    let before = rt.live_allocations();
    let buf = exec::alloc_one_buffer(&mut g, &dev.buffer_type())
        .unwrap()
        .unwrap();
    assert_eq!(
        rt.live_allocations(),
        before + 1,
        "11 tensors, one allocation"
    );
    assert_eq!(dev.buffer_type().alignment(), 256);
    assert!(!dev.buffer_type().is_host());
    assert_eq!(dev.memory().source, MemorySource::Driver);
    assert_eq!(dev.memory().free_bytes, (64 << 20) - buf.size());
    drop(g);
    drop(buf);
    assert_eq!(rt.live_allocations(), before);
}

#[test]
fn running_out_of_device_memory_is_an_error_naming_the_device() {
    let dev = EmuRuntime::device(3, 1 << 20, true);
    let bt = dev.buffer_type();
    let _a = bt.alloc(768 << 10, BufferUsage::Weights).unwrap();
    match bt.alloc(512 << 10, BufferUsage::Compute) {
        Err(Error::OutOfMemory {
            buffer_type,
            requested_bytes,
            ..
        }) => {
            assert_eq!(buffer_type, "emu:3");
            assert_eq!(requested_bytes, 512 << 10);
        }
        Err(e) => panic!("expected out of memory, got {e}"),
        Ok(_) => panic!("expected out of memory, got a buffer"),
    }
}

#[test]
fn device_buffers_read_write_fill_copy_and_check_bounds() {
    let dev = EmuRuntime::device(0, 1 << 20, true);
    let a = dev.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    let b = dev.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    a.write(0, &(0..64).collect::<Vec<u8>>()).unwrap();
    b.fill(0, 64, 7).unwrap();
    copy_between(a.as_ref(), 8, b.as_ref(), 16, 8).unwrap();
    let mut out = [0u8; 32];
    b.read(0, &mut out).unwrap();
    assert_eq!(&out[..16], &[7; 16]);
    assert_eq!(&out[16..24], &[8, 9, 10, 11, 12, 13, 14, 15]);
    assert!(matches!(
        a.write(60, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(a.read(u64::MAX - 2, &mut out).is_err());
    assert!(a.fill(0, 65, 0).is_err());
    // host memory straight in, device memory out to a CPU buffer
    let host = CpuDevice::new()
        .buffer_type()
        .alloc(64, BufferUsage::Compute)
        .unwrap();
    host.write(0, &[42; 64]).unwrap();
    copy_between(host.as_ref(), 0, a.as_ref(), 0, 4).unwrap();
    copy_between(a.as_ref(), 0, host.as_ref(), 10, 6).unwrap();
    let mut h = [0u8; 16];
    host.read(0, &mut h).unwrap();
    assert_eq!(&h[10..16], &[42, 42, 42, 42, 4, 5]);
}

#[test]
fn copies_between_two_gpus_take_the_peer_path() {
    let d0 = EmuRuntime::device(0, 1 << 20, true);
    let d1 = EmuRuntime::device(1, 1 << 20, true);
    let a = d0.buffer_type().alloc(16, BufferUsage::Compute).unwrap();
    let b = d1.buffer_type().alloc(16, BufferUsage::Compute).unwrap();
    a.write(0, &[5; 16]).unwrap();
    assert!(b.copy_from(0, a.as_ref(), 0, 16).unwrap(), "direct copy");
    let mut out = [0u8; 16];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [5; 16]);
    assert_ne!(a.buffer_type_name(), b.buffer_type_name());
    assert!(!d1.supports_buffer_type(d0.buffer_type().as_ref()));
}

#[test]
fn pinned_host_memory_has_a_cap_and_falls_back_to_pageable_memory() {
    let dev = EmuRuntime::device(0, 1 << 20, true);
    let bt = dev.pinned_buffer_type().with_cap(4096);
    assert!(bt.is_host());
    assert_eq!(bt.name(), "emu_Host");
    let pinned = bt.alloc(3000, BufferUsage::Compute).unwrap();
    let p = pinned.as_any().downcast_ref::<PinnedBuffer>().unwrap();
    assert!(p.is_pinned());
    assert_eq!(bt.pinned_bytes(), 3000);
    // past the cap: pageable, and still a working host buffer
    let pageable = bt.alloc(3000, BufferUsage::Compute).unwrap();
    assert!(
        !pageable
            .as_any()
            .downcast_ref::<PinnedBuffer>()
            .unwrap()
            .is_pinned()
    );
    assert_eq!(bt.pinned_bytes(), 3000);
    pageable.write(0, &[1, 2, 3]).unwrap();
    let mut out = [0u8; 3];
    pageable.read(0, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3]);
    assert!(pageable.host_ptr().is_some());
    drop(pinned);
    assert_eq!(
        bt.pinned_bytes(),
        0,
        "freed pinned memory is returned to the cap"
    );
    // the CPU computes on it
    assert!(CpuDevice::new().supports_buffer_type(&bt));
    assert!(dev.host_buffer_type().is_some());
}

#[test]
fn a_bad_index_is_reported_when_the_stream_synchronises() {
    let dev = EmuRuntime::device(0, 1 << 20, true);
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, &[4, 3]).unwrap();
    let idx = b.input("idx", DType::I32, &[2]).unwrap();
    let r = b.get_rows(a, idx).unwrap();
    b.set_output(r).unwrap();
    let mut g = b.build();
    let _buf = exec::alloc_one_buffer(&mut g, &dev.buffer_type()).unwrap();
    g.write_f32(a, &(0..12).map(|v| v as f32).collect::<Vec<_>>())
        .unwrap();
    g.write_i32(idx, &[2, 3]).unwrap();
    let mut s = dev.new_stream().unwrap();
    s.compute(&g, g.nodes()).unwrap();
    let err = s.synchronize().unwrap_err();
    assert!(err.to_string().contains("get_rows"), "{err}");
    // the row with a good index was still copied, the bad one zeroed
    assert_eq!(
        g.read_f32(r).unwrap(),
        vec![8.0, 9.0, 10.0, 11.0, 0.0, 0.0, 0.0, 0.0]
    );
    // the flag is cleared: a good run synchronises cleanly
    g.write_i32(idx, &[1, 0]).unwrap();
    s.compute(&g, g.nodes()).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        g.read_f32(r).unwrap(),
        vec![4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0]
    );
}

#[test]
fn tensors_in_cpu_memory_are_refused_by_the_gpu_kernels() {
    let dev = EmuRuntime::device(0, 1 << 20, true);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[16]).unwrap();
    let y = b.silu(x).unwrap();
    b.set_output(y).unwrap();
    let mut g = b.build();
    let host = CpuDevice::new()
        .buffer_type()
        .alloc(64, BufferUsage::Compute)
        .unwrap();
    let devbuf = dev.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    g.set_data(
        x,
        TensorData {
            buffer: host,
            offset: 0,
        },
    )
    .unwrap();
    g.set_data(
        y,
        TensorData {
            buffer: devbuf,
            offset: 0,
        },
    )
    .unwrap();
    let err = exec::compute_on(dev.as_ref(), &g).unwrap_err();
    assert!(err.to_string().contains("cannot address"), "{err}");
}

#[test]
fn offload_takes_large_batches_and_the_threshold_can_be_changed() {
    let dev = EmuRuntime::device(0, 1 << 20, true);
    let mut b = GraphBuilder::new();
    let w = b.weight("w", DType::Q4_0, &[64, 16]).unwrap();
    let x31 = b.input("x31", DType::F32, &[64, 31]).unwrap();
    let x32 = b.input("x32", DType::F32, &[64, 32]).unwrap();
    let small = b.mul_mat(w, x31).unwrap();
    let large = b.mul_mat(w, x32).unwrap();
    let act = b.silu(large).unwrap();
    let g = b.build();
    assert_eq!(dev.offload_min_batch(), 32);
    assert!(dev.offload_op(&g, large));
    assert!(!dev.offload_op(&g, small));
    assert!(
        !dev.offload_op(&g, act),
        "only matrix products are offloaded"
    );
    dev.set_offload_min_batch(8);
    assert!(dev.offload_op(&g, small));
}

#[test]
fn streams_copy_asynchronously_and_order_work_with_events() {
    let d0: Arc<dyn Device> = EmuRuntime::device(0, 1 << 20, true);
    let d1: Arc<dyn Device> = EmuRuntime::device(1, 1 << 20, true);
    let a = d0.buffer_type().alloc(32, BufferUsage::Compute).unwrap();
    let b = d1.buffer_type().alloc(32, BufferUsage::Compute).unwrap();
    let pinned = d0
        .host_buffer_type()
        .unwrap()
        .alloc(32, BufferUsage::Compute)
        .unwrap();
    let mut s0 = d0.new_stream().unwrap();
    let mut s1 = d1.new_stream().unwrap();
    s0.write_async(a.as_ref(), 0, &[3; 32]).unwrap();
    s0.copy_async(a.as_ref(), 0, pinned.as_ref(), 0, 32)
        .unwrap();
    let ev = s0.record_event().unwrap();
    s1.wait_event(ev.as_ref()).unwrap();
    s1.copy_async(a.as_ref(), 4, b.as_ref(), 0, 8).unwrap();
    s1.synchronize().unwrap();
    s0.synchronize().unwrap();
    ev.synchronize().unwrap();
    let mut out = [0u8; 8];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [3; 8]);
    pinned.read(0, &mut out).unwrap();
    assert_eq!(out, [3; 8]);
    assert!(d0.caps().async_copy && d0.caps().events && d0.caps().host_buffer);
}

/// An integrated device (CUDA's `integrated` attribute) counts the host's
/// available memory as its free memory, as ggml's CUDA backend does, and
/// fitting a model sees that figure: the device's own 512 KiB takes some
/// of the model's layers, the host's memory all of them.
#[test]
fn an_integrated_device_counts_the_hosts_available_memory_and_fitting_sees_it() {
    use ggraph_core::backend::{DeviceKind, HostMemInfo};
    use ggraph_model::arch::ModelConfig;
    use ggraph_model::context::ContextParams;
    use ggraph_model::desc::ModelDesc;
    use ggraph_model::estimate::exact::{FitRequest, fit};
    use ggraph_model::placement::PlacementOptions;

    let budget = 512 << 10;
    let discrete = EmuRuntime::device(0, budget, true);
    let integrated = GpuDevice::new(EmuRuntime::integrated(1, budget, true), "emu");
    assert_eq!(discrete.kind(), DeviceKind::Gpu);
    assert_eq!(integrated.kind(), DeviceKind::IntegratedGpu);
    assert_eq!(discrete.memory().free_bytes, budget);

    let host_before = HostMemInfo::read().map_or(0, |h| h.shared_device_free_bytes());
    let m = integrated.memory();
    let host_after = HostMemInfo::read().map_or(0, |h| h.shared_device_free_bytes());
    if host_before == 0 {
        // no /proc/meminfo: the driver's figure
        assert_eq!((m.source, m.free_bytes), (MemorySource::Driver, budget));
        return;
    }
    assert_eq!(m.source, MemorySource::HostShared);
    assert_eq!(m.total_bytes, budget, "the total stays the driver's");
    // the host's figure moves between reads: within 64 MiB of both
    let (lo, hi) = (host_before.min(host_after), host_before.max(host_after));
    assert!(
        m.free_bytes + (64 << 20) >= lo && m.free_bytes <= hi + (64 << 20),
        "{} against the host's {lo}..{hi}",
        m.free_bytes
    );

    let desc =
        ModelDesc::random(ModelConfig::dense(512, 128, 5, 4, 2, 256), DType::Q4_0, 5).unwrap();
    let params = ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 32,
        ..ContextParams::default()
    };
    let req = FitRequest {
        margin: 16 << 10,
        layers_fixed: false,
        fit_ctx: false,
        min_ctx: 64,
    };
    let layers = |dev: Arc<GpuDevice>| {
        let f = fit(
            &desc,
            &[dev as Arc<dyn Device>],
            CpuDevice::new(),
            &PlacementOptions::default(),
            &params,
            req,
        )
        .unwrap();
        (f.estimate.n_gpu_layers, f.reason)
    };
    // five layers and the output layer
    let (on_discrete, why) = layers(discrete);
    assert!(on_discrete < 6, "{on_discrete} layers in 512 KiB: {why}");
    let (on_integrated, why) = layers(integrated);
    assert_eq!(on_integrated, 6, "{why}");
}
