/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "electronic" (testbed/optical/architectures.py): store-and-forward,
 * FIFO per output, never drops; every packet is one OEO conversion. Included by the
 * generated dispatch of optswitch.bpf.c (see the contract there).
 */

OPTSW_DECIDE(electronic)
{
	/* Received whole (tau), then FIFO on the output. */
	*dep = max64(a + tau, ps->out_free_ns);
	return OPTSW_BUFFER;
}
