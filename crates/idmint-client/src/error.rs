//! The client's typed errors, and how a server's answer (a gRPC status with its `idmint-code`
//! metadata, or an HTTP error body `{"error":{"code","message"}}`) becomes one.
//!
//! Every message names what is wrong and how to fix it. The classification decides what the
//! failover does: a [`Failure::Caller`] is the caller's (no other server would answer
//! differently) and is returned at once; a [`Failure::Retry`] tries the next server; a
//! [`Failure::Protocol`] means the server does not speak gRPC there (Auto falls back to
//! HTTP). This file must not decide which server is tried; `endpoints.rs` does.

/// Why the client could not answer with ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The tag does not exist on the servers.
    #[error(
        "tag {tag} does not exist; create it with `idmint tag create {tag}` (or POST /v1/tags)"
    )]
    UnknownTag {
        /// The tag asked for.
        tag: String,
    },
    /// The sequence does not exist on the servers.
    #[error("sequence {name} does not exist; create it with `idmint seq create {name}`")]
    UnknownSequence {
        /// The sequence asked for.
        name: String,
    },
    /// The tag (or sequence) name is not one idmint accepts; refused before any call.
    #[error("bad tag {tag:?}: {reason}")]
    BadTag {
        /// The name given.
        tag: String,
        /// What is wrong with it and what is accepted.
        reason: String,
    },
    /// A count or another argument is out of range (checked locally, or refused by the
    /// server with a 400 / INVALID_ARGUMENT).
    #[error("invalid argument ({code}): {message}")]
    InvalidArgument {
        /// The server's error code (`bad_count`, …), or the client's own.
        code: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The server wants a bearer token the call did not carry (401 / UNAUTHENTICATED).
    #[error(
        "unauthenticated (401): {message}; give the tag's client token with `.token(...)` \
         (CLI: --token or IDMINT_TOKEN)"
    )]
    Unauthenticated {
        /// The server's message.
        message: String,
    },
    /// The token the call carried is not one the tag accepts (403 / PERMISSION_DENIED).
    #[error("permission denied (403): {message}; use the token the server configures for this tag")]
    PermissionDenied {
        /// The server's message.
        message: String,
    },
    /// The tag has a public id format: its internal ids (ranges, `next_id`) stay on the
    /// server. Use `public_ids` or `stream_ids`.
    #[error(
        "tag {tag} has a public id format, so its internal ids are not leased to clients; ask \
         for its public ids with `public_ids` or `stream_ids`"
    )]
    FormattedTag {
        /// The tag.
        tag: String,
    },
    /// The server refused the call for a reason another server would share (409): the tag
    /// is exhausted, its format key changed, …; the message names the fix.
    #[error("refused ({code}): {message}")]
    Refused {
        /// The server's error code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// No server answered within the bounds (down, unreachable, slow, shutting down, its
    /// store unavailable). Nothing was guessed; retry later.
    #[error("idmint unavailable: {reason}")]
    Unavailable {
        /// What went wrong, per server, for the operator.
        reason: String,
    },
    /// The client was closed (`Client::close`); it hands out no more ids.
    #[error("the idmint client is closed; build a new one to take more ids")]
    ShuttingDown,
    /// The client was built without a server.
    #[error("no idmint server given; add one with `.endpoint(\"http://host:port\")`")]
    NoEndpoints,
    /// A server URL cannot be used.
    #[error("bad server URL {url:?}: {reason}")]
    BadEndpoint {
        /// The URL as given.
        url: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A builder setting is out of range.
    #[error("bad client setting {field}: {reason}")]
    BadConfig {
        /// The builder method.
        field: &'static str,
        /// What is wrong and what is accepted (a token's value is never shown).
        reason: String,
    },
    /// The client already serves the most tags the engine holds.
    #[error("this client already serves {0} tags, the most it serves")]
    TooManyTags(usize),
}

/// How one attempt on one server failed.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The caller's error: returned at once, no other server is tried.
    Caller(ClientError),
    /// Worth another server; this one is marked down (backoff) when `down`.
    Retry {
        /// What happened, for the final error.
        reason: String,
        /// Whether the server itself failed (unreachable, timeout, unavailable).
        down: bool,
    },
    /// The server may not speak gRPC here (UNIMPLEMENTED, an h2 protocol error, a
    /// connection closed without an answer): Auto tries HTTP on the same server, and keeps
    /// to HTTP there if that answers.
    Protocol(String),
}

impl Failure {
    /// The server failed.
    pub(crate) fn down(reason: impl Into<String>) -> Failure {
        Failure::Retry { reason: reason.into(), down: true }
    }
}

/// What an idmint error code means for the caller. `subject` is the tag or sequence name the
/// call was about.
pub(crate) fn from_code(code: &str, message: String, subject: &str) -> Failure {
    let caller = Failure::Caller;
    match code {
        "unknown_tag" => caller(ClientError::UnknownTag { tag: subject.to_string() }),
        "unknown_sequence" => caller(ClientError::UnknownSequence { name: subject.to_string() }),
        "formatted_tag" => caller(ClientError::FormattedTag { tag: subject.to_string() }),
        "unauthorized" => caller(ClientError::Unauthenticated { message }),
        "forbidden" => caller(ClientError::PermissionDenied { message }),
        "bad_tag" => caller(ClientError::BadTag { tag: subject.to_string(), reason: message }),
        "tag_exhausted"
        | "sequence_exhausted"
        | "public_ids_exhausted"
        | "key_changed"
        | "tag_exists"
        | "too_many_tags"
        | "tag_not_storable"
        | "strict_tag" => caller(ClientError::Refused { code: code.to_string(), message }),
        // A server without the route (an older idmint, or not idmint at all).
        "no_route" | "method_not_allowed" => {
            Failure::Protocol(format!("the server has no such route ({code}): {message}"))
        }
        "too_many_requests" => Failure::Retry { reason: message, down: false },
        // Served elsewhere, perhaps: this node runs no snowflake generator or no sequences
        // (not yet, not configured, no worker id was free at its start, its layout ran out,
        // or its clock is off its store's: final on this node, not a failure of it).
        "snowflake_not_running"
        | "sequences_not_running"
        | "snowflake_not_configured"
        | "sequences_not_configured"
        | "tag_policy_not_served"
        | "worker_ids_exhausted"
        | "layout_exhausted"
        | "clock_skew" => Failure::Retry { reason: message, down: false },
        code if code.starts_with("bad_") || code == "not_an_id" => {
            caller(ClientError::InvalidArgument { code: code.to_string(), message })
        }
        // unavailable, shutting_down, request_timeout, internal, local_state, and the rest:
        // the server could not serve now; another may.
        code => Failure::down(format!("{code}: {message}")),
    }
}

/// An HTTP error answer: by its body's code when there is one, else by its status.
pub(crate) fn from_http(status: u16, body: &[u8], subject: &str) -> Failure {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: ErrorDetail,
    }
    #[derive(serde::Deserialize)]
    struct ErrorDetail {
        code: String,
        message: String,
    }
    if let Ok(body) = serde_json::from_slice::<ErrorBody>(body) {
        return from_code(&body.error.code, body.error.message, subject);
    }
    let message = format!("HTTP {status} without an idmint error body");
    match status {
        401 => Failure::Caller(ClientError::Unauthenticated { message }),
        403 => Failure::Caller(ClientError::PermissionDenied { message }),
        404 | 405 => Failure::Protocol(message),
        429 => Failure::Retry { reason: message, down: false },
        _ => Failure::down(message),
    }
}

/// A gRPC status: by its `idmint-code` metadata when there is one, else by its code.
pub(crate) fn from_status(status: &tonic::Status, subject: &str) -> Failure {
    use tonic::Code;
    let message = status.message().to_string();
    if let Some(code) = status.metadata().get("idmint-code").and_then(|v| v.to_str().ok()) {
        return from_code(code, message, subject);
    }
    match status.code() {
        Code::Unimplemented => Failure::Protocol(format!("gRPC unimplemented: {message}")),
        Code::Unauthenticated => Failure::Caller(ClientError::Unauthenticated { message }),
        Code::PermissionDenied => Failure::Caller(ClientError::PermissionDenied { message }),
        // Not an answer of idmint's: an HTTP/1-only server or proxy that closed the h2
        // connection (cancelled) or sent what h2 cannot parse, or a server that died
        // mid-call. The caller tells them apart by trying HTTP on the same server.
        Code::Cancelled | Code::Internal | Code::Unknown => {
            Failure::Protocol(format!("no gRPC answer ({:?}): {message}", status.code()))
        }
        Code::ResourceExhausted => Failure::Retry { reason: message, down: false },
        code => Failure::down(format!("{code:?}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_split_into_the_callers_the_retryable_and_the_protocol() {
        let caller = |code| matches!(from_code(code, "m".into(), "t"), Failure::Caller(_));
        for code in ["unknown_tag", "formatted_tag", "unauthorized", "forbidden", "bad_count"] {
            assert!(caller(code), "{code}");
        }
        // Spent in the shared store: no other server has more of it.
        for code in ["tag_exhausted", "sequence_exhausted"] {
            assert!(caller(code), "{code}");
        }
        for code in ["unavailable", "shutting_down", "internal", "too_many_requests"] {
            assert!(matches!(from_code(code, "m".into(), "t"), Failure::Retry { .. }), "{code}");
        }
        // Not configured on this node: another may serve it, and this one is not down.
        for code in [
            "snowflake_not_configured",
            "sequences_not_configured",
            "worker_ids_exhausted",
            "layout_exhausted",
            "clock_skew",
        ] {
            let failure = from_code(code, "m".into(), "t");
            assert!(matches!(failure, Failure::Retry { down: false, .. }), "{code}");
        }
        assert!(matches!(from_code("no_route", "m".into(), "t"), Failure::Protocol(_)));
        assert!(matches!(
            from_code("unknown_tag", "m".into(), "order"),
            Failure::Caller(ClientError::UnknownTag { tag }) if tag == "order"
        ));
        let body = br#"{"error":{"code":"bad_count","message":"count 0"}}"#;
        assert!(matches!(
            from_http(400, body, "t"),
            Failure::Caller(ClientError::InvalidArgument { code, .. }) if code == "bad_count"
        ));
        assert!(matches!(from_http(502, b"<html>", "t"), Failure::Retry { down: true, .. }));
        let mut status = tonic::Status::not_found("tag order does not exist");
        status.metadata_mut().insert("idmint-code", "unknown_tag".parse().unwrap());
        assert!(matches!(from_status(&status, "order"), Failure::Caller(_)));
        let unimplemented = tonic::Status::unimplemented("");
        assert!(matches!(from_status(&unimplemented, "t"), Failure::Protocol(_)));
        let refused = tonic::Status::unavailable("tcp connect error");
        assert!(matches!(from_status(&refused, "t"), Failure::Retry { down: true, .. }));
    }
}
