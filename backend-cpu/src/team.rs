//! The CPU's worker team: during one graph computation, the thread that
//! runs the graph (the leader) and helpers from the team's rayon pool
//! share each kernel's tasks.
//!
//! The helpers spin on an epoch counter while a computation runs, so a
//! kernel hands out its tasks in well under a microsecond instead of
//! waking threads for every op (generation runs a few hundred small ops
//! per token, where waking would cost more than the ops). They keep
//! spinning for [`LINGER`] after a computation ends, so that the next one
//! (the next token) finds them awake; only a team idle for longer puts
//! them to sleep. The leader is the thread that calls [`Team::run`]: it
//! takes tasks too, and returns when every task is done and no helper
//! still looks at the job. Work submitted from inside a task, from a
//! thread outside any computation, or while another thread leads the
//! team runs on the calling thread.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long helpers wait, spinning, for the next computation. Entering
/// the pool for every computation and sleeping between them cost two
/// wake-ups per token (a helper's, then the caller's), a measurable share
/// of a token's time on small models; a token's work outside the graph
/// is much shorter than this wait (docs/performance.md).
const LINGER: Duration = Duration::from_millis(2);

/// One parallel loop: tasks 0..n of `body`.
struct Job {
    /// The loop body with its lifetime erased; valid while the job is
    /// published (the leader retracts it before the body goes away).
    body: *const (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

impl Job {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.n {
                return;
            }
            // SAFETY: the body outlives the job's publication (see `body`).
            let body = unsafe { &*self.body };
            if catch_unwind(AssertUnwindSafe(|| body(i))).is_err() {
                self.panicked.store(true, SeqCst);
            }
            self.done.fetch_add(1, SeqCst);
        }
    }
}

struct Shared {
    job: AtomicPtr<Job>,
    epoch: AtomicU64,
    /// Helpers between reading `job` and being done with it.
    busy: AtomicUsize,
    /// A computation is running: helpers take part in its jobs.
    active: AtomicBool,
    /// Held by the thread that leads the team.
    lead: Mutex<()>,
    /// Helpers in their loop, at work or lingering. A helper leaves, and a
    /// leader counts the helpers it has, under this lock, with `active`
    /// read or set inside it: no computation counts a helper that leaves.
    present: Mutex<usize>,
}

impl Shared {
    fn present(&self) -> MutexGuard<'_, usize> {
        // a count stays valid whatever panicked while it was held
        self.present.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A rayon pool whose threads help the caller of [`Team::run`] (see the
/// module notes).
pub struct Team {
    pool: rayon::ThreadPool,
    /// The leader and its helpers.
    threads: usize,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("threads", &self.threads)
            .finish()
    }
}

thread_local! {
    /// The team this thread leads while it computes a graph.
    static LEADING: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
    /// This thread is running a task: nested loops run inline.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

impl Team {
    /// A team of `threads` threads (at least 1): the caller of `run` and
    /// a new pool for the others.
    pub fn new(threads: usize) -> Result<Team, rayon::ThreadPoolBuildError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads((threads - 1).max(1))
            .thread_name(|i| format!("ggraph-cpu-{i}"))
            .build()?;
        Ok(Team {
            pool,
            threads,
            shared: Arc::new(Shared {
                job: AtomicPtr::new(std::ptr::null_mut()),
                epoch: AtomicU64::new(0),
                busy: AtomicUsize::new(0),
                active: AtomicBool::new(false),
                lead: Mutex::new(()),
                present: Mutex::new(0),
            }),
        })
    }

    /// The team every `CpuDevice::new()` shares: one thread per core (or
    /// `RAYON_NUM_THREADS`); `None` when no thread could be started.
    pub fn shared() -> Option<Arc<Team>> {
        static SHARED: OnceLock<Option<Arc<Team>>> = OnceLock::new();
        SHARED
            .get_or_init(|| Team::new(rayon::current_num_threads()).ok().map(Arc::new))
            .clone()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on the calling thread with this team's threads sharing
    /// the parallel loops `f` starts. If another computation leads the
    /// team now, `f` runs with its loops on the calling thread alone.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let Ok(_lead) = self.shared.lead.try_lock() else {
            return f();
        };
        let s = &self.shared;
        {
            let mut present = s.present();
            s.active.store(true, SeqCst);
            // new helpers start from the epoch before any job of this
            // computation, so a job published before one gets going is
            // still seen
            let start = s.epoch.load(SeqCst);
            while *present < self.threads - 1 {
                let shared = self.shared.clone();
                self.pool.spawn(move || helper(&shared, start));
                *present += 1;
            }
        }
        struct Finish<'a>(&'a Shared, *const Team);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.active.store(false, SeqCst);
                LEADING.with(|l| l.set(self.1));
            }
        }
        let _finish = Finish(s, LEADING.with(|l| l.replace(self)));
        f()
    }

    /// Runs tasks 0..n of `body`, spread over the team, and returns when
    /// all are done.
    fn for_each(&self, n: usize, body: &(dyn Fn(usize) + Sync)) {
        // SAFETY: only the lifetime is erased; `Retract` below withdraws
        // the job (and waits for every helper to let go of it) before this
        // frame, and so `body`, goes away, also when a task panics.
        let body: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(body) };
        let job = Job {
            body,
            n,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        };
        let s = &self.shared;
        struct Retract<'a>(&'a Shared);
        impl Drop for Retract<'_> {
            fn drop(&mut self) {
                self.0.job.store(std::ptr::null_mut(), SeqCst);
                while self.0.busy.load(SeqCst) != 0 {
                    std::hint::spin_loop();
                }
            }
        }
        s.job.store(&job as *const Job as *mut Job, SeqCst);
        let retract = Retract(s);
        s.epoch.fetch_add(1, SeqCst);
        in_task(|| job.work());
        while job.done.load(SeqCst) < n {
            std::hint::spin_loop();
        }
        drop(retract);
        if job.panicked.load(SeqCst) {
            panic!("a CPU kernel task panicked");
        }
    }
}

fn in_task<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_TASK.with(|t| t.set(self.0));
        }
    }
    let _reset = Reset(IN_TASK.with(|t| t.replace(true)));
    f()
}

/// A helper's loop: take part in every job published while a
/// computation runs, and leave when none has run for [`LINGER`].
fn helper(s: &Shared, start: u64) {
    let mut seen = start;
    let mut idle_since: Option<Instant> = None;
    loop {
        if !s.active.load(SeqCst) {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= LINGER {
                let mut present = s.present();
                if !s.active.load(SeqCst) {
                    *present -= 1;
                    return;
                }
            }
            std::hint::spin_loop();
            continue;
        }
        idle_since = None;
        let epoch = s.epoch.load(SeqCst);
        if epoch == seen {
            std::hint::spin_loop();
            continue;
        }
        seen = epoch;
        s.busy.fetch_add(1, SeqCst);
        let job = s.job.load(SeqCst);
        if !job.is_null() {
            // SAFETY: the leader keeps the job alive while busy != 0.
            in_task(|| unsafe { &*job }.work());
        }
        s.busy.fetch_sub(1, SeqCst);
    }
}

/// Runs tasks 0..n of `body` on the team this thread leads, or on this
/// thread alone (no team, inside a task, or a single task).
pub(crate) fn for_each(n: usize, body: impl Fn(usize) + Sync) {
    let team = LEADING.with(|l| l.get());
    if n > 1 && !team.is_null() && !IN_TASK.with(|t| t.get()) {
        // SAFETY: LEADING points at the team `Team::run` borrows for as
        // long as it is set.
        let team = unsafe { &*team };
        if team.threads() > 1 {
            return team.for_each(n, &body);
        }
    }
    for i in 0..n {
        body(i);
    }
}

/// Like [`for_each`], with a state made by `init` once per run of
/// consecutive tasks (a few runs per thread).
pub(crate) fn for_each_init<S>(
    n: usize,
    init: impl Fn() -> S + Sync,
    body: impl Fn(&mut S, usize) + Sync,
) {
    if n == 0 {
        return;
    }
    let per = n.div_ceil((current_threads() * 4).min(n));
    for_each(n.div_ceil(per), |run| {
        let mut state = init();
        for i in run * per..((run + 1) * per).min(n) {
            body(&mut state, i);
        }
    });
}

/// Runs `body(index, chunk)` for every `size`-long chunk of `data` (the
/// last may be shorter), spread over the team.
pub(crate) fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    size: usize,
    body: impl Fn(usize, &mut [T]) + Sync,
) {
    struct Base<T>(*mut T);
    // SAFETY: each task makes a slice of its own chunk only; chunks are
    // disjoint, so no two tasks touch the same element.
    unsafe impl<T: Send> Sync for Base<T> {}
    let size = size.max(1);
    let len = data.len();
    let base = Base(data.as_mut_ptr());
    let base = &base;
    for_each(len.div_ceil(size), |c| {
        let start = c * size;
        let n = size.min(len - start);
        // SAFETY: start + n <= len, and chunk c is this task's alone.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), n) };
        body(c, chunk);
    });
}

/// Bytes a task of a large write to host memory takes: writes of more
/// spread over the device's team, so that the kernel's zeroing of fresh
/// pages on their first touch, most of a model's load, runs on every
/// thread.
pub(crate) const WRITE_TASK_BYTES: usize = 4 << 20;

/// Runs `body(index, chunk)` for every `per`-long chunk of `data` on
/// `team` when there is more than one chunk and the team has more than
/// one thread; otherwise calls `body(0, data)` once, on this thread.
pub(crate) fn split_on(
    team: Option<&Team>,
    data: &mut [u8],
    per: usize,
    body: impl Fn(usize, &mut [u8]) + Sync,
) {
    match team {
        Some(team) if team.threads() > 1 && data.len() > per => {
            team.run(|| for_each_chunk_mut(data, per, body))
        }
        _ => body(0, data),
    }
}

/// The number of threads that share a loop started on this thread now.
pub(crate) fn current_threads() -> usize {
    let team = LEADING.with(|l| l.get());
    if team.is_null() || IN_TASK.with(|t| t.get()) {
        1
    } else {
        // SAFETY: as in `for_each`.
        unsafe { &*team }.threads()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once_on_teams_of_one_to_four() {
        for threads in 1..=4 {
            let team = Team::new(threads).unwrap();
            for n in [0usize, 1, 2, 3, 17, 1000] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                team.run(|| {
                    for_each(n, |i| {
                        hits[i].fetch_add(1, SeqCst);
                    })
                });
                assert!(
                    hits.iter().all(|h| h.load(SeqCst) == 1),
                    "{threads} threads, {n} tasks"
                );
            }
        }
    }

    /// `split_on` covers every byte once, in chunks of `per` on a team
    /// with helpers, in one call on a team of one or with no team.
    #[test]
    fn split_on_hands_out_every_chunk_once() {
        let (per, len) = (1000, 10 * 1000 + 7);
        for team in [Team::new(3).ok(), Team::new(1).ok(), None] {
            let mut data = vec![0u8; len];
            let calls = AtomicU32::new(0);
            split_on(team.as_ref(), &mut data, per, |c, out| {
                calls.fetch_add(1, SeqCst);
                for (i, b) in out.iter_mut().enumerate() {
                    *b = b.wrapping_add(((c * per + i) % 251) as u8 + 1);
                }
            });
            let expected: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            assert!(data == expected);
            let threads = team.as_ref().map_or(1, |t| t.threads());
            let want = if threads > 1 { len.div_ceil(per) } else { 1 };
            assert_eq!(calls.load(SeqCst) as usize, want, "{threads} threads");
        }
    }

    #[test]
    fn the_first_job_of_a_computation_reaches_the_helpers() {
        // each of two tasks waits until both have started: only possible
        // when a helper takes one while the leader holds the other
        let team = Team::new(2).unwrap();
        for _ in 0..20 {
            assert!(two_tasks_meet(&team));
        }
    }

    /// Whether a helper takes one of two tasks that each wait for the
    /// other to start.
    fn two_tasks_meet(team: &Team) -> bool {
        let started = AtomicU32::new(0);
        let met = AtomicU32::new(0);
        team.run(|| {
            for_each(2, |_| {
                started.fetch_add(1, SeqCst);
                let deadline = Instant::now() + Duration::from_secs(5);
                while started.load(SeqCst) < 2 && Instant::now() < deadline {
                    std::hint::spin_loop();
                }
                if started.load(SeqCst) == 2 {
                    met.fetch_add(1, SeqCst);
                }
            })
        });
        met.load(SeqCst) == 2
    }

    #[test]
    fn helpers_linger_between_computations_then_leave_and_come_back() {
        let team = Team::new(2).unwrap();
        assert!(two_tasks_meet(&team));
        let deadline = Instant::now() + Duration::from_secs(5);
        while *team.shared.present() != 0 && Instant::now() < deadline {
            std::thread::sleep(LINGER);
        }
        assert_eq!(*team.shared.present(), 0, "the idle helper left");
        assert!(two_tasks_meet(&team), "a new helper came for the next one");
        for _ in 0..20 {
            assert!(two_tasks_meet(&team));
            // (none if this thread slept past the linger)
            assert!(*team.shared.present() <= 1, "one helper, never two");
        }
    }

    #[test]
    fn nested_loops_and_loops_outside_a_team_run_inline() {
        let team = Team::new(3).unwrap();
        let total = AtomicU32::new(0);
        team.run(|| {
            for_each(8, |_| {
                assert_eq!(current_threads(), 1);
                for_each(4, |_| {
                    total.fetch_add(1, SeqCst);
                });
            })
        });
        assert_eq!(total.load(SeqCst), 32);
        for_each(5, |_| {
            total.fetch_add(1, SeqCst);
        });
        assert_eq!(total.load(SeqCst), 37);
    }

    #[test]
    fn a_panicking_task_reaches_the_leader_and_the_team_keeps_working() {
        let team = Team::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(|| for_each(64, |i| assert!(i != 40, "task 40")))
        }));
        assert!(r.is_err());
        let hits = AtomicU32::new(0);
        team.run(|| {
            for_each(64, |_| {
                hits.fetch_add(1, SeqCst);
            })
        });
        assert_eq!(hits.load(SeqCst), 64);
    }
}
