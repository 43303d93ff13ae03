# shellcheck shell=bash
# FRR in the kubelet lab's router namespace (lab/cluster netns router: 192.0.2.1, AS 64512)
# peering with the 3 nodes (192.0.2.11-13, AS 64513), for the lab's checks (lab/helm-check,
# lab/migrate-check). Sourced after the caller has set CLUSTER (lab/cluster's path) and
# defined fail MESSAGE (exits). Sets FRR_ROUTER (the namespace) and FRR_DIR (its files,
# lab/cluster router-dir, which `lab/cluster down` also cleans up).

FRR_ROUTER=$("$CLUSTER" netns router)
FRR_DIR=$("$CLUSTER" router-dir)

# frr_start: zebra and bgpd, configured with the 3 neighbours; returns once vtysh answers.
frr_start() {
  local d out deadline
  rm -rf "$FRR_DIR"
  mkdir -p "$FRR_DIR"
  : >"$FRR_DIR/empty.conf"
  cat >"$FRR_DIR/frr.conf" <<EOF2
frr defaults traditional
router bgp 64512
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 neighbor 192.0.2.11 remote-as 64513
 neighbor 192.0.2.12 remote-as 64513
 neighbor 192.0.2.13 remote-as 64513
EOF2
  chown -R frr:frr "$FRR_DIR"
  for d in zebra bgpd; do
    ip netns exec "$FRR_ROUTER" /usr/lib/frr/$d -N "$FRR_ROUTER" -d -F traditional -P 0 \
      --vty_socket "$FRR_DIR" -i "$FRR_DIR/$d.pid" -z "$FRR_DIR/zserv.api" -f "$FRR_DIR/empty.conf" \
      --log "file:$FRR_DIR/$d.log" >"$FRR_DIR/$d.start.log" 2>&1 ||
      fail "FRR $d did not start: $(cat "$FRR_DIR/$d.start.log")"
  done
  deadline=$((SECONDS + 30))
  until ip netns exec "$FRR_ROUTER" vtysh --vty_socket "$FRR_DIR" -c "show version" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "FRR in $FRR_ROUTER does not answer vtysh after 30 s"
    sleep 0.2
  done
  out=$(ip netns exec "$FRR_ROUTER" vtysh --vty_socket "$FRR_DIR" -f "$FRR_DIR/frr.conf" 2>&1) ||
    fail "vtysh -f frr.conf: $out"
}

frr_stop() {
  local d pid
  for d in bgpd zebra; do
    pid=$(cat "$FRR_DIR/$d.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
  done
}

# frr_vtysh COMMAND: one vtysh command at the router.
frr_vtysh() { ip netns exec "$FRR_ROUTER" vtysh --vty_socket "$FRR_DIR" -c "$1"; }

# frr_route_hops PREFIX: the next hops (node addresses) of the router's paths to PREFIX,
# sorted, one a line (nothing when it has none).
frr_route_hops() {
  frr_vtysh "show bgp ipv4 unicast $1 json" 2>/dev/null | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
hops = set()
for p in d.get("paths", []):
    for n in p.get("nexthops", []):
        hops.add(n.get("ip", "?"))
print("\n".join(sorted(hops)))'
}
