//! A TCP forwarder of the reliability run, standing between the services
//! and a backend (MariaDB, Redis, the broker, the fake wallet, the fake
//! Tencent IM). It gives the run two things a direct connection cannot:
//!
//! - **One stable address** ([`Proxy::set_upstream`]): the services keep
//!   the proxy's port while the harness moves it to another server, as a
//!   VIP or a DNS switch does in production after a MySQL failover.
//!   Connections to the old upstream are cut when it moves, so no client
//!   keeps talking to a demoted server.
//! - **Network faults** ([`Proxy::set_fault`]): added latency, stalls (the
//!   connection stays open and no byte moves), resets (connections cut
//!   mid-stream, new ones closed at once) and half-open connections (the
//!   server side is gone, the client side stays open and hears nothing).
//!
//! Std threads only (xtask has no dependencies): one thread accepts, two
//! pump each connection, one per direction. A reset is an abrupt close of
//! both sockets, not a TCP RST: stable std cannot set `SO_LINGER` to zero.
//! The client sees its connection end mid-protocol and its next write
//! refused, which it must handle the same way.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward at once.
    None,
    /// Hold every chunk this long before forwarding it (each direction).
    Latency(Duration),
    /// Forward nothing until the fault ends; connections stay open.
    Stall,
    /// Cut every connection now; accept new ones and close them at once.
    Reset,
    /// Close the server side of every connection; the client side stays
    /// open, its bytes are swallowed and nothing comes back. New
    /// connections are accepted and never answered. When the fault ends the
    /// client sides are closed too (as when a keepalive finally fails).
    HalfOpen,
}

/// A running forwarder; dropping it stops accepting and cuts every connection.
#[derive(Debug)]
pub struct Proxy {
    /// The loopback port clients connect to.
    pub port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: Mutex<SocketAddr>,
    fault: Mutex<Fault>,
    connections: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
}

/// One forwarded connection: both sockets, so the harness can cut them.
#[derive(Debug)]
struct Connection {
    client: TcpStream,
    server: Option<TcpStream>,
    /// Set when the server side was closed under [`Fault::HalfOpen`].
    half_open: AtomicBool,
    /// Set once both sides were closed.
    cut: AtomicBool,
}

impl Connection {
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(server) = &self.server {
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("proxy: cannot listen: {error}"))?;
        let port = listener
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            fault: Mutex::new(Fault::None),
            connections: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(&listener, &accepting))
            .map_err(|error| format!("proxy: cannot start its thread: {error}"))?;
        Ok(Self { port, shared })
    }

    /// A proxy to `127.0.0.1:port`.
    pub fn to_local(port: u16) -> Result<Self, String> {
        Self::start(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Where new connections go from now on; every connection to the old
    /// upstream is cut.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *lock(&self.shared.upstream) = upstream;
        self.cut_all();
    }

    /// The current upstream.
    #[cfg(test)]
    pub fn upstream(&self) -> SocketAddr {
        *lock(&self.shared.upstream)
    }

    /// Applies `fault` to the connections open now and to new ones.
    pub fn set_fault(&self, fault: Fault) {
        let before = std::mem::replace(&mut *lock(&self.shared.fault), fault);
        match fault {
            Fault::Reset => self.cut_all(),
            Fault::HalfOpen => {
                for connection in lock(&self.shared.connections).values() {
                    connection.half_open.store(true, Ordering::SeqCst);
                    if let Some(server) = &connection.server {
                        let _ = server.shutdown(Shutdown::Both);
                    }
                }
            }
            Fault::None | Fault::Latency(_) | Fault::Stall => {}
        }
        if before == Fault::HalfOpen && fault != Fault::HalfOpen {
            let connections = lock(&self.shared.connections);
            for connection in connections.values() {
                if connection.half_open.load(Ordering::SeqCst) {
                    connection.cut();
                }
            }
        }
    }

    fn cut_all(&self) {
        for connection in lock(&self.shared.connections).values() {
            connection.cut();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wakes the accept loop so it sees `closed` and lets the port go.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_millis(200),
        );
    }
}

fn current_fault(shared: &Shared) -> Fault {
    *lock(&shared.fault)
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let _ = client.set_nodelay(true);
        let shared = Arc::clone(shared);
        // Connecting upstream may take a moment: not on the accept thread.
        let _ = std::thread::Builder::new()
            .name("proxy-connection".into())
            .spawn(move || open(client, &shared));
    }
}

/// Connects `client` to the upstream as the current fault allows, then
/// pumps both directions until either side ends.
fn open(client: TcpStream, shared: &Arc<Shared>) {
    let server = match current_fault(shared) {
        Fault::Reset => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Fault::HalfOpen => None,
        Fault::None | Fault::Latency(_) | Fault::Stall => {
            let upstream = *lock(&shared.upstream);
            match TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) {
                Ok(server) => {
                    let _ = server.set_nodelay(true);
                    Some(server)
                }
                // The upstream is down: the client sees its connection end,
                // as it would see a refused one.
                Err(_) => {
                    let _ = client.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let Ok(client_reader) = client.try_clone() else {
        return;
    };
    let server_reader = match server.as_ref().map(TcpStream::try_clone) {
        Some(Ok(reader)) => Some(reader),
        Some(Err(_)) => return,
        None => None,
    };
    let connection = Arc::new(Connection {
        half_open: AtomicBool::new(server.is_none()),
        cut: AtomicBool::new(false),
        client,
        server,
    });
    lock(&shared.connections).insert(id, Arc::clone(&connection));
    let upward = {
        let (shared, connection) = (Arc::clone(shared), Arc::clone(&connection));
        std::thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || pump(client_reader, &connection, Direction::Up, &shared))
    };
    if let Some(server_reader) = server_reader {
        pump(server_reader, &connection, Direction::Down, shared);
    }
    if let Ok(upward) = upward {
        let _ = upward.join();
    }
    lock(&shared.connections).remove(&id);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Forwards what `from` reads in `direction` until it ends, applying the
/// fault in force at each chunk.
fn pump(mut from: TcpStream, connection: &Connection, direction: Direction, shared: &Shared) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if !hold(connection, shared) {
            break;
        }
        if connection.half_open.load(Ordering::SeqCst) {
            // Swallowed: the client writes into a connection nobody reads.
            continue;
        }
        let to = match direction {
            Direction::Up => connection.server.as_ref(),
            Direction::Down => Some(&connection.client),
        };
        let written = to.map(|mut to| to.write_all(&buffer[..read]));
        if !matches!(written, Some(Ok(()))) {
            break;
        }
    }
    // Half-open: the client side stays open until the fault ends.
    if !connection.half_open.load(Ordering::SeqCst) {
        connection.cut();
    }
}

/// Waits as the current fault says before a chunk is forwarded; false when
/// the connection was cut meanwhile.
fn hold(connection: &Connection, shared: &Shared) -> bool {
    loop {
        if shared.closed.load(Ordering::SeqCst) {
            return false;
        }
        match current_fault(shared) {
            Fault::None | Fault::HalfOpen | Fault::Reset => return true,
            Fault::Latency(delay) => {
                std::thread::sleep(delay);
                return true;
            }
            // Polled: the harness ends the stall by setting another fault.
            Fault::Stall => std::thread::sleep(Duration::from_millis(20)),
        }
        if connection.cut.load(Ordering::SeqCst) {
            return false;
        }
    }
}

#[cfg(test)]
mod tests;
