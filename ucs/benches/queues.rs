//! Micro-benchmarks of the MPMC queue: push/pop on one thread, and one producer with one
//! consumer thread.
//!
//! `cargo bench -p ucs --bench queues`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use ucs::mpmc::MpmcQueue;

fn mpmc(c: &mut Criterion) {
    let mut g = c.benchmark_group("mpmc");
    g.throughput(Throughput::Elements(1));
    let q = MpmcQueue::new(1024).unwrap();
    g.bench_function("push_pop_same_thread", |b| {
        b.iter(|| {
            q.push(black_box(42u64)).unwrap();
            black_box(q.pop())
        })
    });

    // One consumer thread drains while the measured thread pushes.
    let q = Arc::new(MpmcQueue::new(1024).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (q, stop) = (Arc::clone(&q), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if q.pop().is_none() {
                    std::hint::spin_loop();
                }
            }
        })
    };
    g.bench_function("push_with_consumer_thread", |b| {
        b.iter(|| {
            let mut v = black_box(7u64);
            while let Err(back) = q.push(v) {
                v = back;
                std::hint::spin_loop();
            }
        })
    });
    stop.store(true, Ordering::Relaxed);
    consumer.join().unwrap();
    g.finish();
}

criterion_group!(benches, mpmc);
criterion_main!(benches);
