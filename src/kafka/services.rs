//! What a shard's handlers reach besides the shard itself: the services that run on every
//! shard, each typed, so that a handler's signature says what it uses and a service that is
//! not wired in cannot be asked for (a compile error, not a panic). Built once per shard by the
//! server (`server::wire_services`) and shared by the shard's connections.

use super::fetch_session::FetchSessions;
use crate::controller::Controllers;
use crate::group::Groups;
use crate::shard::Shard;
use crate::txn::service::Txns;
use std::cell::RefCell;
use std::rc::Rc;

pub struct Services {
    pub shard: Rc<Shard>,
    /// The group coordinator of this shard's `__consumer_offsets` partitions.
    pub groups: Rc<Groups>,
    /// The transaction coordinator of this shard's `__transaction_state` partitions.
    pub txns: Rc<Txns>,
    /// The way to the controller (on `shard::CONTROLLER_SHARD`).
    pub controllers: Rc<Controllers>,
    /// The fetch sessions of this shard's connections (KIP-227).
    pub sessions: RefCell<FetchSessions>,
}
