//! The controller's durable Raft state in `data_dir/__raft/`: raft-rs's in-memory storage,
//! backed by two files.
//!
//! - `log`: append-only records `[size u32][crc32c u32][kind u8][protobuf]`, kind 1 an entry,
//!   kind 2 the hard state (term, vote, commit). Raft may overwrite a suffix of its log (a new
//!   leader's entries replace uncommitted ones): the later record wins at load, as in memory.
//!   A torn record at the end (a crash mid-write) is cut off at load.
//! - `snapshot`: the latest snapshot (its metadata and the applied catalog, `catalog::encode`),
//!   written by write-sync-rename. When one is taken, the log is rewritten without the entries
//!   it covers.
//!
//! Entries and the hard state of one Raft `Ready` are written together and made durable by one
//! fdatasync before any message that depends on them is sent (raft-rs's persisted messages).
//! The files are reached through `storage::disk::Disk`, so the simulator runs this code over a
//! disk that loses unsynced writes.

use crate::storage::disk::Disk;
use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, Storage};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
/// Bound on one log record (an entry holds one controller request's records).
const MAX_RECORD_BYTES: usize = 64 << 20;

/// raft-rs's storage for this node: reads from memory, `persist_*` write through to disk.
#[derive(Clone)]
pub struct RaftStore {
    mem: MemStorage,
    /// The latest snapshot with its data: what a far-behind follower is sent.
    snapshot: Rc<RefCell<Snapshot>>,
    disk: Rc<dyn Disk>,
    dir: PathBuf,
}

impl RaftStore {
    /// Opens (or creates) the Raft state in `data_dir/__raft`; a new one starts with `voters`.
    pub fn open(
        disk: Rc<dyn Disk>,
        data_dir: &Path,
        voters: Vec<u64>,
    ) -> anyhow::Result<RaftStore> {
        let dir = data_dir.join("__raft");
        disk.create_dir_all(&dir)?;
        let mem = MemStorage::new_with_conf_state(ConfState::from((voters.clone(), vec![])));
        let snapshot = match disk.read(&dir.join("snapshot"))? {
            Some(raw) => Some(Snapshot::parse_from_bytes(&raw)?),
            None => None,
        };
        if let Some(s) = &snapshot {
            mem.wl().apply_snapshot(s.clone())?;
        }
        // The quorum comes from the config, not the log: a changed voter list takes effect at
        // the next start.
        mem.wl().set_conf_state(ConfState::from((voters, vec![])));
        let log_path = dir.join("log");
        let valid_bytes = replay_log(disk.as_ref(), &log_path, &mem)?;
        disk.truncate(&log_path, valid_bytes)?;
        Ok(RaftStore {
            mem,
            snapshot: Rc::new(RefCell::new(snapshot.unwrap_or_default())),
            disk,
            dir,
        })
    }

    /// The latest snapshot (empty data if none was taken).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }

    /// Writes a Ready's entries and hard state, then one fdatasync.
    pub fn persist(&self, entries: &[Entry], hard_state: Option<&HardState>) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        for e in entries {
            push_record(&mut buf, KIND_ENTRY, &e.write_to_bytes()?);
        }
        if let Some(hs) = hard_state {
            push_record(&mut buf, KIND_HARD_STATE, &hs.write_to_bytes()?);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let log = self.dir.join("log");
        self.disk.append(&log, &buf)?;
        if !crate::inject::active(crate::inject::Bug::RaftSkipsFsync) {
            self.disk.sync(&log)?;
        }
        let mut core = self.mem.wl();
        core.append(entries)?;
        if let Some(hs) = hard_state {
            core.set_hardstate(hs.clone());
        }
        Ok(())
    }

    /// Records a commit index raft-rs reported outside a hard state (a light ready: the leader
    /// learned it from its followers). Written without a sync: losing it in a power cut is
    /// harmless (the leader tells the node again), but a restart after a clean stop or a crash
    /// of the process knows everything it applied, its cluster id included.
    pub fn set_commit(&self, commit: u64) -> anyhow::Result<()> {
        let hs = {
            let mut core = self.mem.wl();
            core.mut_hard_state().commit = commit;
            core.hard_state().clone()
        };
        let mut buf = Vec::new();
        push_record(&mut buf, KIND_HARD_STATE, &hs.write_to_bytes()?);
        self.disk.append(&self.dir.join("log"), &buf)?;
        Ok(())
    }

    /// Installs a snapshot (from the leader, or taken here): written, then the log is
    /// rewritten without the entries it covers.
    pub fn install_snapshot(&self, snapshot: Snapshot, from_leader: bool) -> anyhow::Result<()> {
        let index = snapshot.get_metadata().index;
        self.disk
            .replace(&self.dir.join("snapshot"), &snapshot.write_to_bytes()?)?;
        {
            let mut core = self.mem.wl();
            if from_leader {
                core.apply_snapshot(snapshot.clone())?;
            } else {
                core.compact(index)?;
            }
        }
        *self.snapshot.borrow_mut() = snapshot;
        self.rewrite_log()
    }

    /// Rewrites the log file with the hard state and the entries still held in memory.
    fn rewrite_log(&self) -> anyhow::Result<()> {
        let state = self.mem.initial_state()?;
        let (first, last) = (self.mem.first_index()?, self.mem.last_index()?);
        let entries = if last >= first {
            self.mem
                .entries(first, last + 1, None, GetEntriesContext::empty(false))?
        } else {
            Vec::new()
        };
        let mut buf = Vec::new();
        for e in &entries {
            push_record(&mut buf, KIND_ENTRY, &e.write_to_bytes()?);
        }
        push_record(
            &mut buf,
            KIND_HARD_STATE,
            &state.hard_state.write_to_bytes()?,
        );
        self.disk.replace(&self.dir.join("log"), &buf)?;
        Ok(())
    }
}

fn push_record(buf: &mut Vec<u8>, kind: u8, body: &[u8]) {
    assert!(body.len() < MAX_RECORD_BYTES, "raft record too large");
    buf.extend_from_slice(&((body.len() + 1) as u32).to_be_bytes());
    let mut crc = crc32c::crc32c(&[kind]);
    crc = crc32c::crc32c_append(crc, body);
    buf.extend_from_slice(&crc.to_be_bytes());
    buf.push(kind);
    buf.extend_from_slice(body);
}

/// Splits `raw` into (kind, body) records up to the first torn or damaged one; also returns
/// how many bytes were whole records. (Public for the fuzz target.)
pub fn parse_records(raw: &[u8]) -> (Vec<(u8, &[u8])>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = raw.get(at..at + 8) {
        let size = u32::from_be_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
        if size == 0 || size > MAX_RECORD_BYTES {
            break;
        }
        let Some(body) = raw.get(at + 8..at + 8 + size) else {
            break;
        };
        if crc32c::crc32c(body) != crc {
            break;
        }
        out.push((body[0], &body[1..]));
        at += 8 + size;
    }
    (out, at)
}

/// Loads the log file into `mem`; returns the length of its whole records.
fn replay_log(disk: &dyn Disk, path: &Path, mem: &MemStorage) -> anyhow::Result<u64> {
    let Some(raw) = disk.read(path)? else {
        return Ok(0);
    };
    let (records, valid) = parse_records(&raw);
    if valid < raw.len() {
        log::warn!(
            "raft log {}: cutting {} bytes of a torn record at its end",
            path.display(),
            raw.len() - valid
        );
    }
    for (kind, body) in records {
        match kind {
            KIND_ENTRY => {
                let e = Entry::parse_from_bytes(body)?;
                let first = mem.first_index()?;
                let last = mem.last_index()?;
                // Entries a snapshot covers are skipped; a gap would be a damaged log.
                if e.index < first {
                    continue;
                }
                anyhow::ensure!(
                    e.index <= last + 1,
                    "raft log {}: entry {} after {last}",
                    path.display(),
                    e.index
                );
                mem.wl().append(&[e])?;
            }
            KIND_HARD_STATE => {
                let hs = HardState::parse_from_bytes(body)?;
                mem.wl().set_hardstate(hs);
            }
            other => anyhow::bail!("raft log {}: unknown record kind {other}", path.display()),
        }
    }
    // A hard state's commit never points past the entries that survived (a snapshot install
    // with no later entries, for one), nor before the snapshot: a snapshot holds only
    // committed entries, while the last commit index in the log may be older (one learned
    // from the leader is written without a sync, and the log is rewritten after the snapshot,
    // so a crash between the two leaves the snapshot ahead). raft-rs refuses to start on a
    // commit below its snapshot.
    let (first, last) = (mem.first_index()?, mem.last_index()?);
    let mut core = mem.wl();
    let hs = core.mut_hard_state();
    hs.commit = hs.commit.min(last).max(first - 1);
    Ok(valid as u64)
}

impl Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.mem.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.mem.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let snap = self.snapshot.borrow();
        let meta = snap.get_metadata();
        if idx == meta.index && meta.index > 0 {
            return Ok(meta.term);
        }
        self.mem.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.mem.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.mem.last_index()
    }

    /// The latest snapshot taken: a follower too far behind for the log is sent it.
    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let snap = self.snapshot.borrow();
        if snap.get_metadata().index == 0 {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(snap.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::OsDisk;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_and_hard_state_survive_a_restart_and_later_entries_win() {
        let dir = tempfile::tempdir().unwrap();
        let store = RaftStore::open(Rc::new(OsDisk::default()), dir.path(), vec![1, 2, 3]).unwrap();
        let hs = HardState {
            term: 2,
            vote: 1,
            commit: 1,
            ..Default::default()
        };
        store
            .persist(&[entry(1, 1, b"a"), entry(2, 1, b"b")], Some(&hs))
            .unwrap();
        // A new leader overwrites index 2.
        store.persist(&[entry(2, 2, b"c")], None).unwrap();
        drop(store);
        // A torn record at the end is cut off.
        let log = dir.path().join("__raft/log");
        let mut raw = std::fs::read(&log).unwrap();
        raw.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
        std::fs::write(&log, &raw).unwrap();
        let store = RaftStore::open(Rc::new(OsDisk::default()), dir.path(), vec![1, 2, 3]).unwrap();
        let state = store.initial_state().unwrap();
        assert_eq!((state.hard_state.term, state.hard_state.vote), (2, 1));
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
        assert_eq!(store.last_index().unwrap(), 2);
        let got = store
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(&got[1].data[..], b"c");
        assert_eq!(std::fs::read(&log).unwrap().len(), raw.len() - 6);
    }

    #[test]
    fn a_snapshot_ahead_of_the_logged_commit_raises_it() {
        // Found by the simulator (seed 5009): a snapshot at index 4 reached the disk, the log's
        // last hard state still said commit 3, and raft-rs refused to start on it.
        let dir = tempfile::tempdir().unwrap();
        let disk = Rc::new(OsDisk::default());
        let store = RaftStore::open(disk.clone(), dir.path(), vec![1]).unwrap();
        let entries: Vec<Entry> = (1..=4).map(|i| entry(i, 1, b"x")).collect();
        let hs = HardState {
            term: 1,
            commit: 3,
            ..Default::default()
        };
        store.persist(&entries, Some(&hs)).unwrap();
        let log = std::fs::read(dir.path().join("__raft/log")).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 4;
        snap.mut_metadata().term = 1;
        store.install_snapshot(snap, false).unwrap();
        drop(store);
        // The crash came before the log was rewritten.
        std::fs::write(dir.path().join("__raft/log"), log).unwrap();
        let store = RaftStore::open(disk, dir.path(), vec![1]).unwrap();
        assert_eq!(store.initial_state().unwrap().hard_state.commit, 4);
        let cfg = raft::Config {
            id: 1,
            applied: 4,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        raft::RawNode::new(&cfg, store, &logger).expect("raft-rs starts on it");
    }

    #[test]
    fn a_snapshot_compacts_the_log_and_loads_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = RaftStore::open(Rc::new(OsDisk::default()), dir.path(), vec![1]).unwrap();
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"x")).collect();
        let hs = HardState {
            term: 1,
            commit: 5,
            ..Default::default()
        };
        store.persist(&entries, Some(&hs)).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 4;
        snap.mut_metadata().term = 1;
        snap.data = b"catalog".to_vec().into();
        store.install_snapshot(snap, false).unwrap();
        assert_eq!(store.first_index().unwrap(), 4);
        drop(store);
        let store = RaftStore::open(Rc::new(OsDisk::default()), dir.path(), vec![1]).unwrap();
        assert_eq!(&store.snapshot().data[..], b"catalog");
        assert_eq!(store.first_index().unwrap(), 5);
        assert_eq!(store.last_index().unwrap(), 5);
        assert_eq!(store.term(4).unwrap(), 1);
        assert_eq!(store.initial_state().unwrap().hard_state.commit, 5);
    }
}
