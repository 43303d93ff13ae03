//! The real sessions and BFD behind [`crate::bgp_speaker`]'s traits: the
//! `bgp` crate's [`Session`] (one tokio task per peer) and the `bfd`
//! runtime's handle.

use std::net::IpAddr;
use std::time::Duration;

use bgp::fsm::CeaseSubcode;
use bgp::listener::Listeners;
use bgp::metrics::BgpMetrics;
use bgp::rib_out::Advertisement;
use bgp::session::{Session, SessionEvent, SessionEvents};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::bgp_speaker::{
    BfdClient, BfdOps, Close, Closing, PeerEvent, PeerSession, SessionFactory, SessionId,
};
use crate::decide::sessions::{BfdSpec, SessionSpec};

/// Starts `bgp` crate sessions with MetalLB's `metallb_bgp_*` series.
pub struct BgpFactory {
    listeners: Listeners,
    metrics: Option<BgpMetrics>,
}

impl BgpFactory {
    /// Sessions sharing `listeners`, counted in `metrics`.
    pub fn new(listeners: Listeners, metrics: Option<BgpMetrics>) -> Self {
        Self { listeners, metrics }
    }
}

struct Running {
    session: Option<Session>,
    forward: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

impl SessionFactory for BgpFactory {
    fn spawn(
        &mut self,
        id: SessionId,
        spec: &SessionSpec,
        events: mpsc::Sender<PeerEvent>,
    ) -> Result<Box<dyn PeerSession>, String> {
        let metrics = self.metrics.as_ref().map(|m| {
            m.session(
                bgp::metrics::peer_label(spec.bgp.peer),
                spec.bgp.vrf.as_deref(),
            )
        });
        let session =
            Session::spawn_with_listeners(spec.bgp.clone(), metrics, self.listeners.clone())
                .map_err(|e| e.to_string())?;
        let forward = tokio::spawn(forward(id, session.events(), session.state(), events));
        Ok(Box::new(Running {
            session: Some(session),
            forward,
        }))
    }
}

/// Sends the speaker a [`PeerEvent`] at every change of the session's
/// published state (and when it learns the connection's local address from
/// a negotiation), until the session ends or the speaker stops listening.
/// Events and the state are separate channels: the state watch decides
/// what is reported (an event can precede the state update it announces).
async fn forward(
    id: SessionId,
    mut rx: SessionEvents,
    mut state: tokio::sync::watch::Receiver<bgp::state::SessionState>,
    tx: mpsc::Sender<PeerEvent>,
) {
    let mut local = None;
    let mut events_open = true;
    loop {
        tokio::select! {
            ev = rx.recv(), if events_open => match ev {
                Ok(SessionEvent::Negotiated(n)) => local = Some(n.local),
                // The negotiation may have happened before the subscription.
                Ok(SessionEvent::Current { negotiated, .. }) => {
                    local = negotiated.map(|n| n.local);
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            changed = state.changed() => if changed.is_err() {
                return;
            },
        }
        let s = state.borrow_and_update().clone();
        let ev = PeerEvent {
            id: id.clone(),
            state: s.fsm_state,
            last_error: s.last_error.as_ref().map(|e| e.text.clone()),
            local,
            held_down: s.held_down,
        };
        if tx.send(ev).await.is_err() {
            return;
        }
    }
}

impl PeerSession for Running {
    fn set_advertisements(&self, ads: Vec<Advertisement>) {
        if let Some(s) = &self.session {
            let _ = s.set_advertisements(ads);
        }
    }

    fn hold_down(&self, reason: &str) {
        if let Some(s) = &self.session {
            let _ = s.hold_down(reason, CeaseSubcode::BfdDown);
        }
    }

    fn release(&self) {
        if let Some(s) = &self.session {
            let _ = s.release();
        }
    }

    fn close(mut self: Box<Self>, how: Close) -> Closing {
        let session = self.session.take();
        Box::pin(async move {
            let Some(s) = session else { return };
            match how {
                Close::Deconfigured => s.deconfigure().await,
                Close::Shutdown(m) => s.shutdown(m).await,
                Close::PlannedRestart(m) => s.planned_restart(m).await,
            }
            drop(self);
        })
    }
}

/// The BFD runtime through its handle; `None` when BFD could not start
/// (e.g. port 3784 taken): every acquire then fails with that reason.
pub struct RuntimeBfd {
    handle: Result<bfd::BfdHandle, String>,
}

impl RuntimeBfd {
    /// Over a running runtime, or the reason there is none.
    pub fn new(handle: Result<bfd::BfdHandle, String>) -> Self {
        Self { handle }
    }
}

/// The interface holding `local` (single-hop BFD is bound to it).
pub fn interface_of(local: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for ifa in addrs {
        let Some(a) = ifa.address else { continue };
        let ip = a
            .as_sockaddr_in()
            .map(|s| IpAddr::V4(s.ip()))
            .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())));
        if ip == Some(local) {
            return Some(ifa.interface_name);
        }
    }
    None
}

impl BfdOps for RuntimeBfd {
    fn acquire(
        &mut self,
        local: IpAddr,
        remote: IpAddr,
        spec: &BfdSpec,
        vrf: Option<&str>,
    ) -> Result<BfdClient, String> {
        let handle = self.handle.as_ref().map_err(Clone::clone)?;
        let key = if spec.multihop {
            bfd::SessionKey::multi_hop(local, remote)
        } else {
            let iface = interface_of(local)
                .ok_or_else(|| format!("no interface holds the local address {local}"))?;
            bfd::SessionKey::single_hop(iface, local, remote)
        };
        let (client, _status) = within(
            "acquiring a session",
            handle.acquire_in_vrf(key, spec.params, vrf),
        )?;
        Ok(client.0)
    }

    fn set_parameters(&mut self, client: BfdClient, spec: &BfdSpec) -> Result<(), String> {
        let handle = self.handle.as_ref().map_err(Clone::clone)?;
        within(
            "changing a session's parameters",
            handle.set_parameters(bfd::ClientId(client), spec.params),
        )
    }

    fn release(&mut self, client: BfdClient) {
        if let Ok(h) = &self.handle
            && let Err(e) = within("releasing a session", h.release(bfd::ClientId(client)))
        {
            tracing::warn!(error = %e, "BFD release failed");
        }
    }
}

/// How long a BFD runtime request may take: it answers from its own thread
/// within microseconds; a runtime that does not answer in this time is stuck.
pub const BFD_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs a request to the BFD runtime to its answer or [`BFD_REQUEST_TIMEOUT`],
/// on the calling worker thread (handed over meanwhile: the speaker's
/// decisions call [`BfdOps`] synchronously; multi-threaded runtime).
fn within<T>(
    what: &str,
    request: impl std::future::Future<Output = Result<T, bfd::runtime::Error>>,
) -> Result<T, String> {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(async { tokio::time::timeout(BFD_REQUEST_TIMEOUT, request).await })
    })
    .map_err(|_| {
        format!(
            "the BFD runtime did not answer {what} within {} s",
            BFD_REQUEST_TIMEOUT.as_secs()
        )
    })?
    .map_err(|e| e.to_string())
}
