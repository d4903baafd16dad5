//! Record batches as a producer sends them: split and validate, then read the records of each
//! valid batch, then compact them as a segment (every batch left must still validate). The
//! first byte chooses whether the CRC is fixed up first, so that the fuzzer also reaches the
//! code behind the CRC check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::protocol::batch;
use sluice::storage::compaction::{compact, KeyMap};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        if let Some(size) = batch::peek_size(&buf).filter(|&s| s <= buf.len()) {
            batch::seal(&mut buf[..size]);
        }
    }
    let _ = batch::parse_header(&buf);
    if let Ok(headers) = batch::validate_all(&buf) {
        let mut at = 0;
        for h in headers {
            assert!(
                at + h.size_bytes <= buf.len(),
                "validate_all returned a batch past the input"
            );
            if let Some(records) = batch::records(&buf[at..at + h.size_bytes]) {
                assert!(records.len() <= h.record_count as usize);
            }
            at += h.size_bytes;
        }
        assert_eq!(at, buf.len(), "validate_all must account for every byte");
        let mut map = KeyMap::new(1 << 20);
        map.learn(&buf);
        let mut out = Vec::new();
        compact(&buf, &map, mode & 2 == 2, &mut out);
        let mut at = 0;
        while at < out.len() {
            let size = batch::peek_size(&out[at..]).expect("compaction writes whole batches");
            batch::validate(&out[at..at + size]).expect("a compacted batch is valid");
            at += size;
        }
    }
});
