//! Delayed operations on a shard: one timing wheel, one driver task, and `sleep_until` futures
//! that register in the wheel and cancel themselves when dropped. Fetch long polls and
//! acks=all produce waits park here; so will group session and rebalance timeouts.
//!
//! ## The wheel
//!
//! One `TimingWheel` per shard (`timer/wheel.rs`, 1 ms ticks, 512 buckets a level, overflow levels
//! added on demand). A parked operation is a slab slot in a bucket's intrusive list: insert and
//! cancel are O(1) and allocate nothing once the slab has grown. A min-heap of non-empty buckets
//! (not of timers) gives the driver its next deadline; the driver sleeps on one glommio timer
//! until then, or until an earlier timer arrives, so an idle shard does no work for the operations
//! it holds. Fetch long polls and acks=all waits park here; a waiting future that is dropped
//! cancels its timer. The wheel says when a wait gives up; what ends it early is the partition's
//! offset monitor (`partition/monitor.rs`): waiters keyed by the offset they need in a BTreeMap,
//! woken when the high watermark reaches it (O(log n) per waiter, nothing for the others), or all
//! at once when the partition fails or is deleted.

pub mod wheel;

use crate::metrics::ShardMetrics;
use event_listener::Event;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use wheel::{InsertError, TimerId, TimingWheel};

/// Wheel resolution: deadlines are met within one tick.
pub const TICK_MS: u64 = 1;
/// Buckets per level: level 0 spans 512 ms, level 1 ~4.4 minutes, level 2 ~38 hours.
pub const WHEEL_SIZE: usize = 512;

/// Slots kept beyond `max_parked_operations` for the broker's own timers (group and producer
/// housekeeping), so clients cannot starve them.
const INTERNAL_TIMER_SLOTS: usize = 64;

/// What a parked operation shares with the wheel: whether its deadline passed, and whom to wake.
#[derive(Default)]
struct Parked {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
    /// A client's request (counted against the bound), not the broker's own housekeeping.
    client: bool,
}

pub struct Timers {
    wheel: RefCell<TimingWheel<Rc<Parked>>>,
    /// Wakes the driver when a timer earlier than the one it sleeps for is added.
    rearm: Event,
    sleeping_until: Cell<u64>,
    pub parked_rejected: Cell<u64>,
    /// Client operations parked now, and the bound on them.
    client_parked: Cell<usize>,
    client_limit: usize,
    metrics: Arc<ShardMetrics>,
}

impl Timers {
    /// `capacity` bounds client operations; `connections` more slots are kept for the idle
    /// timers of client connections (one each at most).
    pub fn new(
        now_ms: u64,
        capacity: usize,
        connections: usize,
        metrics: Arc<ShardMetrics>,
    ) -> Timers {
        Timers {
            wheel: RefCell::new(TimingWheel::new(
                TICK_MS,
                WHEEL_SIZE,
                now_ms,
                capacity + connections + INTERNAL_TIMER_SLOTS,
            )),
            rearm: Event::new(),
            sleeping_until: Cell::new(u64::MAX),
            parked_rejected: Cell::new(0),
            client_parked: Cell::new(0),
            client_limit: capacity,
            metrics,
        }
    }

    fn publish(&self) {
        self.metrics
            .parked
            .store(self.client_parked.get() as u64, Ordering::Relaxed);
        self.metrics
            .parked_rejected
            .store(self.parked_rejected.get(), Ordering::Relaxed);
    }

    pub fn parked(&self) -> usize {
        self.client_parked.get()
    }

    /// A future that completes at `deadline_ms` (monotonic ms), for a client's request. Err
    /// when the shard's bound on parked operations is reached.
    pub fn sleep_until(self: &Rc<Self>, deadline_ms: u64) -> Result<Sleep, InsertError> {
        if self.client_parked.get() >= self.client_limit {
            self.parked_rejected.set(self.parked_rejected.get() + 1);
            self.publish();
            return Err(InsertError::Full);
        }
        self.park(deadline_ms, true)
    }

    /// A connection's idle timer: outside the client bound, since the connection limit already
    /// bounds how many there can be.
    pub fn sleep_until_idle(self: &Rc<Self>, deadline_ms: u64) -> Result<Sleep, InsertError> {
        self.park(deadline_ms, false)
    }

    /// The same for the broker's own housekeeping timers, which do not count against the bound.
    pub fn sleep_until_internal(self: &Rc<Self>, deadline_ms: u64) -> Result<Sleep, InsertError> {
        self.park(deadline_ms, false)
    }

    fn park(self: &Rc<Self>, deadline_ms: u64, client: bool) -> Result<Sleep, InsertError> {
        let parked = Rc::new(Parked {
            client,
            ..Parked::default()
        });
        let id = self
            .wheel
            .borrow_mut()
            .insert(deadline_ms, parked.clone())?;
        if client {
            self.client_parked.set(self.client_parked.get() + 1);
        }
        self.publish();
        if deadline_ms < self.sleeping_until.get() {
            self.rearm.notify(1);
        }
        Ok(Sleep {
            timers: self.clone(),
            id,
            parked,
        })
    }

    /// The driver: sleeps until the wheel's next expiration (or until an earlier timer is
    /// added), fires what is due, repeats. With nothing parked it waits on an event and does
    /// no work at all.
    pub async fn drive(self: Rc<Self>, now_ms: impl Fn() -> u64) {
        loop {
            let rearm = self.rearm.listen();
            let next = self.wheel.borrow_mut().next_expiration();
            match next {
                None => {
                    self.sleeping_until.set(u64::MAX);
                    rearm.await;
                }
                Some(at) => {
                    let now = now_ms();
                    if at > now {
                        self.sleeping_until.set(at);
                        let sleep = glommio::timer::sleep(Duration::from_millis(at - now));
                        futures::pin_mut!(sleep);
                        futures::future::select(sleep, rearm).await;
                    }
                }
            }
            let due = self.wheel.borrow_mut().poll(now_ms());
            for parked in due {
                if parked.client {
                    self.client_parked.set(self.client_parked.get() - 1);
                }
                parked.fired.set(true);
                if let Some(w) = parked.waker.borrow_mut().take() {
                    w.wake();
                }
            }
            self.publish();
        }
    }
}

/// Completes at its deadline; dropping it first cancels the timer (O(1)).
pub struct Sleep {
    timers: Rc<Timers>,
    id: TimerId,
    parked: Rc<Parked>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.parked.fired.get() {
            return Poll::Ready(());
        }
        *self.parked.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if !self.parked.fired.get() {
            self.timers.wheel.borrow_mut().cancel(self.id);
            if self.parked.client {
                self.timers
                    .client_parked
                    .set(self.timers.client_parked.get() - 1);
            }
            self.timers.publish();
        }
    }
}
