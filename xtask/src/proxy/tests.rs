//! The forwarder against a loopback echo server: bytes pass both ways, a
//! moved upstream cuts the old connections, and each fault does what it says.

use super::*;
use std::sync::mpsc::{Receiver, channel};

/// An echo server answering `tag` + what it read; sends on the channel
/// when a connection of it ends.
fn echo(tag: u8) -> (SocketAddr, Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended, ends) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let ended = ended.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 64];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    let mut reply = vec![tag];
                    reply.extend_from_slice(&buffer[..read]);
                    if stream.write_all(&reply).is_err() {
                        break;
                    }
                }
                let _ = ended.send(());
            });
        }
    });
    (addr, ends)
}

fn connect(proxy: &Proxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

fn ask(stream: &mut TcpStream, byte: u8) -> Vec<u8> {
    stream.write_all(&[byte]).unwrap();
    let mut reply = [0u8; 2];
    stream.read_exact(&mut reply).unwrap();
    reply.to_vec()
}

/// True when the stream ends (EOF or an error other than a timeout).
fn ended(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Nothing arrives within a short read window (the connection is open).
fn silent(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    let quiet = matches!(
        stream.read(&mut byte),
        Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    quiet
}

#[test]
fn bytes_pass_both_ways_and_a_moved_upstream_cuts_the_old_connections() {
    let (first, _) = echo(b'a');
    let (second, _) = echo(b'b');
    let proxy = Proxy::start(first).unwrap();
    let mut old = connect(&proxy);
    assert_eq!(ask(&mut old, b'x'), b"ax");
    proxy.set_upstream(second);
    assert_eq!(proxy.upstream(), second);
    assert!(
        ended(&mut old),
        "a connection to the old upstream must be cut"
    );
    let mut new = connect(&proxy);
    assert_eq!(ask(&mut new, b'y'), b"by");
}

#[test]
fn a_stall_holds_bytes_until_it_ends_and_loses_none() {
    let (upstream, _) = echo(b'a');
    let proxy = Proxy::start(upstream).unwrap();
    let mut stream = connect(&proxy);
    assert_eq!(ask(&mut stream, b'1'), b"a1");
    proxy.set_fault(Fault::Stall);
    stream.write_all(b"2").unwrap();
    assert!(silent(&mut stream), "nothing may pass during a stall");
    proxy.set_fault(Fault::None);
    let mut reply = [0u8; 2];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"a2");
}

#[test]
fn a_reset_cuts_open_connections_and_refuses_new_ones_until_it_ends() {
    let (upstream, _) = echo(b'a');
    let proxy = Proxy::start(upstream).unwrap();
    let mut open = connect(&proxy);
    assert_eq!(ask(&mut open, b'1'), b"a1");
    proxy.set_fault(Fault::Reset);
    assert!(ended(&mut open));
    let mut during = connect(&proxy);
    assert!(ended(&mut during), "a new connection is closed at once");
    proxy.set_fault(Fault::None);
    let mut after = connect(&proxy);
    assert_eq!(ask(&mut after, b'2'), b"a2");
}

#[test]
fn half_open_closes_the_server_side_and_leaves_the_client_hanging() {
    let (upstream, server_ends) = echo(b'a');
    let proxy = Proxy::start(upstream).unwrap();
    let mut stream = connect(&proxy);
    assert_eq!(ask(&mut stream, b'1'), b"a1");
    proxy.set_fault(Fault::HalfOpen);
    server_ends
        .recv_timeout(Duration::from_secs(10))
        .expect("the server side is closed");
    // The client's writes still succeed, and nothing comes back.
    stream.write_all(b"2").unwrap();
    assert!(silent(&mut stream));
    let mut new = connect(&proxy);
    new.write_all(b"3").unwrap();
    assert!(silent(&mut new), "a new connection is never answered");
    proxy.set_fault(Fault::None);
    assert!(
        ended(&mut stream),
        "the client side closes when the fault ends"
    );
    assert!(ended(&mut new));
    let mut after = connect(&proxy);
    assert_eq!(ask(&mut after, b'4'), b"a4");
}

#[test]
fn latency_delays_but_delivers_and_a_dead_upstream_ends_the_connection() {
    let (upstream, _) = echo(b'a');
    let proxy = Proxy::start(upstream).unwrap();
    proxy.set_fault(Fault::Latency(Duration::from_millis(5)));
    let mut stream = connect(&proxy);
    assert_eq!(ask(&mut stream, b'1'), b"a1");
    // Nothing listens on a port just released.
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    proxy.set_upstream(gone);
    let mut refused = connect(&proxy);
    assert!(ended(&mut refused));
}
