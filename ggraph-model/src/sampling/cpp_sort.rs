//! `std::sort` and `std::partial_sort` as libstdc++ (GCC 12, the library
//! llama.cpp is built with here) implements them: introsort with a
//! median-of-three pivot and a final insertion sort, and heap selection.
//! Neither is stable; equal keys (tied logits, minus infinities, NaN
//! scores) end in the order these algorithms leave them, and llama.cpp's
//! draws depend on that order, so the samplers use these and not Rust's
//! sorts.

/// Elements above this many are partitioned; below, insertion sort.
const THRESHOLD: usize = 16;

/// `std::sort(v.begin(), v.end(), less)`.
pub fn sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() > 1 {
        let depth = 2 * (usize::BITS - 1 - v.len().leading_zeros()) as usize;
        introsort_loop(v, depth, less);
        final_insertion_sort(v, less);
    }
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`: the
/// `middle` smallest first, in order; the rest in no useful order.
pub fn partial_sort<T: Copy>(v: &mut [T], middle: usize, less: &impl Fn(&T, &T) -> bool) {
    heap_select(v, middle, less);
    sort_heap(&mut v[..middle], less);
}

fn introsort_loop<T: Copy>(v: &mut [T], mut depth: usize, less: &impl Fn(&T, &T) -> bool) {
    let mut last = v.len();
    while last > THRESHOLD {
        if depth == 0 {
            partial_sort(&mut v[..last], last, less);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(&mut v[..last], less);
        introsort_loop(&mut v[cut..last], depth, less);
        last = cut;
    }
}

fn unguarded_partition_pivot<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) -> usize {
    let last = v.len();
    let mid = last / 2;
    move_median_to_first(v, 0, 1, mid, last - 1, less);
    unguarded_partition(v, 1, last, 0, less)
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    loop {
        while less(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            let val = v[i];
            v.copy_within(0..i, 1);
            v[0] = val;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &impl Fn(&T, &T) -> bool) {
    let val = v[last];
    let mut next = last - 1;
    while less(&val, &v[next]) {
        v[last] = v[next];
        last = next;
        next -= 1;
    }
    v[last] = val;
}

fn heap_select<T: Copy>(v: &mut [T], middle: usize, less: &impl Fn(&T, &T) -> bool) {
    make_heap(&mut v[..middle], less);
    for i in middle..v.len() {
        if less(&v[i], &v[0]) {
            pop_heap(v, middle, i, less);
        }
    }
}

fn make_heap<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let len = v.len();
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[parent];
        adjust_heap(v, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn sort_heap<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let mut last = v.len();
    while last > 1 {
        last -= 1;
        pop_heap(v, last, last, less);
    }
}

/// Moves the heap `v[..len]`'s top to `result` and `v[result]` into the
/// heap.
fn pop_heap<T: Copy>(v: &mut [T], len: usize, result: usize, less: &impl Fn(&T, &T) -> bool) {
    let value = v[result];
    v[result] = v[0];
    adjust_heap(v, 0, len, value, less);
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    mut hole: usize,
    len: usize,
    value: T,
    less: &impl Fn(&T, &T) -> bool,
) {
    let top = hole;
    let mut second = hole;
    while len > 0 && second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if less(&v[second], &v[second - 1]) {
            second -= 1;
        }
        v[hole] = v[second];
        hole = second;
    }
    if len & 1 == 0 && len >= 2 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[hole] = v[second - 1];
        hole = second - 1;
    }
    // push_heap
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &value) {
        v[hole] = v[parent];
        hole = parent;
        parent = (hole.wrapping_sub(1)) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sort_as_a_sort_does() {
        let mut seed = 12345u32;
        for n in [0usize, 1, 2, 5, 16, 17, 40, 100, 1000] {
            let v: Vec<u32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) % 50
                })
                .collect();
            let mut want = v.clone();
            want.sort();
            let mut a = v.clone();
            sort(&mut a, &|x, y| x < y);
            assert_eq!(a, want, "sort {n}");
            for k in [0, n / 3, n] {
                let mut b = v.clone();
                partial_sort(&mut b, k, &|x, y| x < y);
                assert_eq!(b[..k], want[..k], "partial_sort {n} {k}");
            }
        }
    }

    #[test]
    fn a_comparison_that_is_always_false_stays_in_bounds() {
        let mut v: Vec<f32> = vec![f32::NAN; 100];
        sort(&mut v, &|a, b| a < b);
        partial_sort(&mut v, 30, &|a, b| a < b);
    }
}
