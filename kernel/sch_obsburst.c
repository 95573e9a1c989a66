// SPDX-License-Identifier: GPL-2.0
/*
 * sch_obsburst: an exact optical-burst assembler (ingress edge node of an OBS network).
 *
 * Paper: M. Casoni, C. Raffaelli, "TCP Performance in Hybrid Multigranular OBS
 * Networks", section II (edge node: hybrid time-volume assembly, mixed flows per
 * class, a control packet preceding each burst by the offset time); spec
 * ../shared/spec/e2-obs-multigranular.md, "Edge node".
 *
 * Rule, per class (classes are independent):
 *  - a burst opens with its first packet (time t0 = that packet's enqueue time);
 *  - it closes at t0 + Tmax (a packet enqueued at t0 + Tmax or later is not in it:
 *    it opens the next burst), or when its byte count reaches Lmax, whichever first;
 *    the packet that makes it reach Lmax is in it (a packet of Lmax bytes or more
 *    is a burst on its own);
 *  - at close a control packet (struct obsb_ctrl_hdr, kernel/obsburst.h) is queued to
 *    leave at the close time;
 *  - the burst's packets leave back to back at the class's optical rate R: packet k
 *    (0-based) at start + floor(8e9 * (bytes of packets 0..k-1) / R) ns, where start
 *    = max(close + offset, end of the class's previous burst) (the class's optical
 *    channel carries one burst at a time; the end of a burst is start + floor(8e9 *
 *    bytes / R)). The control packet carries start - close as its offset.
 * Times are CLOCK_MONOTONIC ns (the emulation's clock; paper times x D). A close by
 * Tmax is dated t0 + Tmax even when it is processed later (the qdisc watchdog's
 * hrtimer or the next enqueue/dequeue), so release times do not depend on timer
 * lateness; only the actual dequeue can be late.
 *
 * Bytes are qdisc_pkt_len() (the frame from the Ethernet header, no FCS): turn GSO
 * off on the device, or a GSO super-packet counts as one packet.
 *
 * Configuration: TCA_OPTIONS = struct tc_obsburst_qopt (versioned, bounds checked,
 * errors reported through extack). Counters: TCA_STATS_APP = struct
 * tc_obsburst_xstats. Options can be changed only while nothing is held.
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/skbuff.h>
#include <linux/etherdevice.h>
#include <linux/math64.h>
#include <net/netlink.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#include <net/sock.h>
#include "obsburst.h"

struct obsb_skb_cb {
	u64 time_ns;		/* release time */
};

static struct obsb_skb_cb *obsb_cb(struct sk_buff *skb)
{
	qdisc_cb_private_validate(skb, sizeof(struct obsb_skb_cb));
	return (struct obsb_skb_cb *)qdisc_skb_cb(skb)->data;
}

struct obsb_class {
	struct qdisc_skb_head open;	/* the open burst (empty: none) */
	u64 open_t0;			/* its opening time */
	u64 open_bytes;
	u64 open_id;
	struct qdisc_skb_head closed;	/* closed bursts' packets, release times ascending */
	u64 channel_free;		/* end of the last closed burst on the optical channel */
};

struct obsb_sched {
	struct tc_obsburst_qopt opt;
	struct obsb_class cls[OBSB_MAX_CLASSES];
	struct qdisc_skb_head ctrl;	/* control packets, release times ascending */
	u64 next_id;
	struct tc_obsburst_xstats st;
	struct qdisc_watchdog watchdog;
};

static u32 obsb_classify(const struct obsb_sched *q, const struct sk_buff *skb)
{
	u32 c = q->opt.class_by == OBSB_CLASS_BY_MARK ? skb->mark : TC_H_MIN(skb->priority);

	return c < q->opt.nclasses ? c : q->opt.default_class;
}

/* serialisation time of `bytes` at `rate` bit/s, ns, rounded down */
static u64 obsb_ser_ns(u64 bytes, u64 rate)
{
	return mul_u64_u64_div_u64(bytes * 8, NSEC_PER_SEC, rate);
}

static void obsb_queue_ctrl(struct Qdisc *sch, struct obsb_sched *q, u32 c,
			    u64 close, u64 offset, u32 packets, u64 bytes, u64 id, bool volume)
{
	struct net_device *dev = qdisc_dev(sch);
	struct obsb_ctrl_hdr *h;
	struct sk_buff *skb;
	int hlen = LL_RESERVED_SPACE(dev);

	skb = alloc_skb(hlen + sizeof(*h) + dev->needed_tailroom, GFP_ATOMIC);
	if (!skb) {
		q->st.ctrl_failed++;
		return;
	}
	skb_reserve(skb, hlen);
	skb_reset_network_header(skb);
	h = skb_put_zero(skb, sizeof(*h));
	h->magic = cpu_to_be32(OBSB_CTRL_MAGIC);
	h->version = OBSB_VERSION;
	h->cls = c;
	h->flags = cpu_to_be16(volume ? OBSB_CTRL_F_VOLUME : 0);
	h->burst_id = cpu_to_be64(id);
	h->bytes = cpu_to_be64(bytes);
	h->packets = cpu_to_be32(packets);
	h->offset_ns = cpu_to_be64(offset);
	h->close_ns = cpu_to_be64(close);
	skb->dev = dev;
	skb->protocol = htons(OBSB_ETH_P);
	if (dev_hard_header(skb, dev, OBSB_ETH_P, dev->broadcast, dev->dev_addr, skb->len) < 0) {
		kfree_skb(skb);
		q->st.ctrl_failed++;
		return;
	}
	qdisc_skb_cb(skb)->pkt_len = skb->len;	/* not through __dev_queue_xmit */
	obsb_cb(skb)->time_ns = close;
	__qdisc_enqueue_tail(skb, &q->ctrl);
	qdisc_qstats_backlog_inc(sch, skb);
	sch->q.qlen++;
}

/* close class c's open burst at time `close` */
static void obsb_close(struct Qdisc *sch, struct obsb_sched *q, u32 c, u64 close, bool volume)
{
	const struct tc_obsburst_class *p = &q->opt.cls[c];
	struct obsb_class *cl = &q->cls[c];
	struct tc_obsburst_class_stats *s = &q->st.cls[c];
	struct sk_buff *skb;
	u64 start = close + p->offset_ns, cum = 0;

	if (start < cl->channel_free)
		start = cl->channel_free;
	for (skb = cl->open.head; skb; skb = skb->next) {
		obsb_cb(skb)->time_ns = start + obsb_ser_ns(cum, p->rate_bps);
		cum += qdisc_pkt_len(skb);
	}
	cl->channel_free = start + obsb_ser_ns(cum, p->rate_bps);
	if (q->opt.flags & OBSB_F_CTRL)
		obsb_queue_ctrl(sch, q, c, close, start - close, cl->open.qlen, cum, cl->open_id, volume);
	/* splice the burst behind the class's closed packets */
	if (cl->closed.tail)
		cl->closed.tail->next = cl->open.head;
	else
		cl->closed.head = cl->open.head;
	cl->closed.tail = cl->open.tail;
	cl->closed.qlen += cl->open.qlen;
	cl->open.head = cl->open.tail = NULL;
	cl->open.qlen = 0;
	cl->open_bytes = 0;
	s->bursts++;
	if (volume)
		s->closed_volume++;
	else
		s->closed_time++;
}

/* close, in deadline order, every open burst whose Tmax has passed at `now` */
static void obsb_close_due(struct Qdisc *sch, struct obsb_sched *q, u64 now)
{
	for (;;) {
		u32 c, best = OBSB_MAX_CLASSES;
		u64 best_t = U64_MAX;

		for (c = 0; c < q->opt.nclasses; c++) {
			u64 dl;

			if (!q->cls[c].open.qlen)
				continue;
			dl = q->cls[c].open_t0 + q->opt.cls[c].tmax_ns;
			if (dl <= now && dl < best_t) {
				best_t = dl;
				best = c;
			}
		}
		if (best == OBSB_MAX_CLASSES)
			return;
		obsb_close(sch, q, best, best_t, false);
	}
}

static int obsb_enqueue(struct sk_buff *skb, struct Qdisc *sch, struct sk_buff **to_free)
{
	struct obsb_sched *q = qdisc_priv(sch);
	u64 now = ktime_get_ns();
	struct obsb_class *cl;
	u32 c;

	if (unlikely(sch->q.qlen >= q->opt.limit)) {
		q->st.drops++;
		return qdisc_drop(skb, sch, to_free);
	}
	/*
	 * The packet left its sender's NIC: it no longer belongs to the sending socket.
	 * Across veth pairs the socket reference survives the namespace change
	 * (skb_scrub_packet no longer orphans), so otherwise TCP Small Queues would count
	 * it for as long as the burst holds it (Tmax + offset, dilated) and hold a sender
	 * to a few packets per burst, and a retransmission due while it is held would be
	 * skipped as "still in the host queue". A full orphan: netem's partial one keeps
	 * the socket, which still counts for the latter. (On the fabric the hosts' hostnic
	 * qdisc has orphaned it already.)
	 */
	skb_orphan(skb);
	obsb_close_due(sch, q, now);
	c = obsb_classify(q, skb);
	cl = &q->cls[c];
	if (!cl->open.qlen) {
		cl->open_t0 = now;
		cl->open_id = ++q->next_id;
	}
	obsb_cb(skb)->time_ns = U64_MAX;
	__qdisc_enqueue_tail(skb, &cl->open);
	cl->open_bytes += qdisc_pkt_len(skb);
	qdisc_qstats_backlog_inc(sch, skb);
	sch->q.qlen++;
	if (cl->open_bytes >= q->opt.cls[c].lmax_bytes)
		obsb_close(sch, q, c, now, true);
	return NET_XMIT_SUCCESS;
}

static struct sk_buff *obsb_dequeue(struct Qdisc *sch)
{
	struct obsb_sched *q = qdisc_priv(sch);
	struct qdisc_skb_head *from = NULL;
	u64 now = ktime_get_ns(), best_t = U64_MAX, next;
	struct sk_buff *skb;
	int c, best_c = -1;

	obsb_close_due(sch, q, now);
	if (q->ctrl.head) {
		from = &q->ctrl;
		best_t = obsb_cb(q->ctrl.head)->time_ns;
	}
	for (c = 0; c < q->opt.nclasses; c++) {
		skb = q->cls[c].closed.head;
		if (skb && obsb_cb(skb)->time_ns < best_t) {
			best_t = obsb_cb(skb)->time_ns;
			from = &q->cls[c].closed;
			best_c = c;
		}
	}
	if (from && best_t <= now) {
		skb = __qdisc_dequeue_head(from);
		qdisc_qstats_backlog_dec(sch, skb);
		sch->q.qlen--;
		qdisc_bstats_update(sch, skb);
		if (best_c < 0) {
			q->st.ctrl_packets++;
		} else {
			q->st.cls[best_c].packets++;
			q->st.cls[best_c].bytes += qdisc_pkt_len(skb);
		}
		return skb;
	}
	/* nothing due: wake up at the next release or Tmax deadline */
	next = best_t;
	for (c = 0; c < q->opt.nclasses; c++)
		if (q->cls[c].open.qlen)
			next = min(next, q->cls[c].open_t0 + q->opt.cls[c].tmax_ns);
	if (next != U64_MAX)
		qdisc_watchdog_schedule_ns(&q->watchdog, next);
	return NULL;
}

static void obsb_purge(struct Qdisc *sch)
{
	struct obsb_sched *q = qdisc_priv(sch);
	int c;

	for (c = 0; c < OBSB_MAX_CLASSES; c++) {
		__qdisc_reset_queue(&q->cls[c].open);
		__qdisc_reset_queue(&q->cls[c].closed);
		q->cls[c].open_bytes = 0;
		q->cls[c].channel_free = 0;
	}
	__qdisc_reset_queue(&q->ctrl);
	sch->q.qlen = 0;
	sch->qstats.backlog = 0;
}

static void obsb_reset(struct Qdisc *sch)
{
	struct obsb_sched *q = qdisc_priv(sch);

	obsb_purge(sch);
	qdisc_watchdog_cancel(&q->watchdog);
}

static int obsb_check(const struct tc_obsburst_qopt *o, struct netlink_ext_ack *extack)
{
	u32 c;

	if (o->version != OBSB_VERSION) {
		NL_SET_ERR_MSG_MOD(extack, "options version differs from the module's OBSB_VERSION");
		return -EINVAL;
	}
	if (o->nclasses < 1 || o->nclasses > OBSB_MAX_CLASSES) {
		NL_SET_ERR_MSG_MOD(extack, "nclasses must be 1..OBSB_MAX_CLASSES (4)");
		return -EINVAL;
	}
	if (o->class_by != OBSB_CLASS_BY_PRIORITY && o->class_by != OBSB_CLASS_BY_MARK) {
		NL_SET_ERR_MSG_MOD(extack, "class_by must be 0 (skb->priority minor) or 1 (skb->mark)");
		return -EINVAL;
	}
	if (o->default_class >= o->nclasses) {
		NL_SET_ERR_MSG_MOD(extack, "default_class must be below nclasses");
		return -EINVAL;
	}
	if (o->limit < 1 || o->limit > OBSB_LIMIT_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "limit must be 1..10000000 packets");
		return -EINVAL;
	}
	if (o->flags & ~OBSB_F_CTRL) {
		NL_SET_ERR_MSG_MOD(extack, "unknown flags");
		return -EINVAL;
	}
	for (c = 0; c < o->nclasses; c++) {
		const struct tc_obsburst_class *p = &o->cls[c];

		if (p->tmax_ns < 1 || p->tmax_ns > OBSB_TMAX_MAX_NS) {
			NL_SET_ERR_MSG_MOD(extack, "tmax_ns must be 1..3600e9 (1 h)");
			return -EINVAL;
		}
		if (p->lmax_bytes < 1 || p->lmax_bytes > OBSB_LMAX_MAX) {
			NL_SET_ERR_MSG_MOD(extack, "lmax_bytes must be 1..1e9");
			return -EINVAL;
		}
		if (p->offset_ns > OBSB_OFFSET_MAX_NS) {
			NL_SET_ERR_MSG_MOD(extack, "offset_ns must be 0..3600e9 (1 h)");
			return -EINVAL;
		}
		if (p->rate_bps < OBSB_RATE_MIN || p->rate_bps > OBSB_RATE_MAX) {
			NL_SET_ERR_MSG_MOD(extack, "rate_bps must be 1e3..1e13 bit/s");
			return -EINVAL;
		}
	}
	for (; c < OBSB_MAX_CLASSES; c++) {
		const struct tc_obsburst_class *p = &o->cls[c];

		if (p->tmax_ns || p->lmax_bytes || p->offset_ns || p->rate_bps) {
			NL_SET_ERR_MSG_MOD(extack, "classes at and above nclasses must be all zero");
			return -EINVAL;
		}
	}
	return 0;
}

static int obsb_change(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct obsb_sched *q = qdisc_priv(sch);
	struct tc_obsburst_qopt o;
	int err;

	if (!opt) {
		NL_SET_ERR_MSG_MOD(extack, "options (struct tc_obsburst_qopt) are required");
		return -EINVAL;
	}
	if (nla_len(opt) != sizeof(o)) {
		NL_SET_ERR_MSG_MOD(extack, "options are not a struct tc_obsburst_qopt of this version");
		return -EINVAL;
	}
	memcpy(&o, nla_data(opt), sizeof(o));
	err = obsb_check(&o, extack);
	if (err)
		return err;
	sch_tree_lock(sch);
	if (sch->q.qlen) {
		sch_tree_unlock(sch);
		NL_SET_ERR_MSG_MOD(extack, "options can change only while no packet is held");
		return -EBUSY;
	}
	q->opt = o;
	sch_tree_unlock(sch);
	return 0;
}

static int obsb_init(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct obsb_sched *q = qdisc_priv(sch);

	qdisc_watchdog_init(&q->watchdog, sch);
	/* a safe configuration until change() succeeds (its failure destroys the qdisc) */
	q->opt.nclasses = 1;
	q->opt.limit = 1;
	q->opt.cls[0].tmax_ns = 1;
	q->opt.cls[0].lmax_bytes = 1;
	q->opt.cls[0].rate_bps = OBSB_RATE_MAX;
	return obsb_change(sch, opt, extack);
}

static void obsb_destroy(struct Qdisc *sch)
{
	struct obsb_sched *q = qdisc_priv(sch);

	qdisc_watchdog_cancel(&q->watchdog);
	obsb_purge(sch);
}

static int obsb_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct obsb_sched *q = qdisc_priv(sch);

	if (nla_put(skb, TCA_OPTIONS, sizeof(q->opt), &q->opt))
		return -1;
	return skb->len;
}

static int obsb_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct obsb_sched *q = qdisc_priv(sch);
	struct tc_obsburst_xstats st;

	sch_tree_lock(sch);
	st = q->st;
	sch_tree_unlock(sch);
	return gnet_stats_copy_app(d, &st, sizeof(st));
}

static struct Qdisc_ops obsb_qdisc_ops __read_mostly = {
	.id		= "obsburst",
	.priv_size	= sizeof(struct obsb_sched),
	.enqueue	= obsb_enqueue,
	.dequeue	= obsb_dequeue,
	.peek		= qdisc_peek_dequeued,
	.init		= obsb_init,
	.reset		= obsb_reset,
	.destroy	= obsb_destroy,
	.change		= obsb_change,
	.dump		= obsb_dump,
	.dump_stats	= obsb_dump_stats,
	.owner		= THIS_MODULE,
};

static int __init obsb_module_init(void)
{
	BUILD_BUG_ON(sizeof(struct obsb_ctrl_hdr) != 48);
	BUILD_BUG_ON(sizeof(struct tc_obsburst_qopt) != 24 + 32 * OBSB_MAX_CLASSES);
	return register_qdisc(&obsb_qdisc_ops);
}

static void __exit obsb_module_exit(void)
{
	unregister_qdisc(&obsb_qdisc_ops);
}

module_init(obsb_module_init);
module_exit(obsb_module_exit);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Optical burst assembler: per-class hybrid time-volume (Tmax, Lmax) bursts, "
		   "control packet at close, release after the offset at the optical rate");
