//! Typed command-line values: sizes, counts, lists, weight types, tensor
//! overrides. Each parser is a clap `value_parser`, so a bad value is an
//! error that names its flag: `invalid value 'lots' for '--gpu-free
//! <BYTES>': 'lots' is not a byte count`.

use ggraph_core::DType;
use ggraph_core::util::parse_bytes;
use ggraph_model::placement::{GpuLayers, Override, OverrideTarget, TensorSplit};

/// A byte count with an optional unit: `12GiB`, `8000MB`, `512M`, `4096`.
pub fn size(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| e.to_string())
}

/// A count, `_` allowed between digits: `4096`, `4_096`.
pub fn count(s: &str) -> Result<usize, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))
}

/// A count of at least 1.
pub fn positive(s: &str) -> Result<usize, String> {
    match count(s)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

/// CPU threads: at least 1, and at most 4 per core of this machine (more
/// only wait on each other).
pub fn threads(s: &str) -> Result<usize, String> {
    let n = positive(s)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let most = 4 * cores;
    if n > most {
        return Err(format!(
            "at most {most} (4 per core; this machine has {cores})"
        ));
    }
    Ok(n)
}

/// `--rpc`: `HOST:PORT[,HOST:PORT...]`, each with a port number.
pub fn rpc_list(s: &str) -> Result<String, String> {
    for server in s.split(',') {
        let (host, port) = server
            .rsplit_once(':')
            .ok_or_else(|| format!("'{server}' is not HOST:PORT"))?;
        if host.is_empty() {
            return Err(format!("'{server}' has no host"));
        }
        port.parse::<u16>()
            .map_err(|_| format!("'{server}': '{port}' is not a port number"))?;
    }
    Ok(s.to_string())
}

/// A 64-bit seed or id.
pub fn u64_number(s: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))
}

/// A weight or tensor type by ggml's name, any case: `Q4_0`, `f16`.
pub fn dtype(s: &str) -> Result<DType, String> {
    DType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
        format!("'{s}' is not a type ({})", names.join(", "))
    })
}

/// A type model weights can have: a float type or a quantised one (not
/// I32 or the other index types).
pub fn weight_dtype(s: &str) -> Result<DType, String> {
    let t = dtype(s)?;
    if t.is_quantized() || DType::FLOATS.contains(&t) {
        return Ok(t);
    }
    let names: Vec<&str> = DType::FLOATS
        .iter()
        .chain(DType::QUANTIZED.iter())
        .map(|t| t.name())
        .collect();
    Err(format!("'{s}' is not a weight type ({})", names.join(", ")))
}

/// Layers on the GPUs: a count or `all`.
pub fn gpu_layers(s: &str) -> Result<GpuLayers, String> {
    match s {
        "all" => Ok(GpuLayers::All),
        n => count(n)
            .map(GpuLayers::Count)
            .map_err(|_| format!("'{s}' is not a layer count or 'all'")),
    }
}

/// Shares per GPU, split at `sep`: fractions (`3,1`) or, when any part
/// has a unit, byte budgets (`12GiB,8GiB`).
pub fn tensor_split_by(s: &str, sep: char) -> Result<TensorSplit, String> {
    let parts: Vec<&str> = s.split(sep).map(str::trim).collect();
    let has_unit = parts
        .iter()
        .any(|p| p.chars().any(|c| c.is_ascii_alphabetic()));
    let split = if has_unit {
        let bytes: Vec<u64> = parts.iter().map(|p| size(p)).collect::<Result<_, _>>()?;
        if bytes.iter().all(|&b| b == 0) {
            return Err("every share is zero: give at least one GPU some".into());
        }
        TensorSplit::Bytes(bytes)
    } else {
        let shares: Vec<f64> = parts
            .iter()
            .map(|p| {
                p.parse::<f64>()
                    .map_err(|_| format!("'{p}' is not a number"))
            })
            .collect::<Result<_, _>>()?;
        if let Some(bad) = shares.iter().find(|v| !v.is_finite() || **v < 0.0) {
            return Err(format!("share {bad} is not a finite number of at least 0"));
        }
        if shares.iter().all(|&v| v == 0.0) {
            return Err("every share is zero: give at least one GPU some".into());
        }
        TensorSplit::Fractions(shares)
    };
    Ok(split)
}

/// `--tensor-split`: `3,1` or `12GiB,8GiB`.
pub fn tensor_split(s: &str) -> Result<TensorSplit, String> {
    tensor_split_by(s, ',')
}

/// `REGEX=DEVICE`, DEVICE being `cpu` (or `CPU`, `host`) or a GPU index
/// (`1`, `gpu1`); the last `=` separates them.
pub fn tensor_override(s: &str) -> Result<Override, String> {
    let (re, dev) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("'{s}' is not REGEX=DEVICE"))?;
    let target = match dev {
        "cpu" | "CPU" | "host" => OverrideTarget::Host,
        d => OverrideTarget::Device(
            d.trim_start_matches("gpu")
                .parse()
                .map_err(|_| format!("device '{d}' is cpu or a GPU index"))?,
        ),
    };
    Override::new(re, target).map_err(|e| e.to_string())
}

/// Token ids: `1,300,301`.
pub fn token_ids(s: &str) -> Result<Vec<i32>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .map_err(|_| format!("'{p}' is not a token id"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_counts_and_lists_parse_and_name_what_is_wrong() {
        assert_eq!(size("12GiB"), Ok(12 << 30));
        assert_eq!(size("8000MB"), Ok(8_000_000_000));
        assert!(size("lots").unwrap_err().contains("lots"));
        assert_eq!(count("4_096"), Ok(4096));
        assert_eq!(positive("0"), Err("must be at least 1".into()));
        assert_eq!(
            tensor_split("3,1"),
            Ok(TensorSplit::Fractions(vec![3.0, 1.0]))
        );
        assert_eq!(
            tensor_split("12GiB, 8GiB"),
            Ok(TensorSplit::Bytes(vec![12 << 30, 8 << 30]))
        );
        assert!(tensor_split("3,x").unwrap_err().contains("'x'"));
        assert_eq!(gpu_layers("all"), Ok(GpuLayers::All));
        assert_eq!(gpu_layers("12"), Ok(GpuLayers::Count(12)));
        assert_eq!(dtype("q4_k"), Ok(DType::Q4_K));
        assert!(dtype("Q9_9").unwrap_err().contains("Q8_0"));
        assert_eq!(token_ids("1, 2,3"), Ok(vec![1, 2, 3]));
        let o = tensor_override("blk\\.1\\..*=gpu1").unwrap();
        assert_eq!(o.target, OverrideTarget::Device(1));
        assert_eq!(
            tensor_override("exps=cpu").unwrap().target,
            OverrideTarget::Host
        );
        assert!(tensor_override("exps").is_err());
        assert!(tensor_override("(=cpu").is_err());
    }
}
