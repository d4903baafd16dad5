//! A connection's identity and its SASL exchange (issue 19). On a SASL listener the connection
//! serves only ApiVersions, SaslHandshake and SaslAuthenticate until the client authenticates;
//! after SaslHandshake v0 the tokens arrive as bare frames. A failed authentication is answered
//! (SaslAuthenticate) and the connection closes after the answer; it is counted and logged, at
//! most one line a second per shard.

use super::connection::{Answer, Conn, Held, Outgoing};
use crate::clock::Clock;
use crate::kafka::sasl_authenticate::{self, Outcome};
use crate::kafka::{self, Caller};
use crate::metrics::{bump, LogLimiter};
use crate::protocol::chunk::Chunk;
use crate::protocol::frame::RequestHeader;
use crate::security::sasl::{Exchange, Mechanism};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Bound on a frame before authentication (Kafka's `sasl.server.max.receive.size`): SASL
/// messages are small, and an unauthenticated client must not make the broker read 100 MiB.
pub const MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 512 * 1024;

thread_local! {
    static FAILURES_LOGGED: LogLimiter = const { LogLimiter::new(1_000) };
}

pub struct Auth {
    caller: RefCell<Rc<Caller>>,
    /// The SASL exchange, on a SASL listener.
    exchange: RefCell<Option<Exchange>>,
    authenticated: Cell<bool>,
    /// After SaslHandshake v0 and until the exchange ends: frames are bare tokens.
    bare: Cell<bool>,
    /// When the SASL session ends (monotonic ms; KIP-368), if it has a lifetime.
    expires_ms: Cell<Option<u64>>,
}

impl Auth {
    pub fn new(shard: &Shard, caller: Caller) -> Auth {
        let protocol = caller.listener.security_protocol;
        let sasl = &shard.config.sasl;
        let exchange = protocol.sasl().then(|| {
            let enabled = sasl
                .mechanisms
                .iter()
                .filter_map(|n| Mechanism::from_name(n));
            let mut x = Exchange::new(enabled.collect());
            if sasl.connections_max_reauth_ms > 0 {
                x.allow_reauthentication();
            }
            x
        });
        Auth {
            caller: RefCell::new(Rc::new(caller)),
            exchange: RefCell::new(exchange),
            authenticated: Cell::new(!protocol.sasl()),
            bare: Cell::new(false),
            expires_ms: Cell::new(None),
        }
    }

    pub fn caller(&self) -> Rc<Caller> {
        self.caller.borrow().clone()
    }

    pub fn set_principal(&self, principal: String) {
        let mut caller = (**self.caller.borrow()).clone();
        caller.principal = principal;
        *self.caller.borrow_mut() = Rc::new(caller);
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated.get()
    }

    pub fn bare_tokens(&self) -> bool {
        self.bare.get()
    }

    /// Whether the SASL session's lifetime has passed without a re-authentication (KIP-368):
    /// the connection then serves nothing but SASL, as Kafka closes it. The clock is read only
    /// for a session with a lifetime.
    pub fn expired(&self, clock: &dyn Clock) -> bool {
        self.expires_ms
            .get()
            .is_some_and(|end| clock.monotonic_ms() >= end)
    }
}

/// Serves SaslHandshake or SaslAuthenticate; an undecodable one closes the connection (after
/// the answers before it), as any undecodable request does.
pub(super) fn request(conn: &Conn, header: &RequestHeader, body: Bytes, held: Held) -> Outgoing {
    let auth = &conn.auth;
    let mut exchange = auth.exchange.borrow_mut();
    let v = header.api_version;
    let answered = match header.api_key {
        ApiKey::SaslHandshake => {
            kafka::sasl_handshake::handle(exchange.as_mut(), v, body).map(|(body, ok)| {
                auth.bare.set(ok && v == 0);
                (body, !ok)
            })
        }
        _ => sasl_authenticate::handle(conn.shard(), exchange.as_mut(), v, body)
            .map(|(body, outcome)| (body, !settle(conn, outcome))),
    };
    let mut out = Outgoing::now(header, Vec::new(), held);
    match answered {
        Ok((body, then_close)) => {
            out.answer = Answer::Now(body);
            out.then_close = then_close;
        }
        Err(e) => {
            log::warn!(
                "{}: closing: cannot serve {:?} v{v}: {e}",
                conn.peer,
                header.api_key
            );
            out.answer = Answer::Close;
        }
    }
    out
}

/// Serves a bare token (after SaslHandshake v0): its answer as a bare frame, or a close.
pub(super) fn bare_token(conn: &Conn, token: Bytes, held: Held) -> Outgoing {
    let mut exchange = conn.auth.exchange.borrow_mut();
    let exchange = exchange
        .as_mut()
        .expect("bare tokens only on a SASL listener");
    let (answer, outcome) = sasl_authenticate::token(conn.shard(), exchange, &token);
    let header = RequestHeader {
        api_key: ApiKey::SaslAuthenticate,
        api_version: 0,
        correlation_id: 0,
        client_id: None,
    };
    let ok = settle(conn, outcome);
    let mut out = Outgoing::now(&header, Vec::new(), held);
    out.bare = true;
    out.answer = match answer {
        Ok(bytes) if ok => Answer::Now(vec![Chunk::Bytes(bytes.into())]),
        _ => Answer::Close,
    };
    out
}

/// Takes a token's outcome into the connection's state; false if the exchange failed.
fn settle(conn: &Conn, outcome: Outcome) -> bool {
    let auth = &conn.auth;
    match outcome {
        Outcome::Continue => true,
        Outcome::Authenticated(principal) => {
            let shard = conn.shard();
            if auth.authenticated.get() {
                bump(&shard.metrics().reauthentications);
            }
            log::debug!("{}: authenticated as {principal}", conn.peer);
            auth.set_principal(principal);
            auth.authenticated.set(true);
            auth.bare.set(false);
            let lifetime_ms = shard.config.sasl.connections_max_reauth_ms;
            let now_ms = shard.clock().monotonic_ms();
            auth.expires_ms
                .set((lifetime_ms > 0).then_some(now_ms + lifetime_ms));
            true
        }
        Outcome::Failed(why) => {
            let shard = conn.shard();
            bump(&shard.metrics().authentication_failures);
            let now_ms = shard.clock().monotonic_ms();
            if let Some(suppressed) = FAILURES_LOGGED.with(|l| l.admit(now_ms)) {
                log::warn!(
                    "{}: authentication failed: {why} ({suppressed} more failures not logged)",
                    conn.peer
                );
            }
            false
        }
    }
}
