/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "hybrid" (testbed/optical/architectures.py): cut-through on a free
 * output, else through the electronic buffer via a free buffer input (OE) and the
 * earliest emission slot on a buffer output (EO), else drop. n_e buffer input = buffer
 * output ports; the buffer's state (bin_free_ns, bout, sel_*) is in optsw_node_state.
 * Included by the generated dispatch of optswitch.bpf.c (see the contract there).
 */

/* cfg_node.arch_cfg of a hybrid node (testbed/optical/architectures.py packs it). */
struct optsw_hybrid_cfg {
	__u32 n_e;      /* buffer input = buffer output ports, 0..OPTSW_MAX_NE */
};

#define HYBRID_BOUT_MASK (OPTSW_BOUT_RES - 1)

/*
 * The earliest emission slot: the smallest t >= t0 at which some buffer output is free
 * for tau, and that output (lowest index on a tie), into st->sel_dep / st->sel_bo
 * (sel_bo = OPTSW_MAX_NE if n_e = 0). Each output's reservations are sorted and
 * disjoint, so one pass over them moves t past every reservation that overlaps
 * [t, t + tau) and stops at the first gap of length tau.
 *
 * One flat loop over (output, reservation) with every running value in the map value
 * (volatile): with nested loops and values in registers the verifier learns a new bound
 * at every comparison and never prunes (1M instructions).
 */
static __always_inline void hybrid_earliest_emission(struct optsw_node_state *st,
						     const volatile __u32 *n_e, __u64 t0, __u64 tau)
{
	volatile __u64 *vt = &st->sel_t, *best = &st->sel_dep;
	volatile __u32 *done = &st->sel_done, *bo = &st->sel_bo;
	const volatile __u32 *n;
	struct optsw_bout *b;
	__u32 i, j;
	__u64 e;

	*best = ~0ULL;
	*bo = OPTSW_MAX_NE;
	for (__u32 k = 0; k < OPTSW_MAX_NE * OPTSW_BOUT_RES; k++) {
		i = k / OPTSW_BOUT_RES;
		j = k & HYBRID_BOUT_MASK;
		if (i >= *n_e)
			break;
		b = &st->bout[i & (OPTSW_MAX_NE - 1)];
		n = &b->n;
		if (j == 0) {
			*vt = t0;
			*done = 0;
		}
		if (!*done) {
			if (j >= *n) {
				*done = 1;
			} else {
				e = b->end_ns[j];
				if (e > *vt) {
					if (b->start_ns[j] >= *vt + tau)
						*done = 1;
					else
						*vt = e;
				}
			}
		}
		if (j == OPTSW_BOUT_RES - 1 && *vt < *best) {
			*best = *vt;
			*bo = i;
		}
	}
}

/*
 * Reserve [s, e) on buffer output b (called under the node lock; [s, e) lies in a gap
 * found by hybrid_earliest_emission). Reservations that ended by the arrival a are forgotten. If the
 * calendar is still full, the smallest gap other than the new reservation's is given up
 * (the two neighbours merge: an emission slot the switch would have had is lost, so the
 * model errs towards later departures) and bout_overflow counts it.
 */
static __always_inline void hybrid_bout_reserve(struct optsw_node_state *st, struct optsw_bout *b,
						__u64 a, __u64 s, __u64 e)
{
	/* Counters live in the map value (volatile) so that the verifier does not track
	 * one state per combination of their values. */
	volatile __u32 *n = &st->sel_n, *pos = &st->sel_pos, *drop = &st->sel_drop, *best = &st->sel_best;
	__u64 gap, best_gap = ~0ULL;
	__u32 j;

	*n = b->n < OPTSW_BOUT_RES ? b->n : OPTSW_BOUT_RES;
	*drop = 0;
	*pos = 0;
	*best = OPTSW_BOUT_RES;
	for (j = 0; j < OPTSW_BOUT_RES; j++) {
		if (j >= *n || b->end_ns[j] > a)
			break;
		*drop += 1;
	}
	if (*drop) {
		for (j = 0; j < OPTSW_BOUT_RES; j++) {
			if (j + *drop >= *n)
				break;
			b->start_ns[j] = b->start_ns[(j + *drop) & HYBRID_BOUT_MASK];
			b->end_ns[j] = b->end_ns[(j + *drop) & HYBRID_BOUT_MASK];
		}
		*n -= *drop;
	}
	for (j = 0; j < OPTSW_BOUT_RES; j++) {
		if (j >= *n || b->start_ns[j] >= s)
			break;
		*pos += 1;
	}
	if (*n >= OPTSW_BOUT_RES) {
		for (j = 0; j + 1 < OPTSW_BOUT_RES; j++) {
			if (j + 1 == *pos)
				continue; /* the new reservation goes into this gap */
			gap = b->start_ns[j + 1] - b->end_ns[j];
			if (gap < best_gap) {
				best_gap = gap;
				*best = j;
			}
		}
		if (*best + 1 < OPTSW_BOUT_RES) {
			b->end_ns[*best & HYBRID_BOUT_MASK] = b->end_ns[(*best + 1) & HYBRID_BOUT_MASK];
			for (j = 0; j + 1 < OPTSW_BOUT_RES; j++) {
				if (j <= *best)
					continue;
				b->start_ns[j] = b->start_ns[j + 1];
				b->end_ns[j] = b->end_ns[j + 1];
			}
			*n -= 1;
			if (*pos > *best + 1)
				*pos -= 1;
			st->bout_overflow++;
		}
	}
	for (j = OPTSW_BOUT_RES - 1; j > 0; j--) {
		if (j > *n)
			continue;
		if (j <= *pos)
			break;
		b->start_ns[j] = b->start_ns[j - 1];
		b->end_ns[j] = b->end_ns[j - 1];
	}
	if (*pos < OPTSW_BOUT_RES && *n < OPTSW_BOUT_RES) {
		b->start_ns[*pos & HYBRID_BOUT_MASK] = s;
		b->end_ns[*pos & HYBRID_BOUT_MASK] = e;
		b->n = *n + 1;
	}
}

OPTSW_DECIDE(hybrid)
{
	const struct optsw_hybrid_cfg *hc = (const void *)cfg->arch_cfg;
	/* The choices go through the map value (sel_*) rather than registers so that the
	 * verifier does not track one state per choice. */
	volatile __u32 *sel_bi = &st->sel_bi, *sel_bo = &st->sel_bo;
	volatile __u64 *sel_dep = &st->sel_dep;
	const volatile __u32 *ne = &hc->n_e; /* re-read: no learnt bounds */
	__u64 t0, bin;
	__u32 bi, bo;

	if (output_free(ps, a, dep))
		return OPTSW_CUT;
	/* A free buffer input (OE). One whose conversion ends exactly at a is still busy:
	 * ties go against the arrival (the paper's residual loss). 0 = never used since the
	 * node's reset (arrival times are never 0). */
	*sel_bi = OPTSW_MAX_NE;
	for (__u32 i = 0; i < OPTSW_MAX_NE; i++) {
		if (i >= *ne)
			break;
		bin = st->bin_free_ns[i];
		if (bin < a || bin == 0) {
			*sel_bi = i;
			break;
		}
	}
	bi = *sel_bi;
	if (bi >= OPTSW_MAX_NE)
		return OPTSW_DROP;
	/* First in this output's FIFO once OE is done and the output is free; then the
	 * earliest emission slot of tau on any buffer output (lowest index on a tie). */
	t0 = max64(a + tau, ps->out_free_ns);
	hybrid_earliest_emission(st, &hc->n_e, t0, tau);
	bo = *sel_bo;
	if (bo >= OPTSW_MAX_NE)
		return OPTSW_DROP;
	*dep = *sel_dep;
	st->bin_free_ns[bi & (OPTSW_MAX_NE - 1)] = a + tau;
	hybrid_bout_reserve(st, &st->bout[bo & (OPTSW_MAX_NE - 1)], a, *dep, *dep + tau);
	return OPTSW_BUFFER;
}
