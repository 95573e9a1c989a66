"""E4's network (Moura et al., Fig. 1): Sender - r1 - r2 - r3 - Receiver, the IP path,
and a direct r1 - r3 link, the optical path. r1..r3 are Linux routers.

Before the move r1 routes the receiver's subnet through r2; the move replaces that one
route by r1 - r3. r3 always routes the sender's subnet back through r2, so ACKs stay
on the IP path, as in the paper ("the transition affects only one direction").

Delays (one way, emulation seconds), placed so that r1 delays nothing: data spends
RTT-before - RTT-after on r2 -> r3 (what the IP path adds) and RTT-after - RTT-before / 2
on r3 -> receiver (the leg both paths share), so it takes RTT-before / 2 on the IP path
and RTT-after - RTT-before / 2 on the optical one; ACKs spend RTT-before / 4 on each of
r3 -> r2 and r2 -> r1. The RTT is RTT-before before the move and RTT-after after it.
Every direction of every link is shaped to ``link_rate_bps`` (the paper's
over-provisioned beta = phi1 = phi2 = xi), HTB with netem below it where there is a
delay (netem's queue of ``queue_packets`` must hold every packet it delays) and a FIFO
of ``queue_packets`` where there is none. ``bottleneck`` (rate, FIFO packets) shapes
r1's two ports towards the receiver instead (E4's link-limited variant): a router's
FIFO, the same before and after the move; with no delay on r1, it is a plain FIFO
(packets are orphaned by r1's IP layer, so no TCP Small Queues back-pressure reaches the
sender from it, as it would from a queue on the sender's own port).
"""

from __future__ import annotations

from mininet.topo import Topo

from testbed.net import LinkShape

SENDER, RECEIVER = "snd", "rcv"
R1, R2, R3 = "r1", "r2", "r3"
#: the sender's and the receiver's subnets, and the addresses of the routers' ports
SENDER_NET, RECEIVER_NET = "10.0.1.0/24", "10.0.2.0/24"
SENDER_IP, RECEIVER_IP = "10.0.1.1/24", "10.0.2.1/24"
R1_SENDER, R1_R2, R1_R3 = "10.0.1.254/24", "10.0.12.1/24", "10.0.13.1/24"
R2_R1, R2_R3 = "10.0.12.2/24", "10.0.23.2/24"
R3_R2, R3_R1, R3_RECEIVER = "10.0.23.3/24", "10.0.13.3/24", "10.0.2.254/24"
#: r1's next hops towards the receiver: before the move (r2) and after it (r3, optical)
VIA_IP_PATH, VIA_OPTICAL_PATH = "10.0.12.2", "10.0.13.3"
#: link names as testbed.net names them ("a-b" in build order), e.g. for --pcap
RECEIVER_LINK, OPTICAL_LINK = f"{R3}-{RECEIVER}", f"{R1}-{R3}"


def _ip(cidr: str) -> str:
    return cidr.split("/")[0]


class FlowMovePath(Topo):
    """Sender - r1 - r2 - r3 - Receiver plus r1 - r3 (see the module docstring); all
    arguments in emulation units."""

    def build(self, link_rate_bps: float, rtt_before_s: float, rtt_after_s: float,
              queue_packets: int = 1000, bottleneck: tuple[float, int] | None = None,
              mtu: int | None = None) -> None:
        """All times and rates in emulation units; see the module docstring."""
        if not 0 < rtt_before_s / 2 < rtt_after_s < rtt_before_s:
            raise ValueError(f"RTT after {rtt_after_s} s must lie between half the RTT before ({rtt_before_s} s) "
                             "and it")

        def shape(delay_s: float = 0.0) -> LinkShape:
            return LinkShape(rate_bps=link_rate_bps, delay_s=delay_s, queue_packets=queue_packets)

        r1_out = shape() if bottleneck is None else LinkShape(rate_bps=bottleneck[0], queue_packets=bottleneck[1])
        ack_hop = rtt_before_s / 4
        snd = self.addHost(SENDER, ip=SENDER_IP, gateway=_ip(R1_SENDER))
        rcv = self.addHost(RECEIVER, ip=RECEIVER_IP, gateway=_ip(R3_RECEIVER))
        r1 = self.addHost(R1, cls="router", routes=((RECEIVER_NET, VIA_IP_PATH),))
        r2 = self.addHost(R2, cls="router", routes=((RECEIVER_NET, _ip(R3_R2)), (SENDER_NET, _ip(R1_R2))))
        r3 = self.addHost(R3, cls="router", routes=((SENDER_NET, _ip(R2_R3)),))
        self.addLink(snd, r1, shape=shape(), ip2=R1_SENDER, mtu=mtu)
        self.addLink(r1, r2, shape1=r1_out, shape2=shape(ack_hop), ip1=R1_R2, ip2=R2_R1, mtu=mtu)
        self.addLink(r2, r3, shape1=shape(rtt_before_s - rtt_after_s), shape2=shape(ack_hop), ip1=R2_R3, ip2=R3_R2,
                     mtu=mtu)
        # data only goes r1 -> r3; the r3 -> r1 direction carries nothing
        self.addLink(r1, r3, shape1=r1_out, shape2=shape(), ip1=R1_R3, ip2=R3_R1, mtu=mtu)
        self.addLink(r3, rcv, shape1=shape(rtt_after_s - rtt_before_s / 2), shape2=shape(), ip1=R3_RECEIVER,
                     mtu=mtu)
