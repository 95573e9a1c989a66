"""XCP as E5's edges and core routers run it: rate-based, one probe per macroflow per
control interval (Alparslan, Arakawa, Murata, section II-A, "Optical Rate-based Paced
XCP"; controllers from Katabi, Handley, Rohrs, SIGCOMM 2002).

Pure functions and small classes, no I/O. Units: rates in bit/s, queues and traffic
volumes in bytes, times in seconds (paper units; the emulation scales them by D).

What the E5 paper says, and how it maps onto Katabi et al.
---------------------------------------------------------
* Efficiency controller (II-A): "Phi = alpha . S - beta . Q/d, where Phi is the total
  amount of required change in input traffic, alpha and beta correspond to spare
  bandwidth-control and queue-control parameters, and d is the control-decision interval.
  S is the spare bandwidth that is the difference between the link capacity and input
  traffic in the last control interval. Q is the persistent queue size." Katabi et al.
  write phi = alpha . d . S - beta . Q, a volume (bytes) to add over the next interval d;
  the E5 form is that volume divided by d, a RATE: Phi [bit/s] = alpha S [bit/s] -
  beta 8 Q [bytes] / d [s] (:func:`aggregate_feedback_bps`). "The target utilization
  (TU) parameter of XCP was set to 100%" (III-A): S = TU x capacity - input rate.
* Persistent queue: Katabi et al. take the minimum queue seen by arriving packets over
  the last propagation delay; the E5 paper does not say. Here: the minimum of the queue
  samples the router took during the interval (0 without samples).
* Control interval: Katabi et al. use the average RTT of the flows. E5: "The control
  interval is the maximum RTT in the network. The control interval can be selected to be
  a bit longer than the maximum RTT" and "We selected an XCP control period for core
  routers and the sending interval of probe packets for edge routers of 50 ms" (III-B):
  d = 50 ms, fixed, the same at every router and edge.
* Shuffling (II-A): "h = max(0, gamma . u - |Phi|), where gamma is the shuffling
  parameter and u is the rate of aggregate input traffic in the last control interval."
* Fairness controller, per macroflow i (II-A, eqs. 1 and 2): "p_i = (h + max(0, Phi)) / N"
  and "n_i = u_i . (h + max(0, -Phi)) / u, where N is the number of macroflows on this
  wavelength, u_i is the traffic rate of flow i estimated and sent by the XCP sender in
  the probe packet". "N can be estimated by counting the number of probe packets
  received during the last control interval" (here: at least 1, so that a probe arriving
  in a router's first interval gets a finite share). Summed over the N macroflows (with
  sum u_i = u) the feedback is exactly Phi.
* Probes: "Feedback, which is the required change in the flow rate, is calculated as
  feedback = p_i - n_i. If this feedback is smaller than that in the probe packet, the
  core router replaces the feedback in the probe packet with its own feedback."
  (:func:`lower_feedback`). The edge then changes the macroflow's rate by the returned
  feedback (:func:`next_rate_bps`), and paces the macroflow at that rate ("The edge nodes
  of the OPS network apply leaky-bucket pacing to the macroflows by using the rate
  information provided by XCP").
* Stability (III-B-1): "Katabi et al. [9] proved that the system is stable independent of
  delay, capacity, or the number of sources when alpha and beta satisfy 0 < alpha <
  pi / (4 sqrt 2) and beta = alpha^2 sqrt 2." The paper's "alpha=0.4 and beta=0.226"
  give alpha^2 sqrt 2 = 0.22627 (beta rounded down by 0.12 %); its earlier "0.2, 0.056"
  give 0.05657 (-1.0 %). Beta is therefore accepted within BETA_RELATIVE_TOLERANCE (2 %)
  of alpha^2 sqrt 2. Note: the paper's Fig. 4 sweeps alpha up to 0.6, above the bound
  (0.5554); such points need ``XcpParameters(..., outside_stability_bound=True)``, which
  records that the setting is outside Katabi's proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: Katabi et al.'s bound on alpha, pi / (4 sqrt 2) = 0.5554
ALPHA_MAX = math.pi / (4 * math.sqrt(2))
#: accepted relative distance of beta from alpha^2 sqrt 2 (module docstring)
BETA_RELATIVE_TOLERANCE = 0.02
BITS_PER_BYTE = 8


class XcpParameterError(ValueError):
    """An XCP parameter outside its accepted range; names the parameter, the value and
    the accepted range."""

    def __init__(self, parameter: str, value: float, accepted: str) -> None:
        self.parameter, self.value, self.accepted = parameter, value, accepted
        super().__init__(f"XCP {parameter}={value!r}: accepted {accepted}")


class UnstableParameterError(XcpParameterError):
    """alpha / beta outside Katabi et al.'s stability condition."""


def stable_beta(alpha: float) -> float:
    """The beta that Katabi et al.'s stability condition pairs with ``alpha``: alpha^2 sqrt 2."""
    return alpha * alpha * math.sqrt(2)


def check_stability(alpha: float, beta: float) -> None:
    """Raise UnstableParameterError unless 0 < alpha < pi/(4 sqrt 2) and beta is within
    BETA_RELATIVE_TOLERANCE of alpha^2 sqrt 2."""
    if not 0 < alpha < ALPHA_MAX:
        raise UnstableParameterError("alpha", alpha, f"0 < alpha < pi/(4 sqrt 2) = {ALPHA_MAX:.4f} "
                                     "(Katabi et al. 2002, stability)")
    want = stable_beta(alpha)
    if abs(beta - want) > BETA_RELATIVE_TOLERANCE * want:
        raise UnstableParameterError("beta", beta, f"alpha^2 sqrt 2 = {want:.4f} for alpha = {alpha} within "
                                     f"{BETA_RELATIVE_TOLERANCE:.0%} (Katabi et al. 2002, stability)")


@dataclass(frozen=True)
class XcpParameters:
    """alpha, beta (efficiency controller), gamma (shuffling), interval_s (control
    interval d, s), target_utilisation (TU, fraction of capacity). Defaults: the E5
    paper's 0.4, 0.226, 0.1, 50 ms, 100 %.

    Raises UnstableParameterError for alpha/beta outside the stability condition (unless
    ``outside_stability_bound`` is True), XcpParameterError for gamma outside [0, 1],
    interval_s <= 0 or target_utilisation outside (0, 1]."""

    alpha: float = 0.4
    beta: float = 0.226
    gamma: float = 0.1
    interval_s: float = 0.05
    target_utilisation: float = 1.0
    outside_stability_bound: bool = False

    def __post_init__(self) -> None:
        if self.outside_stability_bound:
            if not self.alpha > 0:
                raise XcpParameterError("alpha", self.alpha, "alpha > 0")
            if not self.beta >= 0:
                raise XcpParameterError("beta", self.beta, "beta >= 0")
        else:
            check_stability(self.alpha, self.beta)
        if not 0 <= self.gamma <= 1:
            raise XcpParameterError("gamma", self.gamma, "0 <= gamma <= 1 (a fraction of the input traffic)")
        if not self.interval_s > 0:
            raise XcpParameterError("interval_s", self.interval_s, "interval_s > 0 (seconds)")
        if not 0 < self.target_utilisation <= 1:
            raise XcpParameterError("target_utilisation", self.target_utilisation, "0 < target_utilisation <= 1")


def aggregate_feedback_bps(spare_bps: float, persistent_queue_bytes: float, params: XcpParameters) -> float:
    """The efficiency controller's Phi = alpha S - beta Q / d, bit/s (S in bit/s, Q in
    bytes, d = params.interval_s)."""
    return params.alpha * spare_bps - params.beta * BITS_PER_BYTE * persistent_queue_bytes / params.interval_s


def shuffled_bps(phi_bps: float, input_rate_bps: float, gamma: float) -> float:
    """The shuffled traffic h = max(0, gamma u - |Phi|), bit/s."""
    return max(0.0, gamma * input_rate_bps - abs(phi_bps))


@dataclass(frozen=True)
class ControlDecision:
    """One control interval's decision of one link: Phi and h (bit/s), the number of
    macroflows N it shares among (>= 1) and the aggregate input rate u (bit/s)."""

    phi_bps: float
    shuffled_bps: float
    macroflows: int
    input_rate_bps: float

    def positive_bps(self) -> float:
        """p_i = (h + max(0, Phi)) / N, the same for every macroflow, bit/s."""
        return (self.shuffled_bps + max(0.0, self.phi_bps)) / self.macroflows

    def negative_bps(self, rate_bps: float) -> float:
        """n_i = u_i (h + max(0, -Phi)) / u for a macroflow at ``rate_bps`` = u_i, bit/s
        (0 when u = 0: nothing to take from)."""
        if self.input_rate_bps <= 0:
            return 0.0
        return rate_bps * (self.shuffled_bps + max(0.0, -self.phi_bps)) / self.input_rate_bps

    def feedback_bps(self, rate_bps: float) -> float:
        """feedback = p_i - n_i for a macroflow at ``rate_bps``: its required rate change, bit/s."""
        return self.positive_bps() - self.negative_bps(rate_bps)


def decide(capacity_bps: float, input_bytes: float, persistent_queue_bytes: float, probes: int,
           params: XcpParameters) -> ControlDecision:
    """The decision after one interval in which ``input_bytes`` arrived for a link of
    ``capacity_bps``, its persistent queue was ``persistent_queue_bytes`` and ``probes``
    probe packets were counted (N = max(1, probes)). u = 8 input_bytes / d, S = TU C - u.
    Raises ValueError for a negative capacity, volume, queue or count."""
    for name, value in (("capacity_bps", capacity_bps), ("input_bytes", input_bytes),
                        ("persistent_queue_bytes", persistent_queue_bytes), ("probes", probes)):
        if value < 0:
            raise ValueError(f"{name}={value!r}: accepted range is {name} >= 0")
    u = BITS_PER_BYTE * input_bytes / params.interval_s
    spare = params.target_utilisation * capacity_bps - u
    phi = aggregate_feedback_bps(spare, persistent_queue_bytes, params)
    return ControlDecision(phi, shuffled_bps(phi, u, params.gamma), max(1, probes), u)


@dataclass(frozen=True)
class Probe:
    """A macroflow's probe: its id, its current rate u_i (bit/s, set by the ingress edge)
    and the feedback (bit/s) that the routers on its path lower."""

    macroflow: object
    rate_bps: float
    feedback_bps: float


def lower_feedback(probe: Probe, own_feedback_bps: float) -> Probe:
    """The probe leaving a router whose own feedback for it is ``own_feedback_bps``: the
    smaller of the two."""
    if own_feedback_bps < probe.feedback_bps:
        return replace(probe, feedback_bps=own_feedback_bps)
    return probe


def initial_probe(macroflow: object, rate_bps: float, wanted_rate_bps: float) -> Probe:
    """The probe an ingress edge sends: feedback = the change it would like
    (``wanted_rate_bps`` - ``rate_bps``, e.g. its access capacity minus its rate)."""
    return Probe(macroflow, rate_bps, wanted_rate_bps - rate_bps)


def next_rate_bps(rate_bps: float, feedback_bps: float, min_rate_bps: float = 0.0,
                  max_rate_bps: float = math.inf) -> float:
    """The macroflow's rate after a returned probe: rate + feedback, kept within
    [min_rate_bps, max_rate_bps] (bit/s). Raises ValueError if the bounds are crossed."""
    if not 0 <= min_rate_bps <= max_rate_bps:
        raise ValueError(f"min_rate_bps={min_rate_bps!r}, max_rate_bps={max_rate_bps!r}: "
                         "accepted 0 <= min_rate_bps <= max_rate_bps")
    return min(max_rate_bps, max(min_rate_bps, rate_bps + feedback_bps))


class LinkController:
    """The XCP agent of one output wavelength of a router: counts input bytes, samples the
    queue, counts probes, and decides once per control interval.

    Between two calls of :meth:`end_interval` the probes are answered with the decision
    of the previous interval. Before its first decision a link knows nothing and gives
    feedback 0 (Phi = h = 0): deciding as if the link had been idle would grant every
    probe of the first interval alpha x C, N times the capacity's share in total."""

    def __init__(self, capacity_bps: float, params: XcpParameters) -> None:
        if not capacity_bps > 0:
            raise ValueError(f"capacity_bps={capacity_bps!r}: accepted range is capacity_bps > 0")
        self.capacity_bps = capacity_bps
        self.params = params
        self.decision = ControlDecision(0.0, 0.0, 1, 0.0)
        self._bytes = 0.0
        self._queue_min: float | None = None
        self._probes = 0

    def on_data(self, length_bytes: float) -> None:
        """A data packet of ``length_bytes`` entered the link's input."""
        self._bytes += length_bytes

    def on_queue(self, queue_bytes: float) -> None:
        """A queue sample (bytes); the persistent queue is the interval's smallest."""
        if self._queue_min is None or queue_bytes < self._queue_min:
            self._queue_min = queue_bytes

    def on_probe(self, probe: Probe) -> Probe:
        """Count the probe (N of the next decision) and lower its feedback to this link's."""
        self._probes += 1
        return lower_feedback(probe, self.decision.feedback_bps(probe.rate_bps))

    def end_interval(self) -> ControlDecision:
        """Decide from the interval's counters, reset them, and return the new decision."""
        self.decision = decide(self.capacity_bps, self._bytes, self._queue_min or 0.0, self._probes, self.params)
        self._bytes, self._queue_min, self._probes = 0.0, None, 0
        return self.decision
