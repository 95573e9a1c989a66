/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "obs-core" (testbed/optical/architectures.py): a bufferless OBS core
 * node (docs/obs.md; paper, section II "core nodes"). Included by the generated dispatch
 * of optswitch.bpf.c (see the contract there).
 */

/* cfg_node.arch_cfg of an obs-core node (testbed/optical/architectures.py packs it). */
struct optsw_obs_core_cfg {
	__u32 pl_ppb;   /* burst loss probability, parts per 1e9 */
	__u32 pad;
	__u64 seed;     /* seed of the burst loss draw */
};

OPTSW_DECIDE(obs_core)
{
	*dep = max64(a, ps->out_free_ns);
	return OPTSW_CUT;
}
