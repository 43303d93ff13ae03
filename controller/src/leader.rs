//! Leader election on a `coordination.k8s.io/v1` Lease: only one controller
//! allocates at a time.
//!
//! The semantics are client-go's `leaderelection` (with `ReleaseOnCancel`):
//!
//! - the Lease (`metallb-rs-controller` in the controller's namespace,
//!   [`LEASE_NAME`]) names its holder (`holderIdentity`), how long others
//!   must wait before taking it over (`leaseDurationSeconds`), when it was
//!   acquired and last renewed (`acquireTime`, `renewTime`, as MicroTime, for
//!   humans only) and how often it changed hands (`leaseTransitions`);
//! - a candidate reads the Lease every `retry_period` (with client-go's
//!   jitter). A missing Lease is created; a Lease with no holder, or whose
//!   holder has not changed the object for `leaseDurationSeconds` **by our
//!   own clock, counted from when we observed the last change** (never from
//!   the remote `renewTime`: clocks differ between nodes), is taken over
//!   (`leaseTransitions` + 1);
//! - every write is optimistic: a create fails if the Lease exists, an update
//!   carries the `resourceVersion` we observed, and a 409 Conflict means
//!   someone else won this round;
//! - the leader renews every `retry_period` and stops leading as soon as it
//!   has not renewed for `renew_deadline` (counted from when it *sent* the
//!   last successful renewal), which is shorter than `leaseDuration`;
//! - on graceful shutdown the leader releases the Lease (empty holder,
//!   `leaseDurationSeconds: 1`), so that a successor takes over at once.
//!
//! Safety (at no instant two leaders, given clocks that measure the same
//! elapsed time): our leadership from a write sent at `s` ends at
//! `s + renew_deadline`. The write was committed at some `c >= s`; another
//! candidate that takes over must have observed that version at some
//! `o >= c`, and writes (with that `resourceVersion`, so only if nothing was
//! written since) no earlier than `o + lease_duration > s + renew_deadline`.
//! The margin `lease_duration - renew_deadline` (5 s by default) absorbs
//! clock rate differences and scheduling delays. A leader that reads the
//! Lease and finds another holder, or no Lease, stops leading at once.
//! We count "a change" as any new `resourceVersion` (any write to the
//! object), which is never later than client-go's comparison of the record.
//!
//! The decisions live in [`Elector`] (and the pure [`decide`]), driven by the
//! `now` it is given, no I/O; [`LeaderElector`] runs one against a server
//! through [`LeaseApi`] ([`KubeLeaseApi`] for a real server,
//! [`testing::MemoryLeaseApi`] in memory), publishing whether we lead on a
//! `tokio::sync::watch` channel.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

#[cfg(test)]
mod tests;

/// The name of the controller's Lease (in its namespace).
pub const LEASE_NAME: &str = "metallb-rs-controller";

/// Whether we lead, published by [`LeaderElector::run`]: the term (1 for
/// the first acquisition by this process, +1 for each later one) and until
/// when it lasts unless renewed. A write made for a term is fenced by it:
/// made only while [`Leadership::leads`] says so for that same term.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// The number of the current (or last) term; 0 before the first.
    pub term: u64,
    /// The end of the current term unless renewed; `None` when not leading.
    pub until: Option<Instant>,
}

impl Leadership {
    /// Whether this says we lead (at the time it was published).
    pub fn is_leader(&self) -> bool {
        self.until.is_some()
    }

    /// Whether we lead at `now` in term `term`.
    pub fn leads(&self, term: u64, now: Instant) -> bool {
        self.term == term && self.until.is_some_and(|u| now < u)
    }

    /// What is left of term `term` at `now` (`None`: it is over).
    pub fn remaining(&self, term: u64, now: Instant) -> Option<Duration> {
        self.leads(term, now)
            .then(|| self.until.map(|u| u.saturating_duration_since(now)))
            .flatten()
    }
}

/// client-go's `JitterFactor`: a candidate waits `retry_period` plus up to
/// this many `retry_period`s between attempts, so that candidates spread out.
pub const JITTER_FACTOR: f64 = 1.2;

/// The durations of an election (client-go's `LeaseDuration`,
/// `RenewDeadline`, `RetryPeriod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a candidate waits, from when it observed the last change of
    /// a held Lease, before taking it over. Written to the Lease as
    /// `leaseDurationSeconds`: a whole number of seconds.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    /// Shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// The interval between attempts (to acquire, to renew, after an error).
    pub retry_period: Duration,
}

impl Default for LeaseConfig {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Durations (or an identity) an election cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `leaseDurationSeconds` is a positive whole number of seconds (int32).
    #[error(
        "lease duration {0:?} must be a whole number of seconds, at least 1 s and at most 2147483647 s"
    )]
    LeaseDuration(Duration),
    /// The leader must stop before others may take over.
    #[error(
        "renew deadline {renew_deadline:?} must be positive and shorter than the lease duration {lease_duration:?}"
    )]
    RenewDeadline {
        /// The renew deadline given.
        renew_deadline: Duration,
        /// The lease duration given.
        lease_duration: Duration,
    },
    /// At least one (jittered) attempt must fit in the renew deadline.
    #[error(
        "retry period {retry_period:?} must be positive and the renew deadline {renew_deadline:?} longer than {JITTER_FACTOR} times it"
    )]
    RetryPeriod {
        /// The retry period given.
        retry_period: Duration,
        /// The renew deadline given.
        renew_deadline: Duration,
    },
    /// The holder identity is empty (an empty holder means "not held").
    #[error("the holder identity must not be empty")]
    EmptyIdentity,
}

impl LeaseConfig {
    /// Checks the durations as client-go's `NewLeaderElector` does, and that
    /// the lease duration is a whole number of seconds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let lease = self.lease_duration;
        if lease.subsec_nanos() != 0 || lease.as_secs() == 0 || lease.as_secs() > i32::MAX as u64 {
            return Err(ConfigError::LeaseDuration(lease));
        }
        if self.renew_deadline.is_zero() || self.renew_deadline >= lease {
            return Err(ConfigError::RenewDeadline {
                renew_deadline: self.renew_deadline,
                lease_duration: lease,
            });
        }
        if self.retry_period.is_zero()
            || self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64()
        {
            return Err(ConfigError::RetryPeriod {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written to the Lease.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// The election fields of a Lease's spec (client-go's
/// `LeaderElectionRecord`). An empty `holder_identity` means "not held".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds the Lease; empty: nobody.
    pub holder_identity: String,
    /// How long others wait, from an observed change, before taking over.
    pub lease_duration_seconds: i32,
    /// When the holder acquired it (informational).
    pub acquire_time: Option<Timestamp>,
    /// When the holder last renewed it (informational: never compared with
    /// our clock).
    pub renew_time: Option<Timestamp>,
    /// How many times the Lease changed hands.
    pub lease_transitions: i32,
}

impl LeaseRecord {
    /// The record of a Lease's spec (missing fields: empty / zero).
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            lease_transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    /// Writes the record's fields into `spec`, keeping the fields it does
    /// not know (`strategy`, `preferredHolder`).
    pub fn apply_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = Some(self.holder_identity.clone());
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_transitions = Some(self.lease_transitions);
    }

    /// The holder, if any.
    pub fn holder(&self) -> Option<&str> {
        Some(self.holder_identity.as_str()).filter(|h| !h.is_empty())
    }

    /// How long a candidate waits before taking over this record: its
    /// `leaseDurationSeconds`, or ours when it has none (being conservative
    /// with a record some other writer left incomplete).
    pub fn lease_duration(&self, config: &LeaseConfig) -> Duration {
        match u64::try_from(self.lease_duration_seconds) {
            Ok(s) if s > 0 => Duration::from_secs(s),
            _ => config.lease_duration,
        }
    }
}

/// The Lease as the server stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Its election fields.
    pub record: LeaseRecord,
    /// Its `metadata.resourceVersion` (the precondition of our next update).
    pub resource_version: String,
}

/// What we know of the Lease, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The Lease (`None`: it does not exist).
    pub lease: Option<Observed>,
    /// When we first saw this version (by our clock).
    pub at: Instant,
}

/// What to do with the Lease, given what we observed ([`decide`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing observed yet: read the Lease.
    Observe,
    /// There is no Lease: create it, held by us.
    Create(LeaseRecord),
    /// The Lease is free or its holder expired: take it over.
    TryAcquire {
        /// The record to write (`leaseTransitions` + 1).
        record: LeaseRecord,
        /// The version it replaces.
        resource_version: String,
    },
    /// The Lease is ours: renew it.
    Renew {
        /// The record to write (same `acquireTime` and transitions).
        record: LeaseRecord,
        /// The version it replaces.
        resource_version: String,
    },
    /// Another holder's Lease is fresh: do not touch it before `expires`
    /// (unless it changes: a renewal moves `expires`, a release frees it).
    StandBy {
        /// Its holder.
        holder: String,
        /// When it expires if nothing changes (by our clock).
        expires: Instant,
    },
}

/// client-go's `tryAcquireOrRenew` decision: what to write given the
/// `observation` (none yet: read first), our `identity` and `config`, at
/// `now`; `wall` only fills the record's informational times.
pub fn decide(
    observation: Option<&Observation>,
    identity: &str,
    config: &LeaseConfig,
    now: Instant,
    wall: Timestamp,
) -> Decision {
    let Some(observation) = observation else {
        return Decision::Observe;
    };
    let ours = |acquire_time: Timestamp, lease_transitions: i32| LeaseRecord {
        holder_identity: identity.to_owned(),
        lease_duration_seconds: config.lease_duration_seconds(),
        acquire_time: Some(acquire_time),
        renew_time: Some(wall),
        lease_transitions,
    };
    let Some(lease) = &observation.lease else {
        return Decision::Create(ours(wall, 0));
    };
    let old = &lease.record;
    let resource_version = lease.resource_version.clone();
    match old.holder() {
        Some(holder) if holder == identity => Decision::Renew {
            record: ours(old.acquire_time.unwrap_or(wall), old.lease_transitions),
            resource_version,
        },
        Some(holder) if now < observation.at + old.lease_duration(config) => Decision::StandBy {
            holder: holder.to_owned(),
            expires: observation.at + old.lease_duration(config),
        },
        _ => Decision::TryAcquire {
            record: ours(wall, old.lease_transitions.saturating_add(1)),
            resource_version,
        },
    }
}

/// A request to the API server about the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Read it.
    Get,
    /// Create it with this record (fails with a conflict if it exists).
    Create(LeaseRecord),
    /// Replace its record, if it is still at `resource_version`.
    Update {
        /// The record to write.
        record: LeaseRecord,
        /// The precondition.
        resource_version: String,
    },
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// The Lease as read (`None`: it does not exist).
    Read(Option<Observed>),
    /// The write succeeded: what the server stored.
    Written(Observed),
    /// 409: the Lease exists (create) or changed (update): someone else
    /// wrote first.
    Conflict,
    /// Any other failure, or no answer: a write may or may not have been
    /// applied.
    Failed,
}

/// What an [`Elector`] asks for next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this request now and hand its answer to [`Elector::on_response`].
    Send(Request),
    /// Nothing to do before this instant (or a leadership deadline).
    Wait(Instant),
}

/// Why we stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// No renewal succeeded for `renew_deadline`.
    RenewDeadline,
    /// A read found another holder.
    HeldBy(String),
    /// A read found the Lease released (no holder) or deleted.
    NotHeld,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RenewDeadline => f.write_str("no renewal succeeded within the renew deadline"),
            Self::HeldBy(h) => write!(f, "the lease is held by {h}"),
            Self::NotHeld => f.write_str("the lease was deleted or released by someone else"),
        }
    }
}

/// A change of leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// We lead (until [`Elector::leader_until`], unless renewed).
    Acquired,
    /// We no longer lead.
    Lost(LostReason),
    /// Our release was written: the Lease is free.
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Release,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    kind: Kind,
    sent_at: Instant,
}

/// One candidate's election state: what it observed of the Lease and
/// whether (until when) it leads. Pure: every method takes `now` (and
/// `wall`, the wall-clock time written into records).
///
/// Drive it with [`Elector::poll`] (send the request it returns, or wait),
/// [`Elector::on_response`] (the answer) and [`Elector::tick`] (at the
/// instant [`Elector::leader_until`], to notice the end of leadership
/// without any answer); on shutdown, [`Elector::release`].
#[derive(Clone, Debug)]
pub struct Elector {
    identity: String,
    config: LeaseConfig,
    observation: Option<Observation>,
    /// The observation may be out of date (after a failed or conflicting
    /// write, or while standing by): read before deciding.
    stale: bool,
    /// A write of ours may have been applied without our seeing it.
    maybe_ours: bool,
    leading_until: Option<Instant>,
    next_at: Instant,
    pending: Option<Pending>,
}

impl Elector {
    /// A candidate named `identity` (unique among candidates, e.g.
    /// [`identity`]) with the durations of `config`, starting at `now`.
    pub fn new(
        identity: impl Into<String>,
        config: LeaseConfig,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let identity = identity.into();
        if identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        Ok(Self::new_unchecked(identity, config, now))
    }

    fn new_unchecked(identity: String, config: LeaseConfig, now: Instant) -> Self {
        Self {
            identity,
            config,
            observation: None,
            stale: true,
            maybe_ours: false,
            leading_until: None,
            next_at: now,
            pending: None,
        }
    }

    /// Our holder identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The durations.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// What we last observed of the Lease, and since when.
    pub fn observation(&self) -> Option<&Observation> {
        self.observation.as_ref()
    }

    /// The holder we last observed.
    pub fn observed_holder(&self) -> Option<&str> {
        self.observation
            .as_ref()
            .and_then(|o| o.lease.as_ref())
            .and_then(|l| l.record.holder())
    }

    /// Whether we lead at `now`.
    pub fn is_leader(&self, now: Instant) -> bool {
        self.leading_until.is_some_and(|until| now < until)
    }

    /// When our leadership ends unless a renewal succeeds; `None` when we
    /// do not lead. (An instant in the past until [`Elector::tick`] or an
    /// answer notices that it ended: [`Elector::is_leader`] is already
    /// false then.)
    pub fn leader_until(&self) -> Option<Instant> {
        self.leading_until
    }

    /// Notices the end of our leadership at `now`.
    pub fn tick(&mut self, now: Instant) -> Option<Transition> {
        match self.leading_until {
            Some(until) if now >= until => {
                self.leading_until = None;
                Some(Transition::Lost(LostReason::RenewDeadline))
            }
            _ => None,
        }
    }

    fn lose(&mut self, reason: LostReason) -> Option<Transition> {
        self.leading_until.take().map(|_| Transition::Lost(reason))
    }

    fn abandon_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            self.stale = true;
            if p.kind != Kind::Read {
                self.maybe_ours = true;
            }
        }
    }

    fn send(&mut self, kind: Kind, now: Instant, request: Request) -> Step {
        self.pending = Some(Pending { kind, sent_at: now });
        Step::Send(request)
    }

    /// What to do at `now`: a request to send (its answer goes to
    /// [`Elector::on_response`]; a request still unanswered is considered
    /// abandoned), or an instant to wait for.
    pub fn poll(&mut self, now: Instant, wall: Timestamp) -> Step {
        self.abandon_pending();
        if now < self.next_at {
            return Step::Wait(self.next_at);
        }
        if self.stale {
            return self.send(Kind::Read, now, Request::Get);
        }
        match decide(
            self.observation.as_ref(),
            &self.identity,
            &self.config,
            now,
            wall,
        ) {
            Decision::Observe => self.send(Kind::Read, now, Request::Get),
            Decision::Create(record) => self.send(Kind::Write, now, Request::Create(record)),
            Decision::TryAcquire {
                record,
                resource_version,
            }
            | Decision::Renew {
                record,
                resource_version,
            } => self.send(
                Kind::Write,
                now,
                Request::Update {
                    record,
                    resource_version,
                },
            ),
            Decision::StandBy { .. } => {
                // Poll again (the holder may release or stop renewing).
                self.stale = true;
                self.next_at = now + self.config.retry_period;
                Step::Wait(self.next_at)
            }
        }
    }

    fn observe(&mut self, lease: Option<Observed>, now: Instant) {
        let unchanged = self.observation.as_ref().is_some_and(|o| {
            o.lease.as_ref().map(|l| &l.resource_version)
                == lease.as_ref().map(|l| &l.resource_version)
        });
        if unchanged {
            if let Some(o) = &mut self.observation {
                o.lease = lease;
            }
        } else {
            self.observation = Some(Observation { lease, at: now });
        }
    }

    /// The answer, at `now`, to the request [`Elector::poll`] or
    /// [`Elector::release`] returned last. Returns the change of leadership
    /// it causes, if any.
    pub fn on_response(&mut self, now: Instant, response: Response) -> Option<Transition> {
        let pending = self.pending.take()?;
        let retry_at = now + self.config.retry_period;
        match response {
            Response::Read(lease) => {
                self.observe(lease, now);
                self.stale = false;
                self.maybe_ours = false;
                self.next_at = now;
                if self.leading_until.is_none() {
                    return self.tick(now);
                }
                match self.observed_holder() {
                    Some(h) if h == self.identity => self.tick(now),
                    Some(h) => {
                        let h = h.to_owned();
                        self.lose(LostReason::HeldBy(h))
                    }
                    None => self.lose(LostReason::NotHeld),
                }
            }
            Response::Written(observed) => {
                let ours = observed.record.holder() == Some(self.identity.as_str());
                self.observation = Some(Observation {
                    lease: Some(observed),
                    at: now,
                });
                self.stale = false;
                self.maybe_ours = false;
                self.next_at = retry_at;
                if pending.kind == Kind::Release {
                    self.leading_until = None;
                    return Some(Transition::Released);
                }
                let until = pending.sent_at + self.config.renew_deadline;
                if !ours {
                    return self.lose(LostReason::NotHeld);
                }
                if until <= now {
                    // Answered too late to count: the renewal may already
                    // have been too old for others.
                    return self.lose(LostReason::RenewDeadline);
                }
                let was_leading = self.leading_until.replace(until).is_some();
                (!was_leading).then_some(Transition::Acquired)
            }
            Response::Conflict => {
                self.stale = true;
                // A leader whose write conflicts reads the Lease at once: if
                // another holder has it, the term ends now rather than at the
                // renew deadline (it went on writing for 1.8 s in the lab's
                // lease-loss fault). A candidate retries at its pace.
                self.next_at = if self.leading_until.is_some() {
                    now
                } else {
                    retry_at
                };
                self.tick(now)
            }
            Response::Failed => {
                self.stale = true;
                if pending.kind != Kind::Read {
                    self.maybe_ours = true;
                }
                self.next_at = retry_at;
                self.tick(now)
            }
        }
    }

    /// Graceful shutdown: stops leading at once, then returns the next
    /// request of the release (client-go's `ReleaseOnCancel`): a read when a
    /// write of ours may have been applied unseen, the write of an empty
    /// holder with `leaseDurationSeconds: 1` when the Lease is ours, `None`
    /// when there is nothing (more) to release. Hand each answer to
    /// [`Elector::on_response`] and call again (a bounded number of times).
    pub fn release(&mut self, now: Instant, wall: Timestamp) -> Option<Request> {
        self.leading_until = None;
        self.abandon_pending();
        let holder_is_us = self.observed_holder() == Some(self.identity.as_str());
        if self.stale && (holder_is_us || self.maybe_ours) {
            self.pending = Some(Pending {
                kind: Kind::Read,
                sent_at: now,
            });
            return Some(Request::Get);
        }
        if !holder_is_us {
            return None;
        }
        let lease = self.observation.as_ref()?.lease.as_ref()?;
        let request = Request::Update {
            record: LeaseRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(wall),
                renew_time: Some(wall),
                lease_transitions: lease.record.lease_transitions,
            },
            resource_version: lease.resource_version.clone(),
        };
        self.pending = Some(Pending {
            kind: Kind::Release,
            sent_at: now,
        });
        Some(request)
    }
}

/// A holder identity: the Pod name, so that the same Pod restarted (a
/// crashed container) finds the Lease its own and renews it at once instead
/// of waiting a whole lease duration. Without a Pod name (run by hand), the
/// host name and a random suffix, so that two such processes never share one.
pub fn identity(pod_name: &str) -> String {
    if !pod_name.is_empty() {
        return pod_name.to_owned();
    }
    format!("{}_{:016x}", hostname(), random_u64())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "metallb-rs-controller".to_owned())
}

/// A random number from the standard library's randomly keyed hasher (a
/// fresh key per call).
fn random_u64() -> u64 {
    RandomState::new().hash_one((std::process::id(), SystemTime::now()))
}

/// client-go's `wait.Jitter`: `base` plus up to `JITTER_FACTOR * base`,
/// `unit` (in `[0, 1)`) choosing where.
pub fn jitter(base: Duration, unit: f64) -> Duration {
    base + base.mul_f64(JITTER_FACTOR * unit.clamp(0.0, 1.0))
}

/// An API error about the Lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 409: it exists (create) or changed (update).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl From<kube::Error> for ApiError {
    /// By the project's one classification of API errors (kube-edge).
    fn from(e: kube::Error) -> Self {
        let f = kube_edge::ApiFailure::from_kube("lease".into(), &e);
        match f.class {
            kube_edge::Class::Conflict => Self::Conflict(e.to_string()),
            _ => Self::Other(e.to_string()),
        }
    }
}

/// The API calls of an election: one Lease, one caller at a time.
pub trait LeaseApi: Send {
    /// Reads the Lease: `None` when it does not exist.
    fn get(&mut self) -> impl Future<Output = Result<Option<Observed>, ApiError>> + Send;

    /// Creates the Lease with `record`.
    fn create(
        &mut self,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<Observed, ApiError>> + Send;

    /// Replaces the Lease's record if it is still at `resource_version`.
    fn replace(
        &mut self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<Observed, ApiError>> + Send;
}

async fn send<A: LeaseApi>(api: &mut A, request: &Request) -> Result<Response, ApiError> {
    Ok(match request {
        Request::Get => Response::Read(api.get().await?),
        Request::Create(record) => Response::Written(api.create(record).await?),
        Request::Update {
            record,
            resource_version,
        } => Response::Written(api.replace(record, resource_version).await?),
    })
}

/// [`LeaseApi`] on a Kubernetes API server. Updates replace the whole
/// object as last read, so that its labels, annotations and the spec fields
/// the election does not use are kept.
#[derive(Clone, Debug)]
pub struct KubeLeaseApi {
    api: Api<Lease>,
    namespace: String,
    name: String,
    last: Option<Lease>,
}

impl KubeLeaseApi {
    /// The Lease `namespace/name` through `client`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            last: None,
        }
    }

    fn remember(&mut self, lease: Lease) -> Result<Observed, ApiError> {
        let observed = observed(&lease)?;
        self.last = Some(lease);
        Ok(observed)
    }
}

/// The record and version of `lease`.
pub fn observed(lease: &Lease) -> Result<Observed, ApiError> {
    let resource_version = lease.metadata.resource_version.clone().ok_or_else(|| {
        ApiError::Other("the server returned a Lease without a resourceVersion".into())
    })?;
    Ok(Observed {
        record: LeaseRecord::from_spec(lease.spec.as_ref()),
        resource_version,
    })
}

fn bare_lease(namespace: &str, name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
    }
}

/// The object of an update of `namespace/name` to `record` at
/// `resource_version`: the `last` object read or written (when it is that
/// version) with its election fields replaced, else a bare one.
pub fn lease_for_update(
    last: Option<&Lease>,
    namespace: &str,
    name: &str,
    record: &LeaseRecord,
    resource_version: &str,
) -> Lease {
    let mut lease = last
        .filter(|l| l.metadata.resource_version.as_deref() == Some(resource_version))
        .cloned()
        .unwrap_or_else(|| bare_lease(namespace, name));
    lease.metadata.resource_version = Some(resource_version.to_owned());
    record.apply_to(lease.spec.get_or_insert_with(LeaseSpec::default));
    lease
}

impl LeaseApi for KubeLeaseApi {
    async fn get(&mut self) -> Result<Option<Observed>, ApiError> {
        match self.api.get_opt(&self.name).await? {
            Some(lease) => self.remember(lease).map(Some),
            None => {
                self.last = None;
                Ok(None)
            }
        }
    }

    async fn create(&mut self, record: &LeaseRecord) -> Result<Observed, ApiError> {
        let mut lease = bare_lease(&self.namespace, &self.name);
        record.apply_to(lease.spec.get_or_insert_with(LeaseSpec::default));
        let created = self.api.create(&PostParams::default(), &lease).await?;
        self.remember(created)
    }

    async fn replace(
        &mut self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> Result<Observed, ApiError> {
        let lease = lease_for_update(
            self.last.as_ref(),
            &self.namespace,
            &self.name,
            record,
            resource_version,
        );
        let replaced = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        self.remember(replaced)
    }
}

/// Runs an [`Elector`] against a server: see [`LeaderElector::run`].
#[derive(Debug)]
pub struct LeaderElector<A = KubeLeaseApi> {
    api: A,
    lease: String,
    elector: Elector,
}

impl LeaderElector<KubeLeaseApi> {
    /// The election on the Lease `namespace/name` (e.g. [`LEASE_NAME`]) as
    /// `identity` (e.g. [`identity`]).
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: impl Into<String>,
        config: LeaseConfig,
    ) -> Result<Self, ConfigError> {
        Self::with_api(
            KubeLeaseApi::new(client, namespace, name),
            format!("{namespace}/{name}"),
            identity,
            config,
        )
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// A uniform number in `[0, 1)`.
fn random_unit() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Logs `transition` and publishes whether we lead, in which term, until
/// when (a new term on each acquisition).
fn report(
    lease: &str,
    elector: &Elector,
    transition: Option<Transition>,
    is_leader: &watch::Sender<Leadership>,
) {
    match &transition {
        Some(Transition::Acquired) => tracing::info!(
            lease,
            holder = elector.identity(),
            term = is_leader.borrow().term + 1,
            "acquired the lease: this controller leads"
        ),
        Some(Transition::Lost(reason)) => tracing::warn!(
            lease,
            holder = elector.identity(),
            observed_holder = elector.observed_holder().unwrap_or_default(),
            reason = %reason,
            "lost the lease: this controller stops allocating"
        ),
        Some(Transition::Released) => {
            tracing::info!(lease, holder = elector.identity(), "released the lease")
        }
        None => {}
    }
    let now = now();
    let until = elector
        .is_leader(now)
        .then(|| elector.leader_until())
        .flatten();
    is_leader.send_if_modified(|v| {
        let term = if transition == Some(Transition::Acquired) {
            v.term + 1
        } else {
            v.term
        };
        let next = Leadership { term, until };
        std::mem::replace(v, next) != next
    });
}

fn stop_leading(is_leader: &watch::Sender<Leadership>) {
    is_leader.send_if_modified(|v| v.until.take().is_some());
}

/// The [`Response`] of an API call's `result` (`None`: it timed out).
fn response(lease: &str, retry: Duration, result: Option<Result<Response, ApiError>>) -> Response {
    match result {
        Some(Ok(r)) => r,
        Some(Err(ApiError::Conflict(e))) => {
            tracing::debug!(lease, error = e, "lease write conflicted; re-reading");
            Response::Conflict
        }
        Some(Err(ApiError::Other(e))) => {
            tracing::warn!(lease, error = e, retry = ?retry, "lease request failed; retrying");
            Response::Failed
        }
        None => {
            tracing::warn!(lease, retry = ?retry, "lease request timed out; retrying");
            Response::Failed
        }
    }
}

impl<A: LeaseApi> LeaderElector<A> {
    /// The election through `api`; `lease` names the Lease in logs.
    pub fn with_api(
        api: A,
        lease: impl Into<String>,
        identity: impl Into<String>,
        config: LeaseConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            api,
            lease: lease.into(),
            elector: Elector::new(identity, config, now())?,
        })
    }

    /// Our holder identity.
    pub fn identity(&self) -> &str {
        self.elector.identity()
    }

    /// Sends `request` (bounded by the renew deadline) while watching our
    /// leadership deadline; `None` when `stop` completes first.
    async fn exchange<F: Future<Output = ()>>(
        &mut self,
        request: &Request,
        is_leader: &watch::Sender<Leadership>,
        mut stop: std::pin::Pin<&mut F>,
    ) -> Option<Response> {
        let Self {
            api,
            lease,
            elector,
        } = self;
        let timeout = elector.config().renew_deadline;
        let result = {
            let mut call = std::pin::pin!(tokio::time::timeout(timeout, send(api, request)));
            loop {
                let deadline = elector.leader_until();
                tokio::select! {
                    () = &mut stop => return None,
                    r = &mut call => break r.ok(),
                    () = sleep_until(deadline) => {
                        let t = elector.tick(now());
                        report(lease, elector, t, is_leader);
                    }
                }
            }
        };
        Some(response(lease, elector.config().retry_period, result))
    }

    /// Runs the election until `stop` completes: publishes on `is_leader`
    /// whether we lead (`false` first, `true` only while we are sure to hold
    /// the Lease), logs each acquisition and loss with the holder's
    /// identity, retries API errors every `retry_period`. After losing the
    /// Lease it stands again as a candidate. When `stop` completes it
    /// publishes `false`, then releases the Lease if it is ours (bounded by
    /// the renew deadline).
    pub async fn run<F: Future<Output = ()>>(
        mut self,
        is_leader: watch::Sender<Leadership>,
        stop: F,
    ) {
        let mut stop = std::pin::pin!(stop);
        stop_leading(&is_leader);
        let mut last_holder: Option<String> = None;
        loop {
            let t = self.elector.tick(now());
            report(&self.lease, &self.elector, t, &is_leader);
            let holder = self.elector.observed_holder().map(str::to_owned);
            if holder != last_holder {
                if let Some(h) = holder.as_deref().filter(|h| *h != self.identity()) {
                    tracing::info!(
                        lease = self.lease,
                        holder = h,
                        "the lease is held by another controller: standing by"
                    );
                }
                last_holder = holder;
            }
            let at = now();
            match self.elector.poll(at, Timestamp::now()) {
                Step::Wait(until) => {
                    // Candidates spread their attempts out (client-go's
                    // JitterUntil); the leader renews on time.
                    let until = if self.elector.is_leader(at) || until <= at {
                        until
                    } else {
                        let base = self.elector.config().retry_period;
                        until + (jitter(base, random_unit()) - base)
                    };
                    let deadline = self.elector.leader_until();
                    tokio::select! {
                        () = &mut stop => break,
                        () = sleep_until(Some(until)) => {}
                        () = sleep_until(deadline) => {}
                    }
                }
                Step::Send(request) => {
                    let Some(r) = self.exchange(&request, &is_leader, stop.as_mut()).await else {
                        break;
                    };
                    let t = self.elector.on_response(now(), r);
                    report(&self.lease, &self.elector, t, &is_leader);
                }
            }
        }
        stop_leading(&is_leader);
        self.release().await;
    }

    /// Releases the Lease if it is ours (a bounded number of attempts,
    /// within the renew deadline).
    async fn release(&mut self) {
        let config = *self.elector.config();
        let Self {
            api,
            lease,
            elector,
        } = self;
        let attempts = async {
            for _ in 0..4 {
                let Some(request) = elector.release(now(), Timestamp::now()) else {
                    return;
                };
                let result = send(api, &request).await;
                let r = response(lease, config.retry_period, Some(result));
                if elector.on_response(now(), r) == Some(Transition::Released) {
                    tracing::info!(
                        lease = *lease,
                        holder = elector.identity(),
                        "released the lease"
                    );
                    return;
                }
            }
            tracing::warn!(
                lease = *lease,
                "could not release the lease; it expires on its own"
            );
        };
        if tokio::time::timeout(config.renew_deadline, attempts)
            .await
            .is_err()
        {
            tracing::warn!(
                lease = *lease,
                "releasing the lease timed out; it expires on its own"
            );
        }
    }
}

pub mod testing {
    //! An in-memory Lease server with Kubernetes' optimistic concurrency,
    //! for tests of code that runs an election.

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    use super::{ApiError, LeaseApi, LeaseRecord, Observed, Request, Response};

    /// One Lease and its versions, answering [`Request`]s as the API server
    /// would: a create of an existing Lease and an update at another version
    /// conflict; an update of a missing Lease fails (404).
    #[derive(Clone, Debug, Default)]
    pub struct LeaseServer {
        lease: Option<Observed>,
        version: u64,
    }

    impl LeaseServer {
        /// No Lease.
        pub fn new() -> Self {
            Self::default()
        }

        /// The Lease, if any.
        pub fn lease(&self) -> Option<&Observed> {
            self.lease.as_ref()
        }

        /// Writes `record` unconditionally (another writer, an admin).
        pub fn put(&mut self, record: LeaseRecord) -> Observed {
            self.version += 1;
            let observed = Observed {
                record,
                resource_version: self.version.to_string(),
            };
            self.lease = Some(observed.clone());
            observed
        }

        /// Deletes the Lease.
        pub fn delete(&mut self) {
            self.lease = None;
        }

        /// Applies `request` atomically.
        pub fn handle(&mut self, request: &Request) -> Response {
            match request {
                Request::Get => Response::Read(self.lease.clone()),
                Request::Create(_) if self.lease.is_some() => Response::Conflict,
                Request::Create(record) => Response::Written(self.put(record.clone())),
                Request::Update {
                    record,
                    resource_version,
                } => match &self.lease {
                    None => Response::Failed,
                    Some(l) if &l.resource_version != resource_version => Response::Conflict,
                    Some(_) => Response::Written(self.put(record.clone())),
                },
            }
        }
    }

    /// A [`LeaseApi`] on a shared [`LeaseServer`], with injected failures.
    #[derive(Clone, Debug, Default)]
    pub struct MemoryLeaseApi {
        /// The server (shared between candidates).
        pub server: Arc<Mutex<LeaseServer>>,
        /// Fail this many of the next calls (without applying them).
        pub fail_next: Arc<AtomicUsize>,
        /// Fail every call while set (the API server is unreachable).
        pub down: Arc<AtomicBool>,
        /// Calls made.
        pub calls: Arc<AtomicUsize>,
    }

    impl MemoryLeaseApi {
        /// An API on `server`.
        pub fn new(server: Arc<Mutex<LeaseServer>>) -> Self {
            Self {
                server,
                ..Self::default()
            }
        }

        fn call(&self, request: &Request) -> Result<Response, ApiError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let injected = self
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if injected || self.down.load(Ordering::SeqCst) {
                return Err(ApiError::Other("injected failure".into()));
            }
            let response = self
                .server
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .handle(request);
            match response {
                Response::Conflict => Err(ApiError::Conflict("injected conflict".into())),
                Response::Failed => Err(ApiError::Other("not found".into())),
                r => Ok(r),
            }
        }
    }

    impl LeaseApi for MemoryLeaseApi {
        async fn get(&mut self) -> Result<Option<Observed>, ApiError> {
            match self.call(&Request::Get)? {
                Response::Read(l) => Ok(l),
                r => Err(ApiError::Other(format!("unexpected {r:?}"))),
            }
        }

        async fn create(&mut self, record: &LeaseRecord) -> Result<Observed, ApiError> {
            match self.call(&Request::Create(record.clone()))? {
                Response::Written(o) => Ok(o),
                r => Err(ApiError::Other(format!("unexpected {r:?}"))),
            }
        }

        async fn replace(
            &mut self,
            record: &LeaseRecord,
            resource_version: &str,
        ) -> Result<Observed, ApiError> {
            let request = Request::Update {
                record: record.clone(),
                resource_version: resource_version.to_owned(),
            };
            match self.call(&request)? {
                Response::Written(o) => Ok(o),
                r => Err(ApiError::Other(format!("unexpected {r:?}"))),
            }
        }
    }
}
