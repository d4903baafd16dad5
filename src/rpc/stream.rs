//! An RPC connection's byte stream: plain TCP, or TLS over it (the server's side of an accepted
//! connection, or the dialer's), so that framing, the cluster-secret handshake and the calls
//! above run the same over either.

use futures::io::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use std::io::Result;
use std::pin::Pin;
use std::task::{Context, Poll};

pub enum RpcStream {
    Plain(TcpStream),
    Accepted(Box<futures_rustls::server::TlsStream<TcpStream>>),
    Dialed(Box<futures_rustls::client::TlsStream<TcpStream>>),
}

/// Runs `$f` on whichever stream `$s` holds, pinned.
macro_rules! each {
    ($s:expr, $v:ident => $f:expr) => {
        match $s.get_mut() {
            RpcStream::Plain($v) => {
                let $v = Pin::new($v);
                $f
            }
            RpcStream::Accepted($v) => {
                let $v = Pin::new($v.as_mut());
                $f
            }
            RpcStream::Dialed($v) => {
                let $v = Pin::new($v.as_mut());
                $f
            }
        }
    };
}

impl AsyncRead for RpcStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<Result<usize>> {
        each!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for RpcStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize>> {
        each!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        each!(self, s => s.poll_flush(cx))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        each!(self, s => s.poll_close(cx))
    }
}
