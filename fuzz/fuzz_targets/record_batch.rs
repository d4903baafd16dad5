//! Record batches as a producer sends them: split and validate, then read the records of each
//! valid batch, then compact them as a segment (every batch left must still validate), then
//! apply a topic's append rules (keys, timestamps, conversion to a codec: every batch that
//! comes out must validate). The first byte chooses whether the CRC is fixed up first, so
//! that the fuzzer also reaches the code behind the CRC check, which rules apply, and whether
//! the transactional batches count as aborted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::partition::ingest::{self, Rules};
use sluice::protocol::batch;
use sluice::protocol::compression::Codec;
use sluice::storage::compaction::{compact, Aborted, Cleaning, KeyMap, TxnsKept};
use sluice::storage::txn_index::AbortedTxn;

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
        for h in headers.iter() {
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
        // Bit 3 (shared with the codec choice below): every transactional producer's batches
        // count as aborted, so that the removal of aborted transactions runs too.
        let aborted: Vec<AbortedTxn> = headers
            .iter()
            .filter(|h| mode & 8 != 0 && h.is_transactional())
            .map(|h| AbortedTxn {
                producer_id: h.producer_id,
                first_offset: i64::MIN,
                last_offset: i64::MAX,
                last_stable_offset: 0,
            })
            .collect();
        let mut map = KeyMap::new(1 << 20);
        map.learn(&buf, Aborted(&aborted));
        let mut out = Vec::new();
        let mut txns = TxnsKept::default();
        let mut cleaning = Cleaning {
            map: &map,
            aborted: Aborted(&aborted),
            past_delete_retention: mode & 2 == 2,
            txns: &mut txns,
            aborts_removed: Vec::new(),
        };
        compact(&buf, &mut cleaning, &mut out);
        let mut at = 0;
        while at < out.len() {
            let size = batch::peek_size(&out[at..]).expect("compaction writes whole batches");
            batch::validate(&out[at..at + size]).expect("a compacted batch is valid");
            at += size;
        }
        let rules = Rules {
            compacted: mode & 4 != 0,
            // 5..=7: keep the producer's.
            codec: Codec::from_id(((mode >> 3) & 7) as i16).map(Into::into),
            log_append_time: false,
            timestamp_before_max_ms: if mode & 0x40 != 0 { 1000 } else { i64::MAX },
            timestamp_after_max_ms: if mode & 0x80 != 0 { 1000 } else { i64::MAX },
            // The partition checks the bound around `apply`, not `apply` itself.
            max_message_bytes: u32::MAX,
        };
        let now_ms = 1_700_000_000_000;
        if let Ok((out, hs)) = ingest::apply("fuzz", buf.clone().into(), headers, &rules, now_ms) {
            assert_eq!(batch::validate_all(&out).as_deref(), Ok(&hs[..]));
        }
    }
});
