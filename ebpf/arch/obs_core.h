/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "obs-core" (testbed/optical/architectures.py): a bufferless OBS core
 * node with a control unit (docs/obs.md "Core node (obs-core)"). Paper, section III: the
 * core "deal[s] with optical data bursts and the related control packets"; "the control
 * packet carries ... the burst length and the offset time"; "the offset time allows the
 * core router to be buffer-less". Spec E2: "each burst is lost with probability Pl, all
 * of its packets together".
 *
 * Control unit (OPTSW_CONTROL): a valid control packet arriving on input port i announces
 * a burst of `packets` packets on i: {packets, lost = draw(seed, burst id, pl_ppb)} goes at
 * the tail of port i's FIFO ring (a full ring refuses it: ring_overflow). The edge's
 * optical channel sends one burst after the other and each control packet precedes its
 * burst, so the data packets arriving on i belong to the burst at the head.
 *
 * Decision: a data packet on an input port with an announced burst counts that burst down
 * (popped at 0) and is dropped if the burst is lost, else leaves at max(a, out_free)
 * (counted in `conflicts` if the output was busy: a bufferless core has nowhere to keep
 * it, so this is where a contention loss mode would drop). A packet on a port without an
 * announced burst (ACKs from the egress side; data before any control packet) leaves at
 * max(a, out_free) and is counted in `unannounced`.
 *
 * Burst loss draw (contract of E2, also testbed/optical/burstloss.py):
 *   x = splitmix64(seed ^ (burst_id * 0x9E3779B97F4A7C15)); lost iff x % 1e9 < pl_ppb.
 * Included by the generated dispatch of optswitch.bpf.c (see the contract there).
 */

/* cfg_node.arch_cfg of an obs-core node (testbed/optical/architectures.py packs it). */
struct optsw_obs_core_cfg {
	__u32 pl_ppb;   /* burst loss probability, parts per 1e9 (0..1e9) */
	__u32 pad;
	__u64 seed;     /* seed of the burst loss draw */
};

#define OBS_GOLDEN 0x9E3779B97F4A7C15ULL
#define OBS_RING_MASK (OPTSW_OBS_RING - 1)

static __always_inline __u64 obs_splitmix64(__u64 z)
{
	z += OBS_GOLDEN;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* 1 if burst burst_id is lost (the draw of the E2 contract). */
static __always_inline __u32 obs_burst_lost(__u64 seed, __u64 burst_id, __u32 pl_ppb)
{
	return obs_splitmix64(seed ^ (burst_id * OBS_GOLDEN)) % 1000000000ULL < pl_ppb;
}

OPTSW_CONTROL(obs_core)
{
	const struct optsw_obs_core_cfg *oc = (const void *)cfg->arch_cfg;
	struct optsw_obs_state *o = &st->obs;
	struct optsw_obs_ring *r = &o->ring[c->in_port & (OPTSW_MAX_PORTS - 1)];
	__u32 lost = obs_burst_lost(oc->seed, c->burst_id, oc->pl_ppb);
	__u32 n = r->n;

	o->announced++;
	if (lost)
		o->bursts_lost++;
	if (c->packets == 0) {
		o->empty_bursts++;
		return 1;
	}
	if (n >= OPTSW_OBS_RING) {
		o->ring_overflow++;
		return 1;
	}
	r->b[(r->head + n) & OBS_RING_MASK].left = c->packets;
	r->b[(r->head + n) & OBS_RING_MASK].lost = lost;
	r->n = n + 1;
	return 1;
}

OPTSW_DECIDE(obs_core)
{
	struct optsw_obs_state *o = &st->obs;
	struct optsw_obs_ring *r;
	struct optsw_obs_burst *b;
	__u32 lost;

	*dep = max64(a, ps->out_free_ns);
	if (pkt->in_port >= OPTSW_MAX_PORTS) {
		o->unannounced++;
		return OPTSW_CUT;
	}
	r = &o->ring[pkt->in_port & (OPTSW_MAX_PORTS - 1)];
	if (r->n == 0) {
		o->unannounced++;
		return OPTSW_CUT;
	}
	b = &r->b[r->head & OBS_RING_MASK];
	lost = b->lost;
	if (b->left <= 1) {
		b->left = 0;
		r->head = (r->head + 1) & OBS_RING_MASK;
		r->n -= 1;
	} else {
		b->left -= 1;
	}
	if (lost) {
		o->packets_lost++;
		return OPTSW_DROP;
	}
	o->packets_passed++;
	if (a < ps->out_free_ns)
		o->conflicts++;
	return OPTSW_CUT;
}
