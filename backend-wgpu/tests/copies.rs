//! Buffers and data movement: reads and writes at any offset, fills,
//! copies within a device, between a wgpu device and the CPU, and between
//! two wgpu devices, through `copy_between` and `Stream::copy_async`;
//! events across devices.

mod common;

use std::sync::Arc;

use ggraph_core::backend::{Buffer, BufferUsage, Device, copy_between};
use ggraph_core::{Error, Result};
use ggraph_wgpu::WgpuDevice;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read_all(b: &dyn Buffer) -> Vec<u8> {
    let mut v = vec![0u8; b.size() as usize];
    b.read(0, &mut v).unwrap();
    v
}

fn two_devices() -> Option<(Arc<dyn Device>, Arc<dyn Device>)> {
    common::device_or_skip("two wgpu devices")?;
    Some((WgpuDevice::open(0).unwrap(), WgpuDevice::open(0).unwrap()))
}

#[test]
fn writes_and_reads_at_any_offset_keep_the_neighbouring_bytes() {
    let Some(dev) = common::device_or_skip("unaligned writes") else {
        return;
    };
    let buf = dev.buffer_type().alloc(37, BufferUsage::Compute).unwrap();
    assert_eq!(buf.size(), 37);
    assert_eq!(
        read_all(buf.as_ref()),
        vec![0u8; 37],
        "new buffers are zeroed"
    );
    let mut want = pattern(37, 1);
    buf.write(0, &want).unwrap();
    for (offset, len) in [
        (0usize, 1usize),
        (1, 2),
        (3, 5),
        (6, 9),
        (13, 3),
        (34, 3),
        (36, 1),
    ] {
        let data = pattern(len, 100 + offset as u8);
        buf.write(offset as u64, &data).unwrap();
        want[offset..offset + len].copy_from_slice(&data);
        assert_eq!(
            read_all(buf.as_ref()),
            want,
            "after writing {len} bytes at {offset}"
        );
        let mut part = vec![0u8; len];
        buf.read(offset as u64, &mut part).unwrap();
        assert_eq!(part, data);
    }
}

#[test]
fn fills_cover_exactly_their_range() {
    let Some(dev) = common::device_or_skip("fills") else {
        return;
    };
    let buf = dev.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    let mut want = pattern(64, 3);
    buf.write(0, &want).unwrap();
    for (offset, len, value) in [(5u64, 11u64, 0xabu8), (16, 16, 0), (33, 1, 7), (0, 3, 0)] {
        buf.fill(offset, len, value).unwrap();
        want[offset as usize..(offset + len) as usize].fill(value);
        assert_eq!(read_all(buf.as_ref()), want, "fill {len} at {offset}");
    }
}

#[test]
fn out_of_range_accesses_are_errors() {
    let Some(dev) = common::device_or_skip("bounds") else {
        return;
    };
    let buf = dev.buffer_type().alloc(16, BufferUsage::Compute).unwrap();
    assert!(matches!(
        buf.write(10, &[0; 7]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        buf.read(16, &mut [0; 1]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(buf.fill(8, 9, 1), Err(Error::OutOfBounds { .. })));
    let other = dev.buffer_type().alloc(8, BufferUsage::Compute).unwrap();
    assert!(matches!(
        copy_between(buf.as_ref(), 12, other.as_ref(), 0, 8),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn copies_within_a_device_aligned_unaligned_and_overlapping() {
    let Some(dev) = common::device_or_skip("device copies") else {
        return;
    };
    let bt = dev.buffer_type();
    let a = bt.alloc(64, BufferUsage::Compute).unwrap();
    let b = bt.alloc(64, BufferUsage::Compute).unwrap();
    let pa = pattern(64, 9);
    a.write(0, &pa).unwrap();
    let mut want_b = vec![0u8; 64];
    for (src, dst, len) in [(0u64, 0u64, 64u64), (4, 8, 16), (3, 10, 7), (1, 2, 1)] {
        copy_between(a.as_ref(), src, b.as_ref(), dst, len).unwrap();
        want_b[dst as usize..(dst + len) as usize]
            .copy_from_slice(&pa[src as usize..(src + len) as usize]);
        assert_eq!(
            read_all(b.as_ref()),
            want_b,
            "copy {len} from {src} to {dst}"
        );
    }
    // overlapping ranges of one buffer behave as memmove
    let mut want_a = pa.clone();
    copy_between(a.as_ref(), 0, a.as_ref(), 8, 32).unwrap();
    want_a.copy_within(0..32, 8);
    assert_eq!(read_all(a.as_ref()), want_a);
}

fn check_round_trip(dev: &Arc<dyn Device>, host: &Arc<dyn Device>, via_stream: bool) -> Result<()> {
    let g = dev.buffer_type().alloc(100, BufferUsage::Compute)?;
    let h = host.buffer_type().alloc(100, BufferUsage::Compute)?;
    let h2 = host.buffer_type().alloc(100, BufferUsage::Compute)?;
    let data = pattern(100, 42);
    h.write(0, &data)?;
    let mut stream = dev.new_stream()?;
    // host -> device at an unaligned offset, device -> host back
    if via_stream {
        stream.copy_async(h.as_ref(), 0, g.as_ref(), 3, 90)?;
        stream.copy_async(g.as_ref(), 3, h2.as_ref(), 5, 90)?;
        stream.synchronize()?;
    } else {
        copy_between(h.as_ref(), 0, g.as_ref(), 3, 90)?;
        copy_between(g.as_ref(), 3, h2.as_ref(), 5, 90)?;
    }
    let mut want = vec![0u8; 100];
    want[5..95].copy_from_slice(&data[..90]);
    assert_eq!(read_all(h2.as_ref()), want);
    Ok(())
}

#[test]
fn data_moves_between_a_wgpu_buffer_and_cpu_memory() {
    let Some(dev) = common::device_or_skip("cpu copies") else {
        return;
    };
    let dev: Arc<dyn Device> = dev;
    let cpu: Arc<dyn Device> = ggraph_cpu::CpuDevice::new();
    check_round_trip(&dev, &cpu, false).unwrap();
    check_round_trip(&dev, &cpu, true).unwrap();
    // a simulated device's memory is not host memory: staged through the host
    let sim: Arc<dyn Device> = ggraph_cpu::SimDevice::new(9, ggraph_cpu::SimConfig::gpu(1 << 20));
    check_round_trip(&dev, &sim, false).unwrap();
    check_round_trip(&dev, &sim, true).unwrap();
}

#[test]
fn data_moves_between_two_wgpu_devices() {
    let Some((d0, d1)) = two_devices() else {
        return;
    };
    let a = d0.buffer_type().alloc(256, BufferUsage::Compute).unwrap();
    let b = d1.buffer_type().alloc(256, BufferUsage::Compute).unwrap();
    let data = pattern(256, 77);
    a.write(0, &data).unwrap();
    copy_between(a.as_ref(), 16, b.as_ref(), 32, 128).unwrap();
    let mut want = vec![0u8; 256];
    want[32..160].copy_from_slice(&data[16..144]);
    assert_eq!(read_all(b.as_ref()), want);

    // queued on either device's stream, in either direction
    for (stream_dev, src, dst) in [(&d0, &a, &b), (&d1, &a, &b), (&d0, &b, &a), (&d1, &b, &a)] {
        let fresh = pattern(256, src.size() as u8 ^ 5);
        src.write(0, &fresh).unwrap();
        let mut s = stream_dev.new_stream().unwrap();
        s.copy_async(src.as_ref(), 7, dst.as_ref(), 9, 200).unwrap();
        s.synchronize().unwrap();
        let mut got = vec![0u8; 200];
        dst.read(9, &mut got).unwrap();
        assert_eq!(got, fresh[7..207], "copy queued on {}", stream_dev.name());
    }
}

#[test]
fn events_order_work_across_devices() {
    let Some((d0, d1)) = two_devices() else {
        return;
    };
    let a = d0.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    let b = d1.buffer_type().alloc(64, BufferUsage::Compute).unwrap();
    let mut s0 = d0.new_stream().unwrap();
    let mut s1 = d1.new_stream().unwrap();
    s0.write_async(a.as_ref(), 0, &pattern(64, 1)).unwrap();
    let e = s0.record_event().unwrap();
    s1.wait_event(e.as_ref()).unwrap();
    s1.copy_async(a.as_ref(), 0, b.as_ref(), 0, 64).unwrap();
    let e1 = s1.record_event().unwrap();
    e1.synchronize().unwrap();
    assert_eq!(read_all(b.as_ref()), pattern(64, 1));
    // an event of the same device costs nothing to wait for
    s0.wait_event(e.as_ref()).unwrap();
    e.synchronize().unwrap();
}
