/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "fifo" (testbed/optical/architectures.py): store-and-forward FIFO per
 * output with a delay bound, E5's edge nodes (Alparslan, Arakawa, Murata, III-A: "The
 * edge nodes had 0.25 s of electronic buffering"; docs/e5.md). A packet of duration tau
 * arriving at a is received whole at a + tau, then waits in its output's FIFO:
 * dep = max(a + tau, out_free), as "electronic". It is dropped if it would wait in the
 * buffer longer than max_wait, i.e. if dep - (a + tau) > max_wait (a wait of exactly
 * max_wait is admitted); a drop changes no state (out_free stays). The bytes waiting
 * ahead of an admitted packet are thus at most max_wait x the output's rate. Every
 * admitted packet is one OEO conversion (OPTSW_BUFFER). Included by the generated
 * dispatch of optswitch.bpf.c (see the contract there).
 */

/* cfg_node.arch_cfg of a fifo node (testbed/optical/architectures.py packs it). */
struct optsw_fifo_cfg {
	__u64 max_wait_ns; /* longest wait in the buffer, emulation ns (the spec's paper ns x D) */
};

OPTSW_DECIDE(fifo)
{
	const struct optsw_fifo_cfg *c = (const void *)cfg->arch_cfg;
	__u64 ready = a + tau; /* received whole */
	__u64 d = max64(ready, ps->out_free_ns);

	if (d - ready > c->max_wait_ns)
		return OPTSW_DROP;
	*dep = d;
	return OPTSW_BUFFER;
}
