//! The stderr drainer: a bounded tail for error reports and the optional callback.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex as StdMutex};

use futures::{FutureExt as _, StreamExt};

use super::lock;
use crate::options::StderrCallback;
use crate::process::ByteStream;

pub(super) struct Tail {
    pub(super) buf: VecDeque<u8>,
    pub(super) cap: usize,
}

impl Tail {
    pub(super) fn push(&mut self, chunk: &[u8]) {
        if self.cap == 0 {
            return;
        }
        let chunk = if chunk.len() > self.cap {
            &chunk[chunk.len() - self.cap..]
        } else {
            chunk
        };
        let excess = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
        self.buf.drain(..excess);
        self.buf.extend(chunk);
    }
}

pub(super) async fn stderr_loop(
    mut stderr: ByteStream,
    tail: Arc<StdMutex<Tail>>,
    callback: Option<StderrCallback>,
) {
    let mut callback_failed = false;
    while let Some(item) = stderr.next().await {
        let Ok(chunk) = item else { break };
        lock(&tail).push(&chunk);
        if let Some(cb) = callback.as_ref() {
            let outcome = match cb {
                StderrCallback::Sync(cb) => {
                    std::panic::catch_unwind(AssertUnwindSafe(|| cb(&chunk)))
                }
                StderrCallback::Async(cb) => {
                    match std::panic::catch_unwind(AssertUnwindSafe(|| cb(chunk.clone()))) {
                        Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
                        Err(p) => Err(p),
                    }
                }
            };
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if !callback_failed {
                        tracing::warn!(error = %e, "the stderr callback failed; the transport carries on");
                    }
                    callback_failed = true;
                }
                Err(_) => {
                    if !callback_failed {
                        tracing::warn!("the stderr callback panicked; the transport carries on");
                    }
                    callback_failed = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail {
            buf: VecDeque::new(),
            cap: 4,
        };
        t.push(b"ab");
        t.push(b"cdef");
        assert_eq!(t.buf.iter().copied().collect::<Vec<_>>(), b"cdef");
        t.push(b"0123456789");
        assert_eq!(t.buf.iter().copied().collect::<Vec<_>>(), b"6789");
        t.push(b"x");
        assert_eq!(t.buf.iter().copied().collect::<Vec<_>>(), b"789x");
    }
}
