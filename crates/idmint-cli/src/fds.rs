//! The process's file descriptor limit (`RLIMIT_NOFILE`): `serve` raises its soft limit to
//! the hard one at start, since every connection, store connection and marks file write
//! takes a descriptor and the common soft limit (1 024) is far below what the hard one
//! allows. It only reads and sets the limit; what the limit leaves for connections is
//! decided by idmint-server (`HttpLimits::fit_descriptors`).

/// Raises the soft limit to the hard one; the soft limit now, `None` when unlimited or
/// unknown (not a Unix).
pub fn raise_to_hard() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        match (limit.current, limit.maximum) {
            (Some(soft), Some(hard)) if soft < hard => {
                let raised = Rlimit { current: Some(hard), maximum: Some(hard) };
                match setrlimit(Resource::Nofile, raised) {
                    Ok(()) => {
                        tracing::info!(
                            from = soft,
                            to = hard,
                            "file descriptor limit (RLIMIT_NOFILE) raised to the hard limit"
                        );
                        Some(hard)
                    }
                    Err(error) => {
                        tracing::warn!(%error, soft, hard, "file descriptor limit (RLIMIT_NOFILE) not raised; serving within the soft limit");
                        Some(soft)
                    }
                }
            }
            (soft, _) => soft,
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The limit `serve` would run with: the hard limit, which it raises the soft one to
/// (`None` when unlimited or unknown).
pub fn hard() -> Option<u64> {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        limit.maximum.or(limit.current)
    }
    #[cfg(not(unix))]
    {
        None
    }
}
