//! Optional TLS on the admin listener (`admin_tls`): the console and
//! `/admin/*` carry tokens and session cookies, which must not cross a
//! network in clear text once the listener is reachable beyond loopback.
//!
//! The section has the shape of every server TLS section
//! (`service_kit::grpc_tls::ServerTls`: `cert_file`, `key_file`, optional
//! `client_ca_file` for mutual TLS), loaded here into rustls. Handshakes run
//! in their own tasks with a deadline, so a slow or silent client never
//! holds up the accept loop; the finished streams reach axum through a
//! bounded channel.

use crate::Error;
use axum::serve::{Listener, ListenerExt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use service_kit::grpc_tls::ServerTls;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::sync::CancellationToken;

/// A handshake not finished by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum; more wait in their own tasks.
const READY_QUEUE: usize = 64;

/// The rustls config of `admin_tls`, or None when it is off; refuses half a
/// section and unreadable or unusable files, naming the key.
pub fn load(tls: &ServerTls) -> Result<Option<Arc<rustls::ServerConfig>>, Error> {
    let refuse = |message: String| Error::Config(format!("admin_tls.{message}"));
    if !tls.is_enabled() {
        if !tls.key_file.is_empty() || !tls.client_ca_file.is_empty() {
            return Err(refuse(
                "cert_file is required when admin_tls.key_file or admin_tls.client_ca_file is set"
                    .into(),
            ));
        }
        return Ok(None);
    }
    if tls.key_file.is_empty() {
        return Err(refuse(
            "key_file is required with admin_tls.cert_file".into(),
        ));
    }
    let chain = CertificateDer::pem_file_iter(&tls.cert_file)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| refuse(format!("cert_file `{}`: {error}", tls.cert_file)))?;
    if chain.is_empty() {
        return Err(refuse(format!(
            "cert_file `{}` holds no certificate",
            tls.cert_file
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(|error| refuse(format!("key_file `{}`: {error}", tls.key_file)))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| refuse(format!("cert_file: {error}")))?;
    let builder = if tls.client_ca_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(&tls.client_ca_file)
            .map_err(|error| refuse(format!("client_ca_file `{}`: {error}", tls.client_ca_file)))?
        {
            let certificate = certificate.map_err(|error| {
                refuse(format!("client_ca_file `{}`: {error}", tls.client_ca_file))
            })?;
            roots.add(certificate).map_err(|error| {
                refuse(format!("client_ca_file `{}`: {error}", tls.client_ca_file))
            })?;
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| {
                    refuse(format!("client_ca_file `{}`: {error}", tls.client_ca_file))
                })?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|error| refuse(format!("cert_file and key_file do not fit: {error}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// Serves `router` on `listener` — over TLS with `tls` — until `shutdown`,
/// with each request's client address available to the throttle
/// (`ConnectInfo<SocketAddr>`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: axum::Router,
    shutdown: CancellationToken,
) {
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let stop = async move { shutdown.cancelled().await };
    let result = match tls {
        None => {
            axum::serve(listener, service)
                .with_graceful_shutdown(stop)
                .await
        }
        Some(config) => match TlsListener::new(listener, config) {
            // A no-op tap: it gives the TLS listener axum's connect-info support.
            Ok(listener) => {
                axum::serve(listener.tap_io(|_| {}), service)
                    .with_graceful_shutdown(stop)
                    .await
            }
            Err(error) => Err(error),
        },
    };
    if let Err(error) = result {
        tracing::error!(%error, "admin http server failed");
    }
}

/// A TCP listener whose connections are TLS streams once their handshake
/// succeeded.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` in a task of its own until the returned
    /// listener is dropped.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY_QUEUE);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), sender));
        Ok(Self { ready, local })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let accepted = tokio::select! {
            _ = ready.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // Out of descriptors and the like: pause instead of spinning.
                tracing::warn!(%error, "admin listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%error, %peer, "admin TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "admin TLS handshake timed out"),
            }
        });
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop only ends when this receiver is gone, so this
            // never resolves; axum's shutdown stops waiting on it.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
