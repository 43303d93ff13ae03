//! Reaching the lab's API server from a node namespace.
//!
//! The lab's kube-apiserver listens on 127.0.0.1 of the root namespace only. A
//! speaker runs in a node namespace, as a hostNetwork Pod runs on its node, and
//! needs the API server at an address of its own namespace. [`ApiProxy`]
//! listens on 127.0.0.1:`port` inside the node namespace and relays every
//! connection, in user space, to 127.0.0.1:`target` of the root namespace: the
//! node's kubeconfig is the root's (`https://127.0.0.1:<port>`, the certificate
//! already names 127.0.0.1), nothing in the root namespace gets an address or a
//! listening socket beyond 127.0.0.1, and no packet is forwarded by a kernel.
//!
//! How: a socket belongs to the namespace of the thread that creates it. A
//! short-lived thread enters the node namespace (`setns`), binds the listener
//! and hands it back; the accepting thread stays in the root namespace, so the
//! sockets it connects reach the root's loopback.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

use crate::Result;
use crate::netns::Netns;

/// A relay from 127.0.0.1:`port` in a node namespace to 127.0.0.1:`target` in
/// the namespace of the process. Stops (closing its listener) when dropped;
/// connections already relayed end when either side closes.
pub struct ApiProxy {
    listen: SocketAddr,
    stop: Arc<AtomicBool>,
    relayed: Arc<AtomicU64>,
    accept: Option<JoinHandle<()>>,
}

/// Binds a TCP listener on `addr` inside the network namespace `ns`.
fn listen_in(ns: &Netns, addr: SocketAddr) -> Result<TcpListener> {
    let name = ns.name().to_owned();
    let handle = std::thread::spawn(move || -> Result<TcpListener> {
        // Only this thread changes namespace; it ends right after.
        crate::netns::enter_thread(&name)?;
        TcpListener::bind(addr).with_context(|| format!("binding {addr} in namespace {name}"))
    });
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
}

/// Copies `from` to `to` until EOF or an error, then shuts `to` down for
/// writing so the other side sees the end.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn relay(client: TcpStream, target: SocketAddr) {
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || pump(c2, s2));
    std::thread::spawn(move || pump(server, client));
}

impl ApiProxy {
    /// Starts relaying 127.0.0.1:`port` of `ns` to 127.0.0.1:`target` here.
    pub fn start(ns: &Netns, port: u16, target: u16) -> Result<ApiProxy> {
        let listen = SocketAddr::from(([127, 0, 0, 1], port));
        let target = SocketAddr::from(([127, 0, 0, 1], target));
        let listener = listen_in(ns, listen)?;
        listener
            .set_nonblocking(true)
            .context("making the relay's listener non-blocking")?;
        let stop = Arc::new(AtomicBool::new(false));
        let relayed = Arc::new(AtomicU64::new(0));
        let accept = {
            let stop = stop.clone();
            let relayed = relayed.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let _ = client.set_nonblocking(false);
                            relayed.fetch_add(1, Ordering::Relaxed);
                            relay(client, target);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Ok(ApiProxy {
            listen,
            stop,
            relayed,
            accept: Some(accept),
        })
    }

    /// The address it listens on, inside the node namespace.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// How many connections it has relayed.
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}
