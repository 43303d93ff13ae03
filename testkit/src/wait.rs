//! Polling waits that say what they last saw when they give up.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// A wait that timed out: how long, how many polls, and the last observation
/// (the `Err` string of the last poll).
#[derive(Debug, Clone)]
pub struct WaitTimeout {
    pub timeout: Duration,
    pub elapsed: Duration,
    pub polls: u32,
    pub last: String,
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:.1?} (bound {:?}, {} polls); last observation: {}",
            self.elapsed, self.timeout, self.polls, self.last
        )
    }
}

impl std::error::Error for WaitTimeout {}

/// Calls `f` every `poll` until it returns `Ok`, for at most `timeout`
/// (`f` runs at least once, and once more at the deadline). On timeout the
/// error carries the last `Err` that `f` returned, so a failing test says
/// what it saw, e.g. `last observation: 192.0.2.11 is Active`.
pub fn wait_until<T, F>(timeout: Duration, poll: Duration, mut f: F) -> Result<T, WaitTimeout>
where
    F: FnMut() -> Result<T, String>,
{
    let start = Instant::now();
    let deadline = start + timeout;
    let mut polls = 0;
    loop {
        polls += 1;
        let last = match f() {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitTimeout {
                timeout,
                elapsed: now - start,
                polls,
                last,
            });
        }
        std::thread::sleep(poll.min(deadline - now));
    }
}

/// The async flavour of [`wait_until`] (sleeps with tokio).
pub async fn wait_until_async<T, F, Fut>(
    timeout: Duration,
    poll: Duration,
    mut f: F,
) -> Result<T, WaitTimeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let deadline = start + timeout;
    let mut polls = 0;
    loop {
        polls += 1;
        let last = match f().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitTimeout {
                timeout,
                elapsed: now - start,
                polls,
                last,
            });
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value() {
        let mut n = 0;
        let v = wait_until(Duration::from_secs(5), Duration::from_millis(1), || {
            n += 1;
            if n == 3 { Ok(n) } else { Err(format!("n={n}")) }
        })
        .unwrap();
        assert_eq!(v, 3);
    }

    #[test]
    fn reports_the_last_observation() {
        let mut n = 0;
        let e = wait_until::<(), _>(Duration::from_millis(50), Duration::from_millis(5), || {
            n += 1;
            Err(format!("seen {n}"))
        })
        .unwrap_err();
        assert_eq!(e.last, format!("seen {n}"));
        assert!(e.to_string().contains("last observation: seen"));
    }

    #[test]
    fn async_flavour() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let e = rt
            .block_on(wait_until_async::<(), _, _>(
                Duration::from_millis(30),
                Duration::from_millis(5),
                || async { Err("nope".to_string()) },
            ))
            .unwrap_err();
        assert_eq!(e.last, "nope");
    }
}
