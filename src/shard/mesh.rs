//! Typed hops between shards: a request runs on the shard that owns its subject and answers
//! with its own reply type, over glommio's channel mesh (one bounded channel per shard pair).
//!
//! A request type names its reply type (`Request::Reply`); `Shard::call` returns exactly that,
//! so no call site matches on replies it cannot get. The mesh itself carries requests and
//! replies type-erased, and restores the reply's type in one place (`call`).

use super::Shard;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use glommio::channels::channel_mesh::Senders;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// Something one shard asks another to do.
pub trait Request: Send + 'static {
    type Reply: Send + 'static;
    /// Runs on the target shard. The target calls `run` itself (not the future it returns) as
    /// soon as the request arrives, in arrival order: what `run` does before returning, such
    /// as taking a place in a queue, keeps the order the requests were sent in.
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Self::Reply>;
}

/// A request with its reply type erased, as the mesh carries it.
trait Erased: Send {
    fn run(self: Box<Self>, shard: Rc<Shard>) -> LocalBoxFuture<'static, Box<dyn Any + Send>>;
}

impl<R: Request> Erased for R {
    fn run(self: Box<Self>, shard: Rc<Shard>) -> LocalBoxFuture<'static, Box<dyn Any + Send>> {
        let reply = Request::run(*self, shard);
        Box::pin(async move { Box::new(reply.await) as Box<dyn Any + Send> })
    }
}

/// What travels between shards.
pub struct MeshMsg(Envelope);

enum Envelope {
    Request {
        from: usize,
        id: u64,
        request: Box<dyn Erased>,
    },
    Reply {
        id: u64,
        reply: Box<dyn Any + Send>,
    },
}

/// A peer shard has stopped and will not answer (only during shutdown).
#[derive(Debug, Clone, Copy)]
pub struct ShardGone;

/// One shard's end of the mesh: its senders and the calls awaiting replies.
pub struct Mesh {
    senders: Option<Senders<MeshMsg>>,
    pending: RefCell<HashMap<u64, oneshot::Sender<Box<dyn Any + Send>>>>,
    next_call_id: Cell<u64>,
}

impl Mesh {
    /// `senders` is None only for a broker of one shard, which never sends to itself.
    pub fn new(senders: Option<Senders<MeshMsg>>) -> Mesh {
        Mesh {
            senders,
            pending: RefCell::new(HashMap::new()),
            next_call_id: Cell::new(0),
        }
    }
}

/// A call whose request is on its way (sent over the mesh, or queued as a task on this shard);
/// `reply` waits for its answer. Calls started one after another reach a given shard in that
/// order, and a shard runs the requests it receives in arrival order.
pub struct Started<T>(StartedHow<T>);

enum StartedHow<T> {
    Local(glommio::Task<T>),
    Remote(oneshot::Receiver<Box<dyn Any + Send>>),
    Gone,
}

impl<T: 'static> Started<T> {
    /// The reply; Err if the peer shard stopped first (shutdown).
    pub async fn reply(self) -> Result<T, ShardGone> {
        match self.0 {
            StartedHow::Local(task) => Ok(task.await),
            StartedHow::Remote(rx) => {
                let reply = rx.await.map_err(|_| ShardGone)?;
                Ok(*reply
                    .downcast::<T>()
                    .expect("a reply has its request's reply type"))
            }
            StartedHow::Gone => Err(ShardGone),
        }
    }
}

impl Shard {
    /// Runs `request` on `shard`: on this shard directly, else over the mesh. Err means the
    /// peer shard has stopped (shutdown) and cannot answer.
    pub async fn call<R: Request>(
        self: &Rc<Self>,
        shard: usize,
        request: R,
    ) -> Result<R::Reply, ShardGone> {
        if shard == self.id {
            return Ok(request.run(self.clone()).await);
        }
        self.start(shard, request).await.reply().await
    }

    /// Sends `request` on its way to `shard` (on this shard: queues it as a task) and returns
    /// without waiting for the answer, so that a caller can start its next request meanwhile.
    /// Dropping the returned call before the reply cancels a local task; a sent request runs to
    /// its end regardless.
    pub async fn start<R: Request>(self: &Rc<Self>, shard: usize, request: R) -> Started<R::Reply> {
        if shard == self.id {
            return Started(StartedHow::Local(glommio::spawn_local(
                request.run(self.clone()),
            )));
        }
        let senders = self
            .mesh
            .senders
            .as_ref()
            .expect("several shards imply a mesh");
        let id = self.mesh.next_call_id.get();
        self.mesh.next_call_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        self.mesh.pending.borrow_mut().insert(id, tx);
        let msg = MeshMsg(Envelope::Request {
            from: self.id,
            id,
            request: Box::new(request),
        });
        if senders.send_to(shard, msg).await.is_err() {
            self.mesh.pending.borrow_mut().remove(&id);
            return Started(StartedHow::Gone);
        }
        Started(StartedHow::Remote(rx))
    }

    /// Handles one message from a peer shard: runs a request (`run` now, in arrival order; its
    /// future in its own task, so a slow one does not hold up the others) or completes a call.
    pub fn on_mesh_message(self: &Rc<Self>, msg: MeshMsg) {
        match msg.0 {
            Envelope::Request { from, id, request } => {
                let shard = self.clone();
                let reply = request.run(shard.clone());
                glommio::spawn_local(async move {
                    let reply = reply.await;
                    let senders = shard.mesh.senders.as_ref().expect("mesh");
                    let msg = MeshMsg(Envelope::Reply { id, reply });
                    if senders.send_to(from, msg).await.is_err() {
                        log::error!(
                            "shard {}: reply to shard {from} lost: channel closed",
                            shard.id
                        );
                    }
                })
                .detach();
            }
            Envelope::Reply { id, reply } => match self.mesh.pending.borrow_mut().remove(&id) {
                Some(tx) => {
                    let _ = tx.send(reply); // the caller may have given up; nothing to do
                }
                None => log::error!("shard {}: reply {id} matches no request", self.id),
            },
        }
    }

    /// Sends each item to the shard that owns it (`(owner, item)`), batched per shard and in
    /// parallel, and returns the answers in the order of `items`. `request` wraps one shard's
    /// items; its reply holds one answer per item, in order. Items of a shard that has stopped
    /// are answered `gone()`.
    pub async fn scatter<T, R, Q>(
        self: &Rc<Self>,
        items: Vec<(usize, T)>,
        request: impl Fn(Vec<T>) -> Q,
        gone: impl Fn() -> R,
    ) -> Vec<R>
    where
        Q: Request<Reply = Vec<R>>,
        R: 'static,
    {
        self.scatter_start(items, request).await.gather(gone).await
    }

    /// `scatter`'s first half: every shard's request is on its way when this returns (see
    /// `start`); `Scattered::gather` waits for the answers.
    pub async fn scatter_start<T, R, Q>(
        self: &Rc<Self>,
        items: Vec<(usize, T)>,
        request: impl Fn(Vec<T>) -> Q,
    ) -> Scattered<R>
    where
        Q: Request<Reply = Vec<R>>,
        R: 'static,
    {
        let n = items.len();
        let mut by_shard: Vec<(Vec<usize>, Vec<T>)> = (0..self.router.shards())
            .map(|_| (Vec::new(), Vec::new()))
            .collect();
        for (i, (owner, item)) in items.into_iter().enumerate() {
            by_shard[owner].0.push(i);
            by_shard[owner].1.push(item);
        }
        let mut calls = Vec::new();
        for (shard, (indexes, items)) in by_shard.into_iter().enumerate() {
            if !items.is_empty() {
                calls.push((indexes, self.start(shard, request(items)).await));
            }
        }
        Scattered { n, calls }
    }
}

/// Requests started by `scatter_start`, and which item each answer belongs to.
pub struct Scattered<R> {
    n: usize,
    calls: Vec<(Vec<usize>, Started<Vec<R>>)>,
}

impl<R: 'static> Scattered<R> {
    /// The answers in the order of the scattered items.
    pub async fn gather(self, gone: impl Fn() -> R) -> Vec<R> {
        let replies = self
            .calls
            .into_iter()
            .map(|(indexes, call)| async move { (indexes, call.reply().await) });
        let mut slots: Vec<Option<R>> = (0..self.n).map(|_| None).collect();
        for (indexes, reply) in futures::future::join_all(replies).await {
            let results = match reply {
                Ok(results) => results,
                Err(ShardGone) => indexes.iter().map(|_| gone()).collect(),
            };
            assert_eq!(
                results.len(),
                indexes.len(),
                "a shard answers each item once"
            );
            for (i, r) in indexes.into_iter().zip(results) {
                slots[i] = Some(r);
            }
        }
        slots
            .into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }
}
