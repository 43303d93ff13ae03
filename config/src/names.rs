//! Names of the status objects metallb-rs writes.

use sha2::{Digest, Sha256};

/// Kubernetes' limit on object names (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;

/// Name of the controller's `ConfigurationState`.
pub const CONTROLLER_CONFIGURATION_STATE: &str = "controller";

/// Name of a speaker's `ConfigurationState`: `speaker-<node>`.
pub fn speaker_configuration_state(node: &str) -> String {
    format!("speaker-{node}")
}

/// Name of the `BGPSessionStatus` of `node` x `peer`.
///
/// The labels `metallb.io/node` and `metallb.io/peer` are the key; the name
/// is `<node>-<peer>` when that fits in 253 characters and no other known
/// (node, peer) pair reads the same (node `a-b` with peer `c` and node `a`
/// with peer `b-c` both read `a-b-c`). Otherwise it is a prefix of that text
/// followed by `-` and 10 hex digits of a SHA-256 of the pair, which keeps it
/// stable, unique and valid.
pub fn bgp_session_status<'a>(
    node: &str,
    peer: &str,
    known_pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let plain = format!("{node}-{peer}");
    let ambiguous = known_pairs.into_iter().any(|(n, p)| {
        (n, p) != (node, peer)
            && n.len() + 1 + p.len() == plain.len()
            && format!("{n}-{p}") == plain
    });
    if plain.len() <= MAX_NAME_LEN && !ambiguous {
        return plain;
    }
    let mut h = Sha256::new();
    h.update(node.as_bytes());
    h.update([0u8]);
    h.update(peer.as_bytes());
    let digest = h.finalize();
    let suffix: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let room = MAX_NAME_LEN - suffix.len() - 1;
    let mut prefix: &str = &plain;
    if prefix.len() > room {
        let mut cut = room;
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix = &prefix[..cut];
    }
    // A name must end with an alphanumeric character before the suffix's '-'.
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_when_unambiguous() {
        let pairs = [("node-1", "router-a"), ("node-2", "router-a")];
        assert_eq!(
            bgp_session_status("node-1", "router-a", pairs),
            "node-1-router-a"
        );
    }

    #[test]
    fn hashed_when_two_pairs_read_the_same() {
        let pairs = [("a-b", "c"), ("a", "b-c")];
        let x = bgp_session_status("a-b", "c", pairs);
        let y = bgp_session_status("a", "b-c", pairs);
        assert_ne!(x, y);
        assert!(
            x.starts_with("a-b-c-") && x.len() == "a-b-c-".len() + 10,
            "{x}"
        );
        // Stable across calls.
        assert_eq!(x, bgp_session_status("a-b", "c", pairs));
    }

    #[test]
    fn hashed_and_bounded_when_too_long() {
        let node = "n".repeat(200);
        let peer = "p".repeat(200);
        let name = bgp_session_status(&node, &peer, []);
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with(&node));
        let other = bgp_session_status(&node, &format!("{}q", "p".repeat(199)), []);
        assert_ne!(name, other);
    }

    #[test]
    fn speaker_state_name() {
        assert_eq!(speaker_configuration_state("worker-1"), "speaker-worker-1");
    }
}
