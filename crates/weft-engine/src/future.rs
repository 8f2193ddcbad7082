//! The completion of one task, and the future a caller holds.
//!
//! Invariants:
//! - A completion is resolved exactly once (asserted): the last piece of a task stores the
//!   result, sets `done`, wakes the waker and notifies waiters, in that order.
//! - `EcFuture::test` only reads an atomic flag: it never takes a lock, so it never blocks.
//! - Dropping an `EcFuture` early is safe: the task runs to its end and its result is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::{EncodeOutput, EngineError};

#[derive(Debug, Default)]
struct Slot {
    result: Option<Result<EncodeOutput, EngineError>>,
    resolved: bool,
    taken: bool,
    waker: Option<Waker>,
}

#[derive(Debug, Default)]
pub(crate) struct Completion {
    done: AtomicBool,
    slot: Mutex<Slot>,
    ready: Condvar,
}

impl Completion {
    pub(crate) fn resolve(&self, result: Result<EncodeOutput, EngineError>) {
        let waker = {
            let mut slot = self.slot.lock().expect("completion lock");
            assert!(!slot.resolved, "a task's completion is resolved exactly once");
            slot.resolved = true;
            slot.result = Some(result);
            self.done.store(true, Ordering::Release);
            slot.waker.take()
        };
        self.ready.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The pending result of [`crate::Engine::iencode`]: a [`Future`], which may also be checked
/// with [`EcFuture::test`] or blocked on with [`EcFuture::wait`].
///
/// It resolves exactly once; polling it again after it returned `Ready` panics, as the
/// `Future` contract allows.
#[derive(Debug)]
pub struct EcFuture {
    completion: Arc<Completion>,
}

impl EcFuture {
    pub(crate) fn new(completion: Arc<Completion>) -> EcFuture {
        EcFuture { completion }
    }

    /// True once the task has finished (successfully or not). Never blocks.
    pub fn test(&self) -> bool {
        self.completion.done.load(Ordering::Acquire)
    }

    /// Blocks until the task has finished and returns its result.
    pub fn wait(self) -> Result<EncodeOutput, EngineError> {
        let mut slot = self.completion.slot.lock().expect("completion lock");
        while !slot.resolved {
            slot = self.completion.ready.wait(slot).expect("completion lock");
        }
        assert!(!slot.taken, "a task's result is taken exactly once");
        slot.taken = true;
        slot.result.take().expect("a resolved completion holds its result")
    }
}

impl Future for EcFuture {
    type Output = Result<EncodeOutput, EngineError>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.completion.slot.lock().expect("completion lock");
        if slot.resolved {
            assert!(!slot.taken, "EcFuture polled after it returned Ready");
            slot.taken = true;
            return Poll::Ready(
                slot.result.take().expect("a resolved completion holds its result"),
            );
        }
        slot.waker = Some(context.waker().clone());
        Poll::Pending
    }
}
