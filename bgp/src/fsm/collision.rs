//! Connection collision resolution (RFC 4271 section 6.8, RFC 6286 2.3).

use std::net::Ipv4Addr;

use super::types::Role;

/// Which connection survives a collision between our connection and the
/// peer's, when neither is Established: the one opened by the speaker
/// with the higher BGP Identifier (compared as unsigned 32-bit numbers).
/// When the identifiers are equal (only possible between ASes, RFC 6286),
/// the one opened by the speaker with the larger AS. Returns the [`Role`]
/// of the connection to keep: [`Role::Active`] is the one we opened.
pub fn collision_winner(
    local_id: Ipv4Addr,
    peer_id: Ipv4Addr,
    local_as: u32,
    peer_as: u32,
) -> Role {
    let (ours, theirs) = (u32::from(local_id), u32::from(peer_id));
    if ours > theirs || (ours == theirs && local_as > peer_as) {
        Role::Active
    } else {
        Role::Passive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_identifier_keeps_its_own_connection() {
        let low = Ipv4Addr::new(10, 0, 0, 1);
        let high = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(collision_winner(high, low, 1, 1), Role::Active);
        assert_eq!(collision_winner(low, high, 1, 1), Role::Passive);
        // Compared as unsigned numbers, not signed or octet by octet text.
        assert_eq!(
            collision_winner(Ipv4Addr::new(200, 0, 0, 1), Ipv4Addr::new(9, 0, 0, 1), 1, 1),
            Role::Active
        );
        // Equal identifiers: the larger AS.
        assert_eq!(collision_winner(low, low, 65002, 65001), Role::Active);
        assert_eq!(collision_winner(low, low, 65001, 65002), Role::Passive);
    }
}
