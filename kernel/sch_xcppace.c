// SPDX-License-Identifier: GPL-2.0
/*
 * sch_xcppace: E5's XCP edge pacer, released exactly on the intended timeline (design in
 * docs/xcp-edge.md, "(a) The edge pacer"; the algorithm's Python mirror is
 * testbed/optical/xcppacer.py, checked against this file packet for packet).
 *
 * Paper: Alparslan, Arakawa, Murata, "Comparison of Packet Switch Architectures and
 * Pacing Algorithms for Very Small Optical RAM", II-A (the ingress edge paces each
 * macroflow with a leaky bucket at the rate XCP grants) and III-A (0.25 s of electronic
 * buffering at the edge).
 *
 * One qdisc on an ingress edge's core-facing port. A packet reaches it with its intended
 * arrival a as its monotonic skb->tstamp and its class in cb[2] (the optical switch's
 * egress program, decision OPTSW_HOLD in cb[0]). On the intended timeline:
 *
 *  - it is received whole at ready = a + tau (tau: the frame at the link's rate);
 *  - admission at ready: dropped if the wait estimate at the class's current rate R,
 *    max(0, last_e + gap(L_last) - ready) + 8 (bytes in the bucket) / R, exceeds
 *    max_wait; else appended to the class's FIFO (a class of rate 0 is unused: its
 *    packets are dropped and counted unmodelled);
 *  - the bucket: the class's first packet not yet released by it becomes eligible at
 *    e = max(ready, last_e + gap(L_last, R), the instant of the class's last rate change),
 *    gap(L, R) = max(1, round(8e9 L / R)) ns, last_e the eligibility of the class's
 *    previous packet: a leaky bucket with no burst allowance, re-spaced from the
 *    previous eligibility at the rate in force;
 *  - the link: whenever it is free and packets are eligible, the one with the earliest
 *    eligibility (ties: lower class) departs; link free = departure + tau. Stamped
 *    departure + propagation, released at the stamp with it as monotonic delivery time;
 *  - rate changes (TCA_XCPPACE_RATES) are events of the timeline, applied at their
 *    instant before its arrivals and departures; one whose instant is decided already
 *    is applied at the last decided instant and counted late_rates.
 *  At one instant: rate changes, arrivals (admission), bucket releases, departures.
 *
 * Lookahead: the instant t is decided only once real time has passed t + M_p
 * (lookahead_ns), over everything dated <= t that has reached the qdisc. A packet whose
 * ready instant is not after the last decided instant is counted late and decided at
 * that instant (docs/ib-holding.md, "The lookahead rule").
 *
 * Counters per class and per port, and a ring of XCPPACE_SLOTS intervals (epoch_ns,
 * interval_ns): per class the packets and bytes departing in the interval; for the port
 * their sums, and, by the instant of eligibility (the packet's arrival in the link's
 * queue), the packets and bytes the buckets released in it and the smallest link backlog
 * one of them found (its departure - its eligibility, known at eligibility). The qdisc's counters are its xstats; each class's are
 * the xstats of class (cls + 1) (a class dump: the qdisc dump must fit a netlink message
 * of one page).
 *
 * Locks: the qdisc's root lock, then q->lock (never the reverse); everything of the
 * timeline, the ready and gone lists and the counters are under q->lock; qlen and backlog
 * change only in enqueue/dequeue/reset (root lock). Wake-ups: the soft hrtimer at (next
 * event instant + M_p) decides; the watchdog releases at the ready head's stamp; a
 * decision outside the qdisc's own enqueue/dequeue kicks it with __netif_schedule.
 *
 * Times are CLOCK_MONOTONIC ns (the emulation's clock); lengths qdisc_pkt_len() (the frame
 * from the Ethernet header; GSO off on the device).
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/spinlock.h>
#include <linux/hrtimer.h>
#include <linux/math64.h>
#include <linux/version.h>
#include <net/netlink.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#include <net/sock.h>
#include "xcppace.h"

/* ---- per packet ----------------------------------------------------------------------------- */

/* Our part of skb->cb (qdisc_skb_cb->data), written at enqueue after reading the
 * program's words. skb->tstamp holds ready (then the stamp). */
struct xp_skb_cb {
	u64 e;		/* eligibility, once the bucket released it */
	u32 seq;	/* enqueue order (ties of one ready instant) */
	u32 cls;
};

static struct xp_skb_cb *xp_cb(struct sk_buff *skb)
{
	qdisc_cb_private_validate(skb, sizeof(struct xp_skb_cb));
	return (struct xp_skb_cb *)qdisc_skb_cb(skb)->data;
}

static u64 xp_time(const struct sk_buff *skb)
{
	return ktime_to_ns(skb->tstamp);
}

static bool xp_mono(const struct sk_buff *skb)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	return skb->tstamp_type == SKB_CLOCK_MONOTONIC;
#else
	return skb->mono_delivery_time;
#endif
}

static void xp_set_delivery(struct sk_buff *skb, u64 ns)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	skb_set_delivery_time(skb, ns_to_ktime(ns), SKB_CLOCK_MONOTONIC);
#else
	skb_set_delivery_time(skb, ns_to_ktime(ns), true);
#endif
}

/* ---- a FIFO of skbs (through skb->next) ----------------------------------------------------- */

struct xp_fifo {
	struct sk_buff *head, *tail;
	u32 qlen;
};

static void xp_push(struct xp_fifo *f, struct sk_buff *skb)
{
	skb->next = NULL;
	if (f->tail)
		f->tail->next = skb;
	else
		f->head = skb;
	f->tail = skb;
	f->qlen++;
}

static struct sk_buff *xp_pop(struct xp_fifo *f)
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

/* ---- state ---------------------------------------------------------------------------------- */

struct xp_class {
	struct xp_fifo q;		/* eligible packets (waiting for the link), then the bucket's */
	struct sk_buff *bhead;		/* first packet the bucket has not released (NULL: none) */
	u64 rate;			/* bit/s in force; 0 = unused */
	u64 floor;			/* instant of the class's last rate change */
	u64 last_e;			/* eligibility of the last packet the bucket released */
	u32 last_len;			/* its length */
	bool started;			/* the bucket has released a packet */
	u64 next_e;			/* bhead's eligibility, U64_MAX without bhead */
	u64 bucket_bytes;		/* bytes from bhead on */
	u64 bytes;			/* bytes in q */
	u32 nelig;			/* packets in q before bhead */
	struct tc_xcppace_class_xstats st;	/* (live fields filled at dump) */
};

struct xp_pending_rate {
	u64 at;				/* instant it applies */
	u64 rate;
	u32 cls;
};

struct xp_sched {
	struct tc_xcppace_qopt opt;
	struct Qdisc *sch;
	spinlock_t lock;
	struct hrtimer timer;		/* decisions: at the next event instant + M_p */
	u64 timer_at;			/* its expiry if armed by us (0: not armed) */
	struct qdisc_watchdog watchdog;	/* releases: at the ready head's stamp */
	struct xp_class *cls;		/* [XCPPACE_MAX_CLASSES] */
	struct xp_pending_rate *rates;	/* [XCPPACE_MAX_PENDING], sorted by instant (stable) */
	u32 nrates;
	u32 seq;
	u32 nbucket;			/* classes with a bucket head */
	u32 nelig;			/* eligible packets in all classes */
	u64 last;			/* latest decided instant */
	u64 link_free;
	u64 elig_tau;			/* link time (ns) of the eligible packets */
	struct xp_fifo pend;		/* arrivals not decided yet, by (ready, seq) */
	struct xp_fifo ready;		/* decided, leaving at their stamps (ascending) */
	struct xp_fifo gone;		/* dropped by a decision, freed by dequeue */
	struct tc_xcppace_xstats st;	/* (live fields filled at dump) */
	struct tc_xcppace_xstats dump;	/* dump_stats' copy */
};

static u64 xp_tau(const struct xp_sched *q, u32 len)
{
	return div_u64((u64)len * q->opt.ps_per_byte, 1000);
}

/* round(8e9 bytes / rate) ns, half up (rate >= 1) */
static u64 xp_ns(u64 bytes, u64 rate)
{
	u64 quo = mul_u64_u64_div_u64(bytes, 8 * XCPPACE_NS_PER_S, rate);
	u64 rem = bytes * (8 * XCPPACE_NS_PER_S) - quo * rate;	/* mod 2^64: the true remainder */

	return rem >= rate - rem ? quo + 1 : quo;
}

static u64 xp_gap(u32 len, u64 rate)
{
	return max_t(u64, 1, xp_ns(len, rate));
}

/* The eligibility of class c's bucket head skb. */
static u64 xp_eligible(const struct xp_class *c, const struct sk_buff *skb)
{
	u64 e = max_t(u64, xp_time(skb), c->floor);

	if (c->started)
		e = max_t(u64, e, c->last_e + xp_gap(c->last_len, c->rate));
	return e;
}

static u64 xp_interval(const struct xp_sched *q, u64 t)
{
	return div64_u64(t - q->opt.epoch_ns, q->opt.interval_ns);
}

static struct tc_xcppace_slot *xp_slot(struct xp_sched *q, u64 k)
{
	struct tc_xcppace_slot *s = &q->st.slot[k & (XCPPACE_SLOTS - 1)];

	if (s->interval != k) {
		memset(s, 0, sizeof(*s));
		s->interval = k;
		s->qmin_ns = U64_MAX;
	}
	return s;
}

static struct tc_xcppace_class_slot *xp_class_slot(struct xp_class *c, u64 k)
{
	struct tc_xcppace_class_slot *s = &c->st.slot[k & (XCPPACE_SLOTS - 1)];

	if (s->interval != k) {
		memset(s, 0, sizeof(*s));
		s->interval = k;
	}
	return s;
}

/* ---- the timeline --------------------------------------------------------------------------- */

static u64 xp_next_event(const struct xp_sched *q)
{
	u64 t = U64_MAX;
	u32 k;

	if (q->nrates)
		t = q->rates[0].at;
	if (q->pend.head)
		t = min(t, xp_time(q->pend.head));
	if (q->nelig)
		t = min(t, q->link_free);
	if (q->nbucket)
		for (k = 0; k < q->opt.nclasses; k++)
			t = min(t, q->cls[k].next_e);
	return t;
}

static void xp_apply_rate(struct xp_sched *q, const struct xp_pending_rate *r, u64 t)
{
	struct xp_class *c = &q->cls[r->cls];

	c->rate = r->rate;
	c->floor = t;
	if (c->bhead)
		c->next_e = xp_eligible(c, c->bhead);
	q->st.rate_changes++;
}

/* The arrival skb at its ready instant t: admission. */
static void xp_admit(struct xp_sched *q, struct sk_buff *skb, u64 t, bool *touched)
{
	struct xp_class *c = &q->cls[xp_cb(skb)->cls];
	u32 len = qdisc_pkt_len(skb);
	u64 w = 0;

	if (!c->rate) {
		q->st.unmodelled++;
		xp_push(&q->gone, skb);
		*touched = true;
		return;
	}
	c->st.arrivals++;
	q->st.arrivals++;
	if (c->started) {
		u64 next = c->last_e + xp_gap(c->last_len, c->rate);

		w = next > t ? next - t : 0;
	}
	w += xp_ns(c->bucket_bytes, c->rate);
	if (w > q->opt.max_wait_ns) {
		c->st.drops++;
		q->st.drops++;
		xp_push(&q->gone, skb);
		*touched = true;
		return;
	}
	xp_push(&c->q, skb);
	c->bytes += len;
	c->bucket_bytes += len;
	if (!c->bhead) {
		c->bhead = skb;
		c->next_e = xp_eligible(c, skb);
		q->nbucket++;
	}
}

/* Class c's bucket head becomes eligible at t. */
static void xp_bucket_release(struct xp_sched *q, struct xp_class *c, u64 t)
{
	struct sk_buff *skb = c->bhead;
	u32 len = qdisc_pkt_len(skb);

	xp_cb(skb)->e = t;
	c->last_e = t;
	c->last_len = len;
	c->started = true;
	c->nelig++;
	q->nelig++;
	c->bucket_bytes -= len;
	if (t >= q->opt.epoch_ns) {
		struct tc_xcppace_slot *s = xp_slot(q, xp_interval(q, t));
		/* the link backlog it finds: what is left of the frame on the link and the
		 * frames of the eligible packets ahead of it (its departure - t) */
		u64 backlog = max_t(u64, q->link_free, t) - t + q->elig_tau;

		s->offered_bytes += len;
		s->offered_packets++;
		if (backlog < s->qmin_ns)
			s->qmin_ns = backlog;
	}
	q->elig_tau += xp_tau(q, len);
	c->bhead = skb->next;
	if (c->bhead) {
		c->next_e = xp_eligible(c, c->bhead);
	} else {
		c->next_e = U64_MAX;
		q->nbucket--;
	}
}

/* The eligible packet with the earliest eligibility (ties: lower class) departs at t. */
static void xp_depart(struct xp_sched *q, u64 t, u64 now)
{
	struct xp_class *c = NULL;
	struct sk_buff *skb;
	u64 stamp;
	u32 k, len;

	for (k = 0; k < q->opt.nclasses; k++) {
		struct xp_class *x = &q->cls[k];

		if (x->nelig && (!c || xp_cb(x->q.head)->e < xp_cb(c->q.head)->e))
			c = x;
	}
	skb = xp_pop(&c->q);
	len = qdisc_pkt_len(skb);
	c->nelig--;
	q->nelig--;
	c->bytes -= len;
	q->link_free = t + xp_tau(q, len);
	q->elig_tau -= xp_tau(q, len);
	stamp = t + q->opt.prop_ns;
	c->st.released++;
	c->st.released_bytes += len;
	q->st.released++;
	q->st.released_bytes += len;
	if (t >= q->opt.epoch_ns) {
		u64 k2 = xp_interval(q, t);
		struct tc_xcppace_slot *s = xp_slot(q, k2);
		struct tc_xcppace_class_slot *cs = xp_class_slot(c, k2);

		s->bytes += len;
		s->packets++;
		cs->bytes += len;
		cs->packets++;
	} else {
		q->st.before_epoch++;
	}
	if (now > stamp)
		q->st.decided_after_stamp++;
	skb->tstamp = ns_to_ktime(stamp);
	xp_push(&q->ready, skb);
}

/* Decide every instant t <= now - M_p not decided yet, in order: at each, its rate
 * changes, arrivals, bucket releases and departures. *touched: a packet was decided
 * (ready or gone). */
static void xp_advance(struct xp_sched *q, u64 now, bool *touched)
{
	u64 horizon, t;
	u32 k;

	if (now < q->opt.lookahead_ns)
		return;
	horizon = now - q->opt.lookahead_ns;
	for (;;) {
		t = xp_next_event(q);
		if (t == U64_MAX || t > horizon)
			return;
		if (horizon - t > q->st.max_decision_lag_ns)
			q->st.max_decision_lag_ns = horizon - t;
		while (q->nrates && q->rates[0].at <= t) {
			xp_apply_rate(q, &q->rates[0], t);
			q->nrates--;
			memmove(q->rates, q->rates + 1, q->nrates * sizeof(q->rates[0]));
		}
		while (q->pend.head && xp_time(q->pend.head) <= t)
			xp_admit(q, xp_pop(&q->pend), t, touched);
		for (k = 0; q->nbucket && k < q->opt.nclasses; k++)
			if (q->cls[k].bhead && q->cls[k].next_e <= t)
				xp_bucket_release(q, &q->cls[k], t);
		while (q->nelig && q->link_free <= t) {
			xp_depart(q, t, now);
			*touched = true;
		}
		q->last = t;
	}
}

/* Arm the timer at the next event instant + M_p (after xp_advance, whose horizon it is
 * past). A timer armed earlier and no longer needed fires for nothing. */
static void xp_arm(struct xp_sched *q)
{
	u64 t = xp_next_event(q), want;

	if (t == U64_MAX)
		return;
	want = t + q->opt.lookahead_ns;
	if (q->timer_at == want)
		return;
	q->timer_at = want;
	hrtimer_start(&q->timer, ns_to_ktime(want), HRTIMER_MODE_ABS_SOFT);
}

/* Let the qdisc run its dequeue (release a packet, free a dropped one or arm its
 * watchdog), as qdisc_watchdog does. */
static void xp_kick(struct xp_sched *q)
{
	rcu_read_lock();
	if (!test_bit(__QDISC_STATE_DEACTIVATED, &qdisc_root_sleeping(q->sch)->state))
		__netif_schedule(qdisc_root(q->sch));
	rcu_read_unlock();
}

static enum hrtimer_restart xp_timer(struct hrtimer *timer)
{
	struct xp_sched *q = container_of(timer, struct xp_sched, timer);
	bool touched = false;

	spin_lock(&q->lock);		/* softirq context (HRTIMER_MODE_ABS_SOFT) */
	q->timer_at = 0;
	xp_advance(q, ktime_get_ns(), &touched);
	xp_arm(q);
	if (touched)
		xp_kick(q);
	spin_unlock(&q->lock);
	return HRTIMER_NORESTART;
}

/* ---- rate changes --------------------------------------------------------------------------- */

/* Check an array of rate changes (nla_len bytes at data) against the qdisc: 0 or -errno. */
static int xp_check_rates(const struct xp_sched *q, const struct nlattr *a, struct netlink_ext_ack *extack)
{
	const struct tc_xcppace_rate *r = nla_data(a);
	int n, i;

	if (nla_len(a) <= 0 || nla_len(a) % sizeof(*r)) {
		NL_SET_ERR_MSG_MOD(extack, "TCA_XCPPACE_RATES is not an array of struct tc_xcppace_rate");
		return -EINVAL;
	}
	n = nla_len(a) / sizeof(*r);
	for (i = 0; i < n; i++) {
		if (r[i].cls >= q->opt.nclasses || r[i].pad) {
			NL_SET_ERR_MSG_MOD(extack, "a rate change's class is not below nclasses (or its pad is not 0)");
			return -EINVAL;
		}
		if (r[i].rate_bps < 1 || r[i].rate_bps > XCPPACE_RATE_MAX) {
			NL_SET_ERR_MSG_MOD(extack, "a rate change's rate_bps must be 1..8e12 bit/s");
			return -EINVAL;
		}
	}
	if (q->nrates + n > XCPPACE_MAX_PENDING) {
		NL_SET_ERR_MSG_MOD(extack, "too many rate changes pending (XCPPACE_MAX_PENDING): none applied");
		return -ENOSPC;
	}
	return 0;
}

/* Queue checked rate changes on the timeline (late ones at the last decided instant). */
static void xp_add_rates(struct xp_sched *q, const struct nlattr *a, u64 now)
{
	const struct tc_xcppace_rate *r = nla_data(a);
	int n = nla_len(a) / sizeof(*r), i;
	u32 j;

	for (i = 0; i < n; i++) {
		struct xp_pending_rate p = { r[i].effective_ns, r[i].rate_bps, r[i].cls };

		if (p.at <= q->last) {
			u64 due = r[i].effective_ns + q->opt.lookahead_ns;

			q->st.late_rates++;
			if (now > due && now - due > q->st.max_rate_late_ns)
				q->st.max_rate_late_ns = now - due;
			p.at = q->last;
		}
		for (j = q->nrates; j > 0 && q->rates[j - 1].at > p.at; j--)
			;
		memmove(q->rates + j + 1, q->rates + j, (q->nrates - j) * sizeof(q->rates[0]));
		q->rates[j] = p;
		q->nrates++;
	}
}

/* ---- the qdisc ------------------------------------------------------------------------------ */

static int xp_enqueue(struct sk_buff *skb, struct Qdisc *sch, struct sk_buff **to_free)
{
	struct xp_sched *q = qdisc_priv(sch);
	const u32 *word = (const u32 *)qdisc_skb_cb(skb)->data;
	u32 decision = word[XCPPACE_CB_DECISION], cls = word[XCPPACE_CB_CLASS], b;
	u64 a, ready, now, late;
	bool touched = false;
	struct sk_buff *prev = NULL, *cur;
	struct xp_skb_cb *cb;

	if (unlikely(decision != XCPPACE_OPTSW_HOLD || cls >= q->opt.nclasses || !xp_mono(skb) || !skb->tstamp)) {
		spin_lock_bh(&q->lock);
		q->st.unmodelled++;
		spin_unlock_bh(&q->lock);
		return qdisc_drop(skb, sch, to_free);
	}
	if (unlikely(sch->q.qlen >= q->opt.limit)) {
		spin_lock_bh(&q->lock);
		q->st.overlimit++;
		spin_unlock_bh(&q->lock);
		return qdisc_drop(skb, sch, to_free);
	}
	/* The packet has left its sender (as obsburst and voq: TCP Small Queues must not
	 * count it while we hold it). */
	skb_orphan(skb);
	a = xp_time(skb);
	ready = a + xp_tau(q, qdisc_pkt_len(skb));
	cb = xp_cb(skb);		/* (overwrites the program's words, read above) */
	qdisc_qstats_backlog_inc(sch, skb);
	sch->q.qlen++;
	now = ktime_get_ns();

	spin_lock_bh(&q->lock);
	late = now > a ? now - a : 0;
	if (late > q->st.max_enqueue_late_ns)
		q->st.max_enqueue_late_ns = late;
	b = late > 1 ? fls64(late) - 1 : 0;
	q->st.late_log2[min_t(u32, b, XCPPACE_LATE_BUCKETS - 1)]++;
	cb->seq = q->seq++;
	cb->cls = cls;
	if (ready <= q->last) {
		/* its instant (or a later one) is decided: decide it at the last one */
		q->st.late++;
		ready = q->last;
	}
	skb->tstamp = ns_to_ktime(ready);
	/* sorted by (ready, seq): appended unless an earlier-ready packet comes late */
	if (!q->pend.tail || xp_time(q->pend.tail) <= ready) {
		xp_push(&q->pend, skb);
	} else {
		for (cur = q->pend.head; cur && xp_time(cur) <= ready; cur = cur->next)
			prev = cur;
		skb->next = cur;
		if (prev)
			prev->next = skb;
		else
			q->pend.head = skb;
		q->pend.qlen++;
	}
	xp_advance(q, now, &touched);
	xp_arm(q);
	spin_unlock_bh(&q->lock);	/* (the core runs our dequeue next) */
	return NET_XMIT_SUCCESS;
}

static struct sk_buff *xp_dequeue(struct Qdisc *sch)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct xp_fifo gone;
	struct sk_buff *skb = NULL, *g;
	u64 now = ktime_get_ns(), next = 0;
	bool touched = false;

	spin_lock_bh(&q->lock);
	xp_advance(q, now, &touched);
	xp_arm(q);
	gone = q->gone;
	memset(&q->gone, 0, sizeof(q->gone));
	if (q->ready.head) {
		if (xp_time(q->ready.head) <= now)
			skb = xp_pop(&q->ready);
		else
			next = xp_time(q->ready.head);
	}
	spin_unlock_bh(&q->lock);

	while ((g = xp_pop(&gone))) {
		qdisc_qstats_backlog_dec(sch, g);
		sch->q.qlen--;
		qdisc_qstats_drop(sch);
		kfree_skb(g);
	}
	if (skb) {
		qdisc_qstats_backlog_dec(sch, skb);
		sch->q.qlen--;
		qdisc_bstats_update(sch, skb);
		xp_set_delivery(skb, xp_time(skb));	/* the stamp: intended arrival at the next node */
		return skb;
	}
	if (next)
		qdisc_watchdog_schedule_ns(&q->watchdog, next);
	return NULL;
}

static void xp_free_all(struct xp_fifo *f)
{
	struct sk_buff *skb;

	while ((skb = xp_pop(f)))
		kfree_skb(skb);
}

/* Take every packet out of the qdisc into *out (classes emptied; the timeline, rates
 * and counters stay). Under q->lock. */
static void xp_purge(struct xp_sched *q, struct xp_fifo *out)
{
	struct sk_buff *skb;
	u32 k;

	for (k = 0; k < XCPPACE_MAX_CLASSES; k++) {
		struct xp_class *c = &q->cls[k];

		while ((skb = xp_pop(&c->q)))
			xp_push(out, skb);
		c->bhead = NULL;
		c->next_e = U64_MAX;
		c->bucket_bytes = c->bytes = 0;
		c->nelig = 0;
	}
	q->nbucket = q->nelig = 0;
	q->elig_tau = 0;
	while ((skb = xp_pop(&q->pend)))
		xp_push(out, skb);
	while ((skb = xp_pop(&q->ready)))
		xp_push(out, skb);
	while ((skb = xp_pop(&q->gone)))
		xp_push(out, skb);
}

static void xp_reset(struct Qdisc *sch)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct xp_fifo out = {};

	if (q->cls) {
		spin_lock_bh(&q->lock);
		xp_purge(q, &out);
		spin_unlock_bh(&q->lock);
	}
	xp_free_all(&out);
	sch->q.qlen = 0;
	sch->qstats.backlog = 0;
	qdisc_watchdog_cancel(&q->watchdog);
}

/* Split TCA_OPTIONS into its PARMS and RATES attributes: 0 or -EINVAL. */
static int xp_split(struct nlattr *opt, struct nlattr **parms, struct nlattr **rates,
		    struct netlink_ext_ack *extack)
{
	struct nlattr *a;
	int rem;

	*parms = *rates = NULL;
	if (!opt) {
		NL_SET_ERR_MSG_MOD(extack, "options (TCA_XCPPACE_PARMS) are required");
		return -EINVAL;
	}
	nla_for_each_nested(a, opt, rem) {
		if (nla_type(a) == TCA_XCPPACE_PARMS && !*parms) {
			*parms = a;
		} else if (nla_type(a) == TCA_XCPPACE_RATES && !*rates) {
			*rates = a;
		} else {
			NL_SET_ERR_MSG_MOD(extack, "options hold an unknown or repeated attribute");
			return -EINVAL;
		}
	}
	if (rem) {
		NL_SET_ERR_MSG_MOD(extack, "options are not a run of netlink attributes");
		return -EINVAL;
	}
	return 0;
}

static int xp_parse(const struct nlattr *a, struct tc_xcppace_qopt *o, struct netlink_ext_ack *extack)
{
	u32 k;

	if (nla_len(a) != sizeof(*o)) {
		NL_SET_ERR_MSG_MOD(extack, "TCA_XCPPACE_PARMS is not a struct tc_xcppace_qopt of this version");
		return -EINVAL;
	}
	memcpy(o, nla_data(a), sizeof(*o));
	if (o->version != XCPPACE_VERSION) {
		NL_SET_ERR_MSG_MOD(extack, "options version differs from the module's XCPPACE_VERSION");
		return -EINVAL;
	}
	if (o->nclasses < 1 || o->nclasses > XCPPACE_MAX_CLASSES) {
		NL_SET_ERR_MSG_MOD(extack, "nclasses must be 1..64");
		return -EINVAL;
	}
	if (o->limit < 1 || o->limit > XCPPACE_LIMIT_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "limit must be 1..10000000 packets");
		return -EINVAL;
	}
	if (o->flags) {
		NL_SET_ERR_MSG_MOD(extack, "unknown flags");
		return -EINVAL;
	}
	if (o->ps_per_byte < 1 || o->ps_per_byte > XCPPACE_PS_PER_BYTE_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "ps_per_byte must be 1..8e9 (1 kbit/s)");
		return -EINVAL;
	}
	if (o->prop_ns > XCPPACE_TIME_MAX || o->max_wait_ns > XCPPACE_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "prop_ns and max_wait_ns must be 0..3600e9 (1 h)");
		return -EINVAL;
	}
	if (o->lookahead_ns < 1 || o->lookahead_ns > XCPPACE_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "lookahead_ns must be 1..3600e9 (1 h)");
		return -EINVAL;
	}
	if (o->interval_ns < 1 || o->interval_ns > XCPPACE_TIME_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "interval_ns must be 1..3600e9 (1 h)");
		return -EINVAL;
	}
	for (k = 0; k < XCPPACE_MAX_CLASSES; k++) {
		if (o->rate_bps[k] > (k < o->nclasses ? XCPPACE_RATE_MAX : 0)) {
			NL_SET_ERR_MSG_MOD(extack, "rate_bps must be 0..8e12 bit/s per class, 0 from nclasses on");
			return -EINVAL;
		}
	}
	return 0;
}

static int xp_change(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct nlattr *parms, *rates;
	struct tc_xcppace_qopt o;
	bool touched = false;
	int err = xp_split(opt, &parms, &rates, extack);

	if (err)
		return err;
	if (parms) {
		err = xp_parse(parms, &o, extack);
		if (err)
			return err;
		if (memcmp(&o, &q->opt, sizeof(o))) {
			NL_SET_ERR_MSG_MOD(extack, "options cannot change (only rates, by TCA_XCPPACE_RATES): "
					   "delete the qdisc and add it again");
			return -EOPNOTSUPP;
		}
	}
	if (!rates)
		return 0;
	spin_lock_bh(&q->lock);
	err = xp_check_rates(q, rates, extack);
	if (!err) {
		u64 now = ktime_get_ns();

		xp_add_rates(q, rates, now);
		xp_advance(q, now, &touched);
		xp_arm(q);
		if (touched)
			xp_kick(q);
	}
	spin_unlock_bh(&q->lock);
	return err;
}

static int xp_init(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct nlattr *parms, *rates;
	u32 k;
	int err;

	q->sch = sch;
	spin_lock_init(&q->lock);
	qdisc_watchdog_init(&q->watchdog, sch);
	hrtimer_init(&q->timer, CLOCK_MONOTONIC, HRTIMER_MODE_ABS_SOFT);
	q->timer.function = xp_timer;
	err = xp_split(opt, &parms, &rates, extack);
	if (err)
		return err;
	if (!parms) {
		NL_SET_ERR_MSG_MOD(extack, "options (TCA_XCPPACE_PARMS) are required");
		return -EINVAL;
	}
	err = xp_parse(parms, &q->opt, extack);
	if (err)
		return err;
	q->cls = kvcalloc(XCPPACE_MAX_CLASSES, sizeof(*q->cls), GFP_KERNEL);
	q->rates = kvcalloc(XCPPACE_MAX_PENDING, sizeof(*q->rates), GFP_KERNEL);
	if (!q->cls || !q->rates)
		return -ENOMEM;		/* (destroy frees) */
	for (k = 0; k < XCPPACE_SLOTS; k++)
		q->st.slot[k].interval = U64_MAX;
	for (k = 0; k < XCPPACE_MAX_CLASSES; k++) {
		struct xp_class *c = &q->cls[k];
		u32 s;

		c->rate = q->opt.rate_bps[k];
		c->next_e = U64_MAX;
		for (s = 0; s < XCPPACE_SLOTS; s++)
			c->st.slot[s].interval = U64_MAX;
	}
	if (rates)
		return xp_change(sch, opt, extack);
	return 0;
}

static void xp_destroy(struct Qdisc *sch)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct xp_fifo out = {};

	qdisc_watchdog_cancel(&q->watchdog);
	hrtimer_cancel(&q->timer);
	if (q->cls) {
		spin_lock_bh(&q->lock);
		xp_purge(q, &out);
		spin_unlock_bh(&q->lock);
		xp_free_all(&out);
	}
	kvfree(q->cls);
	kvfree(q->rates);
	q->cls = NULL;
	q->rates = NULL;
}

static int xp_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct nlattr *nest = nla_nest_start_noflag(skb, TCA_OPTIONS);

	if (!nest || nla_put(skb, TCA_XCPPACE_PARMS, sizeof(q->opt), &q->opt))
		return -1;
	return nla_nest_end(skb, nest);
}

static int xp_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct tc_xcppace_xstats *st = &q->dump;
	u32 k;

	spin_lock_bh(&q->lock);
	*st = q->st;
	st->last_ns = q->last;
	st->link_free_ns = q->link_free;
	st->pending = q->pend.qlen;
	st->pending_rates = q->nrates;
	st->ready = q->ready.qlen;
	st->queued = 0;
	for (k = 0; k < q->opt.nclasses; k++)
		st->queued += q->cls[k].q.qlen;
	spin_unlock_bh(&q->lock);
	return gnet_stats_copy_app(d, st, sizeof(*st));
}

/* ---- classes: one per pacing class, minor = cls + 1, for their counters ----------------------- */

static unsigned long xp_find(struct Qdisc *sch, u32 classid)
{
	struct xp_sched *q = qdisc_priv(sch);
	u32 minor = TC_H_MIN(classid);

	return minor >= 1 && minor <= q->opt.nclasses ? minor : 0;
}

static struct Qdisc *xp_leaf(struct Qdisc *sch, unsigned long cl)
{
	return NULL;
}

static void xp_walk(struct Qdisc *sch, struct qdisc_walker *arg)
{
	struct xp_sched *q = qdisc_priv(sch);
	u32 k;

	if (arg->stop)
		return;
	for (k = 0; k < q->opt.nclasses; k++) {
		if (arg->count < arg->skip) {
			arg->count++;
			continue;
		}
		if (arg->fn(sch, k + 1, arg) < 0) {
			arg->stop = 1;
			break;
		}
		arg->count++;
	}
}

static int xp_dump_class(struct Qdisc *sch, unsigned long cl, struct sk_buff *skb, struct tcmsg *tcm)
{
	tcm->tcm_handle |= TC_H_MIN(cl);
	return 0;
}

static int xp_dump_class_stats(struct Qdisc *sch, unsigned long cl, struct gnet_dump *d)
{
	struct xp_sched *q = qdisc_priv(sch);
	struct tc_xcppace_class_xstats st;
	struct xp_class *c;

	if (cl < 1 || cl > q->opt.nclasses)
		return -1;
	c = &q->cls[cl - 1];
	spin_lock_bh(&q->lock);
	st = c->st;
	st.rate_bps = c->rate;
	st.queued_bytes = c->bytes;
	st.queued_packets = c->q.qlen;
	st.eligible_packets = c->nelig;
	st.next_eligible_ns = c->next_e;
	spin_unlock_bh(&q->lock);
	return gnet_stats_copy_app(d, &st, sizeof(st));
}

static const struct Qdisc_class_ops xp_class_ops = {
	.find		= xp_find,
	.leaf		= xp_leaf,
	.walk		= xp_walk,
	.dump		= xp_dump_class,
	.dump_stats	= xp_dump_class_stats,
};

static struct Qdisc_ops xp_qdisc_ops __read_mostly = {
	.cl_ops		= &xp_class_ops,
	.id		= "xcppace",
	.priv_size	= sizeof(struct xp_sched),
	.enqueue	= xp_enqueue,
	.dequeue	= xp_dequeue,
	.peek		= qdisc_peek_dequeued,
	.init		= xp_init,
	.reset		= xp_reset,
	.destroy	= xp_destroy,
	.change		= xp_change,
	.dump		= xp_dump,
	.dump_stats	= xp_dump_stats,
	.owner		= THIS_MODULE,
};

static int __init xp_module_init(void)
{
	BUILD_BUG_ON(sizeof(struct tc_xcppace_qopt) != 16 + 6 * 8 + XCPPACE_MAX_CLASSES * 8);
	BUILD_BUG_ON(sizeof(struct tc_xcppace_rate) != 24);
	BUILD_BUG_ON(sizeof(struct tc_xcppace_slot) != 6 * 8);
	BUILD_BUG_ON(sizeof(struct tc_xcppace_class_slot) != 3 * 8);
	BUILD_BUG_ON(sizeof(struct tc_xcppace_xstats) != (20 + XCPPACE_LATE_BUCKETS) * 8 + XCPPACE_SLOTS * 6 * 8);
	BUILD_BUG_ON(sizeof(struct tc_xcppace_class_xstats) != 9 * 8 + XCPPACE_SLOTS * 3 * 8);
	BUILD_BUG_ON(XCPPACE_SLOTS & (XCPPACE_SLOTS - 1));
	return register_qdisc(&xp_qdisc_ops);
}

static void __exit xp_module_exit(void)
{
	unregister_qdisc(&xp_qdisc_ops);
}

module_init(xp_module_init);
module_exit(xp_module_exit);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("XCP edge pacer: a leaky bucket per macroflow class at timed rates, serialised on the "
		   "edge link, decided on the intended timeline with a lookahead margin");
