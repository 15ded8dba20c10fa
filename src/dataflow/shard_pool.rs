//! [`ShardPool`]: the threads a view's shards run on, started once and woken for each round of
//! work, instead of a thread started per node and shard at every barrier.
//!
//! A view of parallelism `p` keeps `p - 1` worker threads, started at its first round that has
//! work for more than one shard; the calling thread (the view's job) takes shard 0's part
//! itself. Starting threads was what made q7's slowest barriers slow (docs/benchmarks.md,
//! session 21): under load a new thread waits behind every runnable one, while a woken
//! thread runs almost at once.
//!
//! [`ShardPool::run`] lends the tasks data of the caller's stack (a shard's operators, its
//! queued changes), as `std::thread::scope` does. Its invariant, on which that rests: `run`
//! returns only after every task it handed out has run to its end or been dropped, panics
//! included: each task runs under `catch_unwind`; the threads are started before any task is
//! handed out, and nothing after that point panics (a task its worker cannot take runs on the
//! caller). Called by `graph` only.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;

/// A task for a worker, its borrows' lifetime erased (see the module's invariant).
type Job = Box<dyn FnOnce() + Send + 'static>;

struct Worker {
    jobs: Sender<Job>,
    thread: Option<JoinHandle<()>>,
}

/// `workers` threads, started on first use.
pub struct ShardPool {
    size: usize,
    workers: Vec<Worker>,
}

impl ShardPool {
    /// A pool for `shards` shards: the caller runs one of them, so `shards - 1` threads.
    pub fn new(shards: usize) -> ShardPool {
        ShardPool { size: shards.saturating_sub(1), workers: Vec::new() }
    }

    /// Runs every task, the first on this thread and the others on the pool's threads, and
    /// returns their results in order: Err for a task that panicked. At most one task more
    /// than the pool has threads.
    pub fn run<'a, R: Send + 'a>(
        &mut self,
        tasks: Vec<Box<dyn FnOnce() -> R + Send + 'a>>,
    ) -> Vec<std::thread::Result<R>> {
        assert!(tasks.len() <= self.size + 1, "more tasks than shards");
        // Every thread needed is started before any task is handed out, so nothing below can
        // panic with a task out; threads that cannot be started (the system's limit) leave the
        // tasks to run here, one after another.
        if let Err(e) = self.start_workers(tasks.len().saturating_sub(1)) {
            tracing::warn!("cannot start a shard worker thread, running the shards one after another: {e}");
            return tasks.into_iter().map(|task| catch_unwind(AssertUnwindSafe(task))).collect();
        }
        let mut tasks = tasks.into_iter();
        let Some(first) = tasks.next() else { return Vec::new() };
        let (done, results) = channel::<(usize, std::thread::Result<R>)>();
        let mut handed = 0;
        for (index, task) in tasks.enumerate() {
            let done = done.clone();
            let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
                let result = catch_unwind(AssertUnwindSafe(task));
                let _ = done.send((index + 1, result));
            });
            // SAFETY: the job borrows only what lives for 'a, and it is over (run, or dropped
            // with what it holds) before this function returns: the loop below waits for a
            // result from each job handed out, or for every sender to be gone, which happens
            // only once each job has been dropped.
            let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
            if let Err(unsent) = self.workers[index].jobs.send(job) {
                // Its worker is gone (it cannot be: it ends only with the pool): run it here.
                (unsent.0)();
            }
            handed += 1;
        }
        drop(done);
        let mut out: Vec<Option<std::thread::Result<R>>> = (0..=handed).map(|_| None).collect();
        out[0] = Some(catch_unwind(AssertUnwindSafe(first)));
        for _ in 0..handed {
            match results.recv() {
                Ok((index, result)) => out[index] = Some(result),
                // Every job is gone without a result: its worker died (it cannot, each job
                // runs under catch_unwind); the missing results are panics.
                Err(_) => break,
            }
        }
        out.into_iter().map(|r| r.unwrap_or_else(|| Err(Box::new("a shard worker died")))).collect()
    }

    /// Starts workers until there are at least `count`.
    fn start_workers(&mut self, count: usize) -> std::io::Result<()> {
        while self.workers.len() < count {
            let (jobs, queue) = channel::<Job>();
            let thread = std::thread::Builder::new()
                .name("weir-shard".into())
                .spawn(move || queue.into_iter().for_each(|job| job()))?;
            self.workers.push(Worker { jobs, thread: Some(thread) });
        }
        Ok(())
    }
}

impl Drop for ShardPool {
    /// Closes each worker's queue and waits for it to end (it is idle: `run` waited for it).
    fn drop(&mut self) {
        let threads: Vec<_> = self.workers.drain(..).filter_map(|mut w| w.thread.take()).collect();
        threads.into_iter().for_each(|t| {
            let _ = t.join();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_borrow_the_callers_data_and_return_in_order() {
        let mut pool = ShardPool::new(3);
        let mut shards = [vec![1], vec![2], vec![3]];
        for round in 0..100 {
            let tasks: Vec<Box<dyn FnOnce() -> usize + Send + '_>> = shards
                .iter_mut()
                .map(|shard| {
                    let task: Box<dyn FnOnce() -> usize + Send + '_> = Box::new(move || {
                        shard.push(round);
                        shard.len()
                    });
                    task
                })
                .collect();
            let lens: Vec<usize> = pool.run(tasks).into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(lens, vec![round + 2; 3]);
        }
        assert_eq!(pool.workers.len(), 2, "threads are started once");
        assert_eq!(shards[2][..3], [3, 0, 1]);
    }

    #[test]
    fn a_panicking_task_is_an_error_and_the_pool_goes_on() {
        let mut pool = ShardPool::new(2);
        let tasks: Vec<Box<dyn FnOnce() -> u8 + Send>> = vec![Box::new(|| 1), Box::new(|| panic!("shard 1"))];
        let results = pool.run(tasks);
        assert_eq!(*results[0].as_ref().unwrap(), 1);
        assert!(results[1].is_err());
        let tasks: Vec<Box<dyn FnOnce() -> u8 + Send>> = vec![Box::new(|| 1), Box::new(|| 2)];
        let results: Vec<u8> = pool.run(tasks).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(results, vec![1, 2]);
    }
}
