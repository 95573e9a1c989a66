// SPDX-License-Identifier: GPL-2.0
/*
 * sch_hostnic: the sending host's NIC queue on the emulated optical fabric.
 *
 * The host's optswitch egress program stamps each packet with its departure from the
 * NIC (skb->tstamp, CLOCK_MONOTONIC ns: serialisation at the link rate, FIFO; the
 * testbed's port architecture "nic", docs/optical-switch.md). This qdisc releases the
 * packets in stamp order at their stamped times, and orphans each packet at enqueue
 * (skb_orphan(): the packet no longer belongs to its socket): for the sending TCP the
 * packet has left when its NIC takes it, as in the papers' model.
 *
 * Why this and not fq (which releases stamped packets just as well): across a veth
 * pair a packet keeps its socket reference into the next namespace
 * (skb_scrub_packet() has not orphaned since Linux 4.19), so TCP Small Queues count
 * it against its sender for as long as the emulated fabric holds it, until the
 * receiver's IP layer orphans it. TSQ allows a socket about max(2 packets, pacing
 * rate x 1 ms) below TCP, and that 1 ms is a kernel constant acting in emulation
 * time (1 ms / D of paper time): a sender whose kernel computes a pacing rate is held
 * to a few packets in the whole emulated path (about four, inferred from goodput), whatever its cwnd. Measured in E1
 * (k = 4 fat-tree, electronic switches, lone 5 MB flows across the core, D = 10000,
 * fq on the hosts): SACK 4.2 Gb/s with cwnd stuck at 12..19 and no loss, mSACK (whose
 * module leaves the pacing rate unset) 8.9 Gb/s with cwnd 250..290. The papers'
 * senders have no such limit. docs/environment.md has the details.
 *
 * Why a full orphan (netem and our obsburst keep a reference, skb_orphan_partial()):
 * while a sent packet still belongs to its socket, TCP treats it as still in the host
 * queue (skb_still_in_host_queue()) and skips a retransmission due then, counting
 * TCPSpuriousRtxHostQueues. In the emulated network that is any packet still in some
 * switch buffer when its RTO fires; the papers' TCP retransmits it (SAW's spurious
 * retransmissions of buffered packets are one of E1's findings). Nothing downstream
 * needs the socket: the fabric's programs never read skb->sk, and fq hashes orphaned
 * packets by their headers.
 *
 * Rule: enqueue keeps the queue in skb->tstamp order (a packet stamped earlier than
 * the tail is inserted before the later ones and counted in out_of_order: the NIC
 * program stamps in order, so this should stay 0); dequeue releases the head when
 * its time has come (a stamp of 0 or in the past: at once), else arms the watchdog
 * for it without slack. A stamp more than HOSTNIC_HORIZON_NS (1 h) ahead is capped to
 * it and counted (horizon_capped), as the fabric's fq does (horizon_cap). No pacing,
 * no per-flow queues, no drop below the limit.
 *
 * Configuration: TCA_OPTIONS = struct tc_hostnic_qopt (optional; versioned, bounds
 * checked, errors through extack). Counters: TCA_STATS_APP = struct
 * tc_hostnic_xstats (kernel/hostnic.h).
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/skbuff.h>
#include <net/netlink.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#include <net/sock.h>
#include <net/tcp.h>
#include "hostnic.h"

struct hostnic_sched {
	struct tc_hostnic_qopt opt;
	struct tc_hostnic_xstats st;
	struct qdisc_watchdog watchdog;
};

static u64 hostnic_time(const struct sk_buff *skb)
{
	return (u64)ktime_to_ns(skb->tstamp);
}

/* insert skb into sch->q after the last packet stamped at or before it (FIFO among
 * equal stamps); the queue is a singly linked list, so walk from its head */
static void hostnic_insert_sorted(struct Qdisc *sch, struct sk_buff *skb)
{
	struct qdisc_skb_head *qh = &sch->q;
	u64 t = hostnic_time(skb);
	struct sk_buff *prev = NULL, *cur = qh->head;

	while (cur && hostnic_time(cur) <= t) {
		prev = cur;
		cur = cur->next;
	}
	skb->next = cur;
	if (prev)
		prev->next = skb;
	else
		qh->head = skb;
	if (!cur)
		qh->tail = skb;
	qh->qlen++;
}

static int hostnic_enqueue(struct sk_buff *skb, struct Qdisc *sch, struct sk_buff **to_free)
{
	struct hostnic_sched *q = qdisc_priv(sch);
	u64 now;

	if (unlikely(sch->q.qlen >= q->opt.limit)) {
		q->st.drops++;
		return qdisc_drop(skb, sch, to_free);
	}
	if (skb->sk)
		q->st.orphaned++;
	skb_orphan(skb);
	now = ktime_get_ns();
	if (unlikely(hostnic_time(skb) > now + HOSTNIC_HORIZON_NS)) {
		q->st.horizon_capped++;
		skb->tstamp = ns_to_ktime(now + HOSTNIC_HORIZON_NS);
	}
	if (!sch->q.tail || hostnic_time(sch->q.tail) <= hostnic_time(skb)) {
		__qdisc_enqueue_tail(skb, &sch->q);
	} else {
		q->st.out_of_order++;
		hostnic_insert_sorted(sch, skb);
	}
	qdisc_qstats_backlog_inc(sch, skb);
	if (sch->q.qlen > q->st.max_qlen)
		q->st.max_qlen = sch->q.qlen;
	return NET_XMIT_SUCCESS;
}

static struct sk_buff *hostnic_dequeue(struct Qdisc *sch)
{
	struct hostnic_sched *q = qdisc_priv(sch);
	struct sk_buff *skb = sch->q.head;
	u64 t;

	if (!skb)
		return NULL;
	t = hostnic_time(skb);
	if (t > ktime_get_ns()) {
		qdisc_watchdog_schedule_ns(&q->watchdog, t);
		return NULL;
	}
	skb = __qdisc_dequeue_head(&sch->q);
	qdisc_qstats_backlog_dec(sch, skb);
	qdisc_bstats_update(sch, skb);
	return skb;
}

static void hostnic_reset(struct Qdisc *sch)
{
	struct hostnic_sched *q = qdisc_priv(sch);

	__qdisc_reset_queue(&sch->q);
	sch->qstats.backlog = 0;
	qdisc_watchdog_cancel(&q->watchdog);
}

static int hostnic_change(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct hostnic_sched *q = qdisc_priv(sch);
	struct tc_hostnic_qopt o;

	if (!opt) {
		o.version = HOSTNIC_VERSION;
		o.limit = HOSTNIC_LIMIT_DEFAULT;
	} else if (nla_len(opt) != sizeof(o)) {
		NL_SET_ERR_MSG_MOD(extack, "options are not a struct tc_hostnic_qopt of this version");
		return -EINVAL;
	} else {
		memcpy(&o, nla_data(opt), sizeof(o));
	}
	if (o.version != HOSTNIC_VERSION) {
		NL_SET_ERR_MSG_MOD(extack, "options version differs from the module's HOSTNIC_VERSION");
		return -EINVAL;
	}
	if (o.limit < 1 || o.limit > HOSTNIC_LIMIT_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "limit must be 1..10000000 packets");
		return -EINVAL;
	}
	sch_tree_lock(sch);
	if (sch->q.qlen > o.limit) {
		sch_tree_unlock(sch);
		NL_SET_ERR_MSG_MOD(extack, "limit is below the packets held now");
		return -EBUSY;
	}
	q->opt = o;
	sch_tree_unlock(sch);
	return 0;
}

static int hostnic_init(struct Qdisc *sch, struct nlattr *opt, struct netlink_ext_ack *extack)
{
	struct hostnic_sched *q = qdisc_priv(sch);

	qdisc_watchdog_init(&q->watchdog, sch);
	q->opt.version = HOSTNIC_VERSION;
	q->opt.limit = 1;	/* until change() succeeds (its failure destroys the qdisc) */
	return hostnic_change(sch, opt, extack);
}

static void hostnic_destroy(struct Qdisc *sch)
{
	hostnic_reset(sch);
}

static int hostnic_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct hostnic_sched *q = qdisc_priv(sch);

	if (nla_put(skb, TCA_OPTIONS, sizeof(q->opt), &q->opt))
		return -1;
	return skb->len;
}

static int hostnic_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct hostnic_sched *q = qdisc_priv(sch);
	struct tc_hostnic_xstats st;

	sch_tree_lock(sch);
	st = q->st;
	sch_tree_unlock(sch);
	return gnet_stats_copy_app(d, &st, sizeof(st));
}

static struct Qdisc_ops hostnic_qdisc_ops __read_mostly = {
	.id		= "hostnic",
	.priv_size	= sizeof(struct hostnic_sched),
	.enqueue	= hostnic_enqueue,
	.dequeue	= hostnic_dequeue,
	.peek		= qdisc_peek_dequeued,
	.init		= hostnic_init,
	.reset		= hostnic_reset,
	.destroy	= hostnic_destroy,
	.change		= hostnic_change,
	.dump		= hostnic_dump,
	.dump_stats	= hostnic_dump_stats,
	.owner		= THIS_MODULE,
};

static int __init hostnic_module_init(void)
{
	BUILD_BUG_ON(sizeof(struct tc_hostnic_qopt) != 8);
	BUILD_BUG_ON(sizeof(struct tc_hostnic_xstats) != 40);
	return register_qdisc(&hostnic_qdisc_ops);
}

static void __exit hostnic_module_exit(void)
{
	unregister_qdisc(&hostnic_qdisc_ops);
}

module_init(hostnic_module_init);
module_exit(hostnic_module_exit);

MODULE_AUTHOR("optical-tcp-testbed");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Host NIC queue of the emulated fabric: releases packets at their stamped departure "
		   "(skb->tstamp, in stamp order) and completes their transmission for the socket at enqueue");
