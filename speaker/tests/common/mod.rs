//! Fakes shared by the speaker's socket-less tests: sessions and a BFD that
//! record what the speaker asks of them, and the claims a fake layer-2
//! responder holds.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use bgp::rib_out::Advertisement;
use speaker::bgp_speaker::{
    BfdClient, BfdOps, Close, Closing, PeerEvent, PeerSession, SessionFactory, SessionId,
};
use speaker::decide::sessions::{BfdSpec, SessionSpec};
use tokio::sync::mpsc;

pub type Log = Arc<Mutex<Vec<String>>>;

/// Claims by address: the owners (Service keys) answering for it, as a fake
/// layer-2 responder records them.
pub type Claims = Arc<Mutex<BTreeMap<IpAddr, BTreeSet<String>>>>;

/// `owner` claims `ip`.
pub fn claim(claims: &Claims, owner: &str, ip: IpAddr) {
    claims
        .lock()
        .unwrap()
        .entry(ip)
        .or_default()
        .insert(owner.to_owned());
}

/// `owner` releases `ip` (an address no owner claims is gone).
pub fn release(claims: &Claims, owner: &str, ip: IpAddr) {
    let mut c = claims.lock().unwrap();
    if let Some(o) = c.get_mut(&ip) {
        o.remove(owner);
        if o.is_empty() {
            c.remove(&ip);
        }
    }
}

pub struct FakeSession {
    peer: String,
    generation: u64,
    log: Log,
}

impl FakeSession {
    fn note(&self, what: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}#{} {what}", self.peer, self.generation));
    }
}

impl PeerSession for FakeSession {
    fn set_advertisements(&self, ads: Vec<Advertisement>) {
        let p: Vec<String> = ads.iter().map(|a| a.prefix.to_string()).collect();
        self.note(format!("set [{}]", p.join(" ")));
    }
    fn hold_down(&self, reason: &str) {
        self.note(format!("hold_down {reason}"));
    }
    fn release(&self) {
        self.note("release".into());
    }
    fn close(self: Box<Self>, how: Close) -> Closing {
        self.note(format!("close {how:?}"));
        Box::pin(async {})
    }
}

pub struct FakeFactory(pub Log);

impl SessionFactory for FakeFactory {
    fn spawn(
        &mut self,
        id: SessionId,
        spec: &SessionSpec,
        _events: mpsc::Sender<PeerEvent>,
    ) -> Result<Box<dyn PeerSession>, String> {
        self.0.lock().unwrap().push(format!(
            "{}#{} spawn {}",
            id.peer, id.generation, spec.bgp.peer
        ));
        Ok(Box::new(FakeSession {
            peer: id.peer,
            generation: id.generation,
            log: self.0.clone(),
        }))
    }
}

pub struct FakeBfd(pub Log, pub u64);

impl BfdOps for FakeBfd {
    fn acquire(
        &mut self,
        local: IpAddr,
        remote: IpAddr,
        spec: &BfdSpec,
        _vrf: Option<&str>,
    ) -> Result<BfdClient, String> {
        self.1 += 1;
        self.0.lock().unwrap().push(format!(
            "bfd acquire {local}->{remote} rx {} = {}",
            spec.params.receive_interval_ms, self.1
        ));
        Ok(self.1)
    }
    fn set_parameters(&mut self, client: BfdClient, spec: &BfdSpec) -> Result<(), String> {
        self.0.lock().unwrap().push(format!(
            "bfd set {client} rx {}",
            spec.params.receive_interval_ms
        ));
        Ok(())
    }
    fn release(&mut self, client: BfdClient) {
        self.0.lock().unwrap().push(format!("bfd release {client}"));
    }
}
