//! A simulated disk: the same `Disk` contract as the operating system's files, with a crash that
//! loses what was not synced and faults drawn from the seed.
//!
//! Each file keeps its durable bytes and the bytes written since (the page cache). `sync`
//! makes them durable, unless a failed fsync is drawn (EIO: the node must stop, as the broker
//! does). A crash keeps the durable bytes and a random prefix of the unsynced ones: a torn write
//! at the tail, sometimes with a hole of zeroed sectors in it (`SimFile::punch_hole`). `append`
//! may fail with ENOSPC.

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
    /// The share of crashes (power cuts aside) after which a file kept some of its unsynced
    /// bytes, writeback having reached them (per mille).
    pub writeback_permille: u32,
    /// The share of those in which a few sectors of the kept bytes read back spoiled
    /// (`SimFile::punch_hole`, per mille).
    pub hole_permille: u32,
}

#[derive(Default, Clone)]
struct SimFile {
    /// The file as reads see it: the durable bytes, then what was written since.
    current: Vec<u8>,
    /// How many of its first bytes are on stable storage. Every change but an append is
    /// durable at once here (`truncate`, `replace`), so the durable bytes are always a prefix
    /// of `current`.
    durable_len: usize,
}

/// The bytes a disk writes at once: a crash tears writes between sectors, never inside one.
const SECTOR_BYTES: usize = 512;
/// The most sectors a hole in a crashed file's tail spans.
const MAX_HOLE_SECTORS: usize = 8;

impl SimFile {
    /// Spoils a few sectors of the unsynced bytes a crash kept: writeback reached later pages
    /// but not these, and the file's size covers them (a file system that does not order data
    /// before size, such as XFS or ext4 with data=writeback), so they read as zeros or as the
    /// stale bytes of a block used before. Sectors that hold durable bytes keep them.
    fn punch_hole(&mut self, rng: &mut ChaCha8Rng) {
        let (durable, end) = (self.durable_len, self.current.len());
        let at = rng.gen_range(durable..end);
        let start = (at - at % SECTOR_BYTES).max(durable);
        let sectors = rng.gen_range(1..=MAX_HOLE_SECTORS);
        let stop = (at - at % SECTOR_BYTES + sectors * SECTOR_BYTES).min(end);
        match rng.gen_bool(0.5) {
            true => self.current[start..stop].fill(0),
            false => rng.fill(&mut self.current[start..stop]),
        }
    }
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

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files = self.files.borrow();
        f.debug_struct("SimDisk")
            .field("files", &files.len())
            .finish()
    }
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

    /// The faults this disk draws (as made: healing does not change them).
    pub fn faults(&self) -> DiskFaults {
        self.faults
    }

    /// How often an append fails with ENOSPC now (none once healed).
    pub fn no_space_ppm(&self) -> u32 {
        match self.healed.get() {
            true => 0,
            false => self.faults.no_space_ppm,
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
        self.crash_drawing(&mut self.rng.borrow_mut(), power_cut)
    }

    /// `crash`, drawing what writeback reached from `rng`.
    pub fn crash_drawing(&self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        let mut lost = 0;
        for f in self.files.borrow_mut().values_mut() {
            let unsynced = f.current.len() - f.durable_len;
            let reached = !power_cut && rng.gen_ratio(self.faults.writeback_permille, 1_000);
            let kept = if unsynced == 0 || !reached {
                0
            } else {
                rng.gen_range(0..=unsynced)
            };
            lost += (unsynced - kept) as u64;
            f.current.truncate(f.durable_len + kept);
            if kept > 0 && rng.gen_ratio(self.faults.hole_permille, 1_000) {
                f.punch_hole(rng);
            }
            f.durable_len = f.current.len();
        }
        lost
    }
}

impl Disk for SimDisk {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.borrow().get(path).map(|f| f.current.clone()))
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // Creating a file needs no block: only a write that allocates one finds the disk full.
        if !bytes.is_empty() && self.draw(self.faults.no_space_ppm) {
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
            f.durable_len = f.current.len();
        }
        Ok(())
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let f = files.entry(path.to_path_buf()).or_default();
        f.current.resize(len as usize, 0);
        f.durable_len = f.current.len();
        Ok(())
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if self.draw(self.faults.fsync_error_ppm) {
            // The temporary file's sync failed: the old file stands.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.replace_unsynced(path, bytes)
    }

    fn create_dir_all(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let files = self.files.borrow();
        let inside = files.keys().filter(|p| p.parent() == Some(dir));
        Ok(inside
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
            .collect())
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        Ok(self
            .files
            .borrow()
            .get(path)
            .map(|f| f.current.len() as u64))
    }

    fn read_at(&self, path: &Path, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let files = self.files.borrow();
        let f = files.get(path).ok_or(io::ErrorKind::NotFound)?;
        let start = (at as usize).min(f.current.len());
        let end = start.saturating_add(len).min(f.current.len());
        Ok(f.current[start..end].to_vec())
    }

    /// Durable at once: the simulated disk has no directory entries to sync.
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.files.borrow_mut().remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let f = files.remove(from).ok_or(io::ErrorKind::NotFound)?;
        files.insert(to.to_path_buf(), f);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    /// Durable at once here, as every change but an append (a stronger disk than the
    /// operating system's: a crash never takes the checkpoint back).
    fn replace_unsynced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let f = SimFile {
            current: bytes.to_vec(),
            durable_len: bytes.len(),
        };
        self.files.borrow_mut().insert(path.to_path_buf(), f);
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.files.borrow_mut().retain(|p, _| !p.starts_with(dir));
        Ok(())
    }
}
