"""Per-host profile selection: the ``[cca]`` table of an experiment definition.

    [cca]
    profile = "sack"          # every host runs this profile ...
    init_rto = "1 s"          # ... with these options (paper units; see the profile)
    [cca.hosts.h2]
    profile = "saw"           # ... except h2 (its own options, none inherited)

Without a ``[cca]`` table hosts keep the kernel default (no profile is applied).
Each host gets its own profile object (``profile_for``); the algorithm is the
default of the host's network namespace, so every new socket there uses it
(per-socket ``TCP_CONGESTION`` still overrides it for one socket).

This is the one way hosts get their congestion control. Families without a profile
parameter use the ``[cca]`` table as it is (netem-path); flow families
(testbed.flow_family) choose every host's profile with their ``cca`` parameter and
their own profile options, and the table may only override single hosts
(:func:`for_family`). Either way :func:`applied` applies the selection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from testbed.cc.profiles import PROFILES, Profile, make
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError


@dataclass(frozen=True)
class Choice:
    """One profile name with its options (paper units, as written)."""

    profile: str
    options: dict[str, Any] = field(default_factory=dict)

    def make(self, key: str = "cca") -> Profile:
        return make(self.profile, self.options, key)

    def to_data(self) -> dict[str, Any]:
        return {"profile": self.profile, **{k: str(v) for k, v in self.options.items()}}


@dataclass(frozen=True)
class CcaSelection:
    """The default profile of all hosts and per-host overrides."""

    default: Choice | None
    hosts: dict[str, Choice] = field(default_factory=dict)

    def choice_for(self, host: str) -> Choice | None:
        return self.hosts.get(host, self.default)

    def profile_for(self, host: str) -> Profile | None:
        c = self.choice_for(host)
        return c.make(f"cca.hosts.{host}" if host in self.hosts else "cca") if c else None

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = self.default.to_data() if self.default else {}
        if self.hosts:
            out["hosts"] = {h: c.to_data() for h, c in self.hosts.items()}
        return out


def for_family(profile: str, options: dict[str, Any], table: CcaSelection | None,
               source: str = "") -> CcaSelection:
    """The selection of a flow family's point: ``profile`` (its ``cca`` parameter) with
    ``options`` (the family's profile options, paper units) on every host, except the
    hosts the ``[cca.hosts.<host>]`` tables of ``table`` name. Raises DefinitionError
    when ``table`` also names a default profile (``[cca] profile``): the parameter
    chooses that."""
    if table is not None and table.default is not None:
        raise DefinitionError("cca.profile", table.default.profile, "no [cca] profile: params.cca chooses every "
                              "host's profile; [cca.hosts.<host>] tables may override single hosts", source)
    return CcaSelection(Choice(profile, dict(options)), dict(table.hosts) if table is not None else {})


def _choice(table: dict[str, Any], key: str, source: str) -> Choice:
    name = table.get("profile")
    if name not in PROFILES:
        raise DefinitionError(f"{key}.profile", name, "one of " + ", ".join(sorted(PROFILES)), source)
    options = {k: v for k, v in table.items() if k not in ("profile", "hosts")}
    try:
        PROFILES[name].parse_options(options, key)
    except DefinitionError as exc:
        raise DefinitionError(exc.key, exc.value, exc.accepted, source) from None
    return Choice(name, options)


def parse(raw: Any, source: str = "") -> CcaSelection | None:
    """Validate the ``[cca]`` table (None when absent); DefinitionError names the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise DefinitionError("cca", raw, "a [cca] table with profile = NAME", source)
    hosts_raw = raw.get("hosts", {})
    if not isinstance(hosts_raw, dict):
        raise DefinitionError("cca.hosts", hosts_raw, "a table of [cca.hosts.<host>] tables", source)
    default = _choice(raw, "cca", source) if "profile" in raw else None
    if default is None and set(raw) - {"hosts"}:
        raise DefinitionError("cca.profile", None, "a profile name when options are given: "
                              + ", ".join(sorted(PROFILES)), source)
    hosts = {}
    for host, table in hosts_raw.items():
        if not isinstance(table, dict):
            raise DefinitionError(f"cca.hosts.{host}", table, "a table with profile = NAME", source)
        hosts[host] = _choice(table, f"cca.hosts.{host}", source)
    return CcaSelection(default, hosts)


def settings(selection: CcaSelection | None, host_names: list[str], tdf: TimeDilation,
             link_rate_bps: float | None = None, mtu: int = 1500, hz: int = 250) -> dict[str, Any]:
    """Each host's effective profile settings, computed without touching the kernel
    (for the run manifest; ``apply`` returns the same with the real MTU and HZ)."""
    if selection is None:
        return {}
    out = {}
    for h in host_names:
        p = selection.profile_for(h)
        if p is not None:
            out[h] = p.settings(tdf, link_rate_bps, mtu, hz)
    return out


@contextlib.contextmanager
def applied(emu: Any, selection: CcaSelection | None, tdf: TimeDilation,
            link_rate_bps: float | dict[str, float] | None = None) -> Iterator[dict[str, Any]]:
    """Apply each host's profile inside ``emu`` (a testbed.net.Emulation) for the block;
    yields {host: effective settings}; undoes in reverse on exit, also on errors.

    ``link_rate_bps``: the hosts' link rate in paper units (one value or per host).
    """
    done: list[Profile] = []
    result: dict[str, Any] = {}
    try:
        if selection is not None:
            for host in emu.hosts():
                profile = selection.profile_for(host.name)
                if profile is None:
                    continue
                rate = link_rate_bps.get(host.name) if isinstance(link_rate_bps, dict) else link_rate_bps
                done.append(profile)
                result[host.name] = profile.apply(host, tdf, rate)
        yield result
    finally:
        errors = []
        for profile in reversed(done):
            try:
                profile.undo()
            except Exception as exc:
                errors.append(str(exc))
        if errors:
            from testbed.cc.modules import CongestionControlError
            raise CongestionControlError("; ".join(errors))
