//! Micro-benchmark of the pure scheduling core: admit/take/release cycles per second with 1,
//! 1,000 and 1,000,000 keys. `cargo bench --bench core` (see bench/README.md).
//!
//! Each iteration is one steady-state cycle of a busy run: release the oldest running job,
//! admit a new job (keys in round robin), take what can start. `max_concurrent` is 8 and
//! `max_queued` unbounded; before measuring, every key gets one waiting job (1 key: 1,000
//! waiting jobs), so the lanes map and the ready line hold all the keys while it runs.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lanes::core::{Admission, JobRequest, Limits, Released, Scheduler, Seq};

const MAX_CONCURRENT: usize = 8;

struct Cycle {
    scheduler: Scheduler,
    keys: Vec<Arc<str>>,
    running: VecDeque<Seq>,
    next_seq: Seq,
    next_key: usize,
    now: Duration,
}

impl Cycle {
    fn new(key_count: usize) -> Self {
        let mut cycle = Cycle {
            scheduler: Scheduler::new(Limits {
                max_concurrent: MAX_CONCURRENT,
                max_queued: usize::MAX,
            }),
            keys: (0..key_count).map(|i| Arc::from(format!("k{i}"))).collect(),
            running: VecDeque::with_capacity(MAX_CONCURRENT),
            next_seq: 1,
            next_key: 0,
            now: Duration::ZERO,
        };
        for _ in 0..key_count.max(1_000) {
            cycle.admit();
        }
        cycle.take_all();
        cycle
    }

    fn admit(&mut self) {
        let key = Arc::clone(&self.keys[self.next_key]);
        self.next_key = (self.next_key + 1) % self.keys.len();
        let job = JobRequest {
            seq: self.next_seq,
            key,
            rank: 0,
            timeout: None,
            weight: 0,
            needs: None,
        };
        self.next_seq += 1;
        let admission = self.scheduler.admit(black_box(job), self.now);
        assert!(matches!(admission, Admission::Queued { .. }));
    }

    fn take_all(&mut self) {
        while let Some(start) = self.scheduler.take(self.now) {
            self.running.push_back(black_box(start).seq);
        }
    }

    /// One cycle: release the oldest running job, admit one, start what can start.
    fn step(&mut self) {
        self.now += Duration::from_micros(1);
        if let Some(seq) = self.running.pop_front() {
            let released = self.scheduler.release(black_box(seq));
            assert!(matches!(released, Released::Done { .. }));
        }
        self.admit();
        self.take_all();
    }
}

fn cycles(c: &mut Criterion) {
    let mut group = c.benchmark_group("admit_take_release");
    group.throughput(Throughput::Elements(1));
    for key_count in [1usize, 1_000, 1_000_000] {
        let mut cycle = Cycle::new(key_count);
        group.bench_function(
            BenchmarkId::from_parameter(format!("{key_count}_keys")),
            |b| {
                b.iter(|| cycle.step());
            },
        );
        assert!(
            cycle.scheduler.running() >= 1,
            "the benchmark kept jobs in flight"
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = cycles
}
criterion_main!(benches);
