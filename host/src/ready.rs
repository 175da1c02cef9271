//! Event-driven readiness: the one place where host tasks wake guests.
//!
//! There is no periodic tick here: a guest blocked in `wasi:io/poll` sleeps
//! in [`Signal::wait_until`] until a socket task calls [`Signal::wake`]
//! after changing the state the guest waits on.

use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use wasmtime_wasi::p2::Pollable;

use crate::bindings::ErrorCode;

/// A condition variable for async tasks: waiters re-check their condition
/// whenever the producer wakes them, so no wake-up is ever lost.
/// It also carries the readiness-set registrations watching it
/// ([`crate::readiness`]): a wake queues them on their sets.
#[derive(Default, Debug)]
pub struct Signal(Notify, crate::readiness::Watchers);

impl Signal {
    /// Resolves once `cond()` is true; `cond` is re-checked after every
    /// [`Signal::wake`].
    pub async fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        loop {
            let notified = self.0.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cond() {
                return;
            }
            notified.await;
        }
    }

    /// Wakes every current waiter so it re-checks its condition.
    pub fn wake(&self) {
        self.0.notify_waiters();
        self.1.wake();
    }

    /// The readiness-set registrations watching this signal.
    pub(crate) fn watchers(&self) -> &crate::readiness::Watchers {
        &self.1
    }
}

enum State<T> {
    Running(JoinHandle<Result<T, ErrorCode>>),
    Ready(Result<T, ErrorCode>),
    Taken,
}

/// The result of a host task the guest started (a connect): a `future-*`
/// resource. Dropping it cancels the task.
pub struct Pending<T> {
    state: State<T>,
}

impl<T: Send + 'static> Pending<T> {
    /// Runs `work` on the current tokio runtime.
    pub fn spawn(work: impl Future<Output = Result<T, ErrorCode>> + Send + 'static) -> Self {
        Pending {
            state: State::Running(tokio::spawn(work)),
        }
    }

    /// `None` while running; then the result once, then `closed`.
    pub fn take(&mut self) -> Option<Result<T, ErrorCode>> {
        if let State::Running(handle) = &mut self.state {
            match handle.now_or_never() {
                Some(result) => self.state = State::Ready(flatten(result)),
                None => return None,
            }
        }
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Ready(result) => Some(result),
            State::Taken => Some(Err(ErrorCode::Closed)),
            State::Running(_) => unreachable!("handled above"),
        }
    }
}

fn flatten<T>(r: Result<Result<T, ErrorCode>, tokio::task::JoinError>) -> Result<T, ErrorCode> {
    r.unwrap_or_else(|e| Err(ErrorCode::Other(format!("host task failed: {e}"))))
}

#[async_trait::async_trait]
impl<T: Send + 'static> Pollable for Pending<T> {
    async fn ready(&mut self) {
        if let State::Running(handle) = &mut self.state {
            let result = handle.await;
            self.state = State::Ready(flatten(result));
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if let State::Running(handle) = &self.state {
            handle.abort();
        }
    }
}
