//! A loopback address that refuses connections for as long as its guard
//! lives: a TCP socket bound and never listening (a connection gets a
//! reset). A port bound and closed would refuse too, but another test's
//! listener, binding port 0 meanwhile, could be given it.

use std::net::SocketAddr;

pub struct Refusing {
    _socket: socket2::Socket,
    pub addr: SocketAddr,
}

pub fn refusing() -> Refusing {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    Refusing {
        _socket: socket,
        addr,
    }
}

/// A loopback address that takes no connection and says nothing for as
/// long as its guard lives, as a host gone from the network does: a
/// listening socket whose accept queue is full (a backlog of 0, one
/// connection made and never accepted), so Linux drops every further
/// SYN and a connect waits on its retransmissions.
pub struct Silent {
    _listener: socket2::Socket,
    _queued: std::net::TcpStream,
    pub addr: SocketAddr,
}

pub fn silent() -> Silent {
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let queued = std::net::TcpStream::connect(addr).unwrap();
    // The premise, checked: a further connect gets no answer.
    let probe = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300));
    assert!(
        probe
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
        "a connect to a full accept queue was answered: {probe:?}"
    );
    Silent {
        _listener: listener,
        _queued: queued,
        addr,
    }
}
