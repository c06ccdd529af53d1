//! Thread schedulers, as Harp's `DynamicScheduler` and `StaticScheduler`: persistent threads,
//! one per task state, that run a function on inputs from a queue while the caller goes on
//! (for example with a collective in flight).
//!
//! * [`Dynamic`]: one input queue shared by every thread; whichever thread is free takes the
//!   next input. Results come back in completion order ([`Dynamic::next_output`], with the input's
//!   index) or in input order ([`Dynamic::run`]).
//! * [`Static`]: one input queue and one output queue per thread; the caller says which
//!   thread runs an input ([`Static::submit`]) and takes each thread's results in that
//!   thread's input order ([`Static::next_output`]).
//!
//! Each thread owns its state (`S`, e.g. a partial sum or a random generator) for the
//! scheduler's life and gets it as `&mut S` with every input; [`Dynamic::finish`] and
//! [`Static::finish`] stop the threads and give the states back in thread order. A task that
//! fails (returns an error or panics) yields an error result for that input; the thread goes
//! on with the next one. Dropping a scheduler lets its threads finish the queued inputs and
//! waits for them.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// The function the threads run: `f(state, input)`.
type TaskFn<S, I, O> = Arc<dyn Fn(&mut S, I) -> Result<O> + Send + Sync>;

/// Runs `f(&mut state, input)` for each input `next()` gives, sending `(index, result)` to
/// `out`, until `next()` gives `None`; returns the state.
fn serve<S, I, O>(
    mut state: S,
    next: impl Fn() -> Option<(u64, I)>,
    f: TaskFn<S, I, O>,
    out: Sender<(u64, Result<O>)>,
) -> S {
    while let Some((i, input)) = next() {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut state, input)))
            .unwrap_or_else(|p| {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(Error::config(format!(
                    "the task of input {i} panicked: {why}"
                )))
            });
        if out.send((i, r)).is_err() {
            break;
        }
    }
    state
}

/// `f` shared by the threads of `states` (at least one).
fn task_fn<S, I, O>(
    states: &[S],
    f: impl Fn(&mut S, I) -> Result<O> + Send + Sync + 'static,
) -> Result<TaskFn<S, I, O>> {
    if states.is_empty() {
        return Err(Error::config("a scheduler needs at least one thread"));
    }
    Ok(Arc::new(f))
}

fn spawn<S: Send + 'static>(
    name: String,
    body: impl FnOnce() -> S + Send + 'static,
) -> Result<JoinHandle<S>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
        .map_err(|e| Error::io("cannot start a scheduler thread", e))
}

/// Joins `threads`, giving their states back in thread order.
fn join<S>(threads: Vec<JoinHandle<S>>) -> Vec<S> {
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .expect("a scheduler thread catches its task's panics")
        })
        .collect()
}

/// Persistent threads sharing one input queue (Harp's `DynamicScheduler`).
pub struct Dynamic<I, O, S> {
    input: Option<Sender<(u64, I)>>,
    output: Receiver<(u64, Result<O>)>,
    threads: Vec<JoinHandle<S>>,
    submitted: u64,
    received: u64,
}

impl<I: Send + 'static, O: Send + 'static, S: Send + 'static> Dynamic<I, O, S> {
    /// One thread per state in `states`, each running `f(&mut its state, input)` on the inputs
    /// of the one queue.
    pub fn new(
        states: Vec<S>,
        f: impl Fn(&mut S, I) -> Result<O> + Send + Sync + 'static,
    ) -> Result<Self> {
        let f = task_fn(&states, f)?;
        let (input, rx) = channel::<(u64, I)>();
        let rx = Arc::new(Mutex::new(rx));
        let (out, output) = channel();
        let threads = states
            .into_iter()
            .enumerate()
            .map(|(t, state)| {
                let (rx, f, out) = (rx.clone(), f.clone(), out.clone());
                let next = move || rx.lock().unwrap_or_else(|e| e.into_inner()).recv().ok();
                spawn(format!("harp-dynamic-{t}"), move || {
                    serve(state, next, f, out)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Dynamic {
            input: Some(input),
            output,
            threads,
            submitted: 0,
            received: 0,
        })
    }

    /// Queues `input`; returns its index (0, 1, … in submission order).
    pub fn submit(&mut self, input: I) -> u64 {
        let i = self.submitted;
        self.submitted += 1;
        let sent = self.input.as_ref().map(|q| q.send((i, input)));
        debug_assert!(
            matches!(sent, Some(Ok(()))),
            "the threads live as long as the queue"
        );
        i
    }

    /// The number of inputs submitted whose results have not been taken.
    pub fn pending(&self) -> u64 {
        self.submitted - self.received
    }

    /// The next result to complete, with its input's index; `None` when every submitted
    /// input's result has been taken. Blocks until one completes.
    pub fn next_output(&mut self) -> Option<(u64, Result<O>)> {
        if self.pending() == 0 {
            return None;
        }
        let r = self.output.recv().ok()?;
        self.received += 1;
        Some(r)
    }

    /// Runs every input and returns the results in input order; the first failure (in input
    /// order) is returned after every input has run. Results of inputs submitted before and
    /// not yet taken are discarded.
    pub fn run(&mut self, inputs: impl IntoIterator<Item = I>) -> Result<Vec<O>> {
        while self.next_output().is_some() {}
        let first = self.submitted;
        for input in inputs {
            self.submit(input);
        }
        let mut slots: Vec<Option<Result<O>>> = (first..self.submitted).map(|_| None).collect();
        while let Some((i, r)) = self.next_output() {
            slots[(i - first) as usize] = Some(r);
        }
        slots
            .into_iter()
            .map(|r| r.expect("every input has a result"))
            .collect()
    }

    /// Waits for the queued inputs to run, stops the threads and returns their states.
    pub fn finish(mut self) -> Vec<S> {
        self.input = None;
        join(std::mem::take(&mut self.threads))
    }
}

impl<I, O, S> Drop for Dynamic<I, O, S> {
    fn drop(&mut self) {
        self.input = None;
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// Persistent threads with an input and an output queue each (Harp's `StaticScheduler`).
pub struct Static<I, O, S> {
    inputs: Vec<Sender<(u64, I)>>,
    outputs: Vec<Receiver<(u64, Result<O>)>>,
    pending: Vec<u64>,
    threads: Vec<JoinHandle<S>>,
}

impl<I: Send + 'static, O: Send + 'static, S: Send + 'static> Static<I, O, S> {
    /// One thread per state in `states`, each with its own queues.
    pub fn new(
        states: Vec<S>,
        f: impl Fn(&mut S, I) -> Result<O> + Send + Sync + 'static,
    ) -> Result<Self> {
        let f = task_fn(&states, f)?;
        let n = states.len();
        let (mut inputs, mut outputs, mut threads) = (vec![], vec![], vec![]);
        for (t, state) in states.into_iter().enumerate() {
            let (input, rx) = channel::<(u64, I)>();
            let (out, output) = channel();
            let f = f.clone();
            let next = move || rx.recv().ok();
            threads.push(spawn(format!("harp-static-{t}"), move || {
                serve(state, next, f, out)
            })?);
            inputs.push(input);
            outputs.push(output);
        }
        Ok(Static {
            inputs,
            outputs,
            pending: vec![0; n],
            threads,
        })
    }

    /// The number of threads.
    pub fn threads(&self) -> usize {
        self.inputs.len()
    }

    /// Queues `input` for thread `task`.
    pub fn submit(&mut self, task: usize, input: I) -> Result<()> {
        let n = self.threads();
        let q = self
            .inputs
            .get(task)
            .ok_or_else(|| Error::config(format!("task {task}: the scheduler has {n} threads")))?;
        let _ = q.send((self.pending[task], input));
        self.pending[task] += 1;
        Ok(())
    }

    /// Thread `task`'s next result, in its input order; `None` when it has none pending.
    /// Blocks until it completes.
    pub fn next_output(&mut self, task: usize) -> Option<Result<O>> {
        if *self.pending.get(task)? == 0 {
            return None;
        }
        let (_, r) = self.outputs[task].recv().ok()?;
        self.pending[task] -= 1;
        Some(r)
    }

    /// Waits for the queued inputs to run, stops the threads and returns their states.
    pub fn finish(mut self) -> Vec<S> {
        self.inputs.clear();
        join(std::mem::take(&mut self.threads))
    }
}

impl<I, O, S> Drop for Static<I, O, S> {
    fn drop(&mut self) {
        self.inputs.clear();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_keeps_per_thread_state_and_gives_input_or_completion_order() {
        // Each thread counts the inputs it ran and sums them.
        let mut s = Dynamic::new(vec![(0u64, 0u64); 3], |st: &mut (u64, u64), x: u64| {
            st.0 += 1;
            st.1 += x;
            if x == 13 {
                return Err(Error::config("thirteen"));
            }
            Ok(x * x)
        })
        .unwrap();
        let got = s.run(0..10u64).unwrap();
        assert_eq!(got, (0..10u64).map(|x| x * x).collect::<Vec<_>>());
        // Completion order: every index once, with its own result.
        for x in 100..120u64 {
            assert_eq!(s.submit(x), x - 90);
        }
        let mut seen = [false; 20];
        while let Some((i, r)) = s.next_output() {
            let x = i + 90;
            assert_eq!(r.unwrap(), x * x);
            assert!(!std::mem::replace(&mut seen[(x - 100) as usize], true));
        }
        assert!(seen.iter().all(|&b| b));
        // A failure is that input's result; the threads go on.
        let e = s.run([12u64, 13, 14]).unwrap_err();
        assert!(e.to_string().contains("thirteen"), "{e}");
        assert_eq!(s.run([2u64]).unwrap(), vec![4]);
        let states = s.finish();
        assert_eq!(states.len(), 3);
        let runs: u64 = states.iter().map(|s| s.0).sum();
        let sum: u64 = states.iter().map(|s| s.1).sum();
        assert_eq!(runs, 10 + 20 + 3 + 1);
        assert_eq!(sum, 45 + (100..120).sum::<u64>() + 12 + 13 + 14 + 2);
    }

    #[test]
    fn a_panicking_task_is_an_error_result_not_a_dead_thread() {
        let mut s = Dynamic::new(vec![(); 1], |_: &mut (), x: u32| {
            assert!(x != 1, "input one");
            Ok(x)
        })
        .unwrap();
        let e = s.run([0, 1, 2]).unwrap_err();
        assert!(e.to_string().contains("input one"), "{e}");
        assert_eq!(s.run([3, 4]).unwrap(), vec![3, 4]);
        assert!(Dynamic::new(Vec::<()>::new(), |_: &mut (), x: u32| Ok(x)).is_err());
    }

    #[test]
    fn static_runs_each_input_on_the_chosen_thread_in_its_order() {
        // The state is the thread's id and the inputs it saw, in order.
        let states: Vec<(usize, Vec<u32>)> = (0..4).map(|t| (t, vec![])).collect();
        let mut s = Static::new(states, |st: &mut (usize, Vec<u32>), x: u32| {
            st.1.push(x);
            Ok((st.0, x))
        })
        .unwrap();
        for x in 0..40u32 {
            s.submit(x as usize % 4, x).unwrap();
        }
        assert!(s.submit(4, 0).is_err());
        for t in 0..4 {
            for k in 0..10u32 {
                let (by, x) = s.next_output(t).unwrap().unwrap();
                assert_eq!((by, x), (t, k * 4 + t as u32));
            }
            assert!(s.next_output(t).is_none());
        }
        let states = s.finish();
        for (t, (id, seen)) in states.into_iter().enumerate() {
            assert_eq!(id, t);
            assert_eq!(seen, (0..10).map(|k| k * 4 + t as u32).collect::<Vec<_>>());
        }
    }
}
