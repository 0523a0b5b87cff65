//! Metrics of both tunnel ends, registered into a registry handed in by the caller (never a
//! global one). Names below are the contract dashboards use; tests assert them.
//!
//! | series | end | meaning |
//! |---|---|---|
//! | `isthmus_tunnel_sessions{state}` | both | sessions by `state`: `connecting`, `active`, `draining` |
//! | `isthmus_tunnel_streams_in_flight` | both | open tunnelled connections |
//! | `isthmus_tunnel_dials_total{outcome,reason}` | agent | target dials: `ok`/`denied`/`failed` × reason |
//! | `isthmus_tunnel_connects_total{code}` | server | CONNECT requests by the status answered |
//! | `isthmus_tunnel_handshakes_total{outcome}` | both | session TLS handshakes: `ok`/`failed` |
//! | `isthmus_tunnel_bytes_total{direction}` | both | bytes carried, `to_target`/`from_target` |
//! | `isthmus_tunnel_ping_rtt_seconds` | server | round trip of a request/answer on each session |
//! | `isthmus_tunnel_refused_total{listener,reason}` | server | connections refused: `client_name`, `evicted`, `proxy_protocol`, `untrusted_proxy_header`, `too_many_sessions`, `setup_timeout` |
//! | `isthmus_tunnel_tls_reloads_total{outcome}` | server | TLS files re-read (SIGHUP, a change): `applied` / `failed` |
//! | `isthmus_tunnel_session_rotations_total{reason}` | agent | sessions drained after their verified replacement: `max_age`, `address_changed` |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// `state` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `connecting`, `active` or `draining`.
    pub state: &'static str,
}

/// `outcome`/`reason` labels of a dial.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DialLabels {
    /// `ok`, `denied` (allow-list), `failed`.
    pub outcome: &'static str,
    /// `connected`, `not_allowed`, `bad_target`, `resolve`, `refused`, `timeout`, `unreachable`, `error`.
    pub reason: &'static str,
}

/// `code` label of a CONNECT answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The HTTP status code answered.
    pub code: u16,
}

/// `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok` or `failed` (handshakes); `applied` or `failed` (TLS reloads).
    pub outcome: &'static str,
}

/// Labels of `isthmus_tunnel_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `agents` or `connect`.
    pub listener: &'static str,
    /// `client_name` (a certificate of the right CA for a name not in
    /// `allowed_client_names`), `evicted` (closed to make room: an agent handshake for a
    /// newer one, `agents.max_handshakes[_per_source]`; a CONNECT connection,
    /// `connect.limits.max_connections`), `proxy_protocol` (a trusted proxy's PROXY header
    /// is broken or not v2), `untrusted_proxy_header` (a PROXY header from a peer not in
    /// `agents.trusted_proxies`), `too_many_sessions`, `setup_timeout` (a session not
    /// verified within `agents.setup_timeout`).
    pub reason: &'static str,
}

/// `direction` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    /// `to_target` or `from_target`.
    pub direction: &'static str,
}

/// `reason` label of a session rotation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `max_age` (the session reached `max_session_age`) or `address_changed` (its server
    /// name no longer resolves to its address).
    pub reason: &'static str,
}

/// All tunnel metrics; cheap to clone (every field is an `Arc` inside).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Sessions by state.
    pub sessions: Family<StateLabel, Gauge>,
    /// Open streams.
    pub streams_in_flight: Gauge,
    /// Agent dials.
    pub dials: Family<DialLabels, Counter>,
    /// Server CONNECT answers.
    pub connects: Family<CodeLabel, Counter>,
    /// Session handshakes.
    pub handshakes: Family<OutcomeLabel, Counter>,
    /// Bytes carried.
    pub bytes: Family<DirectionLabel, Counter>,
    /// Session round trip.
    pub ping_rtt: Histogram,
    /// Agent sessions replaced (make before break) by reason.
    pub rotations: Family<ReasonLabel, Counter>,
    /// TLS reloads by outcome (server).
    pub tls_reloads: Family<OutcomeLabel, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them under `isthmus_tunnel_` in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            sessions: Family::default(),
            streams_in_flight: Gauge::default(),
            dials: Family::default(),
            connects: Family::default(),
            handshakes: Family::default(),
            bytes: Family::default(),
            // 0.25 ms … ~4 s: loopback to inter-continental.
            ping_rtt: Histogram::new(exponential_buckets(0.00025, 2.0, 15)),
            rotations: Family::default(),
            tls_reloads: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("isthmus_tunnel");
        r.register("sessions", "Agent sessions by state", m.sessions.clone());
        r.register(
            "streams_in_flight",
            "Open tunnelled connections",
            m.streams_in_flight.clone(),
        );
        r.register(
            "dials",
            "Agent dials of targets by outcome and reason",
            m.dials.clone(),
        );
        r.register(
            "connects",
            "CONNECT requests by answered status code",
            m.connects.clone(),
        );
        r.register(
            "handshakes",
            "Session TLS handshakes by outcome",
            m.handshakes.clone(),
        );
        r.register("bytes", "Bytes carried by streams", m.bytes.clone());
        r.register(
            "ping_rtt_seconds",
            "Request round trip on a session",
            m.ping_rtt.clone(),
        );
        r.register(
            "session_rotations",
            "Agent sessions drained once their verified replacement took over, by reason",
            m.rotations.clone(),
        );
        r.register(
            "tls_reloads",
            "TLS files re-read on SIGHUP or a change, by outcome (applied, failed)",
            m.tls_reloads.clone(),
        );
        m
    }

    /// Counts a TLS reload.
    pub(crate) fn tls_reload(&self, applied: bool) {
        let outcome = if applied { "applied" } else { "failed" };
        self.tls_reloads
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Counts a session drained in favour of its verified replacement.
    pub(crate) fn rotation(&self, reason: &'static str) {
        self.rotations.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts a dial.
    pub(crate) fn dial(&self, outcome: &'static str, reason: &'static str) {
        self.dials
            .get_or_create(&DialLabels { outcome, reason })
            .inc();
    }

    /// Counts a handshake.
    pub(crate) fn handshake(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.handshakes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A stream: in flight until the guard drops.
    pub(crate) fn stream(&self) -> StreamGuard {
        self.streams_in_flight.inc();
        StreamGuard(self.streams_in_flight.clone())
    }

    /// A session gauge entry starting in `state`, moved with [`SessionState::set`].
    pub(crate) fn session_state(&self, state: &'static str) -> SessionState {
        self.sessions.get_or_create(&StateLabel { state }).inc();
        SessionState {
            family: self.sessions.clone(),
            state,
        }
    }
}

/// Decrements `streams_in_flight` on drop.
#[derive(Debug)]
pub(crate) struct StreamGuard(Gauge);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One session's entry in `sessions{state}`; leaves the gauge on drop.
#[derive(Debug)]
pub(crate) struct SessionState {
    family: Family<StateLabel, Gauge>,
    state: &'static str,
}

impl SessionState {
    /// Moves the session to `state`.
    pub(crate) fn set(&mut self, state: &'static str) {
        if state != self.state {
            self.family
                .get_or_create(&StateLabel { state: self.state })
                .dec();
            self.family.get_or_create(&StateLabel { state }).inc();
            self.state = state;
        }
    }
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.family
            .get_or_create(&StateLabel { state: self.state })
            .dec();
    }
}
