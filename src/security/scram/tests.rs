use super::*;

/// RFC 7677's example exchange (SCRAM-SHA-256, user "user", password "pencil").
const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn pencil(mechanism: Mechanism) -> Credential {
    let salt = BASE64.decode(SALT_B64).unwrap();
    Credential::new(mechanism, b"pencil", &salt, 4096)
}

fn lookup(mechanism: Mechanism) -> impl FnOnce(&str) -> Option<Credential> {
    move |user| (user == "user").then(|| pencil(mechanism))
}

#[test]
fn rfc_7677_exchange() {
    let first = client_first(
        CLIENT_FIRST.as_bytes(),
        SERVER_NONCE,
        lookup(Mechanism::Sha256),
    )
    .expect("client-first");
    assert_eq!(first.username, "user");
    assert_eq!(first.server_first(), SERVER_FIRST.as_bytes());
    let last = client_final(&first, CLIENT_FINAL.as_bytes()).expect("client-final");
    assert_eq!(last, SERVER_FINAL.as_bytes());
}

/// A client's final message for `password`, computed as a client does.
fn client_final_for(m: Mechanism, first: &FirstAnswered, password: &[u8], gs2: &str) -> String {
    let server_first = std::str::from_utf8(first.server_first()).unwrap();
    let salt = BASE64.decode(
        server_first
            .split(",s=")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap(),
    );
    let salted = m.salted_password(password, &salt.unwrap(), 4096);
    let client_key = m.hmac(&salted, b"Client Key");
    let without_proof = format!("c={},r={}", BASE64.encode(gs2), first.nonce);
    let auth = format!("{},{server_first},{without_proof}", first.client_first_bare);
    let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    format!("{without_proof},p={}", BASE64.encode(proof))
}

#[test]
fn sha_512_and_an_authorization_id_of_ones_own() {
    let m = Mechanism::Sha512;
    let msg = "n,a=user,n=user,r=abc";
    let first = client_first(msg.as_bytes(), "xyz", lookup(m)).unwrap();
    let good = client_final_for(m, &first, b"pencil", "n,a=user,");
    let server_final = client_final(&first, good.as_bytes()).unwrap();
    assert!(server_final.starts_with(b"v="));
    let bad = client_final_for(m, &first, b"pencil2", "n,a=user,");
    assert_eq!(
        client_final(&first, bad.as_bytes()),
        Err(SaslError("invalid credentials"))
    );
}

#[test]
fn malformed_or_refused_first_messages() {
    let m = Mechanism::Sha256;
    for bad in [
        "",
        "n,,",
        "p=tls-unique,,n=user,r=abc",
        "x,,n=user,r=abc",
        "n,,r=abc,n=user",
        "n,,n=user",
        "n,,n=,r=abc",
        "n,,n=us=er,r=abc",
        "n,a=other,n=user,r=abc",
        "n,,n=user,r=abc,tokenauth=true",
    ] {
        assert!(
            client_first(bad.as_bytes(), "s", lookup(m)).is_err(),
            "{bad}"
        );
    }
    let unknown = client_first(b"n,,n=nobody,r=abc", "s", lookup(m));
    assert_eq!(unknown.unwrap_err(), SaslError("invalid credentials"));
    let long = format!("n,,n=user,r={}", "a".repeat(MAX_MESSAGE_BYTES));
    assert!(client_first(long.as_bytes(), "s", lookup(m)).is_err());
    assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
}

#[test]
fn a_final_message_must_continue_its_own_exchange() {
    let m = Mechanism::Sha256;
    let first = client_first(CLIENT_FIRST.as_bytes(), SERVER_NONCE, lookup(m)).unwrap();
    let wrong_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
    let wrong_binding = CLIENT_FINAL.replace("c=biws", "c=eSws");
    let no_proof = CLIENT_FINAL.split(",p=").next().unwrap().to_string();
    let short_proof = format!("{no_proof},p=AAAA");
    for bad in [
        wrong_nonce,
        wrong_binding,
        no_proof,
        short_proof,
        "p=".into(),
    ] {
        assert!(client_final(&first, bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn plain_passwords_check_against_the_stored_keys() {
    for m in Mechanism::ALL {
        let c = pencil(m);
        assert!(c.matches(b"pencil"));
        assert!(!c.matches(b"pencil "));
        let salted = m.salted_password(b"pencil", &c.salt, 4096);
        assert_eq!(Credential::from_salted(m, &salted, &c.salt, 4096), c);
        assert_eq!(Mechanism::from_name(m.name()), Some(m));
        assert_eq!(Mechanism::from_code(m.code()), Some(m));
    }
}
