/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "all-optical" (testbed/optical/architectures.py): bufferless (the
 * hybrid with n_e = 0): cut through on a free output, else drop. Included by the
 * generated dispatch of optswitch.bpf.c (see the contract there).
 */

OPTSW_DECIDE(all_optical)
{
	return output_free(ps, a, dep) ? OPTSW_CUT : OPTSW_DROP;
}
