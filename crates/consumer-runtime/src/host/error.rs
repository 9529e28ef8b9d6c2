//! The one error type of every consumer service (im-bridge, activity-consumer,
//! notice-consumer re-export it as their `Error`): each service used to spell
//! out the same enum, and callers (mains, room-service, bench) only ever
//! printed it.

/// A boxed error of an extra server (e.g. activity's gRPC listener), so the
/// host need not know the server's library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of a consumer service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The consumer runtime failed.
    #[error(transparent)]
    Runtime(#[from] crate::Error),
    /// Shared plumbing (config loading, MySQL, listeners) failed.
    #[error(transparent)]
    Service(#[from] service_kit::Error),
    /// An operator command (`dead-letters …`, `deliveries …`) was refused
    /// or could not be carried out; the message says why.
    #[error("{0}")]
    Operator(String),
    /// An extra server the service registered (`grpc`) failed.
    #[error("{name} server: {source}")]
    Server {
        /// The server's name, as registered.
        name: &'static str,
        /// What failed.
        source: BoxError,
    },
}

impl Error {
    /// A configuration error from anything printable (a section's own
    /// validation error, say), naming the key in its text.
    pub fn config(error: impl std::fmt::Display) -> Self {
        Error::Config(error.to_string())
    }
}
