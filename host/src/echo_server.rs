//! An embedded WebSocket echo server (tokio-tungstenite) on its own thread,
//! the peer for `tether demo` and `tether bench echo`. It behaves like a
//! remote server: its own runtime, so wake-ups cross threads as they would
//! across processes.

use std::net::SocketAddr;

use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// A running echo server; stopped when dropped.
pub struct EchoServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoServer {
    /// Binds `127.0.0.1:0` and serves until dropped. Errors: bind failure.
    pub fn start() -> std::io::Result<EchoServer> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("echo-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("listener");
                    tokio::select! {
                        _ = serve(listener) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(EchoServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://ADDR/echo`.
    pub fn url(&self) -> String {
        format!("ws://{}/echo", self.addr)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
