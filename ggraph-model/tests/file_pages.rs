//! A model file gives back its pages of a tensor once the loader has
//! copied it (`ModelFile::release`), as the kernel counts them.
#![cfg(target_os = "linux")]

use ggraph_core::DType;
use ggraph_model::gguf::{GgufWriter, ModelFile};

/// Kilobytes of this process's memory resident in the mapping that
/// holds `addr`, from the kernel's accounting (`/proc/self/smaps`).
fn resident_kib_of_mapping(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = (a..b).contains(&addr);
        } else if inside && let Some(kib) = line.strip_prefix("Rss:") {
            return kib.trim().trim_end_matches(" kB").trim().parse().unwrap();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// A tensor copied out and released no longer counts in the process's
/// resident memory, and still reads the same bytes.
#[test]
fn a_released_tensor_leaves_resident_memory_and_reads_the_same() {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama");
    let data: Vec<u8> = (0..4 << 20)
        .map(|i: u32| (i * 7 + i / 4093) as u8)
        .collect();
    w.tensor("big", DType::F32.into(), &[1 << 20], data.clone())
        .unwrap();
    let path = std::env::temp_dir().join(format!("ggraph-{}-release.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let m = ModelFile::open(&path).unwrap();
    let bytes = m.tensor_data("big").unwrap();
    let at = bytes.as_ptr() as usize;
    assert_eq!(bytes, &data[..]);
    let before = resident_kib_of_mapping(at);
    assert!(
        before >= 4 << 10,
        "{before} KiB resident after reading 4 MiB"
    );
    m.release("big");
    let after = resident_kib_of_mapping(at);
    // all but the partial pages at its ends and the header's
    assert!(after <= 256, "{after} KiB still resident after release");
    assert_eq!(m.tensor_data("big").unwrap(), &data[..]);
    m.release("no such tensor");
    std::fs::remove_file(path).ok();
}
