//! Deadlines for the upstream call and for reading a body, checked at a coarse tick instead of
//! one tokio timer each.
//!
//! `tokio::time::timeout` arms a timer-wheel entry when its future first returns pending and takes
//! it out again on drop, both under the time driver's lock: on the board shape that was about 900
//! instructions per request of the plain build (callgrind, docs/hot-path.md). A [`Deadline`] is a
//! slot in its worker thread's table instead: claimed on the first pending poll and given back on
//! drop, with no lock, and no allocation once the table has grown to the worker's concurrency.
//! While any deadline is armed, one task of the worker wakes every [`TICK`] and wakes the ones
//! that have passed; it ends when none is left, so an idle worker keeps no timer. A deadline
//! therefore fires up to one tick after its instant, never before it.
//!
//! The ticker is a local task: a deadline is armed only inside a worker's `LocalSet`, and a
//! [`Deadline`] stays on its thread (it is not `Send`).

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

/// How often a worker with armed deadlines looks at the clock: the most a deadline fires late.
pub const TICK: Duration = Duration::from_millis(10);

/// The deadline passed before the future finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// `fut`, given up on once `at` has passed (within one [`TICK`]).
pub fn timeout_at<F: Future>(at: Instant, fut: F) -> Deadline<F> {
    Deadline {
        fut,
        at,
        slot: None,
        _thread: PhantomData,
    }
}

/// The future of [`timeout_at`]. Not `Send`: its slot is in the table of the thread that armed
/// it, so it must be polled and dropped there.
pub struct Deadline<F> {
    fut: F,
    at: Instant,
    /// Its slot in the thread's table once armed.
    slot: Option<usize>,
    _thread: PhantomData<*const ()>,
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `fut` is structurally pinned: it is never moved out of a pinned `Deadline`
        // (not by `Drop` either), and the other fields are plain data.
        let this = unsafe { self.get_unchecked_mut() };
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(v) = fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let (fired, start_ticker) = TABLE.with_borrow_mut(|t| match this.slot {
            None => {
                this.slot = Some(t.arm(this.at, cx.waker()));
                (false, !std::mem::replace(&mut t.ticking, true))
            }
            Some(i) => {
                let s = &mut t.slots[i];
                if !s.fired && !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.waker = Some(cx.waker().clone());
                }
                (s.fired, false)
            }
        });
        if start_ticker {
            tokio::task::spawn_local(tick());
        }
        if fired {
            Poll::Ready(Err(Elapsed))
        } else {
            Poll::Pending
        }
    }
}

impl<F> Drop for Deadline<F> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            // The table is gone only while the thread itself is being torn down.
            let _ = TABLE.try_with(|t| t.borrow_mut().disarm(i));
        }
    }
}

struct Slot {
    at: Instant,
    /// The task to wake when `at` passes; `None` once woken (and while the slot is free).
    waker: Option<Waker>,
    fired: bool,
}

struct Table {
    slots: Vec<Slot>,
    /// Slots not armed, to be reused first.
    free: Vec<usize>,
    /// Slots armed now.
    armed: usize,
    /// Whether this thread's ticker task is running.
    ticking: bool,
}

thread_local! {
    static TABLE: RefCell<Table> = const {
        RefCell::new(Table {
            slots: Vec::new(),
            free: Vec::new(),
            armed: 0,
            ticking: false,
        })
    };
}

impl Table {
    fn arm(&mut self, at: Instant, waker: &Waker) -> usize {
        self.armed += 1;
        let slot = Slot {
            at,
            waker: Some(waker.clone()),
            fired: false,
        };
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    fn disarm(&mut self, i: usize) {
        self.armed -= 1;
        self.slots[i].waker = None;
        self.free.push(i);
    }
}

/// The worker's ticker: every [`TICK`], wakes the armed deadlines that have passed; ends when
/// none is armed (the next deadline armed starts another).
async fn tick() {
    /// Marks the ticker stopped however its task ends: also when the runtime drops it, so that a
    /// later runtime on this thread starts its own.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = TABLE.try_with(|t| t.borrow_mut().ticking = false);
        }
    }
    let _running = Running;
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await; // the first tick is now
    let mut due: Vec<Waker> = Vec::new();
    loop {
        every.tick().await;
        let done = TABLE.with_borrow_mut(|t| {
            let now = Instant::now();
            for s in t.slots.iter_mut() {
                if s.at <= now {
                    if let Some(w) = s.waker.take() {
                        s.fired = true;
                        due.push(w);
                    }
                }
            }
            t.armed == 0
        });
        // Woken outside the table's borrow: a waker may run code that arms or drops a deadline.
        due.drain(..).for_each(Waker::wake);
        if done {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    /// Real time: the upper bounds leave room for a loaded machine (the tick itself is 10 ms).
    const SLACK: Duration = Duration::from_millis(500);

    #[test]
    fn fires_after_its_instant_and_not_before() {
        local(async {
            let t0 = Instant::now();
            let r = timeout_at(t0 + Duration::from_millis(35), std::future::pending::<()>()).await;
            assert_eq!(r, Err(Elapsed));
            let late = Instant::now() - t0;
            assert!(late >= Duration::from_millis(35), "{late:?}");
            assert!(late <= Duration::from_millis(35) + SLACK, "{late:?}");
        });
    }

    #[test]
    fn a_future_that_finishes_first_is_answered_and_its_slot_reused() {
        local(async {
            let far = Instant::now() + Duration::from_secs(60);
            for n in 0..3 {
                let sleep = tokio::time::sleep(Duration::from_millis(20));
                let r = timeout_at(far, async move {
                    sleep.await;
                    n
                })
                .await;
                assert_eq!(r, Ok(n));
            }
            let t = TABLE.with_borrow(|t| (t.slots.len(), t.armed));
            assert_eq!(t, (1, 0));
            // With nothing armed the ticker ends.
            tokio::time::sleep(TICK * 3).await;
            assert!(!TABLE.with_borrow(|t| t.ticking));
        });
    }

    #[test]
    fn many_deadlines_each_fire_at_their_own_time() {
        local(async {
            let t0 = Instant::now();
            let waits = (1..=5u64).map(|k| {
                tokio::task::spawn_local(async move {
                    let at = t0 + Duration::from_millis(100 * k);
                    let r = timeout_at(at, std::future::pending::<()>()).await;
                    (r, Instant::now() - t0)
                })
            });
            let waits: Vec<_> = waits.collect();
            for (k, w) in (1..=5u64).zip(waits) {
                let (r, at) = w.await.unwrap();
                assert_eq!(r, Err(Elapsed));
                let want = Duration::from_millis(100 * k);
                assert!(at >= want && at <= want + SLACK, "{k}: {at:?}");
            }
        });
    }
}
