//! The completion of one task, and the future a caller holds.
//!
//! Invariants:
//! - A completion is resolved exactly once (asserted): the last piece of a task stores the
//!   result, sets `done`, wakes the waker and notifies waiters, in that order.
//! - `EcFuture::test` only reads an atomic flag: it never takes a lock, so it never blocks.
//! - Dropping an `EcFuture` early is safe: the task runs to its end and its result is dropped.
//! - Waiters are counted under the slot's lock, so resolving a task nobody blocks on makes no
//!   wake-up system call.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::{EncodeOutput, EngineError};

#[derive(Debug)]
struct Slot<T> {
    result: Option<Result<T, EngineError>>,
    resolved: bool,
    taken: bool,
    waiting: usize,
    waker: Option<Waker>,
}

#[derive(Debug)]
pub(crate) struct Completion<T> {
    done: AtomicBool,
    slot: Mutex<Slot<T>>,
    ready: Condvar,
}

impl<T> Default for Completion<T> {
    fn default() -> Self {
        Completion {
            done: AtomicBool::new(false),
            slot: Mutex::new(Slot {
                result: None,
                resolved: false,
                taken: false,
                waiting: 0,
                waker: None,
            }),
            ready: Condvar::new(),
        }
    }
}

impl<T> Completion<T> {
    pub(crate) fn resolve(&self, result: Result<T, EngineError>) {
        let (waker, waiting) = {
            let mut slot = self.slot.lock().expect("completion lock");
            assert!(!slot.resolved, "a task's completion is resolved exactly once");
            slot.resolved = true;
            slot.result = Some(result);
            self.done.store(true, Ordering::Release);
            (slot.waker.take(), slot.waiting)
        };
        if waiting > 0 {
            self.ready.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The pending result of [`crate::Engine::iencode`] (or, as `EcFuture<DecodeOutput>`, of
/// [`crate::Engine::idecode`]): a [`Future`], which may also be checked with
/// [`EcFuture::test`] or blocked on with [`EcFuture::wait`].
///
/// It resolves exactly once; polling it again after it returned `Ready` panics, as the
/// `Future` contract allows.
#[derive(Debug)]
pub struct EcFuture<T = EncodeOutput> {
    completion: Arc<Completion<T>>,
}

impl<T> EcFuture<T> {
    pub(crate) fn new(completion: Arc<Completion<T>>) -> EcFuture<T> {
        EcFuture { completion }
    }

    /// True once the task has finished (successfully or not). Never blocks.
    pub fn test(&self) -> bool {
        self.completion.done.load(Ordering::Acquire)
    }

    /// Blocks until the task has finished and returns its result.
    pub fn wait(self) -> Result<T, EngineError> {
        let mut slot = self.completion.slot.lock().expect("completion lock");
        slot.waiting += 1;
        while !slot.resolved {
            slot = self.completion.ready.wait(slot).expect("completion lock");
        }
        slot.waiting -= 1;
        assert!(!slot.taken, "a task's result is taken exactly once");
        slot.taken = true;
        slot.result.take().expect("a resolved completion holds its result")
    }
}

impl<T> Future for EcFuture<T> {
    type Output = Result<T, EngineError>;

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
