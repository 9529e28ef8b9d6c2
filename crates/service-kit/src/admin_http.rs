//! The admin HTTP surface every service exposes on its own port:
//! `/healthz` (process alive), `/readyz` (ready for traffic; false while
//! starting or draining) and `/metrics` (Prometheus text format).

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::registry::Registry;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Readiness shared between the service and its probes.
#[derive(Debug, Default)]
pub struct Readiness {
    ready: AtomicBool,
}

impl Readiness {
    /// Marks the service ready for traffic.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Marks the service draining: `/readyz` fails so load balancers stop routing.
    pub fn set_draining(&self) {
        self.ready.store(false, Ordering::SeqCst);
    }

    /// Current readiness.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AdminState {
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
}

/// The probe and metrics routes; services may merge their own admin routes in.
pub fn router(readiness: Arc<Readiness>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState {
            readiness,
            registry,
        })
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// Binds `addr` (port 0 picks a free one) and returns the listener, so callers
/// learn the real address before serving.
pub async fn bind(addr: &str) -> Result<TcpListener, crate::Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| crate::Error::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serves `router` on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, router: Router, shutdown: CancellationToken) {
    let result = axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "admin http server failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn probes_follow_readiness() {
        let readiness = Arc::new(Readiness::default());
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            router(readiness.clone(), Arc::new(Registry::default())),
            token.clone(),
        ));
        let status = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response.split_whitespace().nth(1).unwrap().to_string()
        };
        assert_eq!(status("/healthz").await, "200");
        assert_eq!(status("/readyz").await, "503");
        readiness.set_ready();
        assert_eq!(status("/readyz").await, "200");
        assert_eq!(status("/metrics").await, "200");
        readiness.set_draining();
        assert_eq!(status("/readyz").await, "503");
        token.cancel();
        server.await.unwrap();
    }
}
