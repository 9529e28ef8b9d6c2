//! Stalled peers for the client-timeout tests (docs/design.md#client-timeouts):
//! a listener that accepts connections and never answers, and a TCP proxy in
//! front of a real server that can stop forwarding mid-stream and resume.
//! A client under test must turn either into an error; the tests' own
//! deadline is only the failure mode, never the assertion.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The test MariaDB's `host:port`, for a proxy in front of it.
///
/// # Panics
/// When [`crate::mysql_server_url`] names no `host:port`.
pub fn mysql_server_address() -> SocketAddr {
    let url = crate::mysql_server_url();
    let authority = url
        .trim_start_matches("mysql://")
        .rsplit('@')
        .next()
        .expect("authority")
        .split('/')
        .next()
        .expect("host:port")
        .replace("localhost", "127.0.0.1");
    authority.parse().expect("the test MariaDB's address")
}

/// The URL of database `name` on the test MariaDB reached through
/// `address` (a proxy), with the test server's user.
pub fn mysql_url_via(address: SocketAddr, name: &str) -> String {
    let server = crate::mysql_server_url();
    let user = server
        .trim_start_matches("mysql://")
        .split('@')
        .next()
        .expect("user");
    format!("mysql://{user}@{address}/{name}")
}

/// A pool to database `name` of the test MariaDB through `proxy`, each unit
/// of work (and each wait for a connection) given `limit`: what a stall test
/// hands the code under test.
///
/// # Panics
/// When the pool cannot connect through the proxy.
pub async fn bounded_pool_via(
    proxy: &StallingProxy,
    name: &str,
    limit: std::time::Duration,
) -> service_kit::db::statement::BoundedPool {
    let limit = service_kit::duration::ConfigDuration::from_millis(
        i64::try_from(limit.as_millis()).expect("a test's limit fits in i64"),
    );
    let config = service_kit::db::MysqlConfig {
        url: mysql_url_via(proxy.address(), name),
        acquire_timeout: limit,
        statement_timeout: limit,
        ssl_mode: service_kit::db::MysqlSslMode::Disabled,
        ..service_kit::db::MysqlConfig::default()
    };
    config
        .connect_bounded()
        .await
        .expect("connect through the proxy")
}

/// Accepts every connection, reads and discards what the client sends (so
/// its writes never block) and never writes a byte: a peer whose process is
/// stuck, or a half-open connection as the client sees it.
#[derive(Debug)]
pub struct SilentListener {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SilentListener {
    /// Listens on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound: the test cannot run.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut sink = [0u8; 4096];
                    while matches!(socket.read(&mut sink).await, Ok(read) if read > 0) {}
                });
            }
        });
        Self {
            address,
            accepted,
            task,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:<port>`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Connections accepted so far (a test checks the client really came).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP proxy to `target`. While stalled it keeps every connection open
/// and reads what either side sends, but forwards nothing: what a network
/// partition or a frozen middlebox looks like. Held bytes are forwarded once
/// resumed, as a network that recovers would deliver them late. It counts
/// the connections its clients closed, so a test sees a client give up on
/// a stalled connection (a keepalive that went unanswered).
#[derive(Debug)]
pub struct StallingProxy {
    address: SocketAddr,
    stalled: watch::Sender<bool>,
    closed_by_client: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl StallingProxy {
    /// Starts forwarding to `target` from a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound: the test cannot run.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let (stalled, _) = watch::channel(false);
        let closed_by_client = Arc::new(AtomicUsize::new(0));
        let watcher = stalled.clone();
        let closed = closed_by_client.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let upstream = pump(client_read, server_write, watcher.subscribe());
                let closed = closed.clone();
                tokio::spawn(async move {
                    upstream.await;
                    closed.fetch_add(1, Ordering::SeqCst);
                });
                tokio::spawn(pump(server_read, client_write, watcher.subscribe()));
            }
        });
        Self {
            address,
            stalled,
            closed_by_client,
            task,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:<port>`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops forwarding, in both directions, on every connection.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, held bytes first.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Connections whose client closed its side (seen even while stalled).
    pub fn closed_by_client(&self) -> usize {
        self.closed_by_client.load(Ordering::SeqCst)
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding what it reads while stalled (and still
/// reading, so the end of `from` is seen during a stall). Returns when
/// `from` ends, after handing on what was held once the stall is over.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut held: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut writable = true;
    loop {
        tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(read) => held.extend_from_slice(&buffer[..read]),
            },
            changed = stalled.changed(), if !held.is_empty() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if !*stalled.borrow_and_update() && !held.is_empty() && writable {
            writable = to.write_all(&held).await.is_ok();
            held.clear();
        }
    }
    tokio::spawn(async move {
        if !held.is_empty() && writable && stalled.wait_for(|stalled| !*stalled).await.is_ok() {
            let _ = to.write_all(&held).await;
        }
        let _ = to.shutdown().await;
    });
}
