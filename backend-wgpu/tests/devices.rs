//! Devices: discovery (and its absence), names, kinds, memory figures.

mod common;

use std::process::Command;
use std::sync::Arc;

use ggraph_core::backend::{BackendRegistration, BufferUsage, Device, DeviceKind, MemorySource};
use ggraph_core::{DType, Error, GraphBuilder};
use ggraph_wgpu::{Registration, WgpuDevice, WgpuOptions};

/// The no-adapter path runs in a child process of this test binary, with
/// the Vulkan loader pointed at a driver list that does not exist.
#[test]
fn without_an_adapter_the_backend_lists_no_devices_and_does_not_panic() {
    if std::env::var_os("GGRAPH_WGPU_NO_ADAPTER_CHILD").is_some() {
        assert!(
            ggraph_wgpu::adapters().is_empty(),
            "{:?}",
            ggraph_wgpu::adapters()
        );
        assert!(Registration.devices().is_empty());
        assert!(ggraph_wgpu::devices().is_empty());
        match WgpuDevice::open(0) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("0 adapters"), "{msg}"),
            other => panic!(
                "expected an error, got {:?}",
                other.map(|d| d.name().to_string())
            ),
        }
        println!("child: no adapter, no device, no panic");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "without_an_adapter_the_backend_lists_no_devices_and_does_not_panic",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GGRAPH_WGPU_NO_ADAPTER_CHILD", "1")
        .env("VK_ICD_FILENAMES", "/nonexistent.json")
        .env("VK_DRIVER_FILES", "/nonexistent.json")
        .env("WGPU_BACKEND", "vulkan")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child: no adapter, no device, no panic"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_device_is_a_gpu_class_device_named_wgpu_n_with_its_own_memory() {
    let Some(dev) = common::device_or_skip("device identity") else {
        return;
    };
    assert!(dev.name().starts_with("wgpu:"), "{}", dev.name());
    assert!(!dev.description().is_empty());
    assert!(matches!(
        dev.kind(),
        DeviceKind::Gpu | DeviceKind::IntegratedGpu
    ));
    let bt = dev.buffer_type();
    assert_eq!(
        bt.name(),
        dev.name(),
        "the buffer type is named after its device"
    );
    assert!(!bt.is_host());
    assert!(bt.alignment() >= 16 && bt.alignment().is_power_of_two());
    assert!(bt.max_size() >= 1 << 20);
    assert!(dev.max_binding_bytes() <= bt.max_size());
    let caps = dev.caps();
    assert!(caps.async_copy && caps.events);
    let cpu = ggraph_cpu::CpuDevice::new();
    assert!(!dev.supports_buffer_type(cpu.buffer_type().as_ref()));
    assert!(!cpu.supports_buffer_type(bt.as_ref()));
    // the registry hands out the same devices every time
    let again = Registration.devices();
    assert!(again.iter().any(|d| d.name() == dev.name()));
}

#[test]
fn memory_reports_say_where_their_figures_come_from() {
    let Some(dev) = common::device_or_skip("memory report") else {
        return;
    };
    let r = dev.memory_report();
    assert!(r.info.total_bytes > 0, "{r:?}");
    assert!(r.info.free_bytes <= r.info.total_bytes, "{r:?}");
    assert!(!r.how.is_empty());
    println!("{}: {r:?}", dev.name());
}

#[test]
fn allocations_are_counted_and_a_declared_budget_is_enforced() {
    if common::device_or_skip("declared budget").is_none() {
        return;
    }
    let dev = WgpuDevice::open_with(
        0,
        WgpuOptions {
            memory_budget_bytes: Some(1 << 20),
            ..WgpuOptions::default()
        },
    )
    .unwrap();
    let m = dev.memory();
    assert_eq!(m.source, MemorySource::DeclaredBudget);
    assert_eq!((m.total_bytes, m.free_bytes), (1 << 20, 1 << 20));
    let bt = dev.buffer_type();
    let a = bt.alloc(768 << 10, BufferUsage::Weights).unwrap();
    assert_eq!(dev.allocated_bytes(), 768 << 10);
    assert_eq!(dev.memory().free_bytes, 256 << 10);
    match bt.alloc(512 << 10, BufferUsage::Compute) {
        Err(Error::OutOfMemory {
            buffer_type,
            requested_bytes,
            available_bytes,
        }) => {
            assert_eq!(buffer_type, dev.name());
            assert_eq!(requested_bytes, 512 << 10);
            assert_eq!(available_bytes, 256 << 10);
        }
        other => panic!("expected out of memory, got {:?}", other.map(|_| ())),
    }
    drop(a);
    assert_eq!(dev.allocated_bytes(), 0, "freed buffers are returned");
    assert!(bt.alloc(1 << 20, BufferUsage::Compute).is_ok());
}

#[test]
fn a_buffer_larger_than_the_adapter_allows_is_an_out_of_memory_error() {
    let Some(dev) = common::device_or_skip("oversized buffer") else {
        return;
    };
    let too_big = dev.limits().max_buffer_size + 4;
    match dev.buffer_type().alloc(too_big, BufferUsage::Weights) {
        Err(Error::OutOfMemory {
            requested_bytes, ..
        }) => assert_eq!(requested_bytes, too_big),
        other => panic!("expected out of memory, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn two_devices_on_one_adapter_do_not_share_buffer_types() {
    if common::device_or_skip("two devices").is_none() {
        return;
    }
    let a = WgpuDevice::open(0).unwrap();
    let b = WgpuDevice::open(0).unwrap();
    assert_ne!(a.name(), b.name());
    assert_ne!(a.buffer_type().name(), b.buffer_type().name());
    assert!(!a.supports_buffer_type(b.buffer_type().as_ref()));
    assert!(a.supports_buffer_type(a.buffer_type().as_ref()));
}

#[test]
fn a_kernel_refuses_tensors_in_another_devices_memory() {
    if common::device_or_skip("foreign memory").is_none() {
        return;
    }
    let a: Arc<dyn Device> = WgpuDevice::open(0).unwrap();
    let b: Arc<dyn Device> = WgpuDevice::open(0).unwrap();
    let mut gb = GraphBuilder::new();
    let x = gb.input("x", DType::F32, &[16]).unwrap();
    let y = gb.silu(x).unwrap();
    gb.set_output(y).unwrap();
    let mut g = gb.build();
    let _own = ggraph_core::exec::alloc_one_buffer(&mut g, &a.buffer_type()).unwrap();
    let other = b.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    g.set_data(
        x,
        ggraph_core::ir::TensorData {
            buffer: other,
            offset: 0,
        },
    )
    .unwrap();
    match ggraph_core::exec::compute_on(a.as_ref(), &g) {
        Err(Error::Backend { device, msg }) => {
            assert_eq!(device, a.name());
            assert!(msg.contains("cannot address"), "{msg}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}
