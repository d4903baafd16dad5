//! The transaction files as a crash or a bad disk may leave them: `__transaction_state`
//! records (key and value decoders) and a segment's aborted-transaction index. Whatever the
//! bytes, decoding ends without a panic; what decodes re-encodes to the same thing, and an
//! index keeps exactly its good prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::txn_index::{self, ENTRY_BYTES};
use sluice::txn::records;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = records::decode_key(data) {
        assert_eq!(records::decode_key(&records::encode_key(&id)).ok(), Some(id));
    }
    if let Ok(record) = records::decode_value(data) {
        let again = records::decode_value(&records::encode_value(&record));
        assert_eq!(again.ok(), Some(record));
    }
    let (entries, intact) = txn_index::decode(data);
    let kept: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    assert_eq!(&data[..kept.len()], &kept[..], "the entries are the file's prefix");
    assert_eq!(intact, kept.len() == data.len());
    assert!(entries.windows(2).all(|w| w[0].last_offset < w[1].last_offset));
    assert!(kept.len() % ENTRY_BYTES == 0);
});
