"""The chaos soak's knobs and its seeded fault schedule (same seed and length, same schedule).

The schedule is a list of :class:`Fault` s, each a window ``[start, end]`` in seconds after the
soak's start (``start == end`` for an instant fault such as a SIGKILL). It is built from *scenes*
whose faults the oracle can judge exactly from the documents (docs/fleet.md, docs/probe.md,
docs/configuration.md): an outage with workers recycled and an override forcing enforcement on
inside it; status-page faults in healthy time (with a Redis pause and a leader kill under them);
verify-API faults (with Redis killed and restarted under them); overrides placed, lifted and
lapsing (with a FLUSHALL while one is in force). The first round plays every scene once, so any
run of two minutes or more sees every fault kind; later rounds draw scenes and their lengths
from the seed.

Deliberately kept apart, so that the oracle need not guess behaviour the docs leave open: an
override is never placed or lifted within a Redis kill or pause (plus a margin); a status-page
fault inside an outage ends before the outage does (never in its recovery, where whether a
failed poll resets the count of good readings is not documented).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = [
    "FAULT_KINDS", "Fault", "Knobs", "build_schedule", "SCENE_MIN_SECONDS", "SENTINEL_FAILOVER",
    "SENTINEL_KINDS",
]

# Fault kinds. Status page (what the fake reports or how it fails):
STATUS_OUTAGE = "status_global_outage"      # global major_outage, then operational (recovery)
STATUS_REGIONAL = "status_regional_only"    # a region major_outage, global operational
STATUS_500 = "status_500"
STATUS_TIMEOUT = "status_timeout"
STATUS_MALFORMED = "status_malformed"
STATUS_OVERSIZED = "status_oversized"       # the fake's "huge": ~50 MB of valid-looking JSON
# Verify API:
VERIFY_DOWN = "verify_down"                 # 503
VERIFY_SLOW = "verify_slow"                 # slow_drip: answers slower than the verify timeout
VERIFY_429 = "verify_429"
# The fleet's Redis and processes:
REDIS_KILL = "redis_kill"                   # SIGKILL at start, restarted (empty) at end
REDIS_PAUSE = "redis_pause"                 # SIGSTOP at start, SIGCONT at end
REDIS_FLUSHALL = "redis_flushall"           # instant
LEADER_KILL = "leader_kill"                 # SIGKILL of the process holding the lease; instant
WORKERS_RECYCLE = "workers_recycle"         # HUP to gunicorn's master and uvicorn's; instant
# Operators (the `failopen override` CLI against the same Redis):
OVERRIDE_OFF_LIFTED = "override_off_lifted"    # `override off` at start, `override auto` at end
OVERRIDE_OFF_LAPSING = "override_off_lapsing"  # `override off --ttl (end-start)`, lapses itself
OVERRIDE_ON = "override_on"                    # `override on` at start, `override auto` at end

FAULT_KINDS = (
    STATUS_OUTAGE, STATUS_REGIONAL, STATUS_500, STATUS_TIMEOUT, STATUS_MALFORMED,
    STATUS_OVERSIZED, VERIFY_DOWN, VERIFY_SLOW, VERIFY_429, REDIS_KILL, REDIS_PAUSE,
    REDIS_FLUSHALL, LEADER_KILL, WORKERS_RECYCLE, OVERRIDE_OFF_LIFTED, OVERRIDE_OFF_LAPSING,
    OVERRIDE_ON,
)
#: Sentinel mode only: SIGKILL of the primary the sentinel names; the window ends when the
#: sentinel names another (down-after-milliseconds plus the promotion), after which the killed
#: server is restarted as a replica of the new primary.
SENTINEL_FAILOVER = "sentinel_failover"
SENTINEL_KINDS = (*FAULT_KINDS, SENTINEL_FAILOVER)
STATUS_UNREADABLE = frozenset({STATUS_500, STATUS_TIMEOUT, STATUS_MALFORMED, STATUS_OVERSIZED})
VERIFY_FAULTS = frozenset({VERIFY_DOWN, VERIFY_SLOW, VERIFY_429})
#: Verify faults the probe counts as failed (docs/probe.md: a time-out, a 5xx or an unusable
#: body); a 429 is an answer given in time: healthy, never evidence.
PROBE_FAILING = frozenset({VERIFY_DOWN, VERIFY_SLOW})
REDIS_FAULTS = frozenset({REDIS_KILL, REDIS_PAUSE, REDIS_FLUSHALL})
#: Faults after which a member may take up to a lease (plus a Redis command time-out) to be
#: back to one shared poller: what the oracle allows on top of the detection/recovery bounds.
FLEET_DISRUPTIONS = frozenset({REDIS_KILL, REDIS_PAUSE, REDIS_FLUSHALL, LEADER_KILL,
                               WORKERS_RECYCLE, SENTINEL_FAILOVER})
#: Faults during which the fleet's Redis does not answer (a failover: until the promotion).
REDIS_AWAY = frozenset({REDIS_KILL, REDIS_PAUSE, SENTINEL_FAILOVER})
OVERRIDES = frozenset({OVERRIDE_OFF_LIFTED, OVERRIDE_OFF_LAPSING, OVERRIDE_ON})


@dataclass(frozen=True)
class Knobs:
    """The soak's settings: the real FAILOPEN_* knobs (short, so minutes cover every fault) and
    the documented constants the oracle derives its tolerances from."""

    poll_interval: float = 1.0      # FAILOPEN_POLL_INTERVAL
    poll_jitter: float = 0.1        # FAILOPEN_POLL_JITTER (the default)
    status_timeout: float = 1.0     # FAILOPEN_STATUS_TIMEOUT
    open_after: int = 1             # FAILOPEN_OPEN_AFTER (the default)
    close_after: int = 2            # FAILOPEN_CLOSE_AFTER (the default)
    backoff_max: float = 3.0        # FAILOPEN_BACKOFF_MAX
    store_refresh: float = 0.5      # FAILOPEN_STORE_REFRESH
    fleet_lease: float = 2.0        # FAILOPEN_FLEET_LEASE (at least 3 x store_refresh)
    verify_timeout: float = 1.5     # FAILOPEN_VERIFY_TIMEOUT
    confirm_ttl: float = 2.0        # FAILOPEN_CONFIRM_TTL
    probe_interval: float = 1.0     # FAILOPEN_PROBE_INTERVAL
    probe_open_after: int = 3       # FAILOPEN_PROBE_OPEN_AFTER (the default)
    max_stale_bypass: float = 30.0  # FAILOPEN_MAX_STALE_BYPASS
    fallback_cost: int = 1000       # FAILOPEN_FALLBACK_COST: the cheapest, solving is not tested
    #: docs/fleet.md: "Redis down, slow (a command over 0.5 s)": a paused Redis is noticed then.
    redis_command_timeout: float = 0.5

    def env(self) -> dict[str, str]:
        """The FAILOPEN_* variables (without the FAILOPEN_ prefix) both servers get."""
        return {
            "POLL_INTERVAL": f"{self.poll_interval:g}", "POLL_JITTER": f"{self.poll_jitter:g}",
            "STATUS_TIMEOUT": f"{self.status_timeout:g}", "OPEN_AFTER": str(self.open_after),
            "CLOSE_AFTER": str(self.close_after), "BACKOFF_MAX": f"{self.backoff_max:g}",
            "STORE_REFRESH": f"{self.store_refresh:g}", "FLEET_LEASE": f"{self.fleet_lease:g}",
            "VERIFY_TIMEOUT": f"{self.verify_timeout:g}", "CONFIRM_TTL": f"{self.confirm_ttl:g}",
            "MAX_STALE_BYPASS": f"{self.max_stale_bypass:g}",
            "FALLBACK_COST": str(self.fallback_cost),
        }

    def probe_env(self) -> dict[str, str]:
        """What the server with the verify probe adds."""
        return {"EVIDENCE": "status,probe", "PROBE_INTERVAL": f"{self.probe_interval:g}",
                "PROBE_OPEN_AFTER": str(self.probe_open_after)}

    # -- the tolerances, each from the knobs the docs name -------------------------------------

    @property
    def detection(self) -> float:
        """An outage on the page bypasses within one (jittered) poll interval plus the status
        time-out, plus half a store refresh and a round trip for a follower (docs/fleet.md)."""
        return self.poll_interval * (1 + self.poll_jitter) + self.status_timeout \
            + self.store_refresh

    @property
    def detection_after_failures(self) -> float:
        """After the page failed, the watcher backs off up to FAILOPEN_BACKOFF_MAX between polls
        (docs/configuration.md), so the first good reading may come that late."""
        return max(self.backoff_max, self.poll_interval * (1 + self.poll_jitter)) \
            + self.status_timeout + self.store_refresh

    @property
    def stale_after(self) -> float:
        """FAILOPEN_STALE_AFTER's default, 3 intervals: a reading this old is stale."""
        return 3 * self.poll_interval

    @property
    def recovery(self) -> float:
        """Enforcement is back within FAILOPEN_CLOSE_AFTER (jittered) intervals plus the status
        time-out, plus the follower's store refresh."""
        return self.close_after * self.poll_interval * (1 + self.poll_jitter) \
            + self.status_timeout + self.store_refresh

    @property
    def propagation(self) -> float:
        """An override reaches every process within a store refresh (read twice per period)
        plus a Redis round trip (docs/fleet.md, docs/operations.md: "within ~1 s")."""
        return self.store_refresh + self.redis_command_timeout

    @property
    def fleet_gap(self) -> float:
        """A dead leader is replaced within one lease; a Redis that stops answering is noticed
        after one command time-out (docs/fleet.md)."""
        return self.fleet_lease + self.redis_command_timeout

    @property
    def probe_earliest(self) -> float:
        """The probe needs FAILOPEN_PROBE_OPEN_AFTER failed probes in a row: the first may come
        at once, the last no sooner than (OPEN_AFTER - 1) spacings later (docs/probe.md)."""
        return (self.probe_open_after - 1) * self.probe_interval * (1 - self.poll_jitter)

    @property
    def probe_recovery(self) -> float:
        """A probe bypass ends at the first healthy probe while the page reads operational: one
        probe spacing, the verify time-out, and a store refresh for a follower."""
        return self.probe_interval * (1 + self.poll_jitter) + self.verify_timeout \
            + self.store_refresh


@dataclass(frozen=True)
class Fault:
    """One fault window, in seconds after the soak's start (``start == end``: instant)."""

    kind: str
    start: float
    end: float
    detail: dict[str, str] = field(default_factory=dict)
    #: When the start action had taken effect (a command returned); None: at ``start``.
    settled_at: float | None = None
    #: When the end action was begun (``end`` is when it had taken effect); None: at ``end``.
    ending_at: float | None = None

    @property
    def settled(self) -> float:
        """When the start had surely taken effect."""
        return self.start if self.settled_at is None else self.settled_at

    @property
    def ending(self) -> float:
        """When the end was begun: the fault surely held until then."""
        return self.end if self.ending_at is None else self.ending_at

    def covers(self, t: float) -> bool:
        """True when ``t`` is inside the window."""
        return self.start <= t <= self.end


# Each scene: its faults at offsets from the scene's start, scaled by ``stretch`` (1 = the
# shortest that still shows each effect), and the scene's length.
def _outage_scene(at: float, stretch: float, rng: random.Random,
                  sentinel: bool = False) -> tuple[list[Fault], float]:
    """A global outage (sometimes with the verify API down too, as in a real one); workers
    recycled while it lasts; an operator forcing enforcement on, then handing back; then the
    page failing for longer than FAILOPEN_STALE_AFTER while it still shows the outage (the
    bypass must hold: a page that cannot be read is no evidence either way), then readable
    again before the recovery. On Sentinel, the primary is killed (a failover) while the page
    fails, at least 2 s after the operator handed back: an override is never placed or lifted
    during one, and no other kill or pause of the primary is near."""
    length = 18 * stretch
    faults = [Fault(STATUS_OUTAGE, at, at + length)]
    if rng.random() < 0.5:
        faults.append(Fault(VERIFY_DOWN, at, at + length, {"with": "outage"}))
    faults.append(Fault(WORKERS_RECYCLE, at + 4 * stretch, at + 4 * stretch))
    faults.append(Fault(OVERRIDE_ON, at + 7 * stretch, at + 10 * stretch))
    failing = rng.choice([STATUS_500, STATUS_TIMEOUT, STATUS_MALFORMED, STATUS_OVERSIZED])
    faults.append(Fault(failing, at + 11 * stretch, at + 15 * stretch, {"in": "outage"}))
    if sentinel:  # drawn last: the other faults stay those of the plain schedule
        failover_at = at + rng.uniform(12.5, 14) * stretch
        faults.append(Fault(SENTINEL_FAILOVER, failover_at, failover_at))
    return faults, length + 6


def _status_scene(at: float, stretch: float, rng: random.Random,
                  sentinel: bool = False) -> tuple[list[Fault], float]:
    """Every way the page misleads or fails while the platform is healthy, back to back, with
    a Redis pause and a leader kill under them."""
    kinds = [STATUS_REGIONAL, STATUS_500, STATUS_TIMEOUT, STATUS_MALFORMED, STATUS_OVERSIZED]
    rng.shuffle(kinds)
    faults, t = [], at
    for kind in kinds:
        length = (5 if kind == STATUS_REGIONAL else 3.5) * stretch
        faults.append(Fault(kind, t, t + length,
                            {"region": rng.choice(["us-east-1", "eu-west-1"])}
                            if kind == STATUS_REGIONAL else {}))
        t += length + 1.5
    pause_at = at + rng.uniform(2, max(2.0, t - at - 6))
    faults.append(Fault(REDIS_PAUSE, pause_at, pause_at + 3 * stretch))
    kill_at = at + rng.uniform(1, max(1.0, t - at - 2))
    faults.append(Fault(LEADER_KILL, kill_at, kill_at))
    return faults, t - at + 2


def _verify_scene(at: float, stretch: float, rng: random.Random,
                  sentinel: bool = False) -> tuple[list[Fault], float]:
    """The verify API down, slow and rate limited under a healthy page, with Redis killed and
    restarted (empty) under them."""
    kinds = [VERIFY_DOWN, VERIFY_SLOW, VERIFY_429]
    rng.shuffle(kinds)
    faults, t = [], at
    for kind in kinds:
        length = 6 * stretch
        faults.append(Fault(kind, t, t + length))
        t += length + 4
    kill_at = at + rng.uniform(1, max(1.0, t - at - 8))
    faults.append(Fault(REDIS_KILL, kill_at, kill_at + 4 * stretch))
    return faults, t - at + 1


def _override_scene(at: float, stretch: float, rng: random.Random,
                    sentinel: bool = False) -> tuple[list[Fault], float]:
    """An override placed, Redis killed and restarted empty under it (the members keep it and
    put it back, docs/fleet.md), then lifted; another placed with a TTL that lapses, with a
    FLUSHALL while it is in force."""
    lifted = Fault(OVERRIDE_OFF_LIFTED, at, at + 9 * stretch)
    restart = Fault(REDIS_KILL, at + 2.5 * stretch, at + 5.5 * stretch, {"under": "override"})
    lapse_at = lifted.end + 4
    lapsing = Fault(OVERRIDE_OFF_LAPSING, lapse_at, lapse_at + round(5 * stretch),
                    {"ttl": str(round(5 * stretch))})
    flush_at = lapse_at + rng.uniform(1.5, max(1.5, lapsing.end - lapse_at - 1.5))
    return [lifted, restart, lapsing, Fault(REDIS_FLUSHALL, flush_at, flush_at)], \
        lapsing.end - at + 4


SCENES = (_outage_scene, _status_scene, _verify_scene, _override_scene)
#: What the first round needs at stretch 1, with the warm-up: a 2-minute run fits it.
SCENE_MIN_SECONDS = 24 + 29 + 31 + 22
WARM_UP = 8.0
#: A failover is at least this far from another kill or pause of the primary: a restarted
#: server must be a synced replica the sentinel has seen again before it can be promoted (the
#: soak also waits for one before it kills: a paused primary resumed after a failover stays a
#: primary until the sentinel's next INFO of it, up to 10 s).
FAILOVER_GAP = 5.0


def build_schedule(seed: int, seconds: float, *, sentinel: bool = False) -> list[Fault]:
    """The faults of a soak of ``seconds`` (after the servers are up), sorted by start; with
    ``sentinel``, the same faults plus a :data:`SENTINEL_FAILOVER` in every outage scene."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = WARM_UP  # a quiet start: every process has read the page and the fleet has a leader
    order = list(SCENES)
    rng.shuffle(order)
    first_round = True
    while True:
        for scene in order:
            stretch = 1.0 if first_round else rng.uniform(1.0, 2.0)
            made, length = scene(t, stretch, random.Random(rng.random()), sentinel)
            if t + length > seconds and not first_round:
                return sorted(faults, key=lambda f: (f.start, f.kind))
            faults.extend(made)
            t += length + (0 if first_round else rng.uniform(0, 6))
        first_round = False
        order = [rng.choice(SCENES) for _ in range(len(SCENES))]
