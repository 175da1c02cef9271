//! A TCP server on 127.0.0.1 with its own thread and current-thread tokio
//! runtime, as a remote peer has: wake-ups cross threads as they would
//! across processes. The embedded echo server, the native QUIC server and
//! the JMUX benchmark's native relays run on it.

use std::net::SocketAddr;

/// A running server; dropping it stops the runtime and every task on it
/// (connections included) and joins the thread.
pub struct LocalServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalServer {
    /// Binds `127.0.0.1:0` and runs `serve(listener)` on a new thread named
    /// `name` until the server is dropped (or `serve` returns).
    ///
    /// Errors: binding, the runtime or the thread could not be created.
    pub fn start<F, Fut>(name: &str, serve: F) -> std::io::Result<LocalServer>
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _runtime = rt.enter();
            tokio::net::TcpListener::from_std(std_listener)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                rt.block_on(async move {
                    tokio::select! {
                        _ = serve(listener) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(LocalServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
