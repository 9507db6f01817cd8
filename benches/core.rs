//! Micro-benchmark of the pure scheduling core: admit/take/release cycles per second with 1,
//! 1,000 and 1,000,000 keys. `cargo bench --bench core` (see bench/README.md).
//!
//! Each iteration is one steady-state cycle of a busy run: release the oldest running job,
//! admit a new job (keys in round robin), take what can start. `max_concurrent` is 8 and
//! `max_queued` unbounded; before measuring, every key gets one waiting job (1 key: 1,000
//! waiting jobs), so the lanes map and the ready line hold all the keys while it runs.
//!
//! `admit_take_release_3_resources` is the same cycle on a run with three named resources
//! (8 named `gpu` units, 64 GiB of `mem`, 16 `cpu`), every job of weight 2 needing one GPU,
//! 4 GiB and 2 CPUs, on a cap of 16, so that 8 jobs are in flight as in the plain cycle.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lanes::core::{
    Admission, JobRequest, Limits, Needs, Policy, Released, Resource, Scheduler, Seq, Stock,
};

const MAX_CONCURRENT: usize = 8;

struct Cycle {
    scheduler: Scheduler,
    keys: Vec<Arc<str>>,
    running: VecDeque<Seq>,
    next_seq: Seq,
    next_key: usize,
    now: Duration,
    needs: Option<Arc<Needs>>,
}

impl Cycle {
    fn new(key_count: usize, resources: bool) -> Self {
        let cap = if resources {
            2 * MAX_CONCURRENT
        } else {
            MAX_CONCURRENT
        };
        let mut scheduler = Scheduler::with_policy(
            Limits {
                max_concurrent: cap,
                max_queued: usize::MAX,
            },
            Policy::default(),
        );
        let needs = resources.then(|| {
            scheduler.set_resources(vec![
                Resource {
                    name: Arc::from("gpu"),
                    stock: Stock::Units((0..8).map(|i| Arc::from(i.to_string())).collect()),
                },
                Resource {
                    name: Arc::from("mem"),
                    stock: Stock::Count(64 << 30),
                },
                Resource {
                    name: Arc::from("cpu"),
                    stock: Stock::Count(16),
                },
            ]);
            Arc::new(Needs {
                weight: 2,
                resources: vec![(0, 1), (1, 4 << 30), (2, 2)],
            })
        });
        let mut cycle = Cycle {
            scheduler,
            needs,
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
            needs: self.needs.clone(),
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
    measure(c, "admit_take_release", false, &[1, 1_000, 1_000_000]);
    measure(c, "admit_take_release_3_resources", true, &[1, 1_000]);
}

fn measure(c: &mut Criterion, name: &str, resources: bool, key_counts: &[usize]) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    for &key_count in key_counts {
        let mut cycle = Cycle::new(key_count, resources);
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
