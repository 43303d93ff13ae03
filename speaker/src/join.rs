//! A starting speaker's wait to learn the other members before it decides layer-2
//! Services (MetalLB joins synchronously before its reconcilers run): alone in its own
//! view, a restarted speaker would win every election at once and answer every address
//! twice.
//!
//! Joined means: this node holds another member's whole state (every datagram of it,
//! `membership::Core::synced`), or the first discovery answered and found no other
//! speaker. A member that pulled this node back in (the others announce to members they
//! hold down) is asked for its whole state at once, whether or not the discovery has
//! answered: the others take this node for a candidate from that moment and release its
//! addresses, so every millisecond waited after it is dark (issue 24 item 1: a discovery
//! that failed on a returning API server, connection refused then 403, kept the owner
//! silent for its whole 3 s wait after its successors had released).
//!
//! Not the first member heard: with only that one in its view, a restarted speaker won
//! the elections of the members it had not heard of yet and answered their addresses
//! beside them, ~25 ms in 2 of 60 restarts in the lab (`bench-l2-faults`, kill).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;

/// How long a starting speaker waits to learn the other members.
pub const INITIAL_JOIN_WAIT: Duration = Duration::from_secs(3);

/// How the wait ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Joined {
    /// This node holds another member's whole state.
    Members,
    /// The discovery answered and found no other speaker.
    Alone,
    /// Nobody answered within the wait (or the discovery ended): deciding with the
    /// members known.
    TimedOut,
}

/// Waits at most `wait` until this node is joined (module doc): `synced` is the
/// membership's, `live` its live set. Each seed list the discovery publishes meanwhile
/// goes to `set_seeds` (the membership joins them).
pub async fn wait_joined(
    mut synced: watch::Receiver<bool>,
    live: watch::Receiver<BTreeSet<String>>,
    seeds: &mut watch::Receiver<Option<Vec<SocketAddr>>>,
    set_seeds: impl Fn(Vec<SocketAddr>),
    wait: Duration,
) -> Joined {
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    let mut discovery_open = true;
    // A list published before the wait began (and maybe seen already) counts.
    if seeds.borrow().is_some() {
        seeds.mark_changed();
    }
    loop {
        if *synced.borrow_and_update() {
            return Joined::Members;
        }
        tokio::select! {
            () = &mut deadline => return Joined::TimedOut,
            r = synced.changed() => {
                if r.is_err() {
                    return Joined::TimedOut;
                }
            }
            r = seeds.changed(), if discovery_open => {
                if r.is_err() {
                    discovery_open = false;
                    continue;
                }
                let Some(found) = seeds.borrow_and_update().clone() else {
                    continue;
                };
                let alone = found.is_empty();
                set_seeds(found);
                // a member that pulled this node in is not alone: its state is
                // on the way
                if alone && live.borrow().len() <= 1 {
                    return Joined::Alone;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn seed(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    type Live = BTreeSet<String>;
    type Channels = (
        watch::Sender<bool>,
        watch::Receiver<bool>,
        watch::Sender<Live>,
        watch::Receiver<Live>,
    );

    /// Not synced, alone in the live set.
    fn channels() -> Channels {
        let (synced_tx, synced_rx) = watch::channel(false);
        let (live_tx, live_rx) = watch::channel(set(&["n1"]));
        (synced_tx, synced_rx, live_tx, live_rx)
    }

    /// Issue 24 item 1: a member pulls this node in while its discovery is failing; the
    /// wait ends when that member's whole state is in, not when the member is heard.
    #[tokio::test(start_paused = true)]
    async fn a_member_that_pulled_this_node_in_ends_the_wait_with_its_whole_state() {
        let (synced_tx, synced_rx, live_tx, live_rx) = channels();
        let (_seeds_tx, mut seeds_rx) = watch::channel(None);
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            live_tx.send_replace(set(&["n1", "n2"]));
            tokio::time::sleep(Duration::from_millis(2)).await;
            live_tx.send_replace(set(&["n1", "n2", "n3"]));
            synced_tx.send_replace(true);
            // keep the senders alive past the wait
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop((live_tx, synced_tx));
        });
        let r = wait_joined(synced_rx, live_rx, &mut seeds_rx, |_| {}, INITIAL_JOIN_WAIT).await;
        assert_eq!(r, Joined::Members);
        assert_eq!(start.elapsed(), Duration::from_millis(152));
    }

    /// The first member heard is not a view: two live without a whole state wait on.
    #[tokio::test(start_paused = true)]
    async fn a_member_heard_without_its_state_does_not_end_the_wait() {
        let (synced_tx, synced_rx, live_tx, live_rx) = channels();
        let (seeds_tx, mut seeds_rx) = watch::channel(None);
        live_tx.send_replace(set(&["n1", "n2"]));
        // the discovery finds nobody (its list is stale): still not alone
        seeds_tx.send_replace(Some(Vec::new()));
        let start = tokio::time::Instant::now();
        let r = wait_joined(synced_rx, live_rx, &mut seeds_rx, |_| {}, INITIAL_JOIN_WAIT).await;
        assert_eq!(r, Joined::TimedOut);
        assert_eq!(start.elapsed(), INITIAL_JOIN_WAIT);
        drop((synced_tx, seeds_tx));
    }

    #[tokio::test(start_paused = true)]
    async fn seeds_found_are_joined_and_the_wait_ends_with_a_whole_state() {
        let (synced_tx, synced_rx, live_tx, live_rx) = channels();
        let (seeds_tx, mut seeds_rx) = watch::channel(None);
        let given = Arc::new(Mutex::new(Vec::new()));
        let g = given.clone();
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            seeds_tx.send_replace(Some(vec![seed("192.0.2.2:7946")]));
            tokio::time::sleep(Duration::from_millis(20)).await;
            live_tx.send_replace(set(&["n1", "n2"]));
            synced_tx.send_replace(true);
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop((seeds_tx, live_tx, synced_tx));
        });
        let r = wait_joined(
            synced_rx,
            live_rx,
            &mut seeds_rx,
            move |s| g.lock().unwrap().push(s),
            INITIAL_JOIN_WAIT,
        )
        .await;
        assert_eq!(r, Joined::Members);
        assert_eq!(start.elapsed(), Duration::from_millis(120));
        assert_eq!(*given.lock().unwrap(), vec![vec![seed("192.0.2.2:7946")]]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_other_speaker_found_ends_the_wait_at_once() {
        let (_synced_tx, synced_rx, _live_tx, live_rx) = channels();
        let (seeds_tx, mut seeds_rx) = watch::channel(None);
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(40)).await;
            seeds_tx.send_replace(Some(Vec::new()));
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let r = wait_joined(synced_rx, live_rx, &mut seeds_rx, |_| {}, INITIAL_JOIN_WAIT).await;
        assert_eq!(r, Joined::Alone);
        assert_eq!(start.elapsed(), Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn seeds_that_never_answer_wait_the_whole_time() {
        let (_synced_tx, synced_rx, _live_tx, live_rx) = channels();
        let (seeds_tx, mut seeds_rx) = watch::channel(None);
        seeds_tx.send_replace(Some(vec![seed("192.0.2.2:7946")]));
        let start = tokio::time::Instant::now();
        let r = wait_joined(synced_rx, live_rx, &mut seeds_rx, |_| {}, INITIAL_JOIN_WAIT).await;
        assert_eq!(r, Joined::TimedOut);
        assert_eq!(start.elapsed(), INITIAL_JOIN_WAIT);
    }

    /// Already synced (a member pulled it in before the wait began).
    #[tokio::test(start_paused = true)]
    async fn already_synced_returns_at_once() {
        let (synced_tx, synced_rx, live_tx, live_rx) = channels();
        live_tx.send_replace(set(&["n1", "n3"]));
        synced_tx.send_replace(true);
        let (_seeds_tx, mut seeds_rx) = watch::channel(None);
        let start = tokio::time::Instant::now();
        let r = wait_joined(synced_rx, live_rx, &mut seeds_rx, |_| {}, INITIAL_JOIN_WAIT).await;
        assert_eq!(r, Joined::Members);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
