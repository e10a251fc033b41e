//! Every error the API answers, and its HTTP status: the one place where errors meet status
//! codes. Bodies are JSON, `{"error": {"code": "...", "message": "..."}}`, and never carry a
//! number that could be mistaken for an id.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idmint::{Error, FormatError, SequenceError, SnowflakeError, UuidsError};
use idmint_core::{TagError, ValueError};
use idmint_store::StoreError;
use serde::Serialize;

/// An error answered by the API.
#[derive(Debug)]
#[non_exhaustive]
pub enum ApiError {
    /// The request is malformed: a bad tag, count, body or parameter (400).
    BadRequest {
        /// Machine-readable code, e.g. `bad_tag`.
        code: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No route matches (404).
    NoRoute(String),
    /// The library refused (status depends on the error).
    Library(Error),
    /// The snowflake generator refused, or is not running (status depends on the error).
    Snowflake(SnowflakeError),
    /// The sequence engine refused (status depends on the error).
    Sequence(SequenceError),
    /// Sequences are not served by this node (503), with the reason.
    SequencesNotRunning(String),
    /// A tag's public id format refused (status depends on the error).
    Format(FormatError),
    /// No UUID v7 or ULID: the clock is past their 48-bit time field (503).
    Uuids(UuidsError),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: String,
}

impl ApiError {
    /// A 400 with a code and a message.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { code, message: message.into() }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            ApiError::Library(error) => library_status(error),
            ApiError::Snowflake(error) => snowflake_status(error),
            ApiError::Sequence(error) => sequence_status(error),
            ApiError::SequencesNotRunning(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "sequences_not_running")
            }
            ApiError::Format(error) => format_status(error),
            ApiError::Uuids(_) => (StatusCode::SERVICE_UNAVAILABLE, "clock_out_of_range"),
        }
    }
}

fn snowflake_status(error: &SnowflakeError) -> (StatusCode, &'static str) {
    match error {
        SnowflakeError::ClockBehind { .. } => (StatusCode::SERVICE_UNAVAILABLE, "clock_behind"),
        SnowflakeError::LeaseNotProven { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "worker_lease_not_proven")
        }
        SnowflakeError::Exhausted(_) => (StatusCode::SERVICE_UNAVAILABLE, "layout_exhausted"),
        SnowflakeError::Unavailable(_) | SnowflakeError::Store(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "snowflake_unavailable")
        }
        SnowflakeError::Config(_) => (StatusCode::SERVICE_UNAVAILABLE, "snowflake_not_running"),
        SnowflakeError::LocalState(_) => (StatusCode::INTERNAL_SERVER_ERROR, "local_state"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

fn format_status(error: &FormatError) -> (StatusCode, &'static str) {
    match error {
        // An internal id past the permutation's width or the template's: the tag has used
        // up its public ids.
        FormatError::Permute(_) | FormatError::Encoding(_) => {
            (StatusCode::CONFLICT, "public_ids_exhausted")
        }
        FormatError::NotThisFormat { .. } => (StatusCode::BAD_REQUEST, "not_an_id"),
        FormatError::KeyChanged { .. } => (StatusCode::CONFLICT, "key_changed"),
        FormatError::KeyGuard { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

fn sequence_status(error: &SequenceError) -> (StatusCode, &'static str) {
    match error {
        SequenceError::NotFound(_) | SequenceError::Store(StoreError::TagNotFound(_)) => {
            (StatusCode::NOT_FOUND, "unknown_sequence")
        }
        SequenceError::Invalid(_) | SequenceError::Store(StoreError::InvalidValue(_)) => {
            (StatusCode::BAD_REQUEST, "bad_sequence")
        }
        SequenceError::Unavailable { .. } | SequenceError::Store(StoreError::Unavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "sequence_unavailable")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

fn library_status(error: &Error) -> (StatusCode, &'static str) {
    match error {
        Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_)) => {
            (StatusCode::NOT_FOUND, "unknown_tag")
        }
        Error::Unavailable { .. } | Error::Store(StoreError::Unavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
        Error::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        Error::TooManyTags(_) | Error::Store(StoreError::TooManyTags) => {
            (StatusCode::CONFLICT, "too_many_tags")
        }
        Error::Store(StoreError::TagExists(_)) => (StatusCode::CONFLICT, "tag_exists"),
        Error::Store(StoreError::Exhausted { .. }) => (StatusCode::CONFLICT, "tag_exhausted"),
        Error::Store(StoreError::Corrupt { .. }) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "store_row_invalid")
        }
        Error::LocalState(_) => (StatusCode::INTERNAL_SERVER_ERROR, "local_state"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match self {
            ApiError::BadRequest { message, .. } => message,
            ApiError::NoRoute(route) => {
                format!("no route {route}; the API is described at /openapi.json")
            }
            ApiError::Library(error) => error.to_string(),
            ApiError::Snowflake(error) => error.to_string(),
            ApiError::Sequence(error) => error.to_string(),
            ApiError::SequencesNotRunning(reason) => reason,
            ApiError::Format(error) => error.to_string(),
            ApiError::Uuids(error) => error.to_string(),
        };
        // Debug, not warn: during an outage every request fails, and a line per request
        // would flood the log. The cause (refill failed, lease lost, clock behind) is logged
        // once where it happened.
        if status.is_server_error() {
            tracing::debug!(%status, code, %message, "request failed");
        }
        (status, Json(ErrorBody { error: ErrorDetail { code, message } })).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        ApiError::Library(error)
    }
}

impl From<SnowflakeError> for ApiError {
    fn from(error: SnowflakeError) -> ApiError {
        ApiError::Snowflake(error)
    }
}

impl From<TagError> for ApiError {
    fn from(error: TagError) -> ApiError {
        ApiError::bad_request("bad_tag", error.to_string())
    }
}

impl From<ValueError> for ApiError {
    fn from(error: ValueError) -> ApiError {
        let code = match error {
            ValueError::Count { .. } => "bad_count",
            _ => "bad_value",
        };
        ApiError::bad_request(code, error.to_string())
    }
}

impl From<FormatError> for ApiError {
    fn from(error: FormatError) -> ApiError {
        ApiError::Format(error)
    }
}

impl From<UuidsError> for ApiError {
    fn from(error: UuidsError) -> ApiError {
        ApiError::Uuids(error)
    }
}

impl From<SequenceError> for ApiError {
    fn from(error: SequenceError) -> ApiError {
        ApiError::Sequence(error)
    }
}
