//! The loop against a fake API server (optimistic concurrency on
//! `resourceVersion`, scripted failures and hangs) with tokio's paused
//! clock: the failure scenarios of the controller's edge.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use config::api::v1beta1::IPAddressPoolSpec;
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus,
};
use kube::api::ObjectMeta;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube_edge::ApiFailure;
use status::{SystemClock, WriterConfig};
use tokio::sync::mpsc;

use super::*;
use crate::service::ServiceUpdate;

const NS: &str = "metallb-system";

fn pool(addresses: &[&str]) -> IPAddressPool {
    IPAddressPool {
        metadata: ObjectMeta {
            name: Some("a".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: IPAddressPoolSpec {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        status: None,
    }
}

fn lb(name: &str, rv: u64) -> KubeService {
    KubeService {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.to_string()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            cluster_ip: Some("10.96.0.10".into()),
            cluster_ips: Some(vec!["10.96.0.10".into()]),
            ports: Some(vec![ServicePort {
                protocol: Some("TCP".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// `svc` as the controller left it: the address and the pool annotation.
fn with_ingress(mut svc: KubeService, ip: &str) -> KubeService {
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            service::ANNOTATION_IP_ALLOCATED_FROM_POOL.into(),
            "a".into(),
        );
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(ip.into()),
                ..Default::default()
            }]),
        }),
        ..Default::default()
    });
    svc
}

fn ingress(svc: &KubeService) -> Vec<String> {
    service::ingress_ips(svc)
        .unwrap_or_default()
        .iter()
        .map(IpAddr::to_string)
        .collect()
}

/// What the fake server does with the next write of a Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    /// Never answers (the caller's deadline ends it).
    Hang,
    /// Answers with this HTTP status code.
    Fail(u16),
    /// Takes this long, then succeeds.
    Slow(Duration),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Write {
        key: String,
        rv: Option<String>,
        timeout: Duration,
    },
    Get(String),
    Publish {
        key: String,
        reasons: Vec<&'static str>,
    },
}

#[derive(Default)]
struct Server {
    objects: BTreeMap<String, KubeService>,
    rv: u64,
    scripts: HashMap<String, VecDeque<Script>>,
    /// Repeated for every write of the key once its queue is empty.
    forever: HashMap<String, Script>,
    calls: Vec<Call>,
}

type Hook = Box<dyn FnMut(usize) + Send>;

/// An API server with optimistic concurrency: a write carrying another
/// `resourceVersion` than the object's fails with 409.
#[derive(Clone, Default)]
struct FakeApi {
    server: Arc<Mutex<Server>>,
    /// Runs after each successful write, with the number of writes so far.
    after_write: Arc<Mutex<Option<Hook>>>,
}

impl FakeApi {
    fn insert(&self, svc: KubeService) {
        let mut s = self.server.lock().unwrap();
        let rv: u64 = svc
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        s.rv = s.rv.max(rv);
        s.objects.insert(service::key_of(&svc), svc);
    }
    fn object(&self, key: &str) -> KubeService {
        self.server.lock().unwrap().objects[key].clone()
    }
    fn calls(&self) -> Vec<Call> {
        self.server.lock().unwrap().calls.clone()
    }
    fn writes(&self) -> Vec<(String, Option<String>)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Write { key, rv, .. } => Some((key, rv)),
                _ => None,
            })
            .collect()
    }
    fn script(&self, key: &str, steps: &[Script]) {
        self.server
            .lock()
            .unwrap()
            .scripts
            .insert(key.into(), steps.iter().copied().collect());
    }
    fn forever(&self, key: &str, step: Script) {
        self.server.lock().unwrap().forever.insert(key.into(), step);
    }
    fn on_write(&self, hook: impl FnMut(usize) + Send + 'static) {
        *self.after_write.lock().unwrap() = Some(Box::new(hook));
    }
    /// Every Service's first ingress address, to check no address is given twice.
    fn addresses(&self) -> BTreeMap<String, String> {
        self.server
            .lock()
            .unwrap()
            .objects
            .iter()
            .filter_map(|(k, s)| ingress(s).first().map(|ip| (k.clone(), ip.clone())))
            .collect()
    }
}

fn failure(key: &str, code: u16) -> ApiFailure {
    ApiFailure::new(
        format!("patching services/status {key}"),
        Class::of_code(code),
        Some(code),
        format!("HTTP {code}"),
    )
}

impl ServiceApi for FakeApi {
    async fn write(
        &self,
        svc: &KubeService,
        update: &ServiceUpdate,
        timeout: Duration,
    ) -> Result<Option<KubeService>, ApiFailure> {
        let key = service::key_of(svc);
        let step = {
            let mut s = self.server.lock().unwrap();
            s.calls.push(Call::Write {
                key: key.clone(),
                rv: svc.metadata.resource_version.clone(),
                timeout,
            });
            let scripted = s.scripts.get_mut(&key).and_then(VecDeque::pop_front);
            scripted.or_else(|| s.forever.get(&key).copied())
        };
        match step {
            Some(Script::Hang) => {
                tokio::time::sleep(timeout).await;
                return Err(ApiFailure::timeout(key, timeout));
            }
            Some(Script::Fail(code)) => return Err(failure(&key, code)),
            Some(Script::Slow(d)) => tokio::time::sleep(d.min(timeout)).await,
            None => {}
        }
        let (object, n) = {
            let mut s = self.server.lock().unwrap();
            let rv = s.rv + 1;
            let Some(current) = s.objects.get_mut(&key) else {
                return Ok(None);
            };
            if current.metadata.resource_version != svc.metadata.resource_version {
                return Err(failure(&key, 409));
            }
            if let Some(ips) = &update.ingress {
                let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
                *current = match ips.first() {
                    Some(ip) => with_ingress(current.clone(), ip),
                    None => {
                        let mut c = current.clone();
                        c.status = None;
                        c
                    }
                };
            }
            let annotations = current
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new);
            for (k, v) in &update.annotations {
                match v {
                    Some(v) => annotations.insert(k.clone(), v.clone()),
                    None => annotations.remove(k),
                };
            }
            current.metadata.resource_version = Some(rv.to_string());
            let object = current.clone();
            s.rv = rv;
            let n = s
                .calls
                .iter()
                .filter(|c| matches!(c, Call::Write { .. }))
                .count();
            (object, n)
        };
        if let Some(hook) = self.after_write.lock().unwrap().as_mut() {
            hook(n);
        }
        Ok(Some(object))
    }

    async fn get(
        &self,
        namespace: &str,
        name: &str,
        _timeout: Duration,
    ) -> Result<Option<KubeService>, ApiFailure> {
        let key = format!("{namespace}/{name}");
        let mut s = self.server.lock().unwrap();
        s.calls.push(Call::Get(key.clone()));
        Ok(s.objects.get(&key).cloned())
    }

    async fn publish(&self, svc: &KubeService, events: &[Event], _timeout: Duration) {
        self.server.lock().unwrap().calls.push(Call::Publish {
            key: service::key_of(svc),
            reasons: events.iter().map(|e| e.reason).collect(),
        });
    }
}

/// Service changes from the test; a re-list waits for the test's gate and
/// then (when asked to) loads the server's objects into the store.
struct FakeChanges {
    rx: mpsc::UnboundedReceiver<Changes>,
    gate: watch::Receiver<bool>,
    relists: Arc<Mutex<usize>>,
    /// The server and the Service store's writer: a re-list loads the
    /// server's objects into the store when `fresh_relist`.
    fresh: Fresh,
    fresh_relist: bool,
}

type Fresh = Arc<Mutex<Option<(FakeApi, Writer<KubeService>)>>>;

impl ServiceChanges for FakeChanges {
    async fn next(&mut self) -> Option<Changes> {
        let mut c = self.rx.recv().await?;
        while let Ok(more) = self.rx.try_recv() {
            c.keys.extend(more.keys);
            c.full |= more.full;
        }
        Some(c)
    }

    async fn relist(&mut self) {
        *self.relists.lock().unwrap() += 1;
        let _ = self.gate.wait_for(|open| *open).await;
        if !self.fresh_relist {
            return;
        }
        if let Some((api, writer)) = self.fresh.lock().unwrap().as_mut() {
            let objects: Vec<KubeService> = api
                .server
                .lock()
                .unwrap()
                .objects
                .values()
                .cloned()
                .collect();
            writer.apply_watcher_event(&watcher::Event::Init);
            for o in objects {
                writer.apply_watcher_event(&watcher::Event::InitApply(o));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
        }
    }
}

fn ready_store<K>(objects: Vec<K>) -> (Store<K>, Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

struct Harness {
    api: FakeApi,
    leader: watch::Sender<Leadership>,
    changes: mpsc::UnboundedSender<Changes>,
    gate: watch::Sender<bool>,
    relists: Arc<Mutex<usize>>,
    heartbeat: Arc<Heartbeat>,
    pool_writer: StatusWriter<IPAddressPool>,
    store: Fresh,
    config_changed: cluster_view::Changes,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

struct Setup {
    pool: Vec<&'static str>,
    /// The objects on the server.
    server: Vec<KubeService>,
    /// The objects in the store (default: the server's).
    store: Option<Vec<KubeService>>,
    /// A re-list loads the server's objects into the store.
    fresh_relist: bool,
    /// The re-list gate starts open.
    gate_open: bool,
    leader: Leadership,
    api: FakeApi,
    max_chained_passes: usize,
    overlap: Option<OverlapInputs>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            pool: vec!["198.51.100.0/24"],
            server: Vec::new(),
            store: None,
            fresh_relist: false,
            gate_open: true,
            leader: leading(1, Duration::from_secs(3600)),
            api: FakeApi::default(),
            max_chained_passes: 3,
            overlap: None,
        }
    }
}

fn leading(term: u64, for_: Duration) -> Leadership {
    Leadership {
        term,
        until: Some(now() + for_),
    }
}

fn timing() -> Timing {
    Timing {
        request_timeout: Duration::from_secs(10),
        ..Timing::default()
    }
}

fn start(setup: Setup) -> Harness {
    let api = setup.api;
    for s in &setup.server {
        api.insert(s.clone());
    }
    let (pools, _pw) = ready_store(vec![pool(&setup.pool)]);
    let (communities, _cw) = ready_store(Vec::new());
    let (namespaces, _nw) = ready_store(Vec::new());
    let (services, writer) = ready_store(setup.store.unwrap_or(setup.server));
    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    let (gate_tx, gate_rx) = watch::channel(setup.gate_open);
    let relists = Arc::new(Mutex::new(0));
    let fresh = Arc::new(Mutex::new(Some((api.clone(), writer))));
    let (leader_tx, leader_rx) = watch::channel(setup.leader);
    let heartbeat = Arc::new(Heartbeat::new());
    let config_changed = cluster_view::Changes::new(16);
    let pool_writer = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status::Metrics::unregistered(),
    );
    let driver = Driver::new(
        Inputs {
            pools,
            communities,
            namespaces,
            services,
            config_changed: config_changed.clone(),
            service_changes: FakeChanges {
                rx: changes_rx,
                gate: gate_rx,
                relists: relists.clone(),
                fresh: fresh.clone(),
                fresh_relist: setup.fresh_relist,
            },
            leader: leader_rx,
            overlap: setup.overlap,
        },
        Outputs {
            namespace: NS.into(),
            owner: None,
            state_writer: StatusWriter::new(
                WriterConfig::default(),
                Arc::new(SystemClock),
                status::Metrics::unregistered(),
            ),
            pool_writer: pool_writer.clone(),
            api: api.clone(),
            ready: Arc::new(AtomicBool::new(false)),
            heartbeat: heartbeat.clone(),
            lb_class: String::new(),
            metrics: ControllerMetrics::register(&prometheus::Registry::new()).unwrap(),
        },
        Timing {
            max_chained_passes: setup.max_chained_passes,
            ..timing()
        },
    );
    Harness {
        api,
        leader: leader_tx,
        changes: changes_tx,
        gate: gate_tx,
        relists,
        heartbeat,
        pool_writer,
        store: fresh,
        config_changed,
        task: tokio::spawn(driver.run()),
    }
}

impl Harness {
    /// Lets the loop run for `d` of (paused, auto-advancing) time.
    async fn run_for(&self, d: Duration) {
        tokio::time::sleep(d).await;
        assert!(!self.task.is_finished(), "the loop ended");
    }

    /// The Service is deleted (from the server and, as its watch would, the store).
    fn delete(&self, svc: &KubeService) {
        let key = service::key_of(svc);
        self.api.server.lock().unwrap().objects.remove(&key);
        if let Some((_, writer)) = self.store.lock().unwrap().as_mut() {
            writer.apply_watcher_event(&watcher::Event::Delete(svc.clone()));
        }
        self.touch(&key);
    }

    /// The Service loses its address and annotation on the server and in the
    /// store, with no change signal to the loop.
    fn silently_strip(&self, key: &str) {
        let svc = {
            let mut srv = self.api.server.lock().unwrap();
            srv.rv += 1;
            let rv = srv.rv;
            let o = srv.objects.get_mut(key).unwrap();
            o.status = None;
            o.metadata.annotations = None;
            o.metadata.resource_version = Some(rv.to_string());
            o.clone()
        };
        if let Some((_, writer)) = self.store.lock().unwrap().as_mut() {
            writer.apply_watcher_event(&watcher::Event::Apply(svc));
        }
    }

    fn touch(&self, key: &str) {
        self.changes
            .send(Changes {
                keys: [key.to_owned()].into(),
                full: false,
            })
            .unwrap();
    }
}

fn pool_key() -> ObjectKey {
    ObjectKey::new(NS, "a")
}

#[tokio::test(start_paused = true)]
async fn allocates_with_writes_conditional_on_the_version_read() {
    let h = start(Setup {
        server: vec![lb("x", 5)],
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(ingress(&h.api.object("ns/x")), ["198.51.100.0"]);
    assert_eq!(h.api.writes(), [("ns/x".to_owned(), Some("5".to_owned()))]);
    assert!(h.pool_writer.desired(&pool_key()).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_hung_request_ends_at_its_deadline_and_the_loop_goes_on() {
    let api = FakeApi::default();
    api.script("ns/a", &[Script::Hang]);
    let h = start(Setup {
        server: vec![lb("a", 1), lb("b", 1)],
        api,
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(5)).await;
    // Hung on a: b waits its turn, the loop is in a request with a deadline.
    assert!(ingress(&h.api.object("ns/b")).is_empty());
    h.run_for(Duration::from_secs(10)).await;
    assert_eq!(
        ingress(&h.api.object("ns/b")).len(),
        1,
        "{:?}",
        h.api.calls()
    );
    // a is retried after its backoff, and gets its address.
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(
        ingress(&h.api.object("ns/a")).len(),
        1,
        "{:?}",
        h.api.calls()
    );
    for c in h.api.calls() {
        if let Call::Write { timeout, .. } = c {
            assert!(timeout <= Duration::from_secs(10), "{timeout:?}");
        }
    }
    // The loop beat through it all.
    assert!(
        h.heartbeat.age() <= timing().tick,
        "{:?}",
        h.heartbeat.age()
    );
}

#[tokio::test(start_paused = true)]
async fn a_conflict_is_read_again_and_decided_again() {
    // The user changed the Service (version 2) after the store read it (1).
    let api = FakeApi::default();
    let mut edited = lb("x", 2);
    edited
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("team".into(), "web".into());
    let h = start(Setup {
        server: vec![edited],
        store: Some(vec![lb("x", 1)]),
        api,
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    let calls = h.api.calls();
    let writes = h.api.writes();
    assert_eq!(
        writes,
        [
            ("ns/x".to_owned(), Some("1".to_owned())),
            ("ns/x".to_owned(), Some("2".to_owned()))
        ],
        "{calls:?}"
    );
    assert!(calls.contains(&Call::Get("ns/x".into())));
    let x = h.api.object("ns/x");
    assert_eq!(ingress(&x), ["198.51.100.0"]);
    // The user's change is kept.
    assert_eq!(x.metadata.labels.unwrap()["team"], "web");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_refusal_is_retried_rarely_and_its_events_published_once() {
    // A webhook (or RBAC) refuses every write of x: 403 forever.
    let api = FakeApi::default();
    api.forever("ns/x", Script::Fail(403));
    let h = start(Setup {
        server: vec![lb("x", 1)],
        api,
        ..Setup::default()
    });
    // Other changes keep coming for x meanwhile (e.g. the user labels it).
    for _ in 0..20 {
        h.run_for(Duration::from_secs(60)).await;
        h.touch("ns/x");
    }
    let writes = h.api.writes().len();
    // 20 minutes at a pace of 4-5 min: 1 + at most 5 retries (the old
    // behaviour: every 30 s or faster, 40+).
    assert!((2..=6).contains(&writes), "{writes} writes in 20 min");
    let published = h
        .api
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Publish { .. }))
        .count();
    assert_eq!(published, 1, "{:?}", h.api.calls());
}

#[tokio::test(start_paused = true)]
async fn transient_failures_back_off_exponentially() {
    let api = FakeApi::default();
    api.forever("ns/x", Script::Fail(503));
    let h = start(Setup {
        server: vec![lb("x", 1)],
        api,
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(120)).await;
    // 0.5, 1, 2, 4, 8, 16, 32, 60 s (each up to 20 % shorter): 7-9 attempts
    // in 2 min (the old fixed 30 s cap after a few: more; no growth: 240).
    let writes = h.api.writes().len();
    assert!((7..=10).contains(&writes), "{writes} writes in 2 min");
}

#[tokio::test(start_paused = true)]
async fn losing_the_lease_mid_pass_writes_nothing_more_and_forgets_pool_status() {
    let services: Vec<KubeService> = (0..50).map(|i| lb(&format!("s{i:02}"), 1)).collect();
    let api = FakeApi::default();
    let h = start(Setup {
        server: services,
        api: api.clone(),
        ..Setup::default()
    });
    // The elector notices the loss right after the 10th write.
    let leader = h.leader.clone();
    api.on_write(move |n| {
        if n == 10 {
            leader.send_modify(|l| l.until = None);
        }
    });
    h.run_for(Duration::from_secs(30)).await;
    assert_eq!(h.api.writes().len(), 10);
    assert_eq!(h.api.addresses().len(), 10);
    assert!(h.pool_writer.desired(&pool_key()).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_term_that_runs_out_unnoticed_fences_the_writes() {
    // The elector is stuck (nothing published): the term's end alone stops
    // the writes. Each write takes 100 ms; the term has 2.05 s left.
    let services: Vec<KubeService> = (0..50).map(|i| lb(&format!("s{i:02}"), 1)).collect();
    let api = FakeApi::default();
    for i in 0..50 {
        api.forever(
            &format!("ns/s{i:02}"),
            Script::Slow(Duration::from_millis(100)),
        );
    }
    let h = start(Setup {
        server: services,
        leader: leading(1, Duration::from_millis(2050)),
        api,
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(30)).await;
    let writes = h.api.writes().len();
    assert!((19..=21).contains(&writes), "{writes} writes");
    // The last request's deadline was cut to what was left of the term.
    let last = h
        .api
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            Call::Write { timeout, .. } => Some(timeout),
            _ => None,
        })
        .unwrap();
    assert!(last <= Duration::from_millis(150), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stale_store_cannot_overwrite_the_previous_leaders_writes() {
    // The previous leader gave y .1 and x .2. Our store is stale (its watch
    // in backoff, no fresh list): it knows x without an address and not y.
    let h = start(Setup {
        server: vec![
            with_ingress(lb("y", 3), "198.51.100.1"),
            with_ingress(lb("x", 2), "198.51.100.2"),
        ],
        store: Some(vec![lb("x", 1)]),
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(5)).await;
    // Our write of x on version 1 was refused; x read again keeps .2.
    assert_eq!(
        h.api.addresses(),
        BTreeMap::from([
            ("ns/x".to_owned(), "198.51.100.2".to_owned()),
            ("ns/y".to_owned(), "198.51.100.1".to_owned())
        ])
    );
    assert!(h.api.calls().contains(&Call::Get("ns/x".into())));
}

#[tokio::test(start_paused = true)]
async fn a_new_term_waits_for_a_fresh_list_before_the_first_pass() {
    // Standing by; the store is stale (x without its address).
    let h = start(Setup {
        server: vec![
            with_ingress(lb("y", 3), "198.51.100.1"),
            with_ingress(lb("x", 2), "198.51.100.2"),
            lb("z", 4),
        ],
        store: Some(vec![lb("x", 1)]),
        fresh_relist: true,
        gate_open: false,
        leader: Leadership::default(),
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    h.leader.send_replace(leading(1, Duration::from_secs(3600)));
    // The watch is in backoff: no list, no pass, no write.
    h.run_for(Duration::from_secs(30)).await;
    assert_eq!(*h.relists.lock().unwrap(), 1);
    assert!(h.api.writes().is_empty(), "{:?}", h.api.calls());
    // The list comes: only z, the new one, is written, with the first free
    // address (x's .2 and y's .1 are taken).
    h.gate.send_replace(true);
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(h.api.writes(), [("ns/z".to_owned(), Some("4".to_owned()))]);
    assert_eq!(ingress(&h.api.object("ns/z")), ["198.51.100.0"]);
}

/// A list that takes longer than `relist_timeout` (100k Services) is waited
/// for while the term lasts, not asked for again: each new request restarted
/// the watch and cut the list in progress, so a new leader of a large
/// cluster never allocated (issue 25 item 6).
#[tokio::test(start_paused = true)]
async fn a_slow_list_is_waited_for_not_asked_again() {
    let h = start(Setup {
        server: vec![with_ingress(lb("x", 2), "198.51.100.2"), lb("z", 4)],
        store: Some(vec![lb("x", 1)]),
        fresh_relist: true,
        gate_open: false,
        leader: Leadership::default(),
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    h.leader.send_replace(leading(1, Duration::from_secs(3600)));
    h.run_for(Duration::from_secs(100)).await;
    assert_eq!(
        *h.relists.lock().unwrap(),
        1,
        "the list in progress was asked for again"
    );
    assert!(h.api.writes().is_empty(), "{:?}", h.api.calls());
    h.gate.send_replace(true);
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(h.api.writes(), [("ns/z".to_owned(), Some("4".to_owned()))]);
    assert_eq!(*h.relists.lock().unwrap(), 1);
}

/// The term ends while its list is still coming: nothing is written, and the
/// next term asks for a list of its own.
#[tokio::test(start_paused = true)]
async fn a_term_that_ends_while_listing_writes_nothing() {
    let h = start(Setup {
        server: vec![lb("z", 4)],
        store: Some(vec![]),
        fresh_relist: true,
        gate_open: false,
        leader: Leadership::default(),
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    h.leader.send_replace(leading(1, Duration::from_secs(40)));
    h.run_for(Duration::from_secs(45)).await;
    h.leader.send_replace(Leadership::default());
    h.gate.send_replace(true);
    h.run_for(Duration::from_secs(5)).await;
    assert!(h.api.writes().is_empty(), "{:?}", h.api.calls());
    h.leader.send_replace(leading(2, Duration::from_secs(3600)));
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(*h.relists.lock().unwrap(), 2);
    assert_eq!(h.api.writes(), [("ns/z".to_owned(), Some("4".to_owned()))]);
}

#[tokio::test(start_paused = true)]
async fn two_leaders_terms_interleaved_never_give_one_address_twice() {
    // A leads and allocates p and q; then the Lease goes to B, whose store
    // has not seen p at all yet (its watch was in backoff) and has q
    // without its address. r is created in between.
    let api = FakeApi::default();
    let a = start(Setup {
        server: vec![lb("p", 1), lb("q", 2)],
        api: api.clone(),
        ..Setup::default()
    });
    a.run_for(Duration::from_secs(1)).await;
    assert_eq!(api.addresses().len(), 2);
    a.leader.send_modify(|l| l.until = None);
    api.insert(lb("r", 10));
    let b = start(Setup {
        server: Vec::new(),
        store: Some(vec![lb("q", 2), lb("r", 10)]),
        fresh_relist: true,
        api: api.clone(),
        ..Setup::default()
    });
    b.run_for(Duration::from_secs(5)).await;
    a.touch("ns/p");
    a.run_for(Duration::from_secs(5)).await;
    let addresses = api.addresses();
    assert_eq!(addresses.len(), 3, "{addresses:?}");
    let distinct: std::collections::BTreeSet<&String> = addresses.values().collect();
    assert_eq!(distinct.len(), 3, "an address given twice: {addresses:?}");
    // A's two writes in its term, then B's one (r): A wrote nothing after
    // its term, B did not rewrite what A decided.
    let writes = api.writes();
    assert_eq!(
        writes,
        [
            ("ns/p".to_owned(), Some("1".to_owned())),
            ("ns/q".to_owned(), Some("2".to_owned())),
            ("ns/r".to_owned(), Some("10".to_owned())),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn identical_events_are_not_published_again() {
    // A pool of one address: the second Service fails with the same event
    // on every pass.
    let h = start(Setup {
        pool: vec!["198.51.100.7/32"],
        server: vec![lb("a", 1), lb("b", 1)],
        ..Setup::default()
    });
    for _ in 0..10 {
        h.run_for(Duration::from_secs(1)).await;
        h.touch("ns/b");
    }
    h.run_for(Duration::from_secs(1)).await;
    let failed: Vec<Call> = h
        .api
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Publish { key, .. } if key == "ns/b"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_capped_full_pass_is_deferred_not_dropped() {
    // a1 and a2 go at once: a1's release asks for a full pass, in which a2's
    // release asks for another, past the cap of one in a row. Meanwhile c's
    // address is lost without an event reaching the loop: only the deferred
    // full pass can notice it (the old code dropped that pass).
    let h = start(Setup {
        pool: vec!["198.51.100.0/29"],
        server: vec![lb("a1", 1), lb("a2", 2), lb("c", 3)],
        max_chained_passes: 1,
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(h.api.addresses().len(), 3, "{:?}", h.api.addresses());
    let (a1, a2) = (h.api.object("ns/a1"), h.api.object("ns/a2"));
    h.delete(&a1);
    h.delete(&a2);
    h.run_for(Duration::from_millis(100)).await;
    h.silently_strip("ns/c");
    let writes = |h: &Harness| h.api.writes().iter().filter(|(k, _)| k == "ns/c").count();
    let before = writes(&h);
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(writes(&h), before + 1, "{:?}", h.api.calls());
    assert_eq!(ingress(&h.api.object("ns/c")).len(), 1);
}

fn node(name: &str, role: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("role".to_owned(), role.to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn l2_ad(node_role: Option<&str>) -> L2Advertisement {
    let mut ad = L2Advertisement::new(
        "ad",
        config::api::v1beta1::L2AdvertisementSpec {
            ip_address_pools: vec!["a".into()],
            node_selectors: node_role
                .map(|r| {
                    vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                            match_labels: Some([("role".to_owned(), r.to_owned())].into()),
                            match_expressions: None,
                        },
                    ]
                })
                .unwrap_or_default(),
            ..Default::default()
        },
    );
    ad.metadata.namespace = Some(NS.into());
    ad
}

fn not_announceable_events(api: &FakeApi, key: &str) -> usize {
    api.calls()
        .iter()
        .filter(|c| {
            matches!(c, Call::Publish { key: k, reasons }
                if k == key && reasons == &[REASON_NOT_ANNOUNCEABLE])
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_pool_no_node_can_announce_is_warned_on_its_services_once_per_change() {
    // The only L2Advertisement of pool a selects role=edge; the only Node is a worker.
    let (l2_advertisements, mut l2_writer) = ready_store(vec![l2_ad(Some("edge"))]);
    let (nodes, _nodes_writer) = ready_store(vec![node("n1", "worker")]);
    let overlap = OverlapInputs {
        peers: ready_store(Vec::new()).0,
        bfd_profiles: ready_store(Vec::new()).0,
        bgp_advertisements: ready_store(Vec::new()).0,
        l2_advertisements,
        nodes,
    };
    let h = start(Setup {
        server: vec![lb("x", 1)],
        overlap: Some(overlap),
        ..Setup::default()
    });
    h.run_for(Duration::from_secs(1)).await;
    assert_eq!(ingress(&h.api.object("ns/x")), ["198.51.100.0"]);
    assert_eq!(
        not_announceable_events(&h.api, "ns/x"),
        1,
        "{:?}",
        h.api.calls()
    );
    // Processing the Service again (a change, a full pass) publishes nothing new.
    h.touch("ns/x");
    h.config_changed.all();
    h.run_for(Duration::from_secs(30)).await;
    assert_eq!(
        not_announceable_events(&h.api, "ns/x"),
        1,
        "{:?}",
        h.api.calls()
    );

    // Fixed: no new event.
    l2_writer.apply_watcher_event(&watcher::Event::Apply(l2_ad(None)));
    h.config_changed.all();
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(
        not_announceable_events(&h.api, "ns/x"),
        1,
        "{:?}",
        h.api.calls()
    );

    // Broken again: warned again, once.
    l2_writer.apply_watcher_event(&watcher::Event::Apply(l2_ad(Some("edge"))));
    h.config_changed.all();
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(
        not_announceable_events(&h.api, "ns/x"),
        2,
        "{:?}",
        h.api.calls()
    );
}

#[test]
fn the_events_name_the_pool_and_the_object_to_change() {
    let by_pool = BTreeMap::from([(
        "a".to_owned(),
        vec!["L2Advertisement ad: spec.nodeSelectors match none of the 1 Nodes".to_owned()],
    )]);
    assert!(not_announceable(None, &by_pool).is_empty());
    assert!(not_announceable(Some("b"), &by_pool).is_empty());
    let e = not_announceable(Some("a"), &by_pool);
    assert_eq!(e.len(), 1);
    assert!(e[0].warning);
    assert_eq!(e[0].reason, "NotAnnounceable");
    assert_eq!(
        e[0].message,
        "its address comes from IPAddressPool a: L2Advertisement ad: spec.nodeSelectors match \
         none of the 1 Nodes"
    );
}
