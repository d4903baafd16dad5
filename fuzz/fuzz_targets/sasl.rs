//! The SASL messages a client sends before it is authenticated: PLAIN's one message and
//! SCRAM's client-first and client-final. Whatever the bytes, parsing ends without a panic and
//! nothing authenticates without the password: the exchange runs against a credential for a
//! password the input cannot know, and a client-final message taken as valid would be a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::security::{plain, scram};

fuzz_target!(|data: &[u8]| {
    let _ = plain::parse(data);
    // The input splits at its first NUL into a client-first and a client-final message.
    let (first, last) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &data[..0]),
    };
    for mechanism in scram::Mechanism::ALL {
        let credential = scram::Credential::new(mechanism, b"not in the input", b"salt", 1);
        let lookup = |_: &str| Some(credential.clone());
        if let Ok(answered) = scram::client_first(first, "server-nonce", lookup) {
            assert!(
                scram::client_final(&answered, last).is_err(),
                "a client-final message authenticated without the password"
            );
        }
    }
});
