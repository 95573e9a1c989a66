/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "wcsb" (testbed/optical/architectures.py): worst-case shared
 * buffering. Alparslan, Arakawa, Murata, II-B: "As worst-case shared buffering has a
 * single buffer with a size of B independent of the nodal degree, it has a buffer
 * capacity of only a single link in input or output buffering." As sb with a memory of
 * B IP bytes for the whole node. Included by the generated dispatch of optswitch.bpf.c
 * (optical_ram_decide() is there).
 */

/* cfg_node.arch_cfg of a wcsb node (testbed/optical/architectures.py packs it). */
struct optsw_wcsb_cfg {
	__u64 buffer_bytes; /* B: optical RAM of the whole node, IP datagram bytes */
};

OPTSW_DECIDE(wcsb)
{
	const struct optsw_wcsb_cfg *c = (const void *)cfg->arch_cfg;

	return optical_ram_decide(st, pkt, ps, a, dep, c->buffer_bytes, 0);
}
