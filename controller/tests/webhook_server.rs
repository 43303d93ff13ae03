//! The webhook server over real TLS on loopback: a review is answered on
//! MetalLB's path, other paths and methods are refused, an oversized body is
//! refused, a rotated certificate is served to the next connection without a
//! restart, and nothing is validated before the view is ready. BGPPeers are
//! converted on `/convert` (with the same bounds), also before the view is
//! ready: conversion needs no view.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use config::Resources;
use config::api::v1beta1;
use controller::webhook::certs::{self, Bundle, Lifetimes, Plan};
use controller::webhook::server::{Limits, View, WebhookServer};
use kube_metrics::rustls::pki_types::pem::PemObject;
use kube_metrics::rustls::pki_types::{CertificateDer, ServerName};
use kube_metrics::rustls::{self, ClientConfig, RootCertStore};
use kube_metrics::{CertSource, ServerTls, TlsMinVersion, TlsOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const NS: &str = "metallb-system";
const DNS: &str = "metallb-webhook-service.metallb-system.svc";

fn bundle() -> Bundle {
    certs::generate(
        Plan::NewAll,
        None,
        &[DNS.to_string()],
        time::OffsetDateTime::now_utc(),
        Lifetimes::default(),
    )
    .expect("certificates")
}

/// One request on a fresh connection that trusts only `ca`: (status, body).
async fn post(
    addr: std::net::SocketAddr,
    ca: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(DNS).expect("name"), tcp)
        .await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {DNS}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(body).await?;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out).to_string();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Ok((status, body))
}

fn review(name: &str, cidr: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "abc", "operation": "CREATE", "namespace": NS, "name": name,
            "object": {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                "metadata": {"name": name, "namespace": NS}, "spec": {"addresses": [cidr]}}}
    }))
    .expect("json")
}

fn conversion_review(desired: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "conv-1", "desiredAPIVersion": desired, "objects": [
            {"apiVersion": "metallb.io/v1beta1", "kind": "BGPPeer",
                "metadata": {"name": "p", "namespace": NS},
                "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1",
                    "nodeSelectors": [{"matchLabels": {"rack": "r1"}}]}}]}
    }))
    .expect("json")
}

#[tokio::test]
async fn serves_reviews_over_tls_and_picks_up_a_rotated_certificate() {
    let first = bundle();
    let tls = ServerTls::new(&TlsOptions {
        cert: CertSource::SelfSigned { names: vec![] },
        min_version: TlsMinVersion::Tls13,
    })
    .expect("tls");
    tls.replace_pem(first.tls_cert.as_bytes(), first.tls_key.as_bytes())
        .expect("served");
    let existing: Arc<v1beta1::IPAddressPool> = Arc::new(
        serde_json::from_value(json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": "first", "namespace": NS}, "spec": {"addresses": ["192.0.2.0/28"]}}))
        .expect("pool"),
    );
    let ready = Arc::new(AtomicBool::new(false));
    let view: View = {
        let ready = ready.clone();
        Arc::new(move || {
            ready.load(Ordering::SeqCst).then(|| Resources {
                pools: vec![existing.clone()],
                ..Default::default()
            })
        })
    };
    let server = WebhookServer::bind("127.0.0.1:0".parse().expect("addr"), tls.clone(), view, NS)
        .await
        .expect("bound")
        .with_limits(Limits {
            max_body: 64 << 10,
            ..Limits::default()
        });
    let addr = server.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stop_rx.await;
    }));
    let path = "/validate-metallb-io-v1beta1-ipaddresspool";

    // Not ready: an error, not a decision against nothing.
    let (status, _) = post(
        addr,
        &first.ca_cert,
        "POST",
        path,
        &review("x", "192.0.2.8/29"),
    )
    .await
    .expect("request");
    assert_eq!(status, 500);
    // Conversion needs no view: answered already.
    let (status, body) = post(
        addr,
        &first.ca_cert,
        "POST",
        "/convert",
        &conversion_review("metallb.io/v1beta2"),
    )
    .await
    .expect("request");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(v["response"]["uid"], "conv-1");
    assert_eq!(v["response"]["result"]["status"], "Success", "{body}");
    let converted = &v["response"]["convertedObjects"][0];
    assert_eq!(converted["apiVersion"], "metallb.io/v1beta2");
    assert_eq!(converted["spec"]["peerASN"], 64513);
    assert_eq!(
        converted["spec"]["nodeSelectors"],
        json!([{"matchLabels": {"rack": "r1"}}])
    );
    let (status, body) = post(
        addr,
        &first.ca_cert,
        "POST",
        "/convert",
        &conversion_review("metallb.io/v9"),
    )
    .await
    .expect("request");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["response"]["result"]["status"], "Failure", "{body}");
    ready.store(true, Ordering::SeqCst);

    let (status, body) = post(
        addr,
        &first.ca_cert,
        "POST",
        path,
        &review("x", "192.0.2.8/29"),
    )
    .await
    .expect("request");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["uid"], "abc");
    assert_eq!(
        v["response"]["status"]["message"],
        "CIDR \"192.0.2.8/29\" in pool \"x\" overlaps with already defined CIDR \"192.0.2.0/28\""
    );
    let (_, body) = post(
        addr,
        &first.ca_cert,
        "POST",
        path,
        &review("x", "198.51.100.0/28"),
    )
    .await
    .expect("request");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["response"]["allowed"], true);

    // Other paths, methods, bodies.
    let (status, _) = post(addr, &first.ca_cert, "POST", "/converts", b"{}")
        .await
        .expect("request");
    assert_eq!(status, 404);
    let (status, _) = post(addr, &first.ca_cert, "POST", "/convert", b"{}")
        .await
        .expect("request");
    assert_eq!(status, 400);
    let (status, _) = post(addr, &first.ca_cert, "GET", "/convert", b"")
        .await
        .expect("request");
    assert_eq!(status, 405);
    let (status, _) = post(
        addr,
        &first.ca_cert,
        "POST",
        "/convert",
        &vec![b' '; 100 << 10],
    )
    .await
    .expect("request");
    assert_eq!(status, 413);
    let (status, _) = post(addr, &first.ca_cert, "GET", path, b"")
        .await
        .expect("request");
    assert_eq!(status, 405);
    let (status, _) = post(
        addr,
        &first.ca_cert,
        "POST",
        path,
        b"{\"not\": \"a review\"}",
    )
    .await
    .expect("request");
    assert_eq!(status, 400);
    let (status, _) = post(addr, &first.ca_cert, "POST", path, &vec![b' '; 100 << 10])
        .await
        .expect("request");
    assert_eq!(status, 413);

    // Rotation: a new CA and certificate, served to the next connection.
    let second = bundle();
    tls.replace_pem(second.tls_cert.as_bytes(), second.tls_key.as_bytes())
        .expect("rotated");
    let (status, _) = post(
        addr,
        &second.ca_cert,
        "POST",
        path,
        &review("y", "203.0.113.0/28"),
    )
    .await
    .expect("the new certificate is served");
    assert_eq!(status, 200);
    assert!(
        post(
            addr,
            &first.ca_cert,
            "POST",
            path,
            &review("y", "203.0.113.0/28")
        )
        .await
        .is_err(),
        "the old CA no longer verifies the served certificate"
    );

    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the server stops")
        .expect("no panic");
}
