//! The kernel's view of a loopback TCP connection, from `/proc/net/tcp`
//! (Linux): for tests that check what a socket's owner cannot tell them
//! (its state, its timers).
#![allow(dead_code)]

use std::net::SocketAddr;

/// The fields of `/proc/net/tcp`'s row for the connection from `local` to
/// `remote` (matched by port: the tests' loopback addresses), `None` when
/// there is none. Field 3 is the state (hex; `01` ESTABLISHED), field 5
/// the timer and its ticks left (`timer:ticks`, hex).
pub fn row(local: SocketAddr, remote: SocketAddr) -> Option<Vec<String>> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).unwrap();
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (port(fields[1]) == local.port() && port(fields[2]) == remote.port())
            .then(|| fields.iter().map(|f| (*f).to_owned()).collect())
    })
}
