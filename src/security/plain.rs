//! SASL PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd` in one message. The password is
//! checked against the user's SCRAM credential (`scram::Credential::matches`), so a user
//! created once logs in with any enabled mechanism and no password is stored.

use super::{SaslError, SaslResult};

/// Bound on a PLAIN message (bytes): a name and a password, with room to spare.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// A PLAIN message's user and password.
#[derive(Debug, PartialEq, Eq)]
pub struct Plain<'a> {
    pub username: &'a str,
    pub password: &'a [u8],
}

/// Reads a PLAIN message. An authorization id other than the user's own is refused, as Kafka
/// refuses it (nobody may act as another user).
pub fn parse(msg: &[u8]) -> SaslResult<Plain<'_>> {
    if msg.len() > MAX_MESSAGE_BYTES {
        return Err(SaslError("PLAIN message too long"));
    }
    let mut parts = msg.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(authcid), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError(
            "PLAIN message is not authzid NUL username NUL password",
        ));
    };
    let username =
        std::str::from_utf8(authcid).map_err(|_| SaslError("PLAIN username is not UTF-8"))?;
    if username.is_empty() || password.is_empty() {
        return Err(SaslError("PLAIN username and password must not be empty"));
    }
    if !authzid.is_empty() && authzid != authcid {
        return Err(SaslError(
            "PLAIN authorization id differs from the username",
        ));
    }
    Ok(Plain { username, password })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_user_and_password() {
        let p = parse(b"\0alice\0secret").unwrap();
        assert_eq!((p.username, p.password), ("alice", &b"secret"[..]));
        let p = parse(b"alice\0alice\0pass\0with nul").unwrap();
        assert_eq!(p.password, b"pass\0with nul", "the password is the rest");
    }

    #[test]
    fn refuses_malformed_and_borrowed_identities() {
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0secret",
            b"\0alice\0",
            b"bob\0alice\0secret",
            b"\0\xff\0secret",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&vec![b'a'; MAX_MESSAGE_BYTES + 1]).is_err());
    }
}
