//! Running ggml's own mul_mat beside a bench program: `test-backend-ops
//! perf` as `scripts/ggml-mul-mat` builds it (two threads, this
//! processor's instruction sets), so that a bench can time ggml's kernels
//! in turn with its own on the same machine in the same minutes.

use ggraph_core::DType;

/// ggml's spelling of `dtype` in test-backend-ops' case names (`q3_K`,
/// `iq4_xs`, `f16`).
pub fn case_type_name(dtype: DType) -> String {
    let lower = dtype.name().to_ascii_lowercase();
    match lower.strip_suffix("_k") {
        Some(stem) => format!("{stem}_K"),
        None => lower,
    }
}

/// ggml's GFLOP/s for `dtype` weights of `m` x `k` and each of `columns`
/// that test-backend-ops has a case for (its perf cases take 4096 x 14336
/// with n of 1, 2, 3, 4, 5, 8 and 512), by n; an empty list where it
/// failed (said on stderr).
pub fn ggml_mul_mat(
    bin: &str,
    dtype: DType,
    m: usize,
    k: usize,
    columns: &[usize],
    threads: usize,
) -> Vec<(usize, f64)> {
    let ns: Vec<String> = columns.iter().map(usize::to_string).collect();
    let pattern = format!(
        "type_a={},type_b=f32,m={m},n=({}),k={k},",
        case_type_name(dtype),
        ns.join("|")
    );
    let out = std::process::Command::new(bin)
        .args(["perf", "-b", "CPU", "-o", "MUL_MAT", "-p", &pattern])
        .env("GGRAPH_THREADS", threads.to_string())
        .output();
    match out {
        Ok(o) if o.status.success() => parse_perf(&String::from_utf8_lossy(&o.stdout)),
        Ok(o) => {
            eprintln!(
                "test-backend-ops ({bin}): {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("failed")
            );
            Vec::new()
        }
        Err(e) => {
            eprintln!("test-backend-ops ({bin}): {e}");
            Vec::new()
        }
    }
}

/// The (n, GFLOP/s) of every MUL_MAT line of test-backend-ops' perf
/// output, such as `MUL_MAT(type_a=q3_K,...,n=1,k=14336,...): 138 runs -
/// 7536.22 us/run - 117.44 MFLOP/run - 15.58 GFLOPS` (colour codes
/// around the figure).
fn parse_perf(text: &str) -> Vec<(usize, f64)> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("MUL_MAT("))
        .filter_map(|l| {
            let n = l.split([',', '(']).find_map(|f| f.strip_prefix("n="))?;
            let before = &l[..l.find("GFLOPS")?];
            let figure = before
                .rsplit(|c: char| c.is_whitespace() || c == 'm')
                .find(|f| !f.is_empty())?;
            Some((n.parse().ok()?, figure.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_types_as_test_backend_ops_does() {
        assert_eq!(case_type_name(DType::Q3_K), "q3_K");
        assert_eq!(case_type_name(DType::IQ4_XS), "iq4_xs");
        assert_eq!(case_type_name(DType::BF16), "bf16");
        assert_eq!(case_type_name(DType::Q8_0), "q8_0");
    }

    #[test]
    fn reads_the_figures_of_a_perf_run() {
        let text = "Backend 1/1: CPU\n  Device description: AMD EPYC\n\n  \
            MUL_MAT(type_a=q3_K,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1):\
                            138 runs -  7536.22 us/run - 117.44 MFLOP/run - \u{1b}[1;34m 15.58 GFLOPS\u{1b}[0m\n  \
            MUL_MAT(type_a=q3_K,type_b=f32,m=4096,n=512,k=14336,bs=[1,1]):  \
            2 runs - 900.00 us/run - 60129.54 MFLOP/run - 136.70 GFLOPS\n  \
            Backend CPU: OK\n";
        assert_eq!(parse_perf(text), vec![(1, 15.58), (512, 136.7)]);
    }
}
