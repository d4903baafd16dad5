//! A simulated disk: the same `Disk` contract as the operating system's files, with a crash that
//! loses what was not synced and faults drawn from the seed.
//!
//! Each file keeps its durable bytes and the bytes written since (the page cache). `sync`
//! makes them durable, unless a failed fsync is drawn (EIO: the node must stop, as the broker
//! does). A crash keeps the durable bytes and a random prefix of the unsynced ones: a torn write
//! at the tail. `append` may fail with ENOSPC.

use crate::storage::disk::Disk;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// How often faults are drawn, per call (parts per million).
#[derive(Clone, Copy, Debug)]
pub struct DiskFaults {
    pub fsync_error_ppm: u32,
    pub no_space_ppm: u32,
}

#[derive(Default, Clone)]
struct SimFile {
    durable: Vec<u8>,
    /// The file as reads see it: the durable bytes, then what was appended since.
    current: Vec<u8>,
}

pub struct SimDisk {
    files: RefCell<BTreeMap<PathBuf, SimFile>>,
    rng: RefCell<ChaCha8Rng>,
    faults: DiskFaults,
    /// Faults drawn so far (failed fsyncs, full-disk appends).
    pub faults_hit: std::cell::Cell<u64>,
    /// Set when the faults end: the disk fails no more.
    healed: std::cell::Cell<bool>,
}

impl SimDisk {
    pub fn new(rng: ChaCha8Rng, faults: DiskFaults) -> SimDisk {
        SimDisk {
            files: RefCell::new(BTreeMap::new()),
            rng: RefCell::new(rng),
            faults,
            faults_hit: std::cell::Cell::new(0),
            healed: std::cell::Cell::new(false),
        }
    }

    pub fn heal(&self) {
        self.healed.set(true);
    }

    fn draw(&self, ppm: u32) -> bool {
        let hit =
            ppm > 0 && !self.healed.get() && self.rng.borrow_mut().gen_range(0..1_000_000) < ppm;
        if hit {
            self.faults_hit.set(self.faults_hit.get() + 1);
        }
        hit
    }

    /// A crash: every file keeps its durable bytes and a random prefix of those written after
    /// them (what writeback had reached), none of those after a power cut. Returns how many
    /// unsynced bytes were lost.
    pub fn crash(&self, power_cut: bool) -> u64 {
        let mut lost = 0;
        let mut rng = self.rng.borrow_mut();
        for f in self.files.borrow_mut().values_mut() {
            let durable = f.durable.len();
            let unsynced = f.current.len().saturating_sub(durable);
            // A sync or truncate keeps `current` a continuation of `durable`.
            debug_assert_eq!(&f.current[..durable.min(f.current.len())], &f.durable[..]);
            let kept = if unsynced == 0 || power_cut || rng.gen_bool(0.5) {
                0
            } else {
                rng.gen_range(0..=unsynced)
            };
            lost += (unsynced - kept) as u64;
            f.current.truncate(durable + kept);
            f.durable = f.current.clone();
        }
        lost
    }
}

impl Disk for SimDisk {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.borrow().get(path).map(|f| f.current.clone()))
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if self.draw(self.faults.no_space_ppm) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let mut files = self.files.borrow_mut();
        let f = files.entry(path.to_path_buf()).or_default();
        f.current.extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&self, path: &Path) -> io::Result<()> {
        if self.draw(self.faults.fsync_error_ppm) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if let Some(f) = self.files.borrow_mut().get_mut(path) {
            f.durable = f.current.clone();
        }
        Ok(())
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let f = files.entry(path.to_path_buf()).or_default();
        f.current.resize(len as usize, 0);
        f.durable = f.current.clone();
        Ok(())
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if self.draw(self.faults.fsync_error_ppm) {
            // The temporary file's sync failed: the old file stands.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let f = SimFile {
            durable: bytes.to_vec(),
            current: bytes.to_vec(),
        };
        self.files.borrow_mut().insert(path.to_path_buf(), f);
        Ok(())
    }

    fn create_dir_all(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}
