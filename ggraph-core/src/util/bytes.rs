//! Byte counts as people write them: `512MiB`, `2GiB`, `1.5G`.

use crate::error::{Error, Result};

/// Parses a byte count: a plain number, or one with a unit (`512MiB`,
/// `2GiB`, `1.5G`, `300M`, `4096K`, `8GB`). Binary and decimal units are
/// both accepted and mean what they say (GiB = 2^30, GB = 10^9; a bare
/// `G` means GiB, as in most tools).
pub fn parse_bytes(s: &str) -> Result<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("'{s}' is not a byte count")))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "kb" => 1e3,
        "m" | "mib" => 1024.0 * 1024.0,
        "mb" => 1e6,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "gb" => 1e9,
        "t" | "tib" => 1024f64.powi(4),
        "tb" => 1e12,
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown byte unit '{other}' in '{s}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )));
        }
    };
    let v = num * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(Error::InvalidArgument(format!("'{s}' is out of range")));
    }
    Ok(v.round() as u64)
}

/// A byte count for people: `280.00 MiB`, `1.21 GiB`, `512 B`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_units() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("8GB").unwrap(), 8_000_000_000);
        assert_eq!(parse_bytes("512 MiB").unwrap(), 512 << 20);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn byte_counts_format_for_people() {
        assert_eq!(format_bytes(280 << 20), "280.00 MiB");
        assert_eq!(format_bytes(100), "100 B");
    }
}
