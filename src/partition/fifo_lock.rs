//! A lock that serves its callers strictly in the order they called `lock`, not the order
//! their futures are first polled or woken.
//!
//! Why: a partition's appends must land in the order their requests arrived. glommio's
//! `Semaphore` lets a newcomer take a just-released permit ahead of the woken waiter, and
//! a lock that queues a waiter only when it is polled orders by poll, not by arrival. Here a
//! caller's place is fixed by the synchronous `lock()` call (a ticket), so code that calls
//! `lock()` in arrival order is served in arrival order, however its futures are scheduled.
//!
//! A ticket dropped before its turn gives its place up; one dropped at its turn, or a dropped
//! guard, passes the turn on to the next live ticket.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct State {
    /// The ticket the next `lock()` gets.
    next_ticket: u64,
    /// The ticket whose turn it is (it holds the lock, or will when next polled).
    serving: u64,
    /// Wakers of tickets waiting for their turn.
    wakers: HashMap<u64, Waker>,
    /// Tickets dropped before their turn: skipped when the turn reaches them.
    abandoned: BTreeSet<u64>,
}

impl State {
    /// The turn passes to the next ticket not abandoned, which is woken.
    fn pass_turn(&mut self) {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
        assert!(
            self.serving <= self.next_ticket,
            "the turn never passes unissued tickets"
        );
        if let Some(waker) = self.wakers.remove(&self.serving) {
            waker.wake();
        }
    }
}

#[derive(Default, Clone)]
pub struct FifoLock(Rc<RefCell<State>>);

impl FifoLock {
    /// Takes a place in the queue now; the returned ticket resolves to the guard when every
    /// earlier caller has released the lock (or given its place up).
    pub fn lock(&self) -> Ticket {
        let mut state = self.0.borrow_mut();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        Ticket {
            lock: self.0.clone(),
            ticket,
            served: false,
        }
    }

    /// Callers holding a ticket or the guard (for tests and assertions).
    pub fn queued(&self) -> u64 {
        let state = self.0.borrow();
        state.next_ticket - state.serving - state.abandoned.len() as u64
    }
}

/// A place in the queue; a future of the guard.
pub struct Ticket {
    lock: Rc<RefCell<State>>,
    ticket: u64,
    /// Whether the guard was handed out (the guard passes the turn on, not the ticket).
    served: bool,
}

impl Future for Ticket {
    type Output = Guard;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Guard> {
        assert!(!self.served, "a ticket is polled to its guard once");
        let mut state = self.lock.borrow_mut();
        if state.serving == self.ticket {
            state.wakers.remove(&self.ticket);
            drop(state);
            self.served = true;
            return Poll::Ready(Guard(self.lock.clone()));
        }
        assert!(
            state.serving < self.ticket,
            "a live ticket's turn has not passed"
        );
        state.wakers.insert(self.ticket, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let mut state = self.lock.borrow_mut();
        state.wakers.remove(&self.ticket);
        if state.serving == self.ticket {
            state.pass_turn();
        } else {
            state.abandoned.insert(self.ticket);
        }
    }
}

/// The lock, held until dropped.
pub struct Guard(Rc<RefCell<State>>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.borrow_mut().pass_turn();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    fn poll(t: &mut Ticket) -> Option<Guard> {
        let waker = noop_waker();
        match Pin::new(t).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(g) => Some(g),
            Poll::Pending => None,
        }
    }

    #[test]
    fn served_in_call_order_whatever_the_poll_order() {
        let lock = FifoLock::default();
        let (mut a, mut b, mut c) = (lock.lock(), lock.lock(), lock.lock());
        assert!(poll(&mut c).is_none() && poll(&mut b).is_none());
        let ga = poll(&mut a).expect("first caller is served at once");
        assert!(poll(&mut b).is_none(), "held");
        drop(ga);
        // A newcomer cannot barge ahead of the woken waiter.
        let mut d = lock.lock();
        assert!(poll(&mut d).is_none() && poll(&mut c).is_none());
        let gb = poll(&mut b).expect("b's turn");
        drop(gb);
        assert!(poll(&mut d).is_none());
        drop(poll(&mut c).expect("c's turn"));
        drop(poll(&mut d).expect("d's turn"));
        assert_eq!(lock.queued(), 0);
    }

    #[test]
    fn a_dropped_ticket_gives_its_place_up() {
        let lock = FifoLock::default();
        let mut a = lock.lock();
        let (b, c) = (lock.lock(), lock.lock());
        let mut d = lock.lock();
        drop(c); // before its turn
        let ga = poll(&mut a).unwrap();
        drop(ga);
        drop(b); // at its turn, never polled
        assert!(poll(&mut d).is_some(), "the turn skips b and c");
    }

    #[test]
    fn queued_counts_live_callers() {
        let lock = FifoLock::default();
        let mut a = lock.lock();
        let b = lock.lock();
        let _c = lock.lock();
        drop(b);
        assert_eq!(lock.queued(), 2);
        let g = poll(&mut a).unwrap();
        drop(a);
        assert_eq!(lock.queued(), 2, "a's guard still holds the lock");
        drop(g);
        assert_eq!(lock.queued(), 1);
    }
}
