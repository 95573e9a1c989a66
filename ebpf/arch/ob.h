/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "ob" (testbed/optical/architectures.py): output buffering with a very
 * small optical RAM. Alparslan, Arakawa, Murata, "Comparison of Packet Switch
 * Architectures and Pacing Algorithms for Very Small Optical RAM", II-B: "It has buffer
 * size B at each output link." Cut-through on a free output; else the packet waits in its
 * output's FIFO if the IP bytes waiting for that output plus its own fit in B, and leaves
 * when the output is free (virtual cut-through: no conversion, no store-and-forward);
 * else it is dropped. Included by the generated dispatch of optswitch.bpf.c (see the
 * contract there; optical_ram_decide() is there too, shared with sb and wcsb).
 */

/* cfg_node.arch_cfg of an ob node (testbed/optical/architectures.py packs it). */
struct optsw_ob_cfg {
	__u64 buffer_bytes; /* B: optical RAM per output, IP datagram bytes */
};

OPTSW_DECIDE(ob)
{
	const struct optsw_ob_cfg *c = (const void *)cfg->arch_cfg;

	return optical_ram_decide(st, pkt, ps, a, dep, c->buffer_bytes, 1);
}
