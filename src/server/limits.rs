//! Connection admission: a bound on connections to the broker, in total and per client IP.
//! Checked once per accepted connection (never on the data path), so one small lock shared by
//! the shards is enough. The bounds are passed in at each admission: they are dynamic broker
//! configs (`max.connections`, `max.connections.per.ip`), read from the shard's catalog; a
//! lowered bound refuses new connections and leaves open ones alone, as Kafka does.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The open connections, in total and per IP.
pub struct ConnectionLimits {
    counts: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// Held for as long as a connection lives; its drop gives the slot back.
pub struct Admission {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl ConnectionLimits {
    pub fn new() -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits {
            counts: Mutex::new((0, HashMap::new())),
        })
    }

    /// Admits a connection from `ip` within these bounds, or says which one it hit.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_total: usize,
        max_per_ip: usize,
    ) -> Result<Admission, String> {
        let mut c = self.counts.lock().expect("connection counts lock");
        if c.0 >= max_total {
            return Err(format!("max_connections ({max_total}) reached"));
        }
        let per_ip = c.1.get(&ip).copied().unwrap_or(0);
        if per_ip >= max_per_ip {
            return Err(format!(
                "max_connections_per_ip ({max_per_ip}) reached for {ip}"
            ));
        }
        c.0 += 1;
        *c.1.entry(ip).or_insert(0) += 1;
        Ok(Admission {
            limits: self.clone(),
            ip,
        })
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut c = self.limits.counts.lock().expect("connection counts lock");
        c.0 -= 1;
        if let Some(n) = c.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.1.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_release() {
        let l = ConnectionLimits::new();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = l.admit(a, 3, 2).unwrap();
        let _a2 = l.admit(a, 3, 2).unwrap();
        assert!(l.admit(a, 3, 2).err().unwrap().contains("per_ip"));
        let _b1 = l.admit(b, 3, 2).unwrap();
        assert!(l
            .admit(b, 3, 2)
            .err()
            .unwrap()
            .contains("max_connections (3)"));
        drop(a1);
        let _a3 = l.admit(a, 3, 2).unwrap();
        // A lowered bound refuses new connections; the open ones stay.
        assert!(l
            .admit(b, 2, 2)
            .err()
            .unwrap()
            .contains("max_connections (2)"));
        assert!(l.admit(b, 4, 1).err().unwrap().contains("per_ip (1)"));
    }
}
