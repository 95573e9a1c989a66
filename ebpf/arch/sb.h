/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "sb" (testbed/optical/architectures.py): shared buffering with a very
 * small optical RAM. Alparslan, Arakawa, Murata, II-B: "As shared buffering has a single
 * buffer with a size of N . B, this is in fact ... the same total buffer size per node as
 * input and output buffering." One memory of n_ports x B IP bytes holds a FIFO per
 * output: cut-through on a free output; else the packet waits if the IP bytes waiting in
 * the whole node plus its own fit in n_ports x B; else it is dropped. Included by the
 * generated dispatch of optswitch.bpf.c (optical_ram_decide() is there).
 */

/* cfg_node.arch_cfg of an sb node (testbed/optical/architectures.py packs it). */
struct optsw_sb_cfg {
	__u64 buffer_bytes; /* B: optical RAM per link, IP datagram bytes (the node has n_ports x B) */
};

OPTSW_DECIDE(sb)
{
	const struct optsw_sb_cfg *c = (const void *)cfg->arch_cfg;

	return optical_ram_decide(st, pkt, ps, a, dep, c->buffer_bytes * cfg->n_ports, 0);
}
