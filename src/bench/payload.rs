//! The bench's payload: a small header the receiving side reads back, then filler.

use super::args::PAYLOAD_HEADER_BYTES;

pub struct Stamp {
    /// Intended send time, ns since the run's epoch.
    pub sent_ns: u64,
    pub producer: u32,
    pub seq: u64,
}

pub fn write(buf: &mut [u8], stamp: &Stamp) {
    buf[0..8].copy_from_slice(&stamp.sent_ns.to_be_bytes());
    buf[8..12].copy_from_slice(&stamp.producer.to_be_bytes());
    buf[12..20].copy_from_slice(&stamp.seq.to_be_bytes());
}

pub fn read(buf: &[u8]) -> Option<Stamp> {
    if buf.len() < PAYLOAD_HEADER_BYTES {
        return None;
    }
    Some(Stamp {
        sent_ns: u64::from_be_bytes(buf[0..8].try_into().ok()?),
        producer: u32::from_be_bytes(buf[8..12].try_into().ok()?),
        seq: u64::from_be_bytes(buf[12..20].try_into().ok()?),
    })
}

/// Filler that compresses about as well as typical JSON-ish data (neither all zeros nor noise).
pub fn filler(size: usize) -> Vec<u8> {
    let text =
        b"{\"user\":12345,\"event\":\"click\",\"page\":\"/products/widget\",\"ts\":1700000000}";
    text.iter().copied().cycle().take(size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = filler(64);
        write(
            &mut b,
            &Stamp {
                sent_ns: 7,
                producer: 3,
                seq: 99,
            },
        );
        let s = read(&b).unwrap();
        assert_eq!((s.sent_ns, s.producer, s.seq), (7, 3, 99));
        assert!(read(&b[..10]).is_none());
    }
}
