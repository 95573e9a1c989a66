"""os-ken application of E3 (OpenFlow 1.3): leaf-spine forwarding, the OSS as a circuit
switch reprogrammed by a scheduler, ARP relay, and the REST API.

Started by controllers/e3_process.py as
``python -m os_ken.cmd.manager --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port P
controllers.e3_app`` with ``E3_CONTROLLER_CONFIG`` naming its JSON config (portmap,
scheduler, sse_s, pairs, elephants, log_path, rest_host, rest_port). All decisions are
in controllers/core.py, controllers/portmap.py and controllers/schedulers.py; this
module only talks OpenFlow:

- on connect: port description -> the switch's name (its LOCAL port is the bridge);
  delete every flow, install the tables and special-port states of the applied OSS
  state, barrier; the switch is then ready;
- on disconnect: the switch is not ready, so no reconfiguration happens until it is
  back (fail_mode=secure switches keep their flows meanwhile); a reconnecting switch is
  initialised again with the applied state, and the loop then catches up with the
  wanted one; a reconfiguration the loss interrupted is completed or undone then
  (``installed`` is kept per flow-mod). Connects, disconnects and readiness go to
  ``switch-events.jsonl``;
- a loop applies every change of the wanted OSS state in three barrier-separated
  phases: (1) delete flows no longer wanted and bring down special ports leaving their
  position (queued packets there are lost: the stranding under study), (2) bring up
  ports entering their position and add OSS circuit flows, (3) add the ToR flows that
  steer traffic onto the new circuits; then it logs the reconfiguration;
- ARP packets go to the controller, which sends them out of the target host's port.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.lib.packet import arp, packet
from os_ken.ofproto import ofproto_v1_3

from controllers.core import ControllerCore
from controllers.portmap import Flow
from controllers.rest import RestApp

CONFIG_ENV = "E3_CONTROLLER_CONFIG"
BARRIER_TIMEOUT_S = 10.0
LOG = logging.getLogger("e3")


class SwitchLost(Exception):
    """A switch disconnected while a reconfiguration was talking to it."""


class E3Controller(app_manager.OSKenApp):
    """See the module docstring."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise RuntimeError(f"{CONFIG_ENV} must name the controller's JSON config")
        self.cfg = json.loads(Path(path).read_text())
        self.wake = hub.Event()
        self.attach(ControllerCore.from_config(self.cfg, time.monotonic, on_change=self.wake.set))
        host, port = self.cfg.get("rest_host", "127.0.0.1"), int(self.cfg["rest_port"])
        self.threads = [hub.spawn(hub.WSGIServer((host, port), RestApp(self.core)).serve_forever),
                        hub.spawn(self.loop)]

    def attach(self, core: ControllerCore) -> None:
        """Start from ``core`` with no switch connected (the tests build the app this way)."""
        self.core = core
        self.by_bridge = {b: n for n, b in core.portmap.bridges.items()}
        self.dps: dict[str, object] = {}
        self.ports: dict[str, dict[int, object]] = {}
        self.port_parts: dict[int, list] = {}
        self.installed: dict[str, frozenset[Flow]] = {}
        self.port_state: dict[tuple[str, int], bool] = {}
        self.barriers: dict[tuple[int, int], hub.Event] = {}
        # False after a reconfiguration was abandoned half-way: the fabric then holds
        # neither the applied state nor the wanted one, even if the two are equal again.
        self.converged = True

    # -- connection and identification ----------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_port_desc(self, ev: object) -> None:
        """os-ken's ofp_handler asks every OF1.3 switch for its ports on connect."""
        msg = ev.msg
        dp = msg.datapath
        if any(d is dp for d in self.dps.values()):
            return
        self.port_parts.setdefault(dp.id, []).extend(msg.body)
        if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            return
        ports = {p.port_no: p for p in self.port_parts.pop(dp.id)}
        local = ports.get(dp.ofproto.OFPP_LOCAL)
        name = self.by_bridge.get(local.name.decode() if local else "")
        if name is None:
            LOG.warning("datapath %016x (%s) is not a switch of this fabric; ignored", dp.id,
                        local.name if local else "?")
            return
        if name in self.dps:     # reconnected before its old connection was declared dead
            self.core.switch_lost(name)
        self.dps[name], self.ports[name] = dp, ports
        self.core.switch_connected(name)
        hub.spawn(self.initialise, name)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_dead(self, ev: object) -> None:
        """A switch's OpenFlow connection closed (or its handshake failed)."""
        name = next((n for n, d in self.dps.items() if d is ev.datapath), None)
        if name is None:
            return
        del self.dps[name]
        self.core.switch_lost(name)
        LOG.warning("switch %s disconnected; reconfigurations wait until it is back", name)

    def initialise(self, name: str) -> None:
        dp = self.dps.get(name)
        if dp is None:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        self.installed[name] = frozenset()
        flows, ports = self.core.plan(self.core.applied_state)
        for f in flows[name]:
            self.flow_mod(name, f, add=True)
        for (sw, port), up in ports.items():
            if sw == name:
                self.port_mod(name, port, up)
        self.barrier([name])
        if self.dps.get(name) is not dp:     # lost (or replaced) while initialising
            return
        self.core.switch_ready(name, len(flows[name]))
        LOG.info("switch %s ready (%d flows)", name, len(flows[name]))
        if self.core.ready:
            self.wake.set()

    # -- OpenFlow helpers -------------------------------------------------------------
    def datapath(self, name: str) -> object:
        dp = self.dps.get(name)
        if dp is None:
            raise SwitchLost(name)
        return dp

    def flow_mod(self, name: str, f: Flow, *, add: bool) -> None:
        dp = self.datapath(name)
        ofp, parser = dp.ofproto, dp.ofproto_parser
        fields = {}
        for k, v in f.match:
            if k in ("ipv4_src", "ipv4_dst") and "/" in str(v):
                ip, plen = str(v).split("/")
                mask = (0xFFFFFFFF << (32 - int(plen))) & 0xFFFFFFFF
                v = (ip, ".".join(str(mask >> s & 255) for s in (24, 16, 8, 0)))
            fields[k] = v
        match = parser.OFPMatch(**fields)
        if add:
            port = ofp.OFPP_CONTROLLER if f.out == "controller" else int(f.out)
            actions = [parser.OFPActionOutput(port, ofp.OFPCML_NO_BUFFER)]
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
            dp.send_msg(parser.OFPFlowMod(dp, priority=f.priority, match=match, instructions=inst,
                                          command=ofp.OFPFC_ADD))
        else:
            dp.send_msg(parser.OFPFlowMod(dp, priority=f.priority, match=match, command=ofp.OFPFC_DELETE_STRICT,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        # kept per message: a reconfiguration abandoned half-way (a switch lost) leaves
        # ``installed`` true for the others, so the next one computes the right diff
        table = self.installed.get(name, frozenset())
        self.installed[name] = table | {f} if add else table - {f}

    def port_mod(self, name: str, port_no: int, up: bool) -> None:
        dp = self.datapath(name)
        ofp, parser = dp.ofproto, dp.ofproto_parser
        desc = self.ports[name].get(port_no)
        if desc is None:
            LOG.error("switch %s has no port %d", name, port_no)
            return
        config = 0 if up else ofp.OFPPC_PORT_DOWN
        dp.send_msg(parser.OFPPortMod(dp, port_no, desc.hw_addr, config, ofp.OFPPC_PORT_DOWN, 0))
        self.port_state[(name, port_no)] = up

    def barrier(self, names: Iterable[str]) -> None:
        waits = []
        for name in names:
            dp = self.dps.get(name)
            if dp is None:
                continue
            req = dp.ofproto_parser.OFPBarrierRequest(dp)
            dp.set_xid(req)
            ev = hub.Event()
            self.barriers[(dp.id, req.xid)] = ev
            dp.send_msg(req)
            waits.append((name, ev))
        for name, ev in waits:
            if not ev.wait(timeout=BARRIER_TIMEOUT_S):
                LOG.error("no barrier reply from %s within %.0f s", name, BARRIER_TIMEOUT_S)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev: object) -> None:
        msg = ev.msg
        waiter = self.barriers.pop((msg.datapath.id, msg.xid), None)
        if waiter is not None:
            waiter.set()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def on_error(self, ev: object) -> None:
        msg = ev.msg
        LOG.error("OpenFlow error from %016x: type %d code %d", msg.datapath.id, msg.type, msg.code)

    # -- ARP relay --------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev: object) -> None:
        msg = ev.msg
        a = packet.Packet(msg.data).get_protocol(arp.arp)
        if a is None:
            return
        name = self.core.portmap.host_by_ip().get(a.dst_ip)
        if name is None:
            return
        h = self.core.portmap.hosts[name]
        dp = self.dps.get(h["tor"])
        if dp is None:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(h["port"])], data=msg.data))

    # -- the scheduler loop -----------------------------------------------------------
    def loop(self) -> None:
        while True:
            self.step()
            now = time.monotonic()
            nxt = self.core.scheduler.next_change(now) if self.core.ready else None
            timeout = 0.5 if nxt is None else min(0.5, max(0.0, nxt - now))
            self.wake.wait(timeout=timeout)
            self.wake.clear()

    def step(self) -> None:
        """With every switch ready, apply the wanted OSS state if it differs from the
        applied one or the last reconfiguration was abandoned (then the diff against the
        per-switch ``installed`` tables undoes or completes what it did)."""
        if not self.core.ready:
            return
        try:
            want = self.core.wanted()
            if want != self.core.applied_state or not self.converged:
                self.reconfigure(want)
        except SwitchLost as exc:
            self.converged = False
            LOG.warning("reconfiguration abandoned: switch %s disconnected", exc)
        except Exception:  # noqa: BLE001 - keep the controller alive, log the cause
            self.converged = False
            LOG.exception("reconfiguration failed")

    def reconfigure(self, want: frozenset) -> None:
        t_start = time.monotonic()
        before = self.core.applied_state
        if want == before:
            reason = "repair"     # finishing or undoing an abandoned reconfiguration
        else:
            reason = "grant/release" if self.core.scheduler.name == "on-demand" else "epoch"
        flows, ports = self.core.plan(want)
        n_flow = n_port = 0
        # (1) remove what is no longer wanted; take special ports away from positions they leave
        touched = set()
        for name, table in flows.items():
            for f in self.installed[name] - table:
                self.flow_mod(name, f, add=False)
                n_flow += 1
                touched.add(name)
        for (name, port), up in ports.items():
            if not up and self.port_state.get((name, port)) is not False:
                self.port_mod(name, port, False)
                n_port += 1
                touched.add(name)
        self.barrier(touched)
        # (2) ports entering a position, OSS circuits
        touched = set()
        for (name, port), up in ports.items():
            if up and self.port_state.get((name, port)) is not True:
                self.port_mod(name, port, True)
                n_port += 1
                touched.add(name)
        oss = self.core.portmap.oss
        for f in flows[oss] - self.installed[oss]:
            self.flow_mod(oss, f, add=True)
            n_flow += 1
            touched.add(oss)
        self.barrier(touched)
        # (3) steer traffic onto the new circuits (and any new routes)
        touched = set()
        for name, table in flows.items():
            if name == oss:
                continue
            for f in table - self.installed[name]:
                self.flow_mod(name, f, add=True)
                n_flow += 1
                touched.add(name)
        self.barrier(touched)
        rec = self.core.applied(want, reason=reason, t_start=t_start, t_done=time.monotonic(),
                                flow_mods=n_flow, port_mods=n_port)
        self.converged = True
        LOG.info("reconfigured: %s -> %s in %.1f ms", sorted(f"{c.a}-{c.b}" for c in before),
                 [c["a"] + "-" + c["b"] for c in rec["circuits"]], 1e3 * (rec["t_done"] - t_start))
