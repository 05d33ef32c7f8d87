//! Ollama's layer layout over GPUs (llm/server.go: `buildLayout`,
//! `assignLayers`, `findBestFit`, `greedyFit`), for hypothetical GPUs that
//! are discrete, of one library and not Metal (so `ByLibrary` and
//! `ByPerformance` each make one group, and Metal's rules do not apply).
//!
//! How it goes:
//! - GPUs are sorted by free memory, largest first (a stable sort: Go's
//!   sort is insertion sort for up to 12 items, which keeps ties in order).
//! - Each GPU keeps back `457 MiB` (`MinimumMemory`), the configured GPU
//!   overhead and the graph reserved on it so far.
//! - `greedyFit` walks the layers from the last (the output layer) to the
//!   first, filling the *last* GPU of the list first and moving to the one
//!   before it when a layer does not fit, each GPU's room scaled by a
//!   capacity factor.
//! - `findBestFit` binary-searches (in `f32`) the smallest capacity that
//!   places as many layers as capacity 1 does, which spreads layers evenly.
//!   (When a layer count is requested, capacity may go to 1000. There the
//!   `f32` steps are coarser than the search's 1e-6 stop, and Ollama's loop
//!   would never end; here the search stops when the midpoint no longer
//!   moves.)
//! - `assignLayers` tries the first 1, 2, ... GPUs (from the last GPU that
//!   already has a graph) until every layer fits; if they do not all fit,
//!   it tries again without the output layer, and keeps that second try
//!   even when the first placed the requested number of layers (so with
//!   `num_gpu` = 4 on a 10-layer model, layers 5..=8 go, not 6..=9).
//! - Free memory is scaled as `uint64(float32(free) * capacity)`: the
//!   `f32` rounding (24-bit mantissa) is kept.

/// Memory Ollama keeps free on every GPU that is not Metal
/// (`DeviceInfo.MinimumMemory`).
pub const GPU_MINIMUM_MEMORY: u64 = 457 * 1024 * 1024;

/// Layers assigned to one GPU (an index into the list of GPUs given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerAssignment {
    /// The GPU's index in the list of free memories given.
    pub gpu: usize,
    /// Layer indices, ascending.
    pub layers: Vec<usize>,
}

fn sum(list: &[LayerAssignment]) -> usize {
    list.iter().map(|g| g.layers.len()).sum()
}

/// A GPU as the fitting sees it: its index in the list given and the
/// bytes it has for layers.
#[derive(Clone, Copy, Debug)]
struct Room {
    gpu: usize,
    free: u64,
}

fn scaled(free: u64, capacity: f32) -> u64 {
    (free as f32 * capacity) as u64
}

/// `greedyFit`: layers from the last to the first onto the GPUs from the
/// last to the first.
fn greedy_fit(
    layers: &[u64],
    gpus: &[Room],
    capacity: f32,
    requested: i64,
) -> Vec<LayerAssignment> {
    let Some(mut device) = gpus.len().checked_sub(1) else {
        return Vec::new();
    };
    let mut out = vec![LayerAssignment {
        gpu: gpus[device].gpu,
        layers: Vec::new(),
    }];
    let mut free = scaled(gpus[device].free, capacity);
    for i in (0..layers.len()).rev() {
        if requested >= 0 && (layers.len() - 1 - i) as i64 >= requested {
            break;
        }
        loop {
            if layers[i] <= free {
                // Collected last to first; put in order at the end.
                out[0].layers.push(i);
                free -= layers[i];
                break;
            }
            if device == 0 {
                return in_order(out);
            }
            device -= 1;
            out.insert(
                0,
                LayerAssignment {
                    gpu: gpus[device].gpu,
                    layers: Vec::new(),
                },
            );
            free = scaled(gpus[device].free, capacity);
        }
    }
    in_order(out)
}

fn in_order(mut out: Vec<LayerAssignment>) -> Vec<LayerAssignment> {
    for g in &mut out {
        g.layers.reverse();
    }
    out
}

/// `findBestFit` for one performance group.
fn find_best_fit(
    layers: &[u64],
    gpus: &[Room],
    requested: i64,
    force_request: bool,
) -> Vec<LayerAssignment> {
    let mut high: f32 = 1.0;
    let mut low: f32 = 0.0;
    if requested >= 0 && force_request {
        high = 1000.0;
    }
    let mut best = greedy_fit(layers, gpus, high, requested);
    let most = sum(&best);
    while high - low > 1e-6 {
        let mid = (low + high) / 2.0;
        if mid <= low || mid >= high {
            // f32 cannot split the interval further (see the module docs).
            break;
        }
        let a = greedy_fit(layers, gpus, mid, requested);
        if sum(&a) == most {
            high = mid;
            best = a;
        } else {
            low = mid;
        }
    }
    best
}

/// `assignLayers` with `SchedSpread` off.
fn assign_layers(
    layers: &[u64],
    gpus: &[Room],
    require_full: bool,
    requested: i64,
    last_used: usize,
) -> Vec<LayerAssignment> {
    let mut layers = layers;
    let mut requested = requested;
    let mut out = Vec::new();
    for _ in 0..2 {
        requested = requested.min(layers.len() as i64);
        for i in last_used..gpus.len() {
            let force = i == gpus.len() - 1 && !require_full;
            out = find_best_fit(layers, &gpus[..=i], requested, force);
            if sum(&out) == layers.len() || sum(&out) as i64 == requested {
                break;
            }
        }
        if sum(&out) == layers.len() {
            return out;
        }
        match layers.len().checked_sub(1) {
            Some(n) => layers = &layers[..n],
            None => return out,
        }
    }
    out
}

/// `buildLayout`: where the layers of sizes `layer_bytes` go on GPUs with
/// `free` bytes each (after the reserved buffer), with `graph[g]` bytes of
/// graph already reserved on GPU `g`. `requested`: a layer count asked for
/// (Ollama's `num_gpu`), or -1.
pub fn build_layout(
    layer_bytes: &[u64],
    free: &[u64],
    graph: &[u64],
    gpu_overhead: u64,
    requested: i64,
) -> Vec<LayerAssignment> {
    if free.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..free.len()).collect();
    order.sort_by(|&a, &b| free[b].cmp(&free[a]));
    let mut last_used = 0;
    let rooms: Vec<Room> = order
        .iter()
        .enumerate()
        .map(|(i, &g)| {
            let g_graph = graph.get(g).copied().unwrap_or(0);
            if g_graph != 0 {
                last_used = i;
            }
            let reserved = GPU_MINIMUM_MEMORY
                .wrapping_add(gpu_overhead)
                .wrapping_add(g_graph);
            Room {
                gpu: g,
                free: free[g].saturating_sub(reserved),
            }
        })
        .collect();
    assign_layers(layer_bytes, &rooms, false, requested, last_used)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn layers_of(list: &[LayerAssignment], gpu: usize) -> Vec<usize> {
        list.iter()
            .filter(|g| g.gpu == gpu)
            .flat_map(|g| g.layers.clone())
            .collect()
    }

    #[test]
    fn everything_fits_on_one_large_gpu() {
        let layers = vec![100 * MIB; 5];
        let out = build_layout(&layers, &[4 * GIB], &[0], 0, -1);
        assert_eq!(layers_of(&out, 0), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn the_minimum_reserve_and_overhead_are_kept_back() {
        // 457 MiB + 500 MiB of 1000 MiB free leave 43 MiB: no 50 MiB layer
        // fits. Without the overhead, 10 of 12 would.
        let layers = vec![50 * MIB; 12];
        let out = build_layout(&layers, &[1000 * MIB], &[0], 500 * MIB, -1);
        assert_eq!(sum(&out), 0);
        let out = build_layout(&layers, &[1000 * MIB], &[0], 0, -1);
        assert_eq!(sum(&out), 10);
    }

    #[test]
    fn when_not_all_fit_the_output_layer_is_dropped_first() {
        // Room for 3 of 4: the output layer (3, the largest) stays behind
        // and the three repeating layers go.
        let layers = vec![100 * MIB, 100 * MIB, 100 * MIB, 150 * MIB];
        let out = build_layout(&layers, &[GPU_MINIMUM_MEMORY + 320 * MIB], &[0], 0, -1);
        assert_eq!(layers_of(&out, 0), vec![0, 1, 2]);
    }

    #[test]
    fn two_gpus_take_the_layers_evenly_largest_first() {
        let layers = vec![100 * MIB; 10];
        let free = [
            GPU_MINIMUM_MEMORY + 600 * MIB,
            GPU_MINIMUM_MEMORY + 800 * MIB,
        ];
        let out = build_layout(&layers, &free, &[0, 0], 0, -1);
        // GPU 1 has more room, so it comes first and takes the first layers.
        assert_eq!(sum(&out), 10);
        let (a, b) = (layers_of(&out, 0), layers_of(&out, 1));
        assert_eq!(a.len() + b.len(), 10);
        assert!(b.iter().all(|l| a.iter().all(|m| l < m)), "{out:?}");
        assert!(a.len().abs_diff(b.len()) <= 2, "{out:?}");
    }

    #[test]
    fn a_requested_layer_count_is_honoured() {
        let layers = vec![100 * MIB; 10];
        // Four fit, but not all, so Ollama tries again without the output
        // layer and keeps that: layers 5..=8, not 6..=9.
        let out = build_layout(&layers, &[8 * GIB], &[0], 0, 4);
        assert_eq!(layers_of(&out, 0), vec![5, 6, 7, 8]);
        // Forced onto a GPU too small for them: the capacity search may
        // overcommit (up to 1000x) and must still end.
        let out = build_layout(&layers, &[GPU_MINIMUM_MEMORY + 10 * MIB], &[0], 0, 3);
        assert_eq!(sum(&out), 3);
    }

    /// Non-empty assignments as (gpu, layers), in list order.
    fn placed(list: &[LayerAssignment]) -> Vec<(usize, Vec<usize>)> {
        list.iter()
            .filter(|g| !g.layers.is_empty())
            .map(|g| (g.gpu, g.layers.clone()))
            .collect()
    }

    #[test]
    fn the_discrete_gpu_cases_of_ollamas_own_layout_test_agree() {
        // Ollama's llm/server_test.go TestLLMServerFitGPU (one library, no
        // integrated GPUs, requireFull off): GPU 0 has 128 MiB and GPU 1
        // 256 MiB above the 457 MiB minimum; the last layer is the output.
        let small = GPU_MINIMUM_MEMORY + 128 * MIB;
        let large = GPU_MINIMUM_MEMORY + 256 * MIB;
        let m = |v: &[u64]| v.iter().map(|x| x * MIB).collect::<Vec<u64>>();
        type Case<'a> = (&'a str, Vec<u64>, Vec<u64>, i64, Vec<(usize, Vec<usize>)>);
        let cases: Vec<Case> = vec![
            ("no gpu", vec![], m(&[50, 50, 50]), -1, vec![]),
            (
                "full single",
                vec![large],
                m(&[50, 50, 50]),
                -1,
                vec![(0, vec![0, 1, 2])],
            ),
            (
                "partial single",
                vec![large],
                m(&[100, 100, 100, 100]),
                -1,
                vec![(0, vec![1, 2])],
            ),
            (
                "single num_gpu 1",
                vec![large],
                m(&[50, 50, 50]),
                1,
                vec![(0, vec![1])],
            ),
            ("single num_gpu 0", vec![large], m(&[50, 50, 50]), 0, vec![]),
            (
                "single num_gpu 999",
                vec![large],
                m(&[100, 100, 100, 100]),
                999,
                vec![(0, vec![0, 1, 2, 3])],
            ),
            (
                "fits on one",
                vec![small, large],
                m(&[50, 50, 50]),
                -1,
                vec![(1, vec![0, 1, 2])],
            ),
            (
                "split",
                vec![small, large],
                m(&[256, 50, 50]),
                -1,
                vec![(1, vec![0]), (0, vec![1, 2])],
            ),
            (
                "multi partial",
                vec![small, large],
                m(&[256, 256, 50]),
                -1,
                vec![(1, vec![1])],
            ),
            (
                "multi num_gpu 1",
                vec![small, large],
                m(&[50, 50, 50]),
                1,
                vec![(1, vec![1])],
            ),
            (
                "multi num_gpu 2",
                vec![small, large],
                m(&[256, 50, 50]),
                2,
                vec![(1, vec![0]), (0, vec![1])],
            ),
            (
                "multi num_gpu 999",
                vec![small, large],
                m(&[256, 256, 50]),
                999,
                vec![(1, vec![0, 1]), (0, vec![2])],
            ),
        ];
        for (name, free, layers, requested, want) in cases {
            let graph = vec![0; free.len()];
            let got = build_layout(&layers, &free, &graph, 0, requested);
            assert_eq!(placed(&got), want, "{name}");
        }
    }

    #[test]
    fn no_gpus_no_layers() {
        assert!(build_layout(&[1, 2, 3], &[], &[], 0, -1).is_empty());
    }
}
