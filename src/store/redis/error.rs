//! What a Redis error means for the store: a store error (fail closed), and whether the
//! connection it came on may be used again.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::store::error::StoreError;

/// Whether a failed call makes its connection unfit for the next one, so the pool
/// replaces it instead of handing it out again: a broken or timed-out socket, and
/// `READONLY` (the node was demoted to a replica in a failover; a fresh connection
/// finds the new master). Other server errors (`OOM`, a script's `assert`) leave the
/// connection fine. Either way the call itself is a [`StoreError`].
pub fn retires_connection(error: &RedisError) -> bool {
    error.is_unrecoverable_error()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        // Redis before 7.0 answers a write refused inside a script with a script error
        // whose text carries the READONLY code (`... -READONLY You can't write ...`).
        || error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && error.to_string().contains("READONLY")
}

/// A Redis error as a store error, the Redis error kept as its source.
pub(crate) fn command(error: RedisError) -> StoreError {
    StoreError::Command(Box::new(error))
}
