//! The relay from a node namespace's loopback to the root namespace's (how a speaker in
//! a node namespace reaches the lab's API server). Needs root; takes the kit's serial lock.

use std::io::{Read, Write};
use std::net::TcpListener;

use anyhow::{Result, ensure};
use testkit::TopologySpec;
use testkit::apiproxy::ApiProxy;

#[test]
fn a_node_namespace_reaches_the_root_loopback_only_through_the_relay() -> Result<()> {
    let _serial = testkit::serial()?;
    // A stand-in for the API server: an echo server on the root namespace's loopback.
    let server = TcpListener::bind("127.0.0.1:0")?;
    let target = server.local_addr()?.port();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let topo = TopologySpec::new("apiproxy").namespace("node-1").create()?;
    let node = topo.ns("node-1");
    let probe = |port: u16| {
        node.output(
            "python3",
            &[
                "-c",
                &format!(
                    "import socket; s=socket.create_connection(('127.0.0.1',{port}),timeout=5); s.sendall(b'hello api'); print(s.recv(64).decode())"
                ),
            ],
        )
    };
    // Without the relay the node's loopback has nothing there.
    let before = probe(target)?;
    ensure!(
        !before.success(),
        "reached the root loopback without a relay: {before:?}"
    );
    let proxy = ApiProxy::start(node, target, target)?;
    for _ in 0..3 {
        let out = probe(target)?;
        ensure!(out.success() && out.stdout.trim() == "hello api", "{out:?}");
    }
    ensure!(proxy.relayed() == 3, "relayed {}", proxy.relayed());
    drop(proxy);
    let after = probe(target)?;
    ensure!(
        !after.success(),
        "the relay still answers after it was dropped: {after:?}"
    );
    Ok(())
}
