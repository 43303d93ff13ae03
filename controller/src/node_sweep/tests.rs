use std::sync::Mutex;

use super::*;

fn node(name: &str, ready: &str, since_s: u64) -> Arc<Node> {
    let at = chrono_like(since_s);
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "status": { "conditions": [
                { "type": "Ready", "status": ready, "lastTransitionTime": at },
            ]},
        }))
        .unwrap(),
    )
}

/// RFC 3339 of `s` seconds after the epoch.
fn chrono_like(s: u64) -> String {
    let t = k8s_openapi::jiff::Timestamp::from_second(i64::try_from(s).unwrap()).unwrap();
    t.to_string()
}

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

const GRACE: Duration = Duration::from_secs(300);
const T0: u64 = 1_800_000_000;

fn names(d: &[Due]) -> Vec<&str> {
    d.iter().map(Due::node).collect()
}

#[test]
fn not_ready_past_the_grace_is_swept_once_per_spell() {
    let mut s = Sweeper::new(GRACE);
    let nodes = vec![node("a", "True", T0), node("b", "False", T0)];
    assert!(s.due(&nodes, at(T0 + 299)).is_empty(), "within the grace");
    let due = s.due(&nodes, at(T0 + 300));
    assert_eq!(names(&due), ["b"]);
    // not done (failed): due again
    assert_eq!(names(&s.due(&nodes, at(T0 + 330))), ["b"]);
    for d in &due {
        s.done(d);
    }
    assert!(s.due(&nodes, at(T0 + 360)).is_empty(), "once per spell");
    // Ready again, then NotReady again: a new spell
    let back = vec![node("a", "True", T0), node("b", "True", T0 + 400)];
    assert!(s.due(&back, at(T0 + 400)).is_empty());
    let again = vec![node("a", "True", T0), node("b", "Unknown", T0 + 500)];
    assert!(s.due(&again, at(T0 + 700)).is_empty());
    assert_eq!(names(&s.due(&again, at(T0 + 800))), ["b"]);
}

#[test]
fn a_deleted_node_is_swept_until_done() {
    let mut s = Sweeper::new(GRACE);
    let nodes = vec![node("a", "True", T0), node("b", "True", T0)];
    assert!(s.due(&nodes, at(T0)).is_empty());
    let left = vec![node("a", "True", T0)];
    let due = s.due(&left, at(T0 + 1));
    assert_eq!(due, [Due::Deleted("b".into())]);
    assert_eq!(s.due(&left, at(T0 + 2)), [Due::Deleted("b".into())]);
    s.done(&due[0]);
    assert!(s.due(&left, at(T0 + 3)).is_empty());
    // without a Ready condition (not reported yet): nothing
    let fresh: Arc<Node> = Arc::new(
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "c" } })).unwrap(),
    );
    assert!(
        s.due(&[fresh], at(T0 + 10_000))
            .iter()
            .all(|d| d.node() != "c")
    );
}

#[derive(Default)]
struct FakeApi {
    deleted: Mutex<Vec<String>>,
}

impl NodeStatusApi for &FakeApi {
    async fn delete_node_status(&self, node: &str) -> Result<(), String> {
        self.deleted.lock().unwrap().push(node.to_owned());
        Ok(())
    }
}

#[tokio::test]
async fn only_the_leader_sweeps() {
    let api = FakeApi::default();
    let (tx, rx) = watch::channel(Leadership::default());
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let nodes = vec![node("a", "True", now), node("b", "False", now - 3600)];
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let task = run(
        &api,
        move || nodes.clone(),
        rx,
        GRACE,
        Duration::from_millis(10),
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    );
    let drive = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(api.deleted.lock().unwrap().is_empty(), "not leading");
        tx.send(Leadership {
            term: 1,
            until: Some(std::time::Instant::now() + Duration::from_secs(60)),
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(true).unwrap();
    };
    tokio::join!(task, drive);
    assert_eq!(*api.deleted.lock().unwrap(), ["b"]);
}
