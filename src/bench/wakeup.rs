//! What waking a sleeping thread costs on this machine: two threads pass a token back and forth
//! over a pair of eventfds, each blocking in `read` until the other writes, so every pass is
//! one wake-up of a sleeping thread. Measured with the threads on two cores (what a hop
//! between two idle shards, or an io_uring worker's completion on another core, pays) and on
//! one core (a plain context switch). In a virtual machine the first includes waking an idle
//! virtual CPU, which can cost ten times the second; a broker's CPU per request at moderate
//! load is then mostly made of these.

use super::loopback::thread_cpu_s;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// One placement's figures, per wake-up (half a round trip).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct WakeupCost {
    pub wall_us: f64,
    /// CPU of both threads per wake-up.
    pub cpu_us: f64,
}

/// Round trips per measurement: enough for a stable mean, a fraction of a second here.
const ROUND_TRIPS: u32 = 20_000;

/// The cost across two cores (None on a machine of one) and within one.
pub fn measure() -> std::io::Result<(Option<WakeupCost>, WakeupCost)> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let first = cores.first().copied();
    let across = match cores.get(1) {
        Some(&second) => Some(ping_pong(first, Some(second))?),
        None => None,
    };
    Ok((across, ping_pong(first, first)?))
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wakes the thread blocked reading `fd`.
fn signal(fd: &OwnedFd) -> std::io::Result<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an 8-byte buffer, as eventfd requires, alive across the call.
    match unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) } {
        8 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Sleeps until `fd` is signalled.
fn wait(fd: &OwnedFd) -> std::io::Result<()> {
    let mut got = [0u8; 8];
    // SAFETY: an 8-byte buffer, as eventfd requires, alive across the call.
    match unsafe { libc::read(fd.as_raw_fd(), got.as_mut_ptr().cast(), 8) } {
        8 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn ping_pong(
    here: Option<core_affinity::CoreId>,
    there: Option<core_affinity::CoreId>,
) -> std::io::Result<WakeupCost> {
    let (ping, pong) = (eventfd()?, eventfd()?);
    // Both ends run in threads of their own, so that the caller's affinity stays as it was.
    let (wall_s, cpu_s) = std::thread::scope(|scope| -> std::io::Result<(f64, f64)> {
        let peer = scope.spawn(|| -> std::io::Result<f64> {
            there.map(core_affinity::set_for_current);
            let start_s = thread_cpu_s();
            for _ in 0..ROUND_TRIPS {
                wait(&ping)?;
                signal(&pong)?;
            }
            Ok(thread_cpu_s() - start_s)
        });
        let pinger = scope.spawn(|| -> std::io::Result<(f64, f64)> {
            here.map(core_affinity::set_for_current);
            let (started, start_s) = (Instant::now(), thread_cpu_s());
            for _ in 0..ROUND_TRIPS {
                signal(&ping)?;
                wait(&pong)?;
            }
            Ok((started.elapsed().as_secs_f64(), thread_cpu_s() - start_s))
        });
        let (wall_s, mine_s) = pinger
            .join()
            .expect("the ping-pong pinger does not panic")?;
        let peer_s = peer.join().expect("the ping-pong peer does not panic")?;
        Ok((wall_s, mine_s + peer_s))
    })?;
    let wakeups = f64::from(2 * ROUND_TRIPS);
    Ok(WakeupCost {
        wall_us: wall_s * 1e6 / wakeups,
        cpu_us: cpu_s * 1e6 / wakeups,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_wakeup_is_measured() {
        let (across, same) = super::measure().unwrap();
        let costs = across.into_iter().chain([same]);
        for c in costs {
            // A wake-up takes some time and some CPU, and the CPU of two threads that each
            // sleep while the other runs cannot exceed twice the wall time.
            assert!(c.wall_us > 0.0 && c.cpu_us > 0.0, "{c:?}");
            assert!(c.cpu_us <= 2.0 * c.wall_us + 1.0, "{c:?}");
        }
    }
}
