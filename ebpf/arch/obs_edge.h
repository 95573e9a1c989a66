/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "obs-edge" (testbed/optical/architectures.py): the ingress edge node
 * of the OBS network (docs/obs.md; paper, section II "edge nodes"). Packets towards the
 * optical core are assembled into bursts by the obsburst qdisc of the output port
 * (kernel/obsburst.c), which releases them: the program only stamps their arrival
 * (OPTSW_HOLD). Packets towards a host (ACKs going back to the sources) are stored and
 * forwarded like "electronic". Included by the generated dispatch of optswitch.bpf.c.
 */

/* cfg_node.arch_cfg of an obs-edge node (testbed/optical/architectures.py packs it);
 * the assembly itself reads its parameters from the obsburst qdisc's options. */
struct optsw_obs_edge_cfg {
	__u64 tmax_ns;    /* assembly timer Tmax */
	__u64 lmax_bytes; /* assembly volume Lmax */
	__u64 offset_ns;  /* offset time between the control packet and its burst */
};

OPTSW_DECIDE(obs_edge)
{
	if (pkt->out_cfg->flags & OPTSW_PORT_PEER_HOST) {
		/* Received whole (tau), then FIFO on the output towards the host. */
		*dep = max64(a + tau, ps->out_free_ns);
		return OPTSW_BUFFER;
	}
	return OPTSW_HOLD;
}
