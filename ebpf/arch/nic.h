/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "nic" (testbed/optical/architectures.py): a host NIC serialising its
 * own packets at the link rate, FIFO. Included by the generated dispatch of
 * optswitch.bpf.c (see the contract there).
 */

OPTSW_DECIDE(nic)
{
	*dep = max64(a, ps->out_free_ns);
	return OPTSW_CUT;
}
