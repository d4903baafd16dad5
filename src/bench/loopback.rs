//! The kernel's own price of moving a byte through a broker on this machine, for `sluice probe`:
//! what a thread pays (user + system CPU, its own, from RUSAGE_THREAD) for the least work a
//! produce or a fetch needs over a loopback TCP connection, with no broker in the way.
//!
//! Why measure it and not just memcpy: on loopback the sender also runs the receiver's TCP
//! processing (softirq in its own context), and a write into the page cache costs the file
//! system's bookkeeping and writeback besides the copy. A broker's CPU per GiB is then a
//! multiple of what the kernel path itself costs, which a bare memcpy understates.
//! - fetch floor: sendfile(2) of a file already in the page cache, 1 MiB per call;
//! - produce floor: recv(2) into a buffer, one CRC32C pass, pwrite(2) into a file, fdatasync
//!   every 4 MiB; through the page cache (as segments are written now), and with O_DIRECT
//!   (what a DMA write path would pay).

use std::fs::File;
use std::io::{self, Read, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

const GIB: f64 = (1u64 << 30) as f64;
/// Bytes per sendfile, recv and send call.
const CALL_BYTES: usize = 1 << 20;
/// Bytes written between fdatasyncs on the produce floor.
const SYNC_EVERY_BYTES: u64 = 4 << 20;

/// CPU seconds (user + system) this thread has used so far.
pub(super) fn thread_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we own; RUSAGE_THREAD names the calling thread.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let status = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(status, 0, "getrusage(RUSAGE_THREAD) cannot fail on Linux");
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A connected loopback pair: (the accepted end, the dialing end).
fn pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let dialer = TcpStream::connect(listener.local_addr()?)?;
    let (accepted, _) = listener.accept()?;
    Ok((accepted, dialer))
}

/// Sender CPU seconds per GiB of sendfile from a cached `file_bytes` file in `dir`, sent
/// `passes` times to a reader thread on the other end of a loopback connection.
pub fn sendfile_s_per_gib(dir: &Path, file_bytes: usize, passes: usize) -> io::Result<f64> {
    assert!(
        file_bytes >= CALL_BYTES && passes > 0,
        "at least one call's worth"
    );
    let path = dir.join(format!(".sluice-probe-sendfile-{}", std::process::id()));
    let result = (|| {
        let file = File::create(&path)?;
        let block: Vec<u8> = (0..CALL_BYTES).map(|i| (i * 13) as u8).collect();
        for i in 0..file_bytes / CALL_BYTES {
            file.write_all_at(&block, (i * CALL_BYTES) as u64)?;
        }
        let sent_bytes = (file_bytes / CALL_BYTES * CALL_BYTES) as u64;
        let file = File::open(&path)?;
        io::copy(&mut (&file), &mut io::sink())?; // into the page cache before timing
        let (mut socket, mut reader) = pair()?;
        let drain = std::thread::spawn(move || drain(&mut reader));
        let started_s = thread_cpu_s();
        for _ in 0..passes {
            send_file(&socket, &file, sent_bytes)?;
        }
        let cpu_s = thread_cpu_s() - started_s;
        socket.flush()?;
        drop(socket);
        let received = drain.join().expect("the reader thread does not panic")?;
        assert_eq!(
            received,
            sent_bytes * passes as u64,
            "every byte sent arrives"
        );
        Ok(cpu_s / (received as f64 / GIB))
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// Reads `socket` to its end, 1 MiB per call, as a consumer does; the bytes read.
fn drain(socket: &mut TcpStream) -> io::Result<u64> {
    let mut buffer = vec![0u8; CALL_BYTES];
    let mut total = 0;
    loop {
        match socket.read(&mut buffer)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

/// sendfile(2)s `bytes` of `file` from its start to `socket` (blocking).
fn send_file(socket: &TcpStream, file: &File, bytes: u64) -> io::Result<()> {
    let mut offset: libc::off_t = 0;
    while (offset as u64) < bytes {
        let want = CALL_BYTES.min((bytes - offset as u64) as usize);
        // SAFETY: both descriptors are open for the call; the kernel moves `offset` on.
        let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, want) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// How the produce floor writes: through the page cache, as the broker's segments are written
/// today, or with O_DIRECT from an aligned buffer (the DMA write path, for comparison).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Buffered,
    Direct,
}

/// Receiver CPU seconds per GiB of taking `bytes` (whole MiBs) from a loopback connection,
/// checksumming them and writing them durably, 1 MiB per write, into a new file in `dir`.
pub fn ingest_s_per_gib(dir: &Path, bytes: u64, write: Write) -> io::Result<f64> {
    assert!(
        bytes >= CALL_BYTES as u64 && bytes.is_multiple_of(CALL_BYTES as u64),
        "whole calls only, so that every O_DIRECT write is aligned"
    );
    let path = dir.join(format!(".sluice-probe-ingest-{}", std::process::id()));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        if write == Write::Direct {
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_DIRECT);
        }
        let file = options.open(&path)?;
        let (mut socket, writer) = pair()?;
        let feed = std::thread::spawn(move || feed(writer, bytes));
        let mut buffer = AlignedBuffer::new(CALL_BYTES);
        let (mut at, mut crc) = (0u64, 0u32);
        let started_s = thread_cpu_s();
        while at < bytes {
            socket.read_exact(buffer.bytes())?;
            crc ^= crc32c::crc32c(buffer.bytes());
            file.write_all_at(buffer.bytes(), at)?;
            at += CALL_BYTES as u64;
            if at.is_multiple_of(SYNC_EVERY_BYTES) || at == bytes {
                file.sync_data()?;
            }
        }
        let cpu_s = thread_cpu_s() - started_s;
        std::hint::black_box(crc);
        feed.join().expect("the feeding thread does not panic")?;
        Ok(cpu_s / (at as f64 / GIB))
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// Sends `bytes` (whole calls) on `socket`.
fn feed(mut socket: TcpStream, bytes: u64) -> io::Result<()> {
    let block: Vec<u8> = (0..CALL_BYTES).map(|i| (i * 7) as u8).collect();
    for _ in 0..bytes / CALL_BYTES as u64 {
        socket.write_all(&block)?;
    }
    Ok(())
}

/// A zeroed buffer aligned to 4 KiB, as O_DIRECT needs.
struct AlignedBuffer {
    pointer: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuffer {
    fn new(bytes: usize) -> AlignedBuffer {
        let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("a valid layout");
        assert!(bytes > 0, "a non-empty buffer");
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        let pointer = std::ptr::NonNull::new(pointer)
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuffer { pointer, layout }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is ours, initialized (zeroed) and `layout.size()` long.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.pointer.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_measured_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let fetch = sendfile_s_per_gib(dir.path(), 4 << 20, 2).unwrap();
        assert!(fetch >= 0.0 && fetch.is_finite(), "{fetch}");
        for write in [Write::Buffered, Write::Direct] {
            let produce = ingest_s_per_gib(dir.path(), 8 << 20, write).unwrap();
            assert!(
                produce >= 0.0 && produce.is_finite(),
                "{write:?}: {produce}"
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
