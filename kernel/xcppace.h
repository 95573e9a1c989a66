/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * sch_xcppace: the interface shared by the kernel module (kernel/sch_xcppace.c) and user
 * space (testbed/optical/xcppace.py packs and unpacks these; the algorithm's Python
 * mirror is testbed/optical/xcppacer.py; design in docs/xcp-edge.md, "(a) The edge pacer").
 *
 *  - TCA_OPTIONS is a nest of
 *      TCA_XCPPACE_PARMS   struct tc_xcppace_qopt (required at creation; at a change,
 *                          optional and must equal the qdisc's: nothing else may change)
 *      TCA_XCPPACE_RATES   an array of struct tc_xcppace_rate: timed rate changes
 *  - struct tc_xcppace_xstats        TCA_STATS_APP of the qdisc dump
 *  - struct tc_xcppace_class_xstats  TCA_STATS_APP of class (cls + 1) in a class dump
 *    (RTM_GETTCLASS; classid = qdisc handle major : cls + 1)
 *
 * Host byte order. Every struct is made of naturally aligned fixed-size members (no
 * padding); a change of any layout bumps XCPPACE_VERSION (the module refuses others).
 */
#ifndef XCPPACE_H
#define XCPPACE_H

#include <linux/types.h>

#define XCPPACE_VERSION		1
#define XCPPACE_MAX_CLASSES	64	/* the per-class ring of one class dump stays small */
#define XCPPACE_SLOTS		4	/* per-interval ring: slot = interval & 3 */
#define XCPPACE_LATE_BUCKETS	48	/* enqueue-lateness histogram: bucket k = [2^k, 2^(k+1)) ns */
#define XCPPACE_MAX_PENDING	1024	/* timed rate changes waiting for their instant */

/* What the optical switch's egress program leaves in skb->cb (qdisc_skb_cb->data as u32
 * words) for a packet this qdisc paces: cb[0] = OPTSW_HOLD, cb[2] = its class. */
#define XCPPACE_CB_DECISION	0
#define XCPPACE_CB_CLASS	2
#define XCPPACE_OPTSW_HOLD	4	/* OPTSW_HOLD (ebpf/optswitch.h) */

/* bounds (checked by the module; inclusive) */
#define XCPPACE_LIMIT_MAX	10000000U		/* packets held by one qdisc */
#define XCPPACE_TIME_MAX	3600000000000ULL	/* lookahead, propagation, max_wait, interval: 1 h */
#define XCPPACE_PS_PER_BYTE_MAX	8000000000ULL		/* 1 kbit/s */
#define XCPPACE_RATE_MAX	8000000000000ULL	/* 8 Tbit/s (emulation bit/s) */
#define XCPPACE_NS_PER_S	1000000000ULL

enum {
	TCA_XCPPACE_UNSPEC,
	TCA_XCPPACE_PARMS,	/* struct tc_xcppace_qopt */
	TCA_XCPPACE_RATES,	/* struct tc_xcppace_rate[] */
	__TCA_XCPPACE_MAX,
};

struct tc_xcppace_qopt {
	__u32 version;		/* XCPPACE_VERSION */
	__u32 nclasses;		/* classes 0..nclasses-1, 1..XCPPACE_MAX_CLASSES */
	__u32 limit;		/* packets the qdisc may hold, 1..XCPPACE_LIMIT_MAX; above: dropped at enqueue */
	__u32 flags;		/* 0 */
	__u64 ps_per_byte;	/* the link's rate, ps per byte, 1..XCPPACE_PS_PER_BYTE_MAX */
	__u64 prop_ns;		/* the link's propagation, ns, 0..1 h */
	__u64 max_wait_ns;	/* wait bound at admission (estimate), ns, 0..1 h */
	__u64 lookahead_ns;	/* M_p: instant t is decided once real time passes t + M_p, 1..1 h */
	__u64 epoch_ns;		/* E: interval k = [E + k d_e, E + (k+1) d_e) (CLOCK_MONOTONIC ns) */
	__u64 interval_ns;	/* d_e, 1..1 h */
	__u64 rate_bps[XCPPACE_MAX_CLASSES];	/* initial rate per class, emulation bit/s, 0 = class unused;
						 * 0..XCPPACE_RATE_MAX, 0 from nclasses on */
};

/* One timed rate change: class `cls` paces at `rate_bps` from the instant `effective_ns`
 * on (applied before the arrivals and departures of that instant). */
struct tc_xcppace_rate {
	__u32 cls;		/* < nclasses */
	__u32 pad;		/* 0 */
	__u64 rate_bps;		/* emulation bit/s, 1..XCPPACE_RATE_MAX */
	__u64 effective_ns;	/* CLOCK_MONOTONIC ns */
};

/* The port's part of one interval of the ring. */
struct tc_xcppace_slot {
	__u64 interval;		/* k of this slot, ~0 = never used */
	__u64 bytes;		/* frame bytes of the packets whose departure onto the link lies in k */
	__u64 packets;		/* those packets */
	__u64 qmin_ns;		/* smallest link backlog (its departure - eligibility, ns) found by a packet
				 * the buckets released in k, ~0 = none (XCP's persistent queue) */
	__u64 offered_bytes;	/* frame bytes of the packets the buckets released (made eligible) in k:
				 * the link's input (XCP's input traffic) */
	__u64 offered_packets;	/* those packets */
};

/* A class's part of one interval of the ring (its own interval tag). */
struct tc_xcppace_class_slot {
	__u64 interval;		/* ~0 = never used */
	__u64 bytes;		/* frame bytes of its packets departing in k */
	__u64 packets;
};

struct tc_xcppace_xstats {
	__u64 arrivals;		/* packets admitted or dropped by the wait bound (all classes) */
	__u64 drops;		/* of which dropped by the wait bound */
	__u64 released;		/* departures decided (onto the link) */
	__u64 released_bytes;	/* their frame bytes */
	__u64 late;		/* packets that reached the qdisc after their instant (ready) was decided */
	__u64 late_rates;	/* rate changes that reached it after their instant was decided */
	__u64 max_rate_late_ns;	/* largest (real time - (effective + M_p)) of a late rate change */
	__u64 decided_after_stamp;	/* departures decided after their stamp: left late */
	__u64 unmodelled;	/* dropped: no OPTSW_HOLD, class >= nclasses, no monotonic stamp, or class unused (rate 0) */
	__u64 overlimit;	/* dropped at enqueue: limit reached */
	__u64 max_enqueue_late_ns;	/* largest (real time at enqueue - intended arrival) */
	__u64 max_decision_lag_ns;	/* largest (real time - (t + M_p)) at which an instant t was decided */
	__u64 last_ns;		/* the latest instant decided */
	__u64 link_free_ns;	/* the instant the link is free */
	__u64 before_epoch;	/* departures before E (in no interval) */
	__u64 rate_changes;	/* rate changes applied */
	__u64 pending;		/* packets whose arrival instant is not decided yet */
	__u64 pending_rates;	/* rate changes waiting for their instant */
	__u64 queued;		/* packets in the classes (bucket or waiting for the link) */
	__u64 ready;		/* departures decided, held until their stamps */
	__u64 late_log2[XCPPACE_LATE_BUCKETS];	/* enqueue lateness: bucket k [2^k, 2^(k+1)) ns, 0 also 0 */
	struct tc_xcppace_slot slot[XCPPACE_SLOTS];
};

struct tc_xcppace_class_xstats {
	__u64 arrivals;		/* admitted or dropped by the wait bound */
	__u64 drops;		/* dropped by the wait bound */
	__u64 released;		/* departures decided */
	__u64 released_bytes;
	__u64 rate_bps;		/* rate in force (emulation bit/s; 0 = unused) */
	__u64 queued_bytes;	/* frame bytes in the class (bucket and waiting for the link) */
	__u64 queued_packets;
	__u64 eligible_packets;	/* of which released by the bucket, waiting for the link */
	__u64 next_eligible_ns;	/* the bucket head's eligibility, ~0 = none */
	struct tc_xcppace_class_slot slot[XCPPACE_SLOTS];
};

#endif /* XCPPACE_H */
