//! Shutdown signals: the first SIGINT/SIGTERM cancels the root token (graceful
//! drain in the order each service defines); a second one exits at once.

use tokio_util::sync::CancellationToken;

/// Exit code used when a second signal forces an immediate exit.
pub const FORCED_EXIT_CODE: i32 = 130;

/// Returns a root token cancelled on the first SIGINT or SIGTERM. A second
/// signal terminates the process immediately.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining");
        cancel.cancel();
        wait_for_signal().await;
        tracing::warn!("second shutdown signal, exiting now");
        std::process::exit(FORCED_EXIT_CODE);
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM, using ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
