// SPDX-License-Identifier: GPL-2.0
/*
 * sch_voq: an input-buffered optical packet switch node with virtual output queues,
 * released exactly on the intended timeline (E5's IB; design in docs/ib-holding.md).
 *
 * Paper: Alparslan, Arakawa, Murata, "Comparison of Packet Switch Architectures and
 * Pacing Algorithms for Very Small Optical RAM", II-B (IB: N x N fabric, speedup 1,
 * each input's buffer of B bytes divided into N virtual output queues). Semantics are
 * those of the reference testbed/optical/ramsim.py (IB); testbed/optical/ibsched.py is
 * this file's algorithm in Python, checked against it packet for packet.
 *
 * One qdisc per output device of the node; the qdiscs of one node (same network
 * namespace and node_id in their options) share a struct voq_node: the fabric's ports,
 * the VOQs, the scheduler. A packet reaches its output's qdisc with its intended arrival
 * a as its monotonic skb->tstamp and its input port in cb[1] (the optical switch's
 * programs, decision OPTSW_HOLD in cb[0]). It waits in its input's pending list until
 * the node decides its instant, then cuts through, joins VOQ(input, output) or is
 * dropped; buffered packets leave when the scheduler serves them at a release instant.
 *
 * Lookahead: the instant t is decided only once real time has passed t + M
 * (lookahead_ns), over the packets of instants <= t that have arrived by then. A packet
 * arriving after its instant (or a later one) was decided is counted late and decided
 * at the last decided instant. Without late packets every decision is the reference's
 * (docs/ib-holding.md, "Exactness"). A forwarded packet is stamped with its intended
 * arrival at the next node, departure + prop (+ tau towards a host), and released then,
 * as fq releases EDT-stamped packets: with M <= prop the lookahead costs no lateness.
 *
 * Locks: a qdisc's root lock, then its node's lock (never the reverse). Everything of a
 * node, its members' ready/gone lists and counters included, is under the node lock; a
 * qdisc's qlen and backlog change only in its own enqueue/dequeue/reset (root lock).
 * Wake-ups: the node's soft hrtimer at (next event instant + M) decides; a member's
 * qdisc_watchdog releases at its ready head's stamp; a decision giving another member
 * a packet kicks it with __netif_schedule.
 *
 * XCP (docs/xcp-edge.md, "IB nodes"): with xcp_interval_ns (d_e) set, each output keeps
 * a ring of VOQ_XCP_SLOTS per-interval slots (kernel/voq.h, struct tc_voq_xcp_slot):
 * the arrivals decided for it in interval k = (t - E) / d_e of their decided instant t,
 * and the smallest backlog of the output one of them found, in ns of its link:
 * (out_free - t)^+ + the taus of the packets in VOQ(*, o). The XCP agent reads it from
 * the dump (xstats: one output per qdisc, 128 bytes) for its persistent queue Q, as the
 * BPF accumulators give it for the architectures that decide at the egress program.
 *
 * Times are CLOCK_MONOTONIC ns (the emulation's clock); lengths qdisc_pkt_len() (the
 * frame from the Ethernet header; GSO off on the device).
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/bits.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/hrtimer.h>
#include <linux/math64.h>
#include <linux/version.h>
#include <net/netlink.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#include <net/sock.h>
#include "voq.h"

/* ---- per packet ----------------------------------------------------------------------- */

/* Our part of skb->cb (qdisc_skb_cb->data), written at enqueue after reading the
 * programs' words. The intended arrival (later: the stamp) is skb->tstamp. */
struct voq_skb_cb {
	u32 seq;	/* enqueue order in the node (ties on one input) */
	u16 in_port;
	u16 out_port;
	u32 order;	/* hybrid: arrival rank while converting, then join order in its FIFO */
};

static struct voq_skb_cb *voq_cb(struct sk_buff *skb)
{
	qdisc_cb_private_validate(skb, sizeof(struct voq_skb_cb));
	return (struct voq_skb_cb *)qdisc_skb_cb(skb)->data;
}

static u64 voq_time(const struct sk_buff *skb)
{
	return ktime_to_ns(skb->tstamp);
}

static bool voq_mono(const struct sk_buff *skb)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	return skb->tstamp_type == SKB_CLOCK_MONOTONIC;
#else
	return skb->mono_delivery_time;
#endif
}

static void voq_set_delivery(struct sk_buff *skb, u64 ns)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	skb_set_delivery_time(skb, ns_to_ktime(ns), SKB_CLOCK_MONOTONIC);
#else
	skb_set_delivery_time(skb, ns_to_ktime(ns), true);
#endif
}

static u64 voq_ip_bytes(const struct sk_buff *skb)
{
	u32 len = qdisc_pkt_len(skb);

	return len > VOQ_ETH_HLEN ? len - VOQ_ETH_HLEN : 0;
}

/* ---- a FIFO of skbs (through skb->next, free while a qdisc holds the skb) ---------------- */

struct voq_fifo {
	struct sk_buff *head, *tail;
	u64 bytes;	/* IP bytes (VOQs only) */
	u32 qlen;
};

static void voq_push(struct voq_fifo *f, struct sk_buff *skb)
{
	skb->next = NULL;
	if (f->tail)
		f->tail->next = skb;
	else
		f->head = skb;
	f->tail = skb;
	f->qlen++;
}

static struct sk_buff *voq_pop(struct voq_fifo *f)
{
	struct sk_buff *skb = f->head;

	if (skb) {
		f->head = skb->next;
		if (!f->head)
			f->tail = NULL;
		skb->next = NULL;
		f->qlen--;
	}
	return skb;
}

/* Unlink cur (whose predecessor is prev, NULL for the head) from f. */
static void voq_unlink(struct voq_fifo *f, struct sk_buff *prev, struct sk_buff *cur)
{
	if (prev)
		prev->next = cur->next;
	else
		f->head = cur->next;
	if (f->tail == cur)
		f->tail = prev;
	cur->next = NULL;
	f->qlen--;
}

/* Insert into an input's pending list, sorted by intended arrival, ties in enqueue
 * order. Packets of one input normally come in order: appended. */
static void voq_pend_insert(struct voq_fifo *f, struct sk_buff *skb)
{
	u64 a = voq_time(skb);
	struct sk_buff *prev = NULL, *cur;

	if (!f->tail || voq_time(f->tail) <= a) {
		voq_push(f, skb);
		return;
	}
	for (cur = f->head; cur && voq_time(cur) <= a; cur = cur->next)
		prev = cur;
	skb->next = cur;
	if (prev)
		prev->next = skb;
	else
		f->head = skb;
	f->qlen++;
}

/* ---- the node ------------------------------------------------------------------------------- */

struct voq_sched;

struct voq_node {
	struct list_head link;		/* in voq_nodes */
	const struct net *net;		/* key: namespace ... */
	u32 node_id;			/* ... and the fabric's node id */
	u32 members;			/* qdiscs sharing it (voq_nodes_mutex and lock) */
	spinlock_t lock;
	struct hrtimer timer;		/* decisions: at the next event instant + M */
	u64 timer_at;			/* its expiry if armed by us (0: not armed) */
	/* node-wide options (every member gives the same) */
	u32 n_ports, scheduler, voq_split, n_e;
	u64 buffer_bytes, lookahead_ns;
	struct voq_sched *member[VOQ_MAX_PORTS];	/* by output port */
	/* the fabric, on the intended timeline */
	u64 last;			/* latest decided instant */
	u32 seq;
	u32 waiting;			/* packets in VOQs */
	u64 in_free[VOQ_MAX_PORTS];	/* instant each input's fabric port is free */
	u64 out_free[VOQ_MAX_PORTS];	/* instant each output is free */
	u64 in_bytes[VOQ_MAX_PORTS];	/* IP bytes waiting in each input's buffer */
	u64 out_wait_ns[VOQ_MAX_PORTS];	/* per output o: sum of the taus (at o's rate) of VOQ(*, o) */
	u64 node_bytes;
	u32 grant_ptr[VOQ_MAX_PORTS];	/* per output (rr, islip) */
	u32 accept_ptr[VOQ_MAX_PORTS];	/* per input (islip) */
	u64 grants[VOQ_MAX_PORTS];	/* islip scratch: per input, the outputs granting it */
	struct voq_fifo pend[VOQ_MAX_PORTS];	/* per input: arrivals not decided yet */
	struct voq_fifo *voq;		/* [n_ports * n_ports]: VOQ(i, o) at i * n_ports + o */
	u64 in_dropped[VOQ_MAX_PORTS];
	u64 in_max_bytes[VOQ_MAX_PORTS];
	/* hybrid (VOQ_SCHED_HYBRID): the output FIFOs are VOQ(0, o) (voq_hq), `waiting`
	 * counts their packets, in_bytes / node_bytes are frame bytes */
	u64 bin_free[VOQ_MAX_PORTS];	/* instant each buffer input's bufferisation ends */
	u64 bout_free[VOQ_MAX_PORTS];	/* instant each buffer output's emission ends */
	struct voq_fifo conv;		/* converting (OE), at most n_e; skb->tstamp = join instant */
	u32 rank;			/* arrivals decided (the reference's arrival rank) */
	u32 joins;			/* packets that joined a FIFO (their order in it) */
	struct tc_voq_node_stats st;	/* (live fields filled at dump) */
};

struct voq_sched {
	struct tc_voq_qopt opt;
	struct Qdisc *sch;
	struct voq_node *node;
	struct qdisc_watchdog watchdog;	/* releases: at the ready head's stamp */
	/* under node->lock */
	struct voq_fifo ready;		/* decided, leaving at their stamps (ascending) */
	struct voq_fifo gone;		/* dropped by a decision, freed by this qdisc */
	struct tc_voq_port_stats st;
	struct tc_voq_xcp_slot xcp[VOQ_XCP_SLOTS];	/* this output's XCP ring (opt.xcp_*) */
	struct tc_voq_xstats dump;	/* dump_stats' copy (dumps run under RTNL, one at a time) */
};

static LIST_HEAD(voq_nodes);
static DEFINE_MUTEX(voq_nodes_mutex);

static u64 voq_tau(const struct voq_sched *m, const struct sk_buff *skb)
{
	return div_u64((u64)qdisc_pkt_len(skb) * m->opt.ps_per_byte, 1000);
}

static struct voq_fifo *voq_q(struct voq_node *n, u32 i, u32 o)
{
	return &n->voq[i * n->n_ports + o];
}

/* hybrid: output o's FIFO */
static struct voq_fifo *voq_hq(struct voq_node *n, u32 o)
{
	return &n->voq[o];
}

static bool voq_hybrid(const struct voq_node *n)
{
	return n->scheduler == VOQ_SCHED_HYBRID;
}

/* The bytes a waiting packet counts: IP bytes (rr, islip), frame bytes (hybrid). */
static u64 voq_wait_bytes(const struct voq_node *n, const struct sk_buff *skb)
{
	return voq_hybrid(n) ? qdisc_pkt_len(skb) : voq_ip_bytes(skb);
}

/* a before b in an order counter that may wrap (the packets compared are far fewer than 2^31 apart) */
static bool voq_before(u32 a, u32 b)
{
	return (s32)(a - b) < 0;
}

static u64 voq_next_arrival(const struct voq_node *n)
{
	u64 best = U64_MAX;
	u32 k;

	for (k = 0; k < n->n_ports; k++)
		if (n->pend[k].head && voq_time(n->pend[k].head) < best)
			best = voq_time(n->pend[k].head);
	return best;
}

/* The next instant a port is released (only meaningful while packets wait). */
static u64 voq_next_release(const struct voq_node *n)
{
	u64 best = U64_MAX;
	u32 k;

	if (!n->waiting)
		return U64_MAX;
	for (k = 0; k < n->n_ports; k++) {
		if (n->in_free[k] > n->last && n->in_free[k] < best)
			best = n->in_free[k];
		if (n->out_free[k] > n->last && n->out_free[k] < best)
			best = n->out_free[k];
	}
	for (k = 0; k < n->n_e; k++)
		if (n->bout_free[k] > n->last && n->bout_free[k] < best)
			best = n->bout_free[k];
	return best;
}

/* hybrid: the next instant a converting packet joins its FIFO. */
static u64 voq_next_join(const struct voq_node *n)
{
	const struct sk_buff *skb;
	u64 best = U64_MAX;

	for (skb = n->conv.head; skb; skb = skb->next)
		if (voq_time(skb) < best)
			best = voq_time(skb);
	return best;
}

static u64 voq_next_event(const struct voq_node *n)
{
	return min3(voq_next_arrival(n), voq_next_release(n), voq_next_join(n));
}

/* skb's head leaves output o at t: ports i and o busy for tau, stamped with its intended
 * arrival at the next node, onto o's ready list. */
static void voq_depart(struct voq_node *n, struct sk_buff *skb, u32 i, u32 o, u64 t, u64 now,
		       u64 *touched)
{
	struct voq_sched *m = n->member[o];
	u64 tau = voq_tau(m, skb);
	u64 stamp = t + m->opt.prop_ns + ((m->opt.flags & VOQ_F_PEER_HOST) ? tau : 0);

	n->in_free[i] = t + tau;
	n->out_free[o] = t + tau;
	skb->tstamp = ns_to_ktime(stamp);
	if (now > stamp) {
		m->st.decided_after_stamp++;
		n->st.decided_after_stamp++;
	}
	voq_push(&m->ready, skb);
	*touched |= BIT_ULL(o);
}

/* Every slot of m's XCP ring never used (at creation, and when E or d_e change). */
static void voq_xcp_clear(struct voq_sched *m)
{
	u32 k;

	memset(m->xcp, 0, sizeof(m->xcp));
	for (k = 0; k < VOQ_XCP_SLOTS; k++) {
		m->xcp[k].interval = VOQ_XCP_NONE;
		m->xcp[k].qmin_ns = VOQ_XCP_NONE;
	}
}

/* An arrival of len frame bytes decided for m's output at instant t, having found
 * `backlog` ns of it (before its own decision), into slot (t - E) / d_e of m's XCP
 * ring when the ring is on and t >= E (a slot holding another interval, or none,
 * restarts). One division; under the node lock. */
static void voq_xcp_account(struct voq_sched *m, u64 t, u32 len, u64 backlog, bool dropped)
{
	u64 d_e = m->opt.xcp_interval_ns, k;
	struct tc_voq_xcp_slot *s;

	if (!d_e || t < m->opt.xcp_epoch_ns)
		return;
	k = div64_u64(t - m->opt.xcp_epoch_ns, d_e);
	s = &m->xcp[k & (VOQ_XCP_SLOTS - 1)];
	if (s->interval != k || !s->packets) {
		s->interval = k;
		s->bytes = 0;
		s->qmin_ns = VOQ_XCP_NONE;
		s->packets = 0;
		s->drops = 0;
	}
	s->bytes += len;
	s->packets++;
	if (dropped)
		s->drops++;
	if (backlog < s->qmin_ns)
		s->qmin_ns = backlog;
}

/* The arrival skb at instant t: cut-through, VOQ or drop. */
static void voq_arrive(struct voq_node *n, struct sk_buff *skb, u64 t, u64 now, u64 *touched)
{
	struct voq_skb_cb *cb = voq_cb(skb);
	u32 i = cb->in_port, o = cb->out_port;
	struct voq_sched *m = n->member[o];
	struct voq_fifo *v = voq_q(n, i, o);
	u64 ip = voq_ip_bytes(skb);
	/* what output o has still to send as this arrival finds it (XCP's queue sample) */
	u64 backlog = (n->out_free[o] > t ? n->out_free[o] - t : 0) + n->out_wait_ns[o];
	bool room;

	m->st.arrivals++;
	n->st.arrivals++;
	/* (the empty-VOQ test is the rule; after a maximal scheduling pass a free input and
	 * a free output never leave a packet waiting between them) */
	if (n->in_free[i] <= t && n->out_free[o] <= t && !v->head) {
		m->st.cut++;
		n->st.cut++;
		voq_xcp_account(m, t, qdisc_pkt_len(skb), backlog, false);
		voq_depart(n, skb, i, o, t, now, touched);
		return;
	}
	if (n->voq_split == VOQ_SPLIT_SHARED)
		room = n->in_bytes[i] + ip <= n->buffer_bytes;
	else
		room = (v->bytes + ip) * n->n_ports <= n->buffer_bytes;
	voq_xcp_account(m, t, qdisc_pkt_len(skb), backlog, !room);
	if (!room) {
		m->st.dropped++;
		n->st.dropped++;
		n->in_dropped[i]++;
		voq_push(&m->gone, skb);
		*touched |= BIT_ULL(o);
		return;
	}
	voq_push(v, skb);
	v->bytes += ip;
	n->out_wait_ns[o] += voq_tau(m, skb);
	n->in_bytes[i] += ip;
	n->node_bytes += ip;
	n->waiting++;
	m->st.buffered++;
	n->st.buffered++;
	if (n->in_bytes[i] > n->in_max_bytes[i])
		n->in_max_bytes[i] = n->in_bytes[i];
	if (n->node_bytes > n->st.max_node_bytes)
		n->st.max_node_bytes = n->node_bytes;
}

/* VOQ(i, o)'s head leaves at t. */
static void voq_serve(struct voq_node *n, u32 i, u32 o, u64 t, u64 now, u64 *touched)
{
	struct voq_fifo *v = voq_q(n, i, o);
	struct sk_buff *skb = voq_pop(v);
	u64 ip = voq_ip_bytes(skb);

	v->bytes -= ip;
	n->out_wait_ns[o] -= voq_tau(n->member[o], skb);
	n->in_bytes[i] -= ip;
	n->node_bytes -= ip;
	n->waiting--;
	voq_depart(n, skb, i, o, t, now, touched);
}

/* rr: each free output, in index order, serves the first input at or after its pointer
 * with a packet for it and a free port, and moves the pointer one past that input. */
static void voq_schedule_rr(struct voq_node *n, u64 t, u64 now, u64 *touched)
{
	u32 N = n->n_ports, o, step, i;

	for (o = 0; o < N; o++) {
		if (n->out_free[o] > t)
			continue;
		for (step = 0; step < N; step++) {
			i = (n->grant_ptr[o] + step) % N;
			if (voq_q(n, i, o)->head && n->in_free[i] <= t) {
				voq_serve(n, i, o, t, now, touched);
				n->grant_ptr[o] = (i + 1) % N;
				break;
			}
		}
	}
}

/* iSLIP-like: free inputs request the free outputs they have packets for; each output
 * grants the requester at or after its grant pointer; each input accepts the grant at or
 * after its accept pointer; iterated until no match is added; pointers move one past the
 * matched port for first-iteration matches only. */
static void voq_schedule_islip(struct voq_node *n, u64 t, u64 now, u64 *touched)
{
	u32 N = n->n_ports, i, o, step;
	u64 free_in = 0, free_out = 0;
	bool first = true, any;

	for (i = 0; i < N; i++) {
		if (n->in_free[i] <= t)
			free_in |= BIT_ULL(i);
		if (n->out_free[i] <= t)
			free_out |= BIT_ULL(i);
	}
	for (;;) {
		any = false;
		memset(n->grants, 0, N * sizeof(n->grants[0]));
		for (o = 0; o < N; o++) {
			if (!(free_out & BIT_ULL(o)))
				continue;
			for (step = 0; step < N; step++) {
				i = (n->grant_ptr[o] + step) % N;
				if ((free_in & BIT_ULL(i)) && voq_q(n, i, o)->head) {
					n->grants[i] |= BIT_ULL(o);
					any = true;
					break;
				}
			}
		}
		if (!any)
			return;
		for (i = 0; i < N; i++) {
			if (!n->grants[i])
				continue;
			for (step = 0; step < N; step++) {
				o = (n->accept_ptr[i] + step) % N;
				if (n->grants[i] & BIT_ULL(o))
					break;
			}
			if (first) {
				n->grant_ptr[o] = (i + 1) % N;
				n->accept_ptr[i] = (o + 1) % N;
			}
			voq_serve(n, i, o, t, now, touched);
			free_in &= ~BIT_ULL(i);
			free_out &= ~BIT_ULL(o);
		}
		first = false;
	}
}

/* ---- the hybrid switch (E1; docs/hybrid-holding.md, the reference testbed/optical/eventsim.py) ---- */

/* The arrival skb at instant t: cut-through if its output is free at t, else OE through
 * the lowest buffer input released before t (one whose bufferisation ends at t is still
 * busy: the paper's residual loss), else drop. */
static void voq_hybrid_arrive(struct voq_node *n, struct sk_buff *skb, u64 t, u64 now, u64 *touched)
{
	struct voq_skb_cb *cb = voq_cb(skb);
	u32 i = cb->in_port, o = cb->out_port, k;
	struct voq_sched *m = n->member[o];
	u64 len = qdisc_pkt_len(skb), tau;

	m->st.arrivals++;
	n->st.arrivals++;
	cb->order = n->rank++;
	if (n->out_free[o] <= t) {
		m->st.cut++;
		n->st.cut++;
		voq_depart(n, skb, i, o, t, now, touched);
		return;
	}
	for (k = 0; k < n->n_e; k++)
		if (n->bin_free[k] < t)
			break;
	if (k == n->n_e) {
		m->st.dropped++;
		n->st.dropped++;
		n->in_dropped[i]++;
		voq_push(&m->gone, skb);
		*touched |= BIT_ULL(o);
		return;
	}
	tau = voq_tau(m, skb);
	n->bin_free[k] = t + tau;
	skb->tstamp = ns_to_ktime(t + tau);	/* its join instant, while converting */
	voq_push(&n->conv, skb);
	n->in_bytes[i] += len;
	n->node_bytes += len;
	m->st.buffered++;
	n->st.buffered++;
}

/* The converting packets whose bufferisation ends at t join their output's FIFO, in
 * arrival rank. Returns whether any joined. */
static bool voq_hybrid_join(struct voq_node *n, u64 t)
{
	struct sk_buff *skb, *prev, *best, *best_prev;
	bool any = false;

	for (;;) {
		best = best_prev = NULL;
		for (prev = NULL, skb = n->conv.head; skb; prev = skb, skb = skb->next)
			if (voq_time(skb) == t && (!best || voq_before(voq_cb(skb)->order, voq_cb(best)->order))) {
				best = skb;
				best_prev = prev;
			}
		if (!best)
			return any;
		voq_unlink(&n->conv, best_prev, best);
		voq_cb(best)->order = n->joins++;
		voq_push(voq_hq(n, voq_cb(best)->out_port), best);
		n->waiting++;
		any = true;
	}
}

/* FIFO heads whose output is free at t leave through the lowest free buffer output, the
 * earliest joined first, while a buffer output is free. */
static void voq_hybrid_dispatch(struct voq_node *n, u64 t, u64 now, u64 *touched)
{
	struct sk_buff *skb;
	u32 o, best, k;

	while (n->waiting) {
		best = U32_MAX;
		for (o = 0; o < n->n_ports; o++) {
			skb = voq_hq(n, o)->head;
			if (skb && n->out_free[o] <= t &&
			    (best == U32_MAX || voq_before(voq_cb(skb)->order, voq_cb(voq_hq(n, best)->head)->order)))
				best = o;
		}
		if (best == U32_MAX)
			return;
		for (k = 0; k < n->n_e; k++)
			if (n->bout_free[k] <= t)
				break;
		if (k == n->n_e)
			return;		/* every buffer output is emitting */
		skb = voq_pop(voq_hq(n, best));
		n->waiting--;
		n->bout_free[k] = t + voq_tau(n->member[best], skb);
		n->in_bytes[voq_cb(skb)->in_port] -= qdisc_pkt_len(skb);
		n->node_bytes -= qdisc_pkt_len(skb);
		voq_depart(n, skb, voq_cb(skb)->in_port, best, t, now, touched);
	}
}

/* The instant t of a hybrid node: releases (implicit: ports whose tau ended by t are
 * free), dispatch, the arrivals of t in input order, the joins of t, dispatch; then the
 * occupancy maxima (departures of an instant before its arrivals, as the reference). */
static void voq_hybrid_instant(struct voq_node *n, u64 t, u64 now, u64 *touched)
{
	u32 k;

	voq_hybrid_dispatch(n, t, now, touched);
	for (k = 0; k < n->n_ports; k++)
		while (n->pend[k].head && voq_time(n->pend[k].head) == t)
			voq_hybrid_arrive(n, voq_pop(&n->pend[k]), t, now, touched);
	if (voq_hybrid_join(n, t))
		voq_hybrid_dispatch(n, t, now, touched);
	if (n->node_bytes > n->st.max_node_bytes)
		n->st.max_node_bytes = n->node_bytes;
	for (k = 0; k < n->n_ports; k++)
		if (n->in_bytes[k] > n->in_max_bytes[k])
			n->in_max_bytes[k] = n->in_bytes[k];
}

/* Decide every instant t <= now - M not decided yet, in order: at each, the releases'
 * scheduling (if packets wait and ports are released at t), then the arrivals of t in
 * input order. Outputs given a packet are added to *touched. */
static void voq_advance(struct voq_node *n, u64 now, u64 *touched)
{
	u64 horizon, ta, tr, t;
	u32 k;

	if (now < n->lookahead_ns)
		return;
	horizon = now - n->lookahead_ns;
	for (;;) {
		ta = voq_next_arrival(n);
		tr = voq_next_release(n);
		t = min3(ta, tr, voq_next_join(n));
		if (t == U64_MAX || t > horizon)
			return;
		if (horizon - t > n->st.max_decision_lag_ns)
			n->st.max_decision_lag_ns = horizon - t;
		if (voq_hybrid(n)) {
			voq_hybrid_instant(n, t, now, touched);
			n->last = t;
			continue;
		}
		if (n->waiting && tr == t) {
			if (n->scheduler == VOQ_SCHED_ISLIP)
				voq_schedule_islip(n, t, now, touched);
			else
				voq_schedule_rr(n, t, now, touched);
		}
		for (k = 0; k < n->n_ports; k++)
			while (n->pend[k].head && voq_time(n->pend[k].head) == t)
				voq_arrive(n, voq_pop(&n->pend[k]), t, now, touched);
		n->last = t;
	}
}

/* Arm the node's timer at the next event instant + M (after voq_advance, whose horizon
 * it is past). A timer armed earlier and no longer needed fires for nothing. */
static void voq_arm(struct voq_node *n)
{
	u64 t = voq_next_event(n), want;

	if (t == U64_MAX)
		return;
	want = t + n->lookahead_ns;
	if (n->timer_at == want)
		return;
	n->timer_at = want;
	hrtimer_start(&n->timer, ns_to_ktime(want), HRTIMER_MODE_ABS_SOFT);
}

/* Let the members in `touched` run their dequeue (release a packet, free a dropped one,
 * or arm their watchdog), as qdisc_watchdog does. Under the node lock. */
static void voq_kick(struct voq_node *n, u64 touched)
{
	u32 o;

	if (!touched)
		return;
	rcu_read_lock();
	for (o = 0; o < n->n_ports; o++) {
		struct voq_sched *m = n->member[o];

		if (!(touched & BIT_ULL(o)) || !m)
			continue;
		if (test_bit(__QDISC_STATE_DEACTIVATED, &qdisc_root_sleeping(m->sch)->state))
			continue;
		__netif_schedule(qdisc_root(m->sch));
	}
	rcu_read_unlock();
}

static enum hrtimer_restart voq_timer(struct hrtimer *timer)
{
	struct voq_node *n = container_of(timer, struct voq_node, timer);
	u64 touched = 0;

	spin_lock(&n->lock);		/* softirq context (HRTIMER_MODE_ABS_SOFT) */
	n->timer_at = 0;
	voq_advance(n, ktime_get_ns(), &touched);
	voq_arm(n);
	voq_kick(n, touched);
	spin_unlock(&n->lock);
	return HRTIMER_NORESTART;
}

/* ---- the qdisc ----------------------------------------------------------------------------- */

static int voq_enqueue(struct sk_buff *skb, struct Qdisc *sch, struct sk_buff **to_free)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct voq_node *n = q->node;
	const u32 *word = (const u32 *)qdisc_skb_cb(skb)->data;
	u32 decision = word[VOQ_CB_DECISION], in = word[VOQ_CB_IN_PORT], b;
	u64 a, now, late, touched = 0;
	struct voq_skb_cb *cb;

	if (unlikely(decision != VOQ_OPTSW_HOLD || in >= q->opt.n_ports || !voq_mono(skb) || !skb->tstamp)) {
		spin_lock_bh(&n->lock);
		q->st.unmodelled++;
		spin_unlock_bh(&n->lock);
		return qdisc_drop(skb, sch, to_free);
	}
	if (unlikely(sch->q.qlen >= q->opt.limit)) {
		spin_lock_bh(&n->lock);
		q->st.overlimit++;
		spin_unlock_bh(&n->lock);
		return qdisc_drop(skb, sch, to_free);
	}
	/* The packet has left its sender (as obsburst and hostnic: TCP Small Queues must not
	 * count it while we hold it; on the fabric the hosts' qdisc has orphaned it already). */
	skb_orphan(skb);
	a = voq_time(skb);
	cb = voq_cb(skb);		/* (overwrites the programs' words, read above) */
	qdisc_qstats_backlog_inc(sch, skb);
	sch->q.qlen++;
	now = ktime_get_ns();

	spin_lock_bh(&n->lock);
	late = now > a ? now - a : 0;
	if (late > n->st.max_enqueue_late_ns)
		n->st.max_enqueue_late_ns = late;
	b = late > 1 ? fls64(late) - 1 : 0;
	n->st.late_log2[min_t(u32, b, VOQ_LATE_BUCKETS - 1)]++;
	cb->seq = n->seq++;
	cb->in_port = in;
	cb->out_port = q->opt.port;
	if (a <= n->last) {
		/* its instant (or a later one) is decided: decide it at the last one */
		q->st.late++;
		n->st.late++;
		skb->tstamp = ns_to_ktime(n->last);
	}
	voq_pend_insert(&n->pend[in], skb);
	voq_advance(n, now, &touched);
	voq_arm(n);
	voq_kick(n, touched & ~BIT_ULL(q->opt.port));	/* (the core runs our dequeue next) */
	spin_unlock_bh(&n->lock);
	return NET_XMIT_SUCCESS;
}

static struct sk_buff *voq_dequeue(struct Qdisc *sch)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct voq_node *n = q->node;
	struct voq_fifo gone;
	struct sk_buff *skb = NULL, *g;
	u64 now = ktime_get_ns(), next = 0, touched = 0;

	spin_lock_bh(&n->lock);
	voq_advance(n, now, &touched);
	voq_arm(n);
	voq_kick(n, touched & ~BIT_ULL(q->opt.port));
	gone = q->gone;
	memset(&q->gone, 0, sizeof(q->gone));
	if (q->ready.head) {
		if (voq_time(q->ready.head) <= now) {
			skb = voq_pop(&q->ready);
			q->st.released++;
			q->st.released_bytes += qdisc_pkt_len(skb);
		} else {
			next = voq_time(q->ready.head);
		}
	}
	spin_unlock_bh(&n->lock);

	while ((g = voq_pop(&gone))) {
		qdisc_qstats_backlog_dec(sch, g);
		sch->q.qlen--;
		qdisc_qstats_drop(sch);
		kfree_skb(g);
	}
	if (skb) {
		qdisc_qstats_backlog_dec(sch, skb);
		sch->q.qlen--;
		qdisc_bstats_update(sch, skb);
		voq_set_delivery(skb, voq_time(skb));	/* the stamp: intended arrival at the next node */
		return skb;
	}
	if (next)
		qdisc_watchdog_schedule_ns(&q->watchdog, next);
	return NULL;
}

/* Move the packets of f for output o to *out; with n, they counted as waiting (frame
 * bytes, hybrid's converting packets). */
static void voq_take_port(struct voq_fifo *f, u32 o, struct voq_fifo *out, struct voq_node *n)
{
	struct sk_buff *prev = NULL, *cur = f->head, *nx;

	while (cur) {
		nx = cur->next;
		if (voq_cb(cur)->out_port == o) {
			voq_unlink(f, prev, cur);
			if (n) {
				n->in_bytes[voq_cb(cur)->in_port] -= qdisc_pkt_len(cur);
				n->node_bytes -= qdisc_pkt_len(cur);
			}
			voq_push(out, cur);
		} else {
			prev = cur;
		}
		cur = nx;
	}
}

/* Take every packet of member q (output q->opt.port) out of its node into *out: pending,
 * VOQs (buffer counts adjusted), ready and gone lists. Under the node lock. */
static void voq_purge(struct voq_node *n, struct voq_sched *q, struct voq_fifo *out)
{
	u32 o = q->opt.port, i;
	struct sk_buff *skb;

	for (i = 0; i < n->n_ports; i++) {
		struct voq_fifo *v = voq_q(n, i, o);

		voq_take_port(&n->pend[i], o, out, NULL);
		while ((skb = voq_pop(v))) {
			u64 b = voq_wait_bytes(n, skb);

			n->in_bytes[voq_cb(skb)->in_port] -= b;
			n->node_bytes -= b;
			n->waiting--;
			voq_push(out, skb);
		}
		v->bytes = 0;
	}
	voq_take_port(&n->conv, o, out, n);		/* (hybrid: converting packets for o) */
	n->out_wait_ns[o] = 0;		/* VOQ(*, o) is empty */
	while ((skb = voq_pop(&q->ready)))
		voq_push(out, skb);
	while ((skb = voq_pop(&q->gone)))
		voq_push(out, skb);
}

static void voq_free_all(struct voq_fifo *f)
{
	struct sk_buff *skb;

	while ((skb = voq_pop(f)))
		kfree_skb(skb);
}

static void voq_reset(struct Qdisc *sch)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct voq_fifo out = {};

	if (q->node) {
		spin_lock_bh(&q->node->lock);
		voq_purge(q->node, q, &out);
		spin_unlock_bh(&q->node->lock);
	}
	voq_free_all(&out);
	sch->q.qlen = 0;
	sch->qstats.backlog = 0;
	qdisc_watchdog_cancel(&q->watchdog);
}

static int voq_parse(struct nlattr *opt, struct tc_voq_qopt *o, struct netlink_ext_ack *extack)
{
	if (!opt) {
		NL_SET_ERR_MSG_MOD(extack, "options (struct tc_voq_qopt) are required");
		return -EINVAL;
	}
	if (nla_len(opt) != sizeof(*o)) {
		NL_SET_ERR_MSG_MOD(extack, "options are not a struct tc_voq_qopt of this version");
		return -EINVAL;
	}
	memcpy(o, nla_data(opt), sizeof(*o));
	if (o->version != VOQ_VERSION) {
		NL_SET_ERR_MSG_MOD(extack, "options version differs from the module's VOQ_VERSION");
		return -EINVAL;
	}
	if (o->n_ports < 1 || o->n_ports > VOQ_MAX_PORTS) {
		NL_SET_ERR_MSG_MOD(extack, "n_ports must be 1..64");
		return -EINVAL;
	}
	if (o->port >= o->n_ports) {
		NL_SET_ERR_MSG_MOD(extack, "port must be below n_ports");
		return -EINVAL;
	}
	if (o->scheduler != VOQ_SCHED_RR && o->scheduler != VOQ_SCHED_ISLIP && o->scheduler != VOQ_SCHED_HYBRID) {
		NL_SET_ERR_MSG_MOD(extack, "scheduler must be 0 (rr), 1 (islip) or 2 (hybrid)");
		return -EINVAL;
	}
	if (o->reserved) {
		NL_SET_ERR_MSG_MOD(extack, "reserved must be 0");
		return -EINVAL;
	}
	if (o->scheduler == VOQ_SCHED_HYBRID) {
		if (o->n_e > o->n_ports) {
			NL_SET_ERR_MSG_MOD(extack, "n_e must be 0..n_ports (hybrid)");
			return -EINVAL;
		}
		if (o->buffer_bytes || o->voq_split || o->xcp_interval_ns || o->xcp_epoch_ns) {
			NL_SET_ERR_MSG_MOD(extack, "hybrid takes buffer_bytes 0 (unlimited), voq_split 0 and no XCP ring");
			return -EINVAL;
		}
	} else if (o->n_e) {
		NL_SET_ERR_MSG_MOD(extack, "n_e must be 0 unless the scheduler is 2 (hybrid)");
		return -EINVAL;
	}
	if (o->voq_split != VOQ_SPLIT_SHARED && o->voq_split != VOQ_SPLIT_STATIC) {
		NL_SET_ERR_MSG_MOD(extack, "voq_split must be 0 (shared) or 1 (static)");
		return -EINVAL;
	}
	if (o->flags & ~VOQ_F_PEER_HOST) {
		NL_SET_ERR_MSG_MOD(extack, "unknown flags");
		return -EINVAL;
	}
	if (o->limit < 1 || o->limit > VOQ_LIMIT_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "limit must be 1..10000000 packets");
		return -EINVAL;
	}
	if (o->buffer_bytes > VOQ_BUFFER_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "buffer_bytes must be 0..1e9");
		return -EINVAL;
	}
	if (o->lookahead_ns < 1 || o->lookahead_ns > VOQ_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "lookahead_ns must be 1..3600e9 (1 h)");
		return -EINVAL;
	}
	if (o->ps_per_byte < 1 || o->ps_per_byte > VOQ_PS_PER_BYTE_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "ps_per_byte must be 1..8e9 (1 kbit/s)");
		return -EINVAL;
	}
	if (o->prop_ns > VOQ_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "prop_ns must be 0..3600e9 (1 h)");
		return -EINVAL;
	}
	if (o->xcp_interval_ns > VOQ_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "xcp_interval_ns must be 0 (off) or 1..3600e9 (1 h)");
		return -EINVAL;
	}
	if (!o->xcp_interval_ns && o->xcp_epoch_ns) {
		NL_SET_ERR_MSG_MOD(extack, "xcp_epoch_ns must be 0 when xcp_interval_ns is 0 (XCP ring off)");
		return -EINVAL;
	}
	return 0;
}

static struct voq_node *voq_node_new(const struct net *net, const struct tc_voq_qopt *o)
{
	struct voq_node *n = kzalloc(sizeof(*n), GFP_KERNEL);

	if (!n)
		return NULL;
	n->voq = kvcalloc(o->n_ports * o->n_ports, sizeof(*n->voq), GFP_KERNEL);
	if (!n->voq) {
		kfree(n);
		return NULL;
	}
	n->net = net;
	n->node_id = o->node_id;
	n->n_ports = o->n_ports;
	n->scheduler = o->scheduler;
	n->voq_split = o->voq_split;
	n->n_e = o->n_e;
	n->buffer_bytes = o->buffer_bytes;
	n->lookahead_ns = o->lookahead_ns;
	spin_lock_init(&n->lock);
	hrtimer_init(&n->timer, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_SOFT);
	n->timer.function = voq_timer;
	return n;
}

/* Join (or create) the node of q's options; node-wide options must match its. */
static int voq_join(struct Qdisc *sch, struct voq_sched *q, const struct tc_voq_qopt *o,
		    struct netlink_ext_ack *extack)
{
	const struct net *net = dev_net(qdisc_dev(sch));
	struct voq_node *n = NULL, *it;
	int err = 0;

	mutex_lock(&voq_nodes_mutex);
	list_for_each_entry(it, &voq_nodes, link) {
		if (it->net == net && it->node_id == o->node_id) {
			n = it;
			break;
		}
	}
	if (n) {
		if (n->n_ports != o->n_ports || n->scheduler != o->scheduler || n->voq_split != o->voq_split ||
		    n->n_e != o->n_e || n->buffer_bytes != o->buffer_bytes || n->lookahead_ns != o->lookahead_ns) {
			NL_SET_ERR_MSG_MOD(extack, "this node's other ports have other n_ports, scheduler, voq_split, "
					   "n_e, buffer_bytes or lookahead_ns (node-wide options must be the same)");
			err = -EINVAL;
			goto out;
		}
		if (n->member[o->port]) {
			NL_SET_ERR_MSG_MOD(extack, "this node's port already has a voq qdisc");
			err = -EBUSY;
			goto out;
		}
	} else {
		n = voq_node_new(net, o);
		if (!n) {
			err = -ENOMEM;
			goto out;
		}
		list_add(&n->link, &voq_nodes);
	}
	q->opt = *o;
	q->sch = sch;
	voq_xcp_clear(q);
	spin_lock_bh(&n->lock);
	n->member[o->port] = q;
	n->members++;
	spin_unlock_bh(&n->lock);
	q->node = n;
out:
	mutex_unlock(&voq_nodes_mutex);
	return err;
}

static int voq_init(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct tc_voq_qopt o;
	int err;

	qdisc_watchdog_init(&q->watchdog, sch);
	err = voq_parse(opt, &o, extack);
	if (err)
		return err;
	return voq_join(sch, q, &o, extack);
}

static int voq_change(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct tc_voq_qopt o, same;
	int err = voq_parse(opt, &o, extack);

	if (err)
		return err;
	same = o;
	same.xcp_epoch_ns = q->opt.xcp_epoch_ns;
	same.xcp_interval_ns = q->opt.xcp_interval_ns;
	if (memcmp(&same, &q->opt, sizeof(same))) {
		NL_SET_ERR_MSG_MOD(extack, "options cannot change but xcp_epoch_ns and xcp_interval_ns: delete the "
				   "qdisc and add it again");
		return -EOPNOTSUPP;
	}
	if (o.xcp_epoch_ns != q->opt.xcp_epoch_ns || o.xcp_interval_ns != q->opt.xcp_interval_ns) {
		spin_lock_bh(&q->node->lock);
		q->opt.xcp_epoch_ns = o.xcp_epoch_ns;
		q->opt.xcp_interval_ns = o.xcp_interval_ns;
		voq_xcp_clear(q);
		spin_unlock_bh(&q->node->lock);
	}
	return 0;
}

static void voq_destroy(struct Qdisc *sch)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct voq_node *n = q->node;
	struct voq_fifo out = {};
	bool last;

	qdisc_watchdog_cancel(&q->watchdog);
	if (!n)
		return;		/* init failed before joining */
	mutex_lock(&voq_nodes_mutex);
	spin_lock_bh(&n->lock);
	voq_purge(n, q, &out);
	n->member[q->opt.port] = NULL;
	last = --n->members == 0;
	spin_unlock_bh(&n->lock);
	if (last)
		list_del(&n->link);
	mutex_unlock(&voq_nodes_mutex);
	q->node = NULL;
	voq_free_all(&out);
	if (last) {
		hrtimer_cancel(&n->timer);	/* (not under the lock its callback takes) */
		kvfree(n->voq);
		kfree(n);
	}
}

static int voq_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct voq_sched *q = qdisc_priv(sch);

	if (nla_put(skb, TCA_OPTIONS, sizeof(q->opt), &q->opt))
		return -1;
	return skb->len;
}

static int voq_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct voq_sched *q = qdisc_priv(sch);
	struct voq_node *n = q->node;
	struct tc_voq_xstats *st = &q->dump;
	u32 p = q->opt.port, k;

	spin_lock_bh(&n->lock);
	st->port = q->st;
	st->port.in_dropped = n->in_dropped[p];
	st->port.in_max_bytes = n->in_max_bytes[p];
	st->port.in_bytes = n->in_bytes[p];
	st->node = n->st;
	st->node.last_ns = n->last;
	st->node.waiting = n->waiting + n->conv.qlen;
	st->node.pending = 0;
	for (k = 0; k < n->n_ports; k++)
		st->node.pending += n->pend[k].qlen;
	st->node.members = n->members;
	memcpy(st->xcp, q->xcp, sizeof(st->xcp));
	spin_unlock_bh(&n->lock);
	return gnet_stats_copy_app(d, st, sizeof(*st));
}

static struct Qdisc_ops voq_qdisc_ops __read_mostly = {
	.id		= "voq",
	.priv_size	= sizeof(struct voq_sched),
	.enqueue	= voq_enqueue,
	.dequeue	= voq_dequeue,
	.peek		= qdisc_peek_dequeued,
	.init		= voq_init,
	.reset		= voq_reset,
	.destroy	= voq_destroy,
	.change		= voq_change,
	.dump		= voq_dump,
	.dump_stats	= voq_dump_stats,
	.owner		= THIS_MODULE,
};

static int __init voq_module_init(void)
{
	BUILD_BUG_ON(sizeof(struct tc_voq_qopt) != 88);
	BUILD_BUG_ON(sizeof(struct tc_voq_xcp_slot) != 32);
	BUILD_BUG_ON(sizeof(struct tc_voq_xstats) != (13 + 13 + VOQ_LATE_BUCKETS) * 8 + VOQ_XCP_SLOTS * 32);
	BUILD_BUG_ON(VOQ_XCP_SLOTS & (VOQ_XCP_SLOTS - 1));	/* slot = k & (VOQ_XCP_SLOTS - 1) */
	BUILD_BUG_ON(sizeof(struct tc_voq_port_stats) != 13 * 8);
	BUILD_BUG_ON(sizeof(struct tc_voq_node_stats) != (13 + VOQ_LATE_BUCKETS) * 8);
	BUILD_BUG_ON(VOQ_MAX_PORTS > 64);	/* port sets are u64 bit masks */
	return register_qdisc(&voq_qdisc_ops);
}

static void __exit voq_module_exit(void)
{
	unregister_qdisc(&voq_qdisc_ops);
}

module_init(voq_module_init);
module_exit(voq_module_exit);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Optical switch node held and released on the intended timeline with a lookahead margin: "
		   "input-buffered (virtual output queues, rr or iSLIP) or E1's hybrid switch (n_e buffer ports)");
