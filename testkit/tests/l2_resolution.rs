//! `arping` and `ndisc6` from `client` resolve node-1's kernel addresses
//! across the snooping bridge; a capture sees the exchange. Needs root;
//! takes the kit's serial lock.

use anyhow::{Result, ensure};
use testkit::{Lab, LabOptions, plan};

#[test]
fn arping_and_ndisc6_from_client_resolve_node_1() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let node_mac = lab.node(1).mac(lab.l2_iface("node-1"))?;
    let client = lab.client();
    let cif = lab.l2_iface("client");

    let pcap = lab.topo.state_dir().join("client.pcap");
    let cap = client.capture(cif, &pcap, &["arp", "or", "icmp6"])?;

    let mac = client.arping(cif, plan::node_v4(1), 3)?;
    ensure!(mac == node_mac, "arping got {mac}, node-1 has {node_mac}");

    // The solicitation reaches node-1 through the snooping bridge because
    // its kernel joined the solicited-node group (the kit waits for that).
    let mac6 = client.ndisc(cif, plan::node_v6(1), 3)?;
    ensure!(mac6 == node_mac, "ndisc6 got {mac6}, node-1 has {node_mac}");

    // Nobody answers for an address nobody has.
    ensure!(client.arping(cif, "192.0.2.99".parse()?, 1).is_err());

    // MLD snooping with a querier: a solicitation for a group node-1 has
    // not joined (node-2's address, an unused address) never reaches it.
    let n1pcap = lab.topo.state_dir().join("node-1.pcap");
    let n1cap = lab
        .node(1)
        .capture(lab.l2_iface("node-1"), &n1pcap, &["icmp6"])?;
    let mac2 = lab.node(2).mac(lab.l2_iface("node-2"))?;
    ensure!(client.ndisc(cif, plan::node_v6(2), 3)? == mac2);
    ensure!(client.ndisc(cif, "2001:db8:0:1::77".parse()?, 1).is_err());
    ensure!(client.ndisc(cif, plan::node_v6(1), 3)? == node_mac);
    let seen = testkit::capture::read_pcap(&n1cap.stop()?, &[])?;
    ensure!(
        seen.contains(&format!("who has {}", plan::node_v6(1))),
        "node-1 did not see the solicitation for its own address:\n{seen}"
    );
    for other in [plan::node_v6(2).to_string(), "2001:db8:0:1::77".to_string()] {
        ensure!(
            !seen.contains(&format!("who has {other},")),
            "node-1 saw a solicitation for {other} it never joined:\n{seen}"
        );
    }

    let path = cap.stop()?;
    let text = testkit::capture::read_pcap(&path, &[])?;
    ensure!(
        text.contains(&format!("Reply {} is-at {node_mac}", plan::node_v4(1))),
        "no ARP reply in the capture:\n{text}"
    );
    ensure!(
        text.contains(&format!(
            "neighbor advertisement, tgt is {}",
            plan::node_v6(1)
        )),
        "no neighbor advertisement in the capture:\n{text}"
    );
    lab.destroy()?;
    Ok(())
}
