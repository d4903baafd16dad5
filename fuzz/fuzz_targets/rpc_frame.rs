//! Bytes on the inter-node RPC port, as a peer or garbage would send them: the frame decoder
//! (size, magic, version, checksum), then every message decoder on the frame's payload. The
//! first byte chooses whether the input is a whole frame or a payload to be framed first (so
//! that the fuzzer also reaches the message decoders behind the checksum).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::controller::messages::{self, BrokerHeartbeat, Failure, Forward, HeartbeatReply};
use sluice::controller::messages::{Outcomes, ProducerIdBlock, RaftEnvelope};
use sluice::rpc::frame;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let framed;
    let input = if mode & 1 == 1 {
        framed = frame::encode(mode >> 1, 7, rest);
        &framed[..]
    } else {
        rest
    };
    let Ok((header, payload)) = frame::decode(input) else {
        return;
    };
    assert_eq!(header.payload_bytes, payload.len());
    let _ = messages::decode::<RaftEnvelope>(payload);
    let _ = messages::decode::<Forward>(payload);
    let _ = messages::decode::<BrokerHeartbeat>(payload);
    let _ = messages::decode::<HeartbeatReply>(payload);
    let _ = messages::decode::<Failure>(payload);
    let _ = messages::decode::<Outcomes>(payload);
    let _ = messages::decode::<ProducerIdBlock>(payload);
});
