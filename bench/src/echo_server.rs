//! An embedded WebSocket echo server (tokio-tungstenite) on its own thread
//! and runtime ([`LocalServer`]), the peer for `tether demo` and `tether
//! bench echo`.

use std::net::SocketAddr;

use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::local_server::LocalServer;

/// A running echo server; stopped when dropped.
pub struct EchoServer {
    server: LocalServer,
}

impl EchoServer {
    /// Binds `127.0.0.1:0` and serves until dropped. Errors: bind failure.
    pub fn start() -> std::io::Result<EchoServer> {
        Ok(EchoServer {
            server: LocalServer::start("echo-server", serve)?,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `ws://ADDR/echo`.
    pub fn url(&self) -> String {
        format!("ws://{}/echo", self.addr())
    }
}

async fn serve(listener: TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let config = WebSocketConfig::default()
                .max_message_size(None)
                .max_frame_size(None);
            let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await
            else {
                return;
            };
            // Echo everything already received, then flush once.
            while let Some(Ok(first)) = ws.next().await {
                let mut next = Some(first);
                while let Some(m) = next.take() {
                    if (m.is_text() || m.is_binary()) && ws.feed(m).await.is_err() {
                        return;
                    }
                    if let Some(Some(Ok(m))) = ws.next().now_or_never() {
                        next = Some(m);
                    }
                }
                if ws.flush().await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Whether `m` is a data message (for callers filtering echoes).
pub fn is_data(m: &Message) -> bool {
    m.is_text() || m.is_binary()
}
