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
