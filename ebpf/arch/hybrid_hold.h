/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "hybrid-hold" (testbed/optical/architectures.py): E1's hybrid switch
 * (Minakhmetov, Ware, Iannone, sections II and IV) realised by holding. A buffered
 * packet "constantly checks if it is first in buffer queue and the required Azimuth
 * output is available", so its departure is not known when it passes here and an
 * output it waits for stays free for newer arrivals meanwhile: no decision is taken
 * here, every packet is held (OPTSW_HOLD) and the port's voq qdisc in its hybrid mode
 * (kernel/sch_voq.c, docs/hybrid-holding.md) decides on the intended timeline, as the
 * reference testbed/optical/eventsim.py, and releases it. The EDT realisation of the
 * same switch, which must commit departures at arrival, is "hybrid" (arch/hybrid.h).
 * Included by the generated dispatch of optswitch.bpf.c.
 *
 * What the qdisc reads of a held packet: as for "ib" (arch/ib.h, kernel/voq.h).
 */

/* cfg_node.arch_cfg of a hybrid-hold node (testbed/optical/architectures.py packs it);
 * the decisions read n_e from the voq qdisc's options (struct tc_voq_qopt.n_e). */
struct optsw_hybrid_hold_cfg {
	__u32 n_e;      /* buffer input = buffer output ports, 0..OPTSW_MAX_NE */
};

OPTSW_DECIDE(hybrid_hold)
{
	return OPTSW_HOLD;
}
