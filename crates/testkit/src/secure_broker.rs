//! A private Kafka-protocol broker behind the security a managed Kafka has,
//! for the tests of the clients' `rocketmq` security settings.
//!
//! SASL is Tansu's own (`--authentication`): SCRAM-SHA-256/512 are checked
//! against credentials stored in the broker (created here before the
//! authenticating broker starts, on the same SQLite storage). Tansu 0.6
//! accepts the `--cert`/`--key` flags but serves plaintext regardless, so TLS
//! is terminated by a front in this process: a rustls server with the
//! [`TestPki`]'s certificate (optionally requiring a client certificate)
//! that forwards each connection to the broker. The broker advertises the
//! front's address, so every connection a client makes — bootstrap and
//! partition leaders alike — goes through TLS.

use crate::pki::TestPki;
use crate::tls_servers::{ServerProcess, free_port, fresh_dir};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A SCRAM mechanism Tansu stores credentials for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scram {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl Scram {
    /// The `rocketmq.sasl_mechanism` value.
    pub fn mechanism(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn tansu_name(self) -> &'static str {
        match self {
            Self::Sha256 => "scram256",
            Self::Sha512 => "scram512",
        }
    }
}

/// What the broker demands of its clients.
#[derive(Debug, Default)]
pub struct Security<'a> {
    /// Terminate TLS with this PKI's server certificate (`localhost`).
    pub tls: Option<&'a TestPki>,
    /// With `tls`: require a client certificate signed by the PKI's CA.
    pub require_client_cert: bool,
    /// Require SASL; these SCRAM users exist (`(user, password, mechanism)`).
    pub sasl_users: Option<Vec<(&'a str, &'a str, Scram)>>,
}

/// The running broker (and its TLS front); stopped on drop.
#[derive(Debug)]
pub struct SecureBroker {
    /// `localhost:PORT` with TLS (the front; a host name, so the
    /// certificate's name is verified), else `127.0.0.1:PORT`: the address
    /// clients bootstrap from.
    pub bootstrap: String,
    front: Option<TlsFront>,
    broker: ServerProcess,
}

impl SecureBroker {
    /// Starts the broker as `security` describes.
    ///
    /// # Panics
    /// When the broker ([`crate::tansu_binary`]) is unavailable, a user cannot be
    /// created or a port does not listen: the test cannot run.
    pub async fn start(security: Security<'_>) -> Self {
        let tansu = crate::tansu_binary();
        let dir = fresh_dir("hyapp-secure-broker-");
        let broker_port = free_port();
        let front_port = if security.tls.is_some() {
            free_port()
        } else {
            broker_port
        };
        if let Some(users) = &security.sasl_users {
            create_users(&tansu, &dir, users).await;
        }
        // With TLS the name `localhost` is what the certificate is checked
        // against; without, the address itself (Tansu listens on IPv4 only,
        // and `localhost` may resolve to ::1 first).
        let host = if security.tls.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        let advertised = format!("tcp://{host}:{front_port}");
        let mut command = tansu_broker(&tansu, &dir, broker_port, &advertised);
        if security.sasl_users.is_some() {
            command.arg("--authentication");
        }
        let broker = ServerProcess::start(command, "tansu", dir, broker_port).await;
        let front = security
            .tls
            .map(|pki| TlsFront::start(pki, security.require_client_cert, front_port, broker_port));
        Self {
            bootstrap: format!("{host}:{front_port}"),
            front,
            broker,
        }
    }

    /// Where the broker logs (for a failing test's message).
    pub fn log(&self) -> PathBuf {
        self.broker.log()
    }
}

impl Drop for SecureBroker {
    fn drop(&mut self) {
        if let Some(front) = self.front.take() {
            front.stop();
        }
    }
}

/// `tansu broker` on `port` with SQLite storage in `dir` (shared with the
/// user creation that runs before it), advertising `advertised`.
fn tansu_broker(tansu: &str, dir: &Path, port: u16, advertised: &str) -> Command {
    let mut command = Command::new(tansu);
    command
        .args(["broker", "--listener-url"])
        .arg(format!("tcp://127.0.0.1:{port}"))
        .args(["--advertised-listener-url", advertised])
        // Tansu resolves a `sqlite://` path against its working directory.
        .args(["--storage-engine", "sqlite://broker.db"])
        .current_dir(dir);
    command
}

/// Stores the SCRAM credentials: a broker without authentication runs on
/// the same storage just long enough for `tansu user create`, because an
/// authenticating broker refuses the unauthenticated request that would
/// create the first user.
async fn create_users(tansu: &str, dir: &Path, users: &[(&str, &str, Scram)]) {
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let setup_dir = dir.join("setup");
    std::fs::create_dir_all(&setup_dir).expect("create setup log dir");
    let command = tansu_broker(tansu, dir, port, &url);
    let setup = ServerProcess::start(command, "tansu (user setup)", setup_dir, port).await;
    for (user, password, scram) in users {
        let output = Command::new(tansu)
            .args(["user", "create", "--broker", &url, "--mechanism"])
            .arg(scram.tansu_name())
            .args([user, password])
            .output()
            .expect("run tansu user create");
        assert!(
            output.status.success(),
            "tansu user create {user}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    drop(setup);
}

/// The TLS-terminating front: its own thread and runtime, so it keeps
/// serving while a test blocks its own thread on a synchronous client call.
#[derive(Debug)]
struct TlsFront {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    fn start(pki: &TestPki, require_client_cert: bool, port: u16, broker_port: u16) -> Self {
        let acceptor = TlsAcceptor::from(Arc::new(server_config(pki, require_client_cert)));
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind TLS front");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("TLS front runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                tokio::select! {
                    () = accept_loop(listener, acceptor, broker_port) => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, broker_port: u16) {
    while let Ok((client, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            // A failed handshake (wrong CA, missing client certificate) just
            // closes the connection, as a real broker's TLS listener does.
            let Ok(mut tls) = acceptor.accept(client).await else {
                return;
            };
            let Ok(mut broker) = TcpStream::connect(("127.0.0.1", broker_port)).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
        });
    }
}

fn server_config(pki: &TestPki, require_client_cert: bool) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = if require_client_cert {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(&pki.ca).expect("read CA") {
            roots.add(certificate.expect("CA PEM")).expect("add CA");
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let chain = CertificateDer::pem_file_iter(&pki.server_cert)
        .expect("read server certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("server certificate PEM");
    let key = PrivateKeyDer::from_pem_file(&pki.server_key).expect("server key PEM");
    builder
        .with_single_cert(chain, key)
        .expect("server certificate and key")
}
