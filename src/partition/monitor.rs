//! The offset monitor: who waits for a partition's high watermark to reach which offset.
//!
//! A waiter registers the offset it needs (an acks=all produce: its last offset + 1; a long
//! poll: its fetch offset + 1). When the high watermark advances, only the waiters at or below
//! it are woken: an append to one partition wakes its own waiters, never those of the shard's
//! other partitions. A failed or deleted partition wakes all of its waiters, so that each
//! re-reads and reports the error.
//!
//! One `Waiter` may be registered in several monitors (a fetch parked on many partitions); it
//! completes when the first of them fires. Registrations cancel themselves when dropped.
//! Single-threaded: a monitor lives on its partition's shard.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Someone parked on one or more partitions.
#[derive(Default)]
pub struct Waiter {
    woken: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Waiter {
    pub fn new() -> Rc<Waiter> {
        Rc::new(Waiter::default())
    }

    fn wake(&self) {
        self.woken.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Completes once any monitor the waiter is registered in fires for it.
    pub fn woken(self: &Rc<Self>) -> Woken {
        Woken(self.clone())
    }
}

pub struct Woken(Rc<Waiter>);

impl Future for Woken {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.woken.get() {
            return Poll::Ready(());
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Waiters keyed by (offset needed, registration number): the number keeps keys distinct and
/// registrations of one offset in arrival order.
type Waiting = BTreeMap<(i64, u64), Rc<Waiter>>;

#[derive(Default)]
pub struct OffsetMonitor {
    waiting: RefCell<Waiting>,
    registered: Cell<u64>,
}

/// A waiter's place in one monitor; dropping it removes the waiter (O(log n)).
pub struct Registration {
    monitor: Rc<OffsetMonitor>,
    key: (i64, u64),
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.monitor.waiting.borrow_mut().remove(&self.key);
    }
}

impl OffsetMonitor {
    pub fn new() -> Rc<OffsetMonitor> {
        Rc::new(OffsetMonitor::default())
    }

    /// Registers `waiter` to be woken once the high watermark reaches `offset`. The caller
    /// checks the high watermark first: a monitor only ever wakes on a later advance.
    pub fn register(self: &Rc<Self>, offset: i64, waiter: &Rc<Waiter>) -> Registration {
        let n = self.registered.get();
        self.registered.set(n + 1);
        let key = (offset, n);
        let replaced = self.waiting.borrow_mut().insert(key, waiter.clone());
        assert!(replaced.is_none(), "registration numbers are unique");
        Registration {
            monitor: self.clone(),
            key,
        }
    }

    /// The high watermark is now `high_watermark`: wakes every waiter that needed at most it.
    /// Returns how many were woken.
    pub fn advance(&self, high_watermark: i64) -> usize {
        let due = {
            let mut waiting = self.waiting.borrow_mut();
            let later = waiting.split_off(&(high_watermark.saturating_add(1), 0));
            std::mem::replace(&mut *waiting, later)
        };
        // Woken outside the borrow: a woken task may register again at once.
        for waiter in due.values() {
            waiter.wake();
        }
        due.len()
    }

    /// Wakes every waiter (the partition failed or is being deleted): each re-reads and finds
    /// the error.
    pub fn wake_all(&self) -> usize {
        self.advance(i64::MAX - 1)
    }

    pub fn len(&self) -> usize {
        self.waiting.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.borrow().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_only_waiters_at_or_below_the_high_watermark() {
        let m = OffsetMonitor::new();
        let (a, b, c) = (Waiter::new(), Waiter::new(), Waiter::new());
        let _ra = m.register(5, &a);
        let _rb = m.register(10, &b);
        let _rc = m.register(10, &c);
        assert_eq!(m.advance(4), 0);
        assert_eq!(m.advance(5), 1);
        assert!(a.woken.get() && !b.woken.get());
        assert_eq!(m.advance(12), 2);
        assert!(b.woken.get() && c.woken.get());
        assert!(m.is_empty());
    }

    #[test]
    fn a_dropped_registration_is_forgotten() {
        let m = OffsetMonitor::new();
        let a = Waiter::new();
        let r = m.register(1, &a);
        assert_eq!(m.len(), 1);
        drop(r);
        assert_eq!(m.advance(100), 0);
        assert!(!a.woken.get());
    }

    #[test]
    fn one_waiter_in_several_monitors_wakes_on_the_first() {
        let (m1, m2) = (OffsetMonitor::new(), OffsetMonitor::new());
        let w = Waiter::new();
        let _r1 = m1.register(3, &w);
        let _r2 = m2.register(7, &w);
        assert_eq!(m2.advance(7), 1);
        assert!(w.woken.get());
        assert_eq!(m1.wake_all(), 1);
    }
}
