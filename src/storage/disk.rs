//! The small metadata files the broker writes with plain synchronous calls (today the
//! controller's Raft log and snapshot), behind a trait: the broker uses the operating system's
//! files (`OsDisk`), the simulator (`sim/`) runs the same code over a disk that loses what was
//! not synced when its node crashes.
//!
//! The contract each implementation keeps: `append` is durable only after `sync` of the same
//! file (the file's name is durable once the first append returns); `replace`, `truncate` and
//! `create_dir_all` are durable when they return (a crash leaves the old or the new content,
//! never a mix).
//!
//! Names: POSIX makes a new directory entry durable only when its directory is fsynced (ext4
//! does more, other file systems may not), so whatever creates a file or directory that must
//! outlast a power cut syncs its parent (`create_dir_durably` for directories).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};
use std::path::{Path, PathBuf};

pub trait Disk {
    /// The whole file; None when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Appends `bytes`, creating the file if needed; not durable until `sync`.
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Makes every append to `path` durable (fdatasync).
    fn sync(&self, path: &Path) -> io::Result<()>;
    /// Cuts (or creates) the file at `len` bytes, durably.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Replaces the whole file with `bytes`, atomically and durably: write a temporary file,
    /// sync it, rename it over `path`, sync the directory.
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The names of the files in `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The file's length; None when it does not exist.
    fn len(&self, path: &Path) -> io::Result<Option<u64>>;
    /// Up to `len` bytes of the file from `at`: fewer where the file ends first.
    fn read_at(&self, path: &Path, at: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Removes the file if it exists. Durable once its directory is synced.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` over `to`, durably (the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the names in `dir` durable (removals included).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Replaces the whole file with `bytes` atomically (a temporary file renamed over it) but
    /// with no sync: for a file whose loss in a crash only costs time (the high-watermark
    /// checkpoint). A reader sees the old file or the new one, never a mix.
    fn replace_unsynced(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Removes `dir` and everything in it, if it exists (a deleted topic's leftovers).
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
}

/// Creates `path` and any missing parents, each new directory's entry made durable by syncing
/// the directory that holds it.
pub fn create_dir_durably(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => {}
        // Another thread made it meanwhile: its creator syncs the entry.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    sync_parent(path)
}

/// Makes the entry naming `path` durable: syncs the directory that holds it.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    sync_dir(parent.unwrap_or(Path::new(".")))
}

/// The size of the file system that holds `dir`, and the bytes an unprivileged writer may
/// still use there: (total, usable), as DescribeLogDirs reports them.
pub fn space_bytes(dir: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a valid C string and `stat` is written by statvfs before it is read
    // (only when statvfs returns 0).
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        stat.assume_init()
    };
    let unit = stat.f_frsize;
    Ok((stat.f_blocks * unit, stat.f_bavail * unit))
}

/// Makes `dir`'s entries (new, renamed, removed names) durable, on this thread.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Opens `path` for appending, creating it if missing; a file it creates has its name made
/// durable before this returns.
pub fn open_append_durably(path: &Path) -> io::Result<File> {
    let new = !path.exists();
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    if new {
        sync_parent(path)?;
    }
    Ok(file)
}

/// An open descriptor as a std `File`, for positioned reads and writes on this thread, without
/// taking it over: `ManuallyDrop` never closes it. The caller keeps `fd` open while the result
/// lives.
pub fn borrow_file(fd: RawFd) -> ManuallyDrop<File> {
    // SAFETY: `fd` is open for as long as the caller uses the result (its contract), and the
    // result never closes it, so no descriptor is owned twice.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// Where a replacement of `path` is written before it is renamed over it.
fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// The operating system's files. Keeps each appended file open, so an append is one write(2).
#[derive(Default)]
pub struct OsDisk {
    appending: RefCell<HashMap<PathBuf, File>>,
}

impl OsDisk {
    fn with_appender<R>(
        &self,
        path: &Path,
        f: impl FnOnce(&mut File) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut open = self.appending.borrow_mut();
        if !open.contains_key(path) {
            open.insert(path.to_path_buf(), open_append_durably(path)?);
        }
        f(open.get_mut(path).expect("inserted above"))
    }
}

impl Disk for OsDisk {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(raw) => Ok(Some(raw)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.with_appender(path, |f| f.write_all(bytes))
    }

    fn sync(&self, path: &Path) -> io::Result<()> {
        self.with_appender(path, |f| f.sync_data())
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.with_appender(path, |f| {
            f.set_len(len)?;
            f.sync_all()
        })
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = tmp_path(path);
        {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        // An appender open on the old file would write to the unlinked inode.
        self.appending.borrow_mut().remove(path);
        std::fs::rename(&tmp, path)?;
        sync_parent(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        create_dir_durably(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            // A name that is not UTF-8 is no file of Sluice's.
            names.extend(entry?.file_name().into_string().ok());
        }
        Ok(names)
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_at(&self, path: &Path, at: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let file = File::open(path)?;
        let mut buf = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut buf[filled..], at + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.appending.borrow_mut().remove(path);
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.appending.borrow_mut().remove(from);
        self.appending.borrow_mut().remove(to);
        std::fs::rename(from, to)?;
        sync_parent(to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }

    fn replace_unsynced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = tmp_path(path);
        std::fs::write(&tmp, bytes)?;
        self.appending.borrow_mut().remove(path);
        std::fs::rename(tmp, path)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.appending
            .borrow_mut()
            .retain(|p, _| !p.starts_with(dir));
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_dir_durably_makes_missing_parents_and_takes_an_existing_dir() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a").join("b").join("c");
        create_dir_durably(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_durably(&deep).unwrap();
        std::fs::write(root.path().join("file"), b"x").unwrap();
        assert!(create_dir_durably(&root.path().join("file").join("d")).is_err());
    }
}
