//! The live speakers, as the speaker's loop sees them: the seam where the
//! membership protocol plugs in. Its [`LiveSender`] publishes the set of live
//! node names (`None`: membership off, every known Node counts, MetalLB's
//! "memberlist disabled"); the loop hands each new set to
//! [`crate::node::NodeSpeaker::set_live`] and re-decides every Service when it
//! changed.

use std::collections::BTreeSet;

use tokio::sync::watch;

/// The publishing half (the membership protocol holds it).
pub type LiveSender = watch::Sender<Option<BTreeSet<String>>>;

/// The loop's half.
#[derive(Debug)]
pub struct Liveness {
    rx: watch::Receiver<Option<BTreeSet<String>>>,
}

impl Liveness {
    /// A seam starting at `initial`; publish later sets on the sender.
    pub fn new(initial: Option<BTreeSet<String>>) -> (LiveSender, Liveness) {
        let (tx, rx) = watch::channel(initial);
        (tx, Liveness { rx })
    }

    /// Membership off: the set is `None` (keep the sender, or the seam
    /// simply never changes again).
    pub fn memberlist_disabled() -> (LiveSender, Liveness) {
        Self::new(None)
    }

    /// The set now.
    pub fn current(&self) -> Option<BTreeSet<String>> {
        self.rx.borrow().clone()
    }

    /// The next set published (several quick ones coalesce into the last);
    /// pends forever once the sender is gone. Cancel-safe.
    pub async fn changed(&mut self) -> Option<BTreeSet<String>> {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.rx.borrow_and_update().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn set(v: &[&str]) -> Option<BTreeSet<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[tokio::test]
    async fn publishes_coalesce_and_a_dropped_sender_pends() {
        let (tx, mut l) = Liveness::memberlist_disabled();
        assert_eq!(l.current(), None);
        tx.send_replace(set(&["node-1", "node-2"]));
        tx.send_replace(set(&["node-1"]));
        assert_eq!(l.changed().await, set(&["node-1"]));
        // Nothing new: pends.
        let r = tokio::time::timeout(Duration::from_millis(50), l.changed()).await;
        assert!(r.is_err());
        drop(tx);
        let r = tokio::time::timeout(Duration::from_millis(50), l.changed()).await;
        assert!(r.is_err(), "a dropped sender must not spin the loop");
    }
}
