//! A piece of a response body: bytes in memory, or a range of a segment file that the
//! connection hands to the kernel with sendfile, so record bytes never pass through user space.

use bytes::Bytes;
use std::os::fd::OwnedFd;
use std::sync::Arc;

pub enum Chunk {
    Bytes(Bytes),
    File(FileSlice),
}

/// `len` bytes at `position` of an open segment file. The descriptor is shared (and Send), so
/// the shard that owns the connection can send what the partition's shard located.
pub struct FileSlice {
    pub fd: Arc<OwnedFd>,
    pub position: u64,
    pub len: usize,
}

impl Chunk {
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Bytes> for Chunk {
    fn from(b: Bytes) -> Chunk {
        Chunk::Bytes(b)
    }
}
