use super::*;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

fn alice(m: scram::Mechanism) -> Credential {
    Credential::new(m, b"alice-secret", b"salt-of-alice", 4096)
}

fn lookup(user: &str, m: scram::Mechanism) -> Option<Credential> {
    (user == "alice").then(|| alice(m))
}

fn nonce() -> String {
    "server-nonce".to_string()
}

#[test]
fn plain_authenticates_with_the_password_of_the_scram_credential() {
    let mut x = Exchange::new(Mechanism::ALL.to_vec());
    assert_eq!(
        x.mechanisms(),
        vec!["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
    );
    x.handshake("PLAIN").unwrap();
    let done = x
        .authenticate(b"\0alice\0alice-secret", nonce, lookup)
        .unwrap();
    let principal = "User:alice".to_string();
    let expected = Answer::Done {
        principal,
        token: Vec::new(),
    };
    assert_eq!(done, expected);
    assert_eq!(x.principal(), Some("User:alice"));
    assert_eq!(
        x.authenticate(b"\0alice\0alice-secret", nonce, lookup),
        Err(Refused::IllegalState),
        "nothing after the end"
    );
}

#[test]
fn a_wrong_password_or_unknown_user_fails_the_exchange_for_good() {
    for token in [&b"\0alice\0wrong"[..], b"\0bob\0alice-secret", b"garbage"] {
        let mut x = Exchange::new(vec![Mechanism::Plain]);
        x.handshake("PLAIN").unwrap();
        assert!(matches!(
            x.authenticate(token, nonce, lookup),
            Err(Refused::Failed(_))
        ));
        assert_eq!(x.principal(), None);
        assert_eq!(
            x.authenticate(b"\0alice\0alice-secret", nonce, lookup),
            Err(Refused::IllegalState)
        );
    }
}

#[test]
fn scram_takes_two_tokens() {
    let m = scram::Mechanism::Sha512;
    let mut x = Exchange::new(vec![Mechanism::Scram(m)]);
    x.handshake("SCRAM-SHA-512").unwrap();
    let Answer::Challenge(server_first) =
        x.authenticate(b"n,,n=alice,r=cn", nonce, lookup).unwrap()
    else {
        panic!("a challenge first")
    };
    let server_first = String::from_utf8(server_first).unwrap();
    assert!(
        server_first.starts_with("r=cnserver-nonce,s="),
        "{server_first}"
    );
    // The client's proof, computed with the credential's own keys.
    let c = alice(m);
    let salted = pbkdf2::pbkdf2_hmac_array::<sha2::Sha512, 64>(b"alice-secret", &c.salt, 4096);
    let hmac = |key: &[u8], data: &[u8]| {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha512>::new_from_slice(key).unwrap();
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    };
    let client_key = hmac(&salted, b"Client Key");
    let without_proof = "c=biws,r=cnserver-nonce";
    let auth = format!("n=alice,r=cn,{server_first},{without_proof}");
    let signature = hmac(&c.stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let last = format!("{without_proof},p={}", BASE64.encode(proof));
    let Answer::Done { principal, token } = x.authenticate(last.as_bytes(), nonce, lookup).unwrap()
    else {
        panic!("done after the second")
    };
    assert_eq!(principal, "User:alice");
    assert!(token.starts_with(b"v="));
}

#[test]
fn handshakes_are_checked() {
    let mut x = Exchange::new(vec![Mechanism::Scram(scram::Mechanism::Sha256)]);
    assert_eq!(
        x.authenticate(b"n,,n=alice,r=cn", nonce, lookup),
        Err(Refused::IllegalState),
        "a token before the handshake"
    );
    let mut x = Exchange::new(vec![Mechanism::Scram(scram::Mechanism::Sha256)]);
    assert_eq!(
        x.handshake("PLAIN"),
        Err(Refused::Unsupported),
        "not enabled"
    );
    assert_eq!(
        x.handshake("GSSAPI"),
        Err(Refused::Unsupported),
        "not known"
    );
    x.handshake("SCRAM-SHA-256").unwrap();
    assert_eq!(
        x.handshake("SCRAM-SHA-256"),
        Err(Refused::IllegalState),
        "twice"
    );
}

#[test]
fn a_session_reauthenticates_only_where_allowed_and_as_the_same_principal() {
    let both = |user: &str, m| match user {
        "alice" => Some(alice(m)),
        "bob" => Some(Credential::new(m, b"bob-secret", b"salt-of-bob", 4096)),
        _ => None,
    };
    let login = |x: &mut Exchange, token: &[u8]| {
        x.handshake("PLAIN")?;
        x.authenticate(token, nonce, both)
    };
    let mut fixed = Exchange::new(vec![Mechanism::Plain]);
    login(&mut fixed, b"\0alice\0alice-secret").unwrap();
    assert_eq!(fixed.handshake("PLAIN"), Err(Refused::IllegalState));
    let mut renewing = Exchange::new(vec![Mechanism::Plain]);
    renewing.allow_reauthentication();
    login(&mut renewing, b"\0alice\0alice-secret").unwrap();
    login(&mut renewing, b"\0alice\0alice-secret").unwrap();
    assert_eq!(renewing.principal(), Some("User:alice"));
    let as_bob = login(&mut renewing, b"\0bob\0bob-secret");
    assert!(matches!(as_bob, Err(Refused::Failed(_))), "{as_bob:?}");
    assert_eq!(renewing.principal(), None);
}
