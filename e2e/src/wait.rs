use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `probe` until it returns `Ok(value)` and returns the value; `Err(observation)`
/// means "not yet" and says what the probe saw. After `timeout` it fails with the last
/// observation and the history of the distinct observations (with their times), so that a
/// timed-out wait says what it was looking at instead of just "timed out".
///
/// The probe runs at once, then every 100 ms, backing off to 500 ms.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut interval = Duration::from_millis(100);
    let mut checks = 0u32;
    // (first seen, last seen, observation), in order; consecutive repeats are merged.
    let mut history: Vec<(Duration, Duration, String)> = Vec::new();
    loop {
        checks += 1;
        match probe().await {
            Ok(v) => return Ok(v),
            Err(obs) => {
                let at = start.elapsed();
                match history.last_mut() {
                    Some((_, last, o)) if *o == obs => *last = at,
                    _ => history.push((at, at, obs)),
                }
            }
        }
        if start.elapsed() >= timeout {
            break;
        }
        let left = timeout.saturating_sub(start.elapsed());
        tokio::time::sleep(interval.min(left)).await;
        interval = (interval * 3 / 2).min(Duration::from_millis(500));
    }
    let last = history
        .last()
        .map(|(_, _, o)| o.as_str())
        .unwrap_or("nothing");
    let mut msg = format!(
        "timed out after {:.1} s waiting for {what} ({checks} checks); last observation: {last}",
        start.elapsed().as_secs_f64()
    );
    if history.len() > 1 {
        msg.push_str("\nobservations (first seen - last seen):");
        let skip = history.len().saturating_sub(10);
        if skip > 0 {
            let _ = write!(msg, "\n  ... {skip} earlier");
        }
        for (first, last, o) in &history[skip..] {
            let _ = write!(
                msg,
                "\n  {:6.1} s - {:6.1} s: {o}",
                first.as_secs_f64(),
                last.as_secs_f64()
            );
        }
    }
    anyhow::bail!(msg)
}
