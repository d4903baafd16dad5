//! Typed hops between shards: a request runs on the shard that owns its subject and answers
//! with its own reply type, over glommio's channel mesh (one bounded channel per shard pair).
//!
//! A mesh connects the instances of one thing that every shard has: the shard itself
//! (`Mesh<Shard>`, for partition work), or a service (`Sharded<T>`, Seastar's `sharded<T>`: the
//! group coordinator, the transaction coordinator, the controller's handle). A request names
//! what it runs on (`Request<C>`) and its reply type; `Peer::call` returns exactly that, so no
//! call site matches on replies it cannot get, and a request runs only where its service is:
//! what a request needs is in its type, not looked up when it arrives. The mesh carries
//! requests and replies type-erased, and restores the reply's type in one place (`reply`).

use super::Shard;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use futures::StreamExt;
use glommio::channels::channel_mesh::{Receivers, Senders};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ops::Deref;
use std::rc::Rc;

/// Something one shard asks another to do, run there on `C` (the shard, or a service of it).
pub trait Request<C = Shard>: Send + 'static {
    type Reply: Send + 'static;
    /// Runs on the target shard. The target calls `run` itself (not the future it returns) as
    /// soon as the request arrives, in arrival order: what `run` does before returning, such
    /// as taking a place in a queue, keeps the order the requests were sent in.
    fn run(self, on: Rc<C>) -> LocalBoxFuture<'static, Self::Reply>;
}

/// A request with its reply type erased, as the mesh carries it.
trait Erased<C>: Send {
    fn run(self: Box<Self>, on: Rc<C>) -> LocalBoxFuture<'static, Box<dyn Any + Send>>;
}

impl<C: 'static, R: Request<C>> Erased<C> for R {
    fn run(self: Box<Self>, on: Rc<C>) -> LocalBoxFuture<'static, Box<dyn Any + Send>> {
        let reply = Request::run(*self, on);
        Box::pin(async move { Box::new(reply.await) as Box<dyn Any + Send> })
    }
}

/// What travels between the shards' instances of `C`.
pub struct MeshMsg<C>(Envelope<C>);

enum Envelope<C> {
    Request {
        from: usize,
        id: u64,
        request: Box<dyn Erased<C>>,
    },
    Reply {
        id: u64,
        reply: Box<dyn Any + Send>,
    },
}

/// A peer shard has stopped and will not answer (only during shutdown).
#[derive(Debug, Clone, Copy)]
pub struct ShardGone;

/// One shard's end of a mesh: its senders and the calls awaiting replies.
pub struct Mesh<C> {
    /// The shard this end belongs to.
    id: usize,
    /// How many shards the mesh joins.
    shards: usize,
    senders: Option<Senders<MeshMsg<C>>>,
    pending: RefCell<HashMap<u64, oneshot::Sender<Box<dyn Any + Send>>>>,
    next_call_id: Cell<u64>,
}

impl<C> Mesh<C> {
    /// Shard `id`'s end of a mesh of `shards`; `senders` is None only for a broker of one
    /// shard, which never sends to itself.
    pub fn new(id: usize, shards: usize, senders: Option<Senders<MeshMsg<C>>>) -> Mesh<C> {
        assert!(id < shards, "shard {id} of {shards}");
        assert!(
            senders.is_some() || shards == 1,
            "several shards imply a mesh"
        );
        Mesh {
            id,
            shards,
            senders,
            pending: RefCell::new(HashMap::new()),
            next_call_id: Cell::new(0),
        }
    }
}

/// A service with an instance on every shard, reached on another shard through its own mesh.
/// It derefs to the service.
pub struct Sharded<T: 'static> {
    pub shard: Rc<Shard>,
    mesh: Mesh<Sharded<T>>,
    service: T,
}

impl<T: 'static> Sharded<T> {
    pub fn new(shard: Rc<Shard>, mesh: Mesh<Sharded<T>>, service: T) -> Sharded<T> {
        assert_eq!(shard.id, mesh.id, "a service's mesh end is its shard's");
        Sharded {
            shard,
            mesh,
            service,
        }
    }
}

impl<T: 'static> Deref for Sharded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.service
    }
}

impl<T: 'static> Peer for Sharded<T> {
    fn mesh(&self) -> &Mesh<Self> {
        &self.mesh
    }
    fn home(&self) -> &Shard {
        &self.shard
    }
}

impl Peer for Shard {
    fn mesh(&self) -> &Mesh<Self> {
        &self.mesh
    }
    fn home(&self) -> &Shard {
        self
    }
}

/// Serves the requests other shards send `on` over its mesh, until the mesh closes.
pub fn serve<C: Peer>(on: &Rc<C>, mut receivers: Receivers<MeshMsg<C>>) {
    for (_, mut stream) in receivers.streams() {
        let on = on.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.next().await {
                on.on_mesh_message(msg);
            }
        })
        .detach();
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

/// What has an instance on every shard joined by a mesh: the shard, or a `Sharded` service.
/// Its futures are the executor's own, never sent to another thread (hence no `Send` bound).
#[allow(async_fn_in_trait)]
pub trait Peer: Sized + 'static {
    fn mesh(&self) -> &Mesh<Self>;
    /// The shard this instance lives on.
    fn home(&self) -> &Shard;

    /// Runs `request` on `shard`'s instance: this one directly, else over the mesh. Err means
    /// the peer shard has stopped (shutdown) and cannot answer.
    async fn call<R: Request<Self>>(
        self: &Rc<Self>,
        shard: usize,
        request: R,
    ) -> Result<R::Reply, ShardGone> {
        if shard == self.mesh().id {
            return Ok(request.run(self.clone()).await);
        }
        self.start(shard, request).await.reply().await
    }

    /// Sends `request` on its way to `shard` (on this shard: queues it as a task) and returns
    /// without waiting for the answer, so that a caller can start its next request meanwhile.
    /// Dropping the returned call before the reply cancels a local task; a sent request runs to
    /// its end regardless.
    async fn start<R: Request<Self>>(
        self: &Rc<Self>,
        shard: usize,
        request: R,
    ) -> Started<R::Reply> {
        let mesh = self.mesh();
        if shard == mesh.id {
            return Started(StartedHow::Local(glommio::spawn_local(
                request.run(self.clone()),
            )));
        }
        let senders = mesh.senders.as_ref().expect("several shards imply a mesh");
        let id = mesh.next_call_id.get();
        mesh.next_call_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        mesh.pending.borrow_mut().insert(id, tx);
        let msg = MeshMsg(Envelope::Request {
            from: mesh.id,
            id,
            request: Box::new(request),
        });
        if senders.send_to(shard, msg).await.is_err() {
            mesh.pending.borrow_mut().remove(&id);
            return Started(StartedHow::Gone);
        }
        Started(StartedHow::Remote(rx))
    }

    /// Handles one message from a peer shard: runs a request (`run` now, in arrival order; its
    /// future in its own task, so a slow one does not hold up the others) or completes a call.
    fn on_mesh_message(self: &Rc<Self>, msg: MeshMsg<Self>) {
        let mesh = self.mesh();
        match msg.0 {
            Envelope::Request { from, id, request } => {
                let on = self.clone();
                let reply = request.run(on.clone());
                glommio::spawn_local(async move {
                    let reply = reply.await;
                    let mesh = on.mesh();
                    let senders = mesh.senders.as_ref().expect("mesh");
                    let msg = MeshMsg(Envelope::Reply { id, reply });
                    if senders.send_to(from, msg).await.is_err() {
                        log::error!(
                            "shard {}: reply to shard {from} lost: channel closed",
                            mesh.id
                        );
                    }
                })
                .detach();
            }
            Envelope::Reply { id, reply } => match mesh.pending.borrow_mut().remove(&id) {
                Some(tx) => {
                    let _ = tx.send(reply); // the caller may have given up; nothing to do
                }
                None => log::error!("shard {}: reply {id} matches no request", mesh.id),
            },
        }
    }

    /// Sends each item to the shard that owns it (`(owner, item)`), batched per shard and in
    /// parallel, and returns the answers in the order of `items`. `request` wraps one shard's
    /// items; its reply holds one answer per item, in order. Items of a shard that has stopped
    /// are answered `gone()`.
    async fn scatter<T, R, Q>(
        self: &Rc<Self>,
        items: Vec<(usize, T)>,
        request: impl Fn(Vec<T>) -> Q,
        gone: impl Fn() -> R,
    ) -> Vec<R>
    where
        Q: Request<Self, Reply = Vec<R>>,
        R: 'static,
    {
        self.scatter_start(items, request).await.gather(gone).await
    }

    /// `scatter`'s first half: every shard's request is on its way when this returns (see
    /// `start`); `Scattered::gather` waits for the answers.
    async fn scatter_start<T, R, Q>(
        self: &Rc<Self>,
        items: Vec<(usize, T)>,
        request: impl Fn(Vec<T>) -> Q,
    ) -> Scattered<R>
    where
        Q: Request<Self, Reply = Vec<R>>,
        R: 'static,
    {
        let n = items.len();
        let mut by_shard: Vec<(Vec<usize>, Vec<T>)> = (0..self.mesh().shards)
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
