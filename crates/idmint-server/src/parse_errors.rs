//! JSON bodies for the answers hyper writes itself. A request hyper cannot parse (a
//! malformed request line or header: 400, a URI over its 65 534-byte limit: 414, more than
//! 100 headers or headers beyond its read buffer: 431) never reaches a service: hyper writes
//! a bodiless answer and closes the connection, and has no hook to shape it. This file wraps
//! each connection and replaces exactly that answer with the same status and a JSON error
//! body (`bad_request`, `uri_too_long`, `headers_too_large`), like every other error.
//!
//! Only a write that is, in full, one of hyper's automatic heads is replaced: the status
//! line `HTTP/1.1 400|414|431 …` followed by nothing but `connection: close`,
//! `content-length: 0` and `date`. Every answer of the router carries a content type, so
//! none matches; an HTTP/2 connection (its preface read first) is never touched.
//!
//! This file must not decide statuses beyond hyper's own: it only gives them a body.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::connect_info::Connected;
use axum::http::StatusCode;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::limits::{ClientAddr, LimitedListener};

/// The answers hyper writes itself: status, code and message.
const HYPER_ANSWERS: [(StatusCode, &str, &str); 3] = [
    (
        StatusCode::BAD_REQUEST,
        "bad_request",
        "the request is not valid HTTP/1.1 (a malformed request line or header); send \
         `METHOD /path HTTP/1.1` and `Name: value` headers",
    ),
    (
        StatusCode::URI_TOO_LONG,
        "uri_too_long",
        "the request's URI is longer than 65534 bytes; send long input in a body",
    ),
    (
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        "the request has more than 100 headers, or more header bytes than the server reads; \
         send fewer or shorter headers",
    ),
];

/// Longest head hyper writes for its automatic answers (about 120 bytes): a longer write is
/// never one of them.
const HYPER_HEAD_BYTES_MAX: usize = 256;

/// The HTTP/2 connection preface's first bytes (h2c with prior knowledge, gRPC's way).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// A listener whose connections get JSON bodies on hyper's own error answers.
pub struct JsonParseErrors(pub LimitedListener);

impl Listener for JsonParseErrors {
    type Io = JsonErrorsIo<<LimitedListener as Listener>::Io>;
    type Addr = <LimitedListener as Listener>::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        let io = JsonErrorsIo { inner: io, pending: None, first_read: true, h2: false };
        (io, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, JsonParseErrors>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, JsonParseErrors>) -> ClientAddr {
        ClientAddr::accepted(&stream.io().inner, *stream.remote_addr())
    }
}

/// One connection: reads pass through; a write that is one of hyper's automatic error heads
/// is replaced by the same status with a JSON body.
pub struct JsonErrorsIo<I> {
    inner: I,
    /// The replacement being written, how much of it is written, and the length of the
    /// write it stands for (reported once the replacement is out).
    pending: Option<(Vec<u8>, usize, usize)>,
    first_read: bool,
    /// An HTTP/2 connection: never rewritten.
    h2: bool,
}

impl<I: AsyncWrite + Unpin> JsonErrorsIo<I> {
    /// Writes what is left of the replacement; Ready(Ok(claimed)) once it is all out.
    fn drive_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        while let Some((bytes, written, claimed)) = &mut self.pending {
            if *written == bytes.len() {
                let claimed = *claimed;
                self.pending = None;
                return Poll::Ready(Ok(Some(claimed)));
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(None))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for JsonErrorsIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if self.first_read && buf.filled().len() > before {
            self.first_read = false;
            let read = &buf.filled()[before..];
            let n = read.len().min(H2_PREFACE.len());
            self.h2 = read[..n] == H2_PREFACE[..n];
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for JsonErrorsIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // A write that returned Pending mid-replacement is called again with the same bytes.
        if let Some(claimed) = ready!(self.drive_pending(cx))? {
            return Poll::Ready(Ok(claimed));
        }
        if !self.h2
            && let Some(replacement) = json_answer(buf)
        {
            self.pending = Some((replacement, 0, buf.len()));
            let claimed = ready!(self.drive_pending(cx))?;
            return Poll::Ready(Ok(claimed.unwrap_or(buf.len())));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper's automatic answer is a head alone: one slice. Anything else passes through.
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && (self.pending.is_some() || json_answer(only).is_some())
        {
            return self.poll_write(cx, only);
        }
        if let Some(claimed) = ready!(self.drive_pending(cx))? {
            return Poll::Ready(Ok(claimed));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drive_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The JSON answer standing for `written`, when `written` is exactly one of hyper's
/// automatic error heads.
fn json_answer(written: &[u8]) -> Option<Vec<u8>> {
    // The fast way out for every other write (bodies can be megabytes): hyper's head is a
    // short client-error status line and three short headers.
    if written.len() > HYPER_HEAD_BYTES_MAX || !written.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(written).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?.strip_prefix("HTTP/1.1 ")?;
    let (status, code, message) = HYPER_ANSWERS
        .iter()
        .find(|(s, _, _)| status_line.starts_with(&format!("{} ", s.as_u16())))?;
    let mut bodiless = false;
    for line in lines {
        let line = line.to_ascii_lowercase();
        if line == "content-length: 0" {
            bodiless = true;
        } else if line != "connection: close" && !line.starts_with("date: ") {
            return None;
        }
    }
    if !bodiless {
        return None;
    }
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    let reason = status.canonical_reason().unwrap_or("Error");
    let answer = format!(
        "HTTP/1.1 {} {reason}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        status.as_u16(),
        body.len()
    );
    Some(answer.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_own_heads_are_replaced() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                      content-length: 0\r\ndate: Thu, 26 Nov 2026 05:44:56 GMT\r\n\r\n";
        let answer = String::from_utf8(json_answer(hyper).expect("replaced")).unwrap();
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        assert!(answer.contains("\"code\":\"headers_too_large\""), "{answer}");
        // The router's answers carry a content type (and a body): never touched.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: 0\r\n\r\n";
        assert!(json_answer(ours).is_none());
        // Another status, a partial head, a head with a body: never touched.
        assert!(json_answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(json_answer(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n").is_none());
        assert!(json_answer(b"HTTP/1.1 400 Bad Request\r\n\r\n").is_none());
    }
}
