//! Running the sends and receives of one step concurrently.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;

type BoxFut<'f, T> = Pin<Box<dyn Future<Output = Result<T>> + 'f>>;

/// Runs fallible futures concurrently; returns the first error (after all have stopped).
pub async fn join_all<'f, T: 'f>(futs: Vec<BoxFut<'f, T>>) -> Result<Vec<T>> {
    let mut slots: Vec<Option<Result<T>>> = futs.iter().map(|_| None).collect();
    let mut futs: Vec<Option<BoxFut<'f, T>>> = futs.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in futs.iter_mut().enumerate() {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(r) => {
                        let failed = r.is_err();
                        slots[i] = Some(r);
                        *f = None;
                        if failed {
                            // Fail fast: drop the others (their sockets stay consistent because
                            // the worker is poisoned and closes every connection next).
                            return std::task::Poll::Ready(());
                        }
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    let mut out = Vec::with_capacity(slots.len());
    for s in slots {
        match s {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(out)
}

/// Boxes a future for [`join_all`].
pub fn boxed<'f, T, F: Future<Output = Result<T>> + 'f>(f: F) -> BoxFut<'f, T> {
    Box::pin(f)
}
