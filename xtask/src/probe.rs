//! Std-only HTTP probes of the local services' admin ports: the readiness
//! checks of `up`, `demo` and `chaos`, and the fakes' admin calls.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Status code of `GET http://127.0.0.1:{port}{path}`, std-only.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    http_request(port, "GET", path, None)
}

/// Status code of `METHOD http://127.0.0.1:{port}{path}` with an optional JSON body, std-only.
pub fn http_request(port: u16, method: &str, path: &str, json: Option<&str>) -> Option<u16> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let body = json.unwrap_or("");
    let content_type = if json.is_some() {
        "Content-Type: application/json\r\n"
    } else {
        ""
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{content_type}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut head = [0u8; 32];
    let read = stream.read(&mut head).ok()?;
    let line = String::from_utf8_lossy(&head[..read]);
    line.split_whitespace().nth(1)?.parse().ok()
}
