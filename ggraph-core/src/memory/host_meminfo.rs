//! The host's memory as Linux reports it (`/proc/meminfo`): what the CPU
//! device counts as its own, what caps pinned memory, and what a GPU that
//! shares the host's memory (integrated, or unified memory) can allocate.

/// The figures of `/proc/meminfo` that ggraph reads, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostMemInfo {
    /// `MemTotal`.
    pub total_bytes: u64,
    /// `MemAvailable`: what can be allocated without swapping.
    pub available_bytes: u64,
    /// The huge pages the host reserves (hugetlbfs), where it reserves any.
    pub huge_pages: Option<HugePages>,
}

/// Reserved huge pages (`HugePages_Total`, `HugePages_Free`,
/// `Hugepagesize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugePages {
    /// Pages reserved.
    pub total: u64,
    /// Pages free of them.
    pub free: u64,
    /// Bytes a page.
    pub page_bytes: u64,
}

impl HostMemInfo {
    /// This host's figures; `None` where `/proc/meminfo` cannot be read
    /// or names no `MemTotal` (not Linux).
    pub fn read() -> Option<HostMemInfo> {
        HostMemInfo::parse(&std::fs::read_to_string("/proc/meminfo").ok()?)
    }

    /// The figures of a `/proc/meminfo` text; `None` without `MemTotal`.
    /// A missing `MemAvailable` counts as nothing available.
    pub fn parse(text: &str) -> Option<HostMemInfo> {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let kib = |name: &str| field(name).map(|v| v.saturating_mul(1024));
        let huge_pages = match field("HugePages_Total:") {
            Some(total) if total > 0 => Some(HugePages {
                total,
                free: field("HugePages_Free:").unwrap_or(0),
                page_bytes: kib("Hugepagesize:").unwrap_or(0),
            }),
            _ => None,
        };
        Some(HostMemInfo {
            total_bytes: kib("MemTotal:")?,
            available_bytes: kib("MemAvailable:").unwrap_or(0),
            huge_pages,
        })
    }

    /// What a device that shares the host's memory can allocate, as
    /// ggml's CUDA backend counts it for such a device: the free huge
    /// pages where the host reserves any (a driver allocates from them),
    /// else `MemAvailable`.
    pub fn shared_device_free_bytes(&self) -> u64 {
        match self.huge_pages {
            Some(h) => h.free.saturating_mul(h.page_bytes),
            None => self.available_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24571348 kB\n\
                           MemFree:         1843212 kB\n\
                           MemAvailable:   20412344 kB\n\
                           SwapFree:              0 kB\n\
                           HugePages_Total:       0\n\
                           HugePages_Free:        0\n\
                           Hugepagesize:       2048 kB\n";

    #[test]
    fn reads_total_and_available_in_bytes() {
        let info = HostMemInfo::parse(MEMINFO);
        assert_eq!(
            info,
            Some(HostMemInfo {
                total_bytes: 24_571_348 * 1024,
                available_bytes: 20_412_344 * 1024,
                huge_pages: None,
            })
        );
        assert_eq!(
            info.map(|i| i.shared_device_free_bytes()),
            Some(20_412_344 * 1024)
        );
    }

    #[test]
    fn reserved_huge_pages_are_what_a_shared_device_can_take() {
        let text = MEMINFO
            .replace("HugePages_Total:       0", "HugePages_Total:     64")
            .replace("HugePages_Free:        0", "HugePages_Free:      40");
        let info = HostMemInfo::parse(&text);
        assert_eq!(
            info.map(|i| (i.huge_pages, i.shared_device_free_bytes())),
            Some((
                Some(HugePages {
                    total: 64,
                    free: 40,
                    page_bytes: 2048 * 1024
                }),
                40 * 2048 * 1024
            ))
        );
    }

    #[test]
    fn a_text_without_mem_total_is_no_figure() {
        assert_eq!(HostMemInfo::parse(""), None);
        assert_eq!(HostMemInfo::parse("MemAvailable: 12 kB\n"), None);
        assert_eq!(
            HostMemInfo::parse("MemTotal: 100 kB\n").map(|i| i.available_bytes),
            Some(0)
        );
    }

    #[test]
    fn this_host_reads_where_it_is_linux() {
        if cfg!(target_os = "linux") {
            let info = HostMemInfo::read();
            assert!(info.is_some_and(|i| i.total_bytes > 0 && i.available_bytes <= i.total_bytes));
        }
    }
}
