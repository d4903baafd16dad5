//! One connection's SASL authentication (KIP-43, KIP-152), as a state machine without I/O:
//! SaslHandshake names a mechanism, then SaslAuthenticate carries its tokens: one for PLAIN,
//! two for SCRAM. The connection serves nothing else until it is authenticated; a failed
//! exchange leaves it failed (Kafka closes such a connection after its answer).

use super::plain;
use super::scram::{self, Credential, FirstAnswered};
use super::{user_principal, SaslError};

/// A mechanism a listener may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(scram::Mechanism),
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Scram(scram::Mechanism::Sha256),
        Mechanism::Scram(scram::Mechanism::Sha512),
        Mechanism::Plain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Why a request does not fit the exchange (the Kafka error it answers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// UNSUPPORTED_SASL_MECHANISM: the mechanism is not enabled here.
    Unsupported,
    /// ILLEGAL_SASL_STATE: a handshake twice, or a token before the handshake or after the end.
    IllegalState,
    /// SASL_AUTHENTICATION_FAILED, with the reason said to the client.
    Failed(SaslError),
}

/// What SaslAuthenticate answers when a token was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The exchange goes on: send this token and wait for the next.
    Challenge(Vec<u8>),
    /// Authenticated as `principal` (`User:<name>`); send the last token (empty for PLAIN).
    Done { principal: String, token: Vec<u8> },
}

#[derive(Debug)]
enum State {
    AwaitingHandshake,
    Chosen(Mechanism),
    ScramFinal(Box<FirstAnswered>),
    Authenticated(String),
    Failed,
}

/// One connection's exchange.
#[derive(Debug)]
pub struct Exchange {
    enabled: Vec<Mechanism>,
    state: State,
    /// Whether an authenticated connection may authenticate again (KIP-368: the broker gave
    /// the session a lifetime).
    reauthentication: bool,
    /// During a re-authentication: the principal it must keep.
    previous: Option<String>,
}

impl Exchange {
    pub fn new(enabled: Vec<Mechanism>) -> Exchange {
        Exchange {
            enabled,
            state: State::AwaitingHandshake,
            reauthentication: false,
            previous: None,
        }
    }

    /// The enabled mechanisms' names, as SaslHandshake lists them.
    pub fn mechanisms(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|m| m.name()).collect()
    }

    /// The authenticated principal, once there is one.
    pub fn principal(&self) -> Option<&str> {
        match &self.state {
            State::Authenticated(p) => Some(p),
            _ => None,
        }
    }

    /// Lets an authenticated connection authenticate again (KIP-368), as the same principal.
    pub fn allow_reauthentication(&mut self) {
        self.reauthentication = true;
    }

    /// SaslHandshake naming `mechanism`: the first, or a re-authentication's where allowed.
    pub fn handshake(&mut self, mechanism: &str) -> Result<(), Refused> {
        match &self.state {
            State::AwaitingHandshake => {}
            State::Authenticated(p) if self.reauthentication => self.previous = Some(p.clone()),
            _ => return Err(Refused::IllegalState),
        }
        let chosen = Mechanism::from_name(mechanism).filter(|m| self.enabled.contains(m));
        let chosen = chosen.ok_or(Refused::Unsupported)?;
        self.state = State::Chosen(chosen);
        Ok(())
    }

    /// SaslAuthenticate's token. `nonce` makes SCRAM's server nonce (printable, no comma);
    /// `lookup` finds a user's credential for a SCRAM mechanism.
    pub fn authenticate(
        &mut self,
        token: &[u8],
        nonce: impl FnOnce() -> String,
        lookup: impl Fn(&str, scram::Mechanism) -> Option<Credential>,
    ) -> Result<Answer, Refused> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (next, answer) = match state {
            State::Chosen(Mechanism::Plain) => {
                let name = check_plain(token, &lookup)?;
                let principal = user_principal(&name);
                (
                    State::Authenticated(principal.clone()),
                    Answer::Done {
                        principal,
                        token: Vec::new(),
                    },
                )
            }
            State::Chosen(Mechanism::Scram(m)) => {
                let first = scram::client_first(token, &nonce(), |user| lookup(user, m))
                    .map_err(Refused::Failed)?;
                let challenge = first.server_first().to_vec();
                (
                    State::ScramFinal(Box::new(first)),
                    Answer::Challenge(challenge),
                )
            }
            State::ScramFinal(first) => {
                let last = scram::client_final(&first, token).map_err(Refused::Failed)?;
                let principal = user_principal(&first.username);
                (
                    State::Authenticated(principal.clone()),
                    Answer::Done {
                        principal,
                        token: last,
                    },
                )
            }
            State::AwaitingHandshake | State::Authenticated(_) | State::Failed => {
                return Err(Refused::IllegalState)
            }
        };
        if let (State::Authenticated(p), Some(previous)) = (&next, &self.previous) {
            if p != previous {
                return Err(Refused::Failed(SaslError(
                    "re-authentication must keep the session's principal",
                )));
            }
        }
        self.state = next;
        Ok(answer)
    }
}

/// A PLAIN token's user, if its password is the user's: checked against the user's SCRAM
/// credentials (SHA-256's first: any one derived from the password will do).
fn check_plain(
    token: &[u8],
    lookup: &impl Fn(&str, scram::Mechanism) -> Option<Credential>,
) -> Result<String, Refused> {
    let p = plain::parse(token).map_err(Refused::Failed)?;
    let credential = scram::Mechanism::ALL
        .into_iter()
        .find_map(|m| lookup(p.username, m));
    match credential {
        Some(c) if c.matches(p.password) => Ok(p.username.to_string()),
        _ => Err(Refused::Failed(SaslError("invalid credentials"))),
    }
}

#[cfg(test)]
mod tests;
