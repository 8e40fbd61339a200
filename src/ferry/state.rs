// SPDX-License-Identifier: GPL-2.0

//! The session and channel state machines.
//!
//! ```text
//!              connect
//!                 |
//!                 v        all channels up
//!  +-------> Connecting ------------------> Connected
//!  |              |  \                          |
//!  | backoff      |   \ first attempt failed,   | a channel failed (client)
//!  | elapsed      |    \ closed, gave up        v
//!  +-------- Reconnecting <---------------------+
//!                 |    \                        |
//!                 |     +--> Closing <----------+ closed; server: any failure
//!                 +--------> Closing --> Closed
//! ```
//!
//! A server session never reconnects: the client does, with a new generation,
//! and the server replaces whatever it still holds of the old one. Every
//! change goes through [`SessionState::check`], which refuses anything the
//! table does not allow, so a bug shows up as a refused transition (and a
//! warning) instead of a session in an impossible state.

use kernel::prelude::*;

/// Which side opened the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Role {
    /// This side connected.
    Client = 0,
    /// This side accepted.
    Server = 1,
}

/// States of a session (netlink `enum ferry_session_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SessionState {
    /// Channels are being set up.
    Connecting = 0,
    /// Every channel is up.
    Connected = 1,
    /// Waiting out the backoff before the next attempt (client only).
    Reconnecting = 2,
    /// Channels are being torn down for good.
    Closing = 3,
    /// Gone; no way back.
    Closed = 4,
}

impl SessionState {
    /// All states, for the tests.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    const ALL: [Self; 5] = [
        Self::Connecting,
        Self::Connected,
        Self::Reconnecting,
        Self::Closing,
        Self::Closed,
    ];

    /// Whether a session of `role` may go from `self` to `to`.
    pub(crate) fn allows(self, role: Role, to: Self) -> bool {
        use SessionState::*;
        match (self, to) {
            (Connecting, Connected) | (Connecting, Closing) => true,
            (Connected, Closing) | (Closing, Closed) => true,
            // Only a client ever waits to reconnect.
            (Connecting, Reconnecting)
            | (Connected, Reconnecting)
            | (Reconnecting, Connecting)
            | (Reconnecting, Closing) => role == Role::Client,
            _ => false,
        }
    }

    /// `Ok(to)` if the transition is allowed, else `EINVAL`.
    pub(crate) fn check(self, role: Role, to: Self) -> Result<Self> {
        if self.allows(role, to) {
            Ok(to)
        } else {
            Err(EINVAL)
        }
    }

    /// Name, as in the netlink spec.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Reconnecting => "reconnecting",
            Self::Closing => "closing",
            Self::Closed => "closed",
        }
    }
}

/// Where a channel is in its life.
///
/// ```text
///  client: Resolving --route--> Connecting --established--> Handshake
///  server:                      Connecting --established--> Handshake
///          hello reply (client), hello (server): Handshake -> Up
///          a refused hello (server): Connecting/Handshake -> Refusing
///          any failure: anything but Closed -> Failed; shut down: -> Closed
/// ```
///
/// A server's hello may come before its CM event says the connection is
/// established: the server goes from `Connecting` straight on too. Every
/// change goes through [`ChanState::allows`], so a bug shows up as a refused
/// transition (and a warning), not as a channel in an impossible state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChanState {
    /// Resolving the peer's address and route (client).
    Resolving,
    /// Connect request sent (client) or accepted (server).
    Connecting,
    /// Connected, hello not yet answered.
    Handshake,
    /// Refusing the hello; fails once the refusal is sent (server).
    Refusing(super::wire::Reason),
    /// Carrying traffic.
    Up,
    /// Failed; waiting for the session to shut it down.
    Failed,
    /// Shut down.
    Closed,
}

impl ChanState {
    /// Whether a channel of `role` may go from `self` to `to`. Closing a
    /// closed channel again is allowed (teardown paths meet); nothing else
    /// stays where it is.
    pub(crate) fn allows(self, role: Role, to: Self) -> bool {
        use ChanState::*;
        let server = role == Role::Server;
        match (self, to) {
            (_, Closed) => true,
            (Failed, _) | (Closed, _) => false,
            (_, Failed) => true,
            (Resolving, Connecting) => !server,
            (Connecting, Handshake) | (Handshake, Up) => true,
            (Connecting, Up) | (Connecting, Refusing(_)) | (Handshake, Refusing(_)) => server,
            _ => false,
        }
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_state)]
mod tests {
    use super::{Role::*, SessionState::*, *};
    use crate::wire::Reason;

    const CHANNEL: [ChanState; 7] = [
        ChanState::Resolving,
        ChanState::Connecting,
        ChanState::Handshake,
        ChanState::Refusing(Reason::UnknownService),
        ChanState::Up,
        ChanState::Failed,
        ChanState::Closed,
    ];

    /// The channel's table, spelled out for each role: every pair not
    /// listed is refused.
    fn channel_allowed(role: Role, from: ChanState, to: ChanState) -> bool {
        use ChanState::*;
        let both: &[(ChanState, ChanState)] = &[
            (Connecting, Handshake),
            (Handshake, Up),
            (Resolving, Failed),
            (Connecting, Failed),
            (Handshake, Failed),
            (Refusing(Reason::UnknownService), Failed),
            (Up, Failed),
        ];
        let client: &[(ChanState, ChanState)] = &[(Resolving, Connecting)];
        let server: &[(ChanState, ChanState)] = &[
            (Connecting, Up),
            (Connecting, Refusing(Reason::UnknownService)),
            (Handshake, Refusing(Reason::UnknownService)),
        ];
        let own = if role == Client { client } else { server };
        to == Closed || both.contains(&(from, to)) || own.contains(&(from, to))
    }

    #[test]
    fn channel_transitions_match_the_table() {
        for role in [Client, Server] {
            for from in CHANNEL {
                for to in CHANNEL {
                    assert_eq!(from.allows(role, to), channel_allowed(role, from, to));
                }
            }
        }
        // A client never refuses a hello nor skips its handshake; a server
        // never resolves a route; nothing leaves Failed but to Closed.
        assert!(!ChanState::Connecting.allows(Client, ChanState::Up));
        assert!(!ChanState::Resolving.allows(Server, ChanState::Connecting));
        assert!(!ChanState::Failed.allows(Client, ChanState::Up));
        assert!(!ChanState::Closed.allows(Server, ChanState::Failed));
    }

    /// The whole table, spelled out: every pair not listed is forbidden.
    const CLIENT_ALLOWED: [(SessionState, SessionState); 8] = [
        (Connecting, Connected),
        (Connecting, Reconnecting),
        (Connecting, Closing),
        (Connected, Reconnecting),
        (Connected, Closing),
        (Reconnecting, Connecting),
        (Reconnecting, Closing),
        (Closing, Closed),
    ];

    #[test]
    fn client_transitions_match_the_table() {
        for from in SessionState::ALL {
            for to in SessionState::ALL {
                let want = CLIENT_ALLOWED.contains(&(from, to));
                assert_eq!(from.allows(Client, to), want);
                assert_eq!(from.check(Client, to).is_ok(), want);
            }
        }
    }

    #[test]
    fn servers_never_reconnect() {
        for from in SessionState::ALL {
            for to in SessionState::ALL {
                let want = CLIENT_ALLOWED.contains(&(from, to))
                    && from != Reconnecting
                    && to != Reconnecting;
                assert_eq!(from.allows(Server, to), want);
            }
        }
    }

    #[test]
    fn closed_is_final_and_no_state_loops() {
        for s in SessionState::ALL {
            assert!(!Closed.allows(Client, s));
            assert!(!s.allows(Client, s));
            assert!(!s.allows(Server, s));
        }
    }
}
