//! The allocator's free pages given back to the system now and then
//! ([`netsys::release_free_heap`], glibc's `malloc_trim`). A daemon's start lists every
//! object it watches: the responses' buffers and the decoded API objects are dropped once
//! trimmed into its caches, and glibc keeps the pages they freed below the live data in
//! the process's RSS. Measured on the speaker at 5,000 Nodes x 10,000 Services
//! (BENCHMARKS.md, "The allocator's free pages").

use std::time::{Duration, Instant};

/// The first trim after the start (the lists and the first pass are over by then at
/// 5,000 nodes) and the interval after it (re-lists after an API outage peak again).
pub const FIRST_TRIM: Duration = Duration::from_secs(30);
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

/// Calls `trim` `first` after now, then every `every`, on the blocking pool (it walks every
/// arena under its lock), until `stop` completes (or the task is aborted). Each call is
/// logged at debug with what it took.
pub fn spawn_trim(
    first: Duration,
    every: Duration,
    trim: fn() -> bool,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::pin!(stop);
        let mut next = tokio::time::Instant::now() + first;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = &mut stop => return,
            }
            let started = Instant::now();
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            tracing::debug!(
                released,
                took_ms = started.elapsed().as_millis() as u64,
                "allocator's free pages given back"
            );
            next += every;
        }
    })
}

/// [`spawn_trim`] with [`netsys::release_free_heap`] at [`FIRST_TRIM`], then every
/// [`TRIM_EVERY`], until `stop`.
pub fn spawn_release_free_heap(
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    spawn_trim(FIRST_TRIM, TRIM_EVERY, netsys::release_free_heap, stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn counted() -> bool {
        CALLS.fetch_add(1, Ordering::SeqCst);
        true
    }

    async fn calls_after(d: Duration) -> usize {
        tokio::time::sleep(d).await;
        // let the blocking call and the task run
        for _ in 0..10 {
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(5));
        }
        CALLS.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn trims_first_then_every_interval_until_stopped() {
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let stop = async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        };
        let task = spawn_trim(
            Duration::from_secs(30),
            Duration::from_secs(60),
            counted,
            stop,
        );
        assert_eq!(calls_after(Duration::from_secs(29)).await, 0);
        assert_eq!(calls_after(Duration::from_secs(2)).await, 1);
        assert_eq!(calls_after(Duration::from_secs(58)).await, 1);
        assert_eq!(calls_after(Duration::from_secs(2)).await, 2);
        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the task ends when stopped")
            .unwrap();
        assert_eq!(calls_after(Duration::from_secs(120)).await, 2);
    }
}
