/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "ib" (testbed/optical/architectures.py): input buffering with very
 * small optical RAM and virtual output queues. Alparslan, Arakawa, Murata, "Comparison of
 * Packet Switch Architectures and Pacing Algorithms for Very Small Optical RAM", II-B:
 * "input buffering has buffer size B at each input link ... dividing each input buffer
 * into N sub-queues". Which input an output serves when it frees depends on packets that
 * arrive after the one served, so no decision is taken here: every packet is held
 * (OPTSW_HOLD) and the port's voq qdisc (kernel/sch_voq.c, docs/ib-holding.md) decides
 * and releases it. Included by the generated dispatch of optswitch.bpf.c.
 *
 * What the qdisc reads of a held packet (kernel/voq.h): cb[0] = OPTSW_HOLD (the egress
 * program writes the decision), cb[1] = the input port (the ingress program writes it
 * before the redirect), skb->tstamp = a as a monotonic delivery time (the egress program
 * stamps a held packet with its intended arrival here). It stamps the packets it releases
 * with their intended arrival at the next node, so the next node must not re-stamp them:
 * the fabric leaves OPTSW_PORT_PEER_HOLDS off towards an ib node (VoqQdisc.restamps).
 */

/* cfg_node.arch_cfg of an ib node (testbed/optical/architectures.py packs it); the
 * decisions read B from the voq qdisc's options (struct tc_voq_qopt.buffer_bytes). */
struct optsw_ib_cfg {
	__u64 buffer_bytes; /* B: optical RAM per input, IP datagram bytes */
};

OPTSW_DECIDE(ib)
{
	return OPTSW_HOLD;
}
