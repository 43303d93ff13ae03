//! The live speakers, as the speaker's loop sees them: the seam where the
//! membership protocol plugs in. [`Liveness::current`] is the set of live
//! node names (`None`: membership off, every known Node counts, MetalLB's
//! "memberlist disabled"); the loop hands each new set to
//! [`crate::node::NodeSpeaker::set_live`] and, when it changed, decides again
//! the layer-2 Services whose candidates include a node that joined or left
//! ([`crate::node::NodeSpeaker::decide_live`]).
//!
//! With membership on, the set follows the membership protocol's live set
//! ([`Liveness::membership`]), except while this node is self-fenced (the
//! protocol's fence watch, or [`Liveness::set_fenced`]): then it is empty, so
//! this node wins no election and answers for nothing until the fence lifts.
//! Both are read as watches (state, never an event that can be lost): the
//! protocol raises the fence before it publishes a live set it may not win
//! from, so the set read is never one it should not act on.

use std::collections::BTreeSet;

use config::api::v1beta1::Layer2Membership;
use tokio::sync::watch;

/// The publishing half of [`Liveness::new`] (tests, or another source).
pub type LiveSender = watch::Sender<Option<BTreeSet<String>>>;

#[derive(Debug)]
enum Source {
    /// Sets published on a [`LiveSender`].
    Published(watch::Receiver<Option<BTreeSet<String>>>),
    /// The membership protocol's live set and fence.
    Membership {
        live: watch::Receiver<BTreeSet<String>>,
        fenced: watch::Receiver<bool>,
    },
}

/// The loop's half.
#[derive(Debug)]
pub struct Liveness {
    source: Source,
    fenced: bool,
    /// Membership on but not joined yet ([`Liveness::joining`]).
    joining: bool,
}

impl Liveness {
    /// A seam starting at `initial`; publish later sets on the sender.
    pub fn new(initial: Option<BTreeSet<String>>) -> (LiveSender, Liveness) {
        let (tx, rx) = watch::channel(initial);
        (
            tx,
            Liveness {
                source: Source::Published(rx),
                fenced: false,
                joining: false,
            },
        )
    }

    /// Membership on, not joined yet: nobody is live for this node (it
    /// claims nothing) until [`Liveness::membership`] replaces it.
    pub fn joining() -> (LiveSender, Liveness) {
        let (tx, mut l) = Self::new(Some(BTreeSet::new()));
        l.joining = true;
        (tx, l)
    }

    /// Membership off: the set is `None` (keep the sender, or the seam
    /// simply never changes again).
    pub fn memberlist_disabled() -> (LiveSender, Liveness) {
        Self::new(None)
    }

    /// Membership on: the set is the protocol's live set (this node
    /// included), empty while the protocol's fence is up.
    pub fn membership(
        live: watch::Receiver<BTreeSet<String>>,
        fenced: watch::Receiver<bool>,
    ) -> Liveness {
        Liveness {
            source: Source::Membership { live, fenced },
            fenced: false,
            joining: false,
        }
    }

    /// What this speaker publishes of its membership view (its
    /// ConfigurationState's `layer2Membership`, read by `metallbctl explain`):
    /// `None` with membership off.
    /// Read on every turn of the loop: the set is borrowed, not cloned (only
    /// up to 256 names are copied).
    pub fn report(&self) -> Option<Layer2Membership> {
        let (joined, fenced) = (!self.joining, self.fenced());
        match &self.source {
            Source::Published(rx) => rx
                .borrow()
                .as_ref()
                .map(|live| Layer2Membership::of(live, joined, fenced)),
            Source::Membership { live, .. } => {
                Some(Layer2Membership::of(&live.borrow(), joined, fenced))
            }
        }
    }

    /// The set now (empty while fenced).
    pub fn current(&self) -> Option<BTreeSet<String>> {
        let live = match &self.source {
            Source::Published(rx) => rx.borrow().clone(),
            Source::Membership { live, .. } => Some(live.borrow().clone()),
        };
        if self.fenced() {
            return Some(BTreeSet::new());
        }
        live
    }

    /// Self-fence on (`true`: answer for nothing) or off, besides the
    /// protocol's own fence. Returns the set now.
    pub fn set_fenced(&mut self, fenced: bool) -> Option<BTreeSet<String>> {
        self.fenced = fenced;
        self.current()
    }

    /// Whether this node is self-fenced.
    pub fn fenced(&self) -> bool {
        self.fenced
            || match &self.source {
                Source::Membership { fenced, .. } => *fenced.borrow(),
                Source::Published(_) => false,
            }
    }

    /// The next set published (several quick ones coalesce into the last);
    /// pends forever once the source is gone. Cancel-safe.
    pub async fn changed(&mut self) -> Option<BTreeSet<String>> {
        let gone = match &mut self.source {
            Source::Published(rx) => {
                let gone = rx.changed().await.is_err();
                rx.borrow_and_update();
                gone
            }
            Source::Membership { live, fenced } => {
                let gone = tokio::select! {
                    r = live.changed() => r.is_err(),
                    r = fenced.changed() => r.is_err(),
                };
                live.borrow_and_update();
                fenced.borrow_and_update();
                gone
            }
        };
        if gone {
            std::future::pending::<()>().await;
        }
        self.current()
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

    #[tokio::test]
    async fn membership_sets_follow_and_the_fence_empties_them() {
        let (tx, rx) = watch::channel(set(&["node-1", "node-2"]).unwrap());
        let (_fence_tx, fence_rx) = watch::channel(false);
        let mut l = Liveness::membership(rx, fence_rx);
        assert_eq!(l.current(), set(&["node-1", "node-2"]));
        tx.send_replace(set(&["node-1"]).unwrap());
        assert_eq!(l.changed().await, set(&["node-1"]));
        assert_eq!(l.set_fenced(true), set(&[]));
        assert!(l.fenced());
        // While fenced, changes still arrive, and stay empty.
        tx.send_replace(set(&["node-1", "node-3"]).unwrap());
        assert_eq!(l.changed().await, set(&[]));
        assert_eq!(l.set_fenced(false), set(&["node-1", "node-3"]));
        drop(tx);
        let r = tokio::time::timeout(Duration::from_millis(50), l.changed()).await;
        assert!(r.is_err(), "a dropped membership must not spin the loop");
    }

    /// What explain reads: nothing with membership off, `Joining` (electing
    /// with nobody) before the join, then the live set, and `SelfFenced`
    /// (electing with nobody) while fenced.
    #[tokio::test]
    async fn the_view_reported_follows_join_and_fence() {
        let (_tx, off) = Liveness::memberlist_disabled();
        assert_eq!(off.report(), None);
        let (_tx, joining) = Liveness::joining();
        let r = joining.report().unwrap();
        assert_eq!((r.state.as_str(), r.electing()), ("Joining", set(&[])));
        let (tx, rx) = watch::channel(set(&["node-1", "node-2"]).unwrap());
        let (fence_tx, fence_rx) = watch::channel(false);
        let l = Liveness::membership(rx, fence_rx);
        let r = l.report().unwrap();
        assert_eq!(
            (r.state.as_str(), r.live_count, r.electing()),
            ("Joined", 2, set(&["node-1", "node-2"]))
        );
        fence_tx.send_replace(true);
        let r = l.report().unwrap();
        assert_eq!(
            (r.state.as_str(), r.live_count, r.electing()),
            ("SelfFenced", 2, set(&[]))
        );
        fence_tx.send_replace(false);
        // Past the cap only the count: explain cannot elect with it.
        let many: BTreeSet<String> = (0..300).map(|i| format!("node-{i}")).collect();
        tx.send_replace(many);
        let r = l.report().unwrap();
        assert!(r.truncated && r.live_speakers.is_empty() && r.live_count == 300);
        assert_eq!(r.electing(), None);
    }

    /// The protocol's fence is a watch: raised, the set is empty at once;
    /// lowered, the set is back, however many changes came between (a
    /// lost `Fence(false)` event once left a node answering nothing).
    #[tokio::test]
    async fn the_protocol_fence_is_read_as_state() {
        let (tx, rx) = watch::channel(set(&["node-1", "node-2"]).unwrap());
        let (fence_tx, fence_rx) = watch::channel(false);
        let mut l = Liveness::membership(rx, fence_rx);
        fence_tx.send_replace(true);
        assert_eq!(l.changed().await, set(&[]));
        assert!(l.fenced());
        // the fence goes up before a shrink is published: never the shrink unfenced
        tx.send_replace(set(&["node-1"]).unwrap());
        assert_eq!(l.current(), set(&[]));
        fence_tx.send_replace(false);
        fence_tx.send_replace(true);
        fence_tx.send_replace(false);
        assert_eq!(l.changed().await, set(&["node-1"]));
        assert!(!l.fenced());
        drop(fence_tx);
        drop(tx);
        let r = tokio::time::timeout(Duration::from_millis(50), l.changed()).await;
        assert!(r.is_err(), "a dropped membership must not spin the loop");
    }
}
