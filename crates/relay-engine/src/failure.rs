//! [`PublishFailure`]: why one publish attempt failed, and whether a retry
//! can help. Every publisher (broker, direct sinks) answers with it; the
//! worker turns it into the row's next status.

/// Why one publish attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFailure {
    /// Short, secret-free description for `last_error`.
    pub message: String,
    /// False when retrying cannot help (the row goes straight to `failed`).
    pub retryable: bool,
}

impl PublishFailure {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure no retry will fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}
