/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * sch_voq: the interface shared by the kernel module (kernel/sch_voq.c) and user space
 * (a Python packer to come, as testbed/optical/obsburst.py for obsburst; the algorithm's
 * Python mirror is testbed/optical/ibsched.py; design in docs/ib-holding.md).
 *
 *  - struct tc_voq_qopt     the TCA_OPTIONS payload (netlink, host byte order)
 *  - struct tc_voq_xstats   TCA_STATS_APP of the qdisc dump (host byte order): this
 *                           output's and the node's counters and this output's XCP ring
 *                           (docs/xcp-edge.md, "IB nodes": the persistent-queue samples
 *                           the BPF accumulators cannot take for held packets)
 *
 * Every struct is made of naturally aligned fixed-size members (no padding); a change
 * of any layout bumps VOQ_VERSION (the module refuses other versions).
 */
#ifndef VOQ_H
#define VOQ_H

#include <linux/types.h>

#define VOQ_VERSION		3	/* 2: XCP interval ring (xcp_* options, xstats.xcp); 3: hybrid (n_e) */
#define VOQ_MAX_PORTS		64	/* ports of one node (OPTSW_MAX_PORTS) */
#define VOQ_LATE_BUCKETS	48	/* enqueue-lateness histogram: bucket k = [2^k, 2^(k+1)) ns */
#define VOQ_XCP_SLOTS		4	/* XCP ring per output: interval k in slot k & (VOQ_XCP_SLOTS - 1) */
#define VOQ_XCP_NONE		0xffffffffffffffffULL	/* slot interval never used / qmin_ns no arrival */

/* scheduler */
#define VOQ_SCHED_RR		0	/* round-robin per output, outputs in index order */
#define VOQ_SCHED_ISLIP		1	/* iSLIP-like request-grant-accept, iterated */
#define VOQ_SCHED_HYBRID	2	/* not input-buffered: E1's hybrid switch (n_e buffer input/output
					 * ports, a FIFO per output; docs/hybrid-holding.md) */
/* how an input's B bytes are split among its VOQs */
#define VOQ_SPLIT_SHARED	0	/* the input's VOQs share B */
#define VOQ_SPLIT_STATIC	1	/* each VOQ has B / N */
/* flags */
#define VOQ_F_PEER_HOST		0x1	/* this port's peer is an end host: the stamp adds tau */

/* What the optical switch's programs leave in skb->cb (__sk_buff.cb[], i.e.
 * qdisc_skb_cb(skb)->data as u32 words) for a held packet: ebpf/optswitch.bpf.c writes
 * cb[1] = input port at ingress and cb[0] = its decision at egress, OPTSW_HOLD for a
 * packet the port's holding qdisc releases (ebpf/optswitch.h). */
#define VOQ_CB_DECISION		0
#define VOQ_CB_IN_PORT		1
#define VOQ_OPTSW_HOLD		4	/* OPTSW_HOLD */
#define VOQ_ETH_HLEN		14	/* buffers count IP bytes: frame bytes less this */

/* bounds (checked by the module) */
#define VOQ_LIMIT_MAX		10000000U		/* packets held by one qdisc */
#define VOQ_BUFFER_MAX		1000000000ULL		/* B, bytes (architectures.MAX_RAM_BYTES) */
#define VOQ_TIME_MAX		3600000000000ULL	/* lookahead, propagation: 1 h */
#define VOQ_PS_PER_BYTE_MAX	8000000000ULL		/* 1 kbit/s */

struct tc_voq_qopt {
	__u32 version;		/* VOQ_VERSION */
	__u32 node_id;		/* the fabric's node id: qdiscs of one namespace naming it share a node */
	__u32 n_ports;		/* N, 1..VOQ_MAX_PORTS (node-wide) */
	__u32 port;		/* this output's port index, < n_ports, unique in the node */
	__u32 scheduler;	/* VOQ_SCHED_* (node-wide) */
	__u32 voq_split;	/* VOQ_SPLIT_* (node-wide) */
	__u32 flags;		/* VOQ_F_* (this port) */
	__u32 limit;		/* packets this qdisc may hold, 1..VOQ_LIMIT_MAX; above: dropped at enqueue */
	__u64 buffer_bytes;	/* B per input, IP bytes, 0..VOQ_BUFFER_MAX (node-wide) */
	__u64 lookahead_ns;	/* M: instant t is decided once real time passes t + M, 1..1 h (node-wide) */
	__u64 ps_per_byte;	/* this output's rate, ps per byte, 1..VOQ_PS_PER_BYTE_MAX */
	__u64 prop_ns;		/* this output's link propagation, ns, 0..1 h */
	__u64 xcp_epoch_ns;	/* E of the XCP ring (CLOCK_MONOTONIC ns); 0 when xcp_interval_ns is 0 */
	__u64 xcp_interval_ns;	/* d_e, 1..1 h: XCP ring on, interval k = [E + k d_e, E + (k+1) d_e);
				 * 0: off (no slot is ever written). These two (only) may change
				 * on a live qdisc (RTM_NEWQDISC change): the ring then restarts. */
	__u32 n_e;		/* hybrid: buffer input = buffer output ports, 0..n_ports; else 0 (node-wide) */
	__u32 reserved;		/* 0 */
};

/* The hybrid scheduler (VOQ_SCHED_HYBRID) takes no buffer_bytes (the paper's buffer is
 * unlimited: 0), voq_split 0 and no XCP ring; its byte counts (in_bytes, in_max_bytes,
 * max_node_bytes) are *frame* bytes waiting from arrival until the head leaves, as E1's
 * port model counts its occupancy; rr and islip count IP bytes (E5's paper). Its
 * `buffered` are the packets that took a buffer input (OE), `dropped` those that found
 * none, `in_dropped` per input port the same drops by where they came in. */

/* One port of the node: its output (this qdisc) and its input (the same device's
 * ingress, input port `port`). */
struct tc_voq_port_stats {
	__u64 arrivals;		/* packets for this output decided (cut + buffered + dropped) */
	__u64 cut;		/* left at their arrival */
	__u64 buffered;		/* joined a VOQ for this output */
	__u64 dropped;		/* no room in their input's buffer */
	__u64 late;		/* reached the qdisc after their instant had been decided */
	__u64 decided_after_stamp;	/* forwarded, but decided after their stamp: left late */
	__u64 released;		/* packets dequeued */
	__u64 released_bytes;	/* their qdisc_pkt_len */
	__u64 unmodelled;	/* dropped at enqueue: no OPTSW_HOLD decision, input port or monotonic stamp */
	__u64 overlimit;	/* dropped at enqueue: limit reached */
	__u64 in_dropped;	/* packets that came in on this port dropped (input buffer full) */
	__u64 in_max_bytes;	/* most IP bytes waiting in this input's buffer at once */
	__u64 in_bytes;		/* IP bytes waiting in it now */
};

struct tc_voq_node_stats {
	__u64 arrivals;		/* sums over the node's outputs */
	__u64 cut;
	__u64 buffered;
	__u64 dropped;
	__u64 late;
	__u64 decided_after_stamp;
	__u64 max_enqueue_late_ns;	/* largest (real time at enqueue - intended arrival) */
	__u64 max_decision_lag_ns;	/* largest (real time - (t + M)) at which an instant t was decided */
	__u64 max_node_bytes;	/* most IP bytes waiting in the node's input buffers at once */
	__u64 last_ns;		/* the latest instant decided (CLOCK_MONOTONIC ns) */
	__u64 waiting;		/* packets in VOQs now (hybrid: converting or in the output FIFOs) */
	__u64 pending;		/* packets whose arrival instant is not decided yet */
	__u64 members;		/* qdiscs sharing the node now */
	__u64 late_log2[VOQ_LATE_BUCKETS];	/* enqueue lateness: bucket k [2^k, 2^(k+1)) ns, 0 also 0 */
};

/* One interval of this output's XCP ring, laid out as the BPF accumulators' struct
 * optsw_xcp_slot (ebpf/optswitch.h). Counted at every decision of an arrival for this
 * output (cut, buffered or dropped, late ones at the instant they are decided) whose
 * instant t >= E, in interval k = (t - E) / d_e; a slot found holding another interval
 * (or no packet) is reset to k first. The backlog an arrival finds is what output o has
 * still to send, in ns of its link at its rate: (out_free[o] - t)^+ (the rest of the
 * packet being sent to o) + the sum of tau of the packets in VOQ(*, o) (every input),
 * taken before the arrival's own decision: the BPF's (out_free - a)^+ of an output
 * buffer, for an input-buffered node. */
struct tc_voq_xcp_slot {
	__u64 interval;		/* k of this slot, VOQ_XCP_NONE = never used */
	__u64 bytes;		/* frame bytes of the arrivals decided for this output in k (dropped included) */
	__u64 qmin_ns;		/* smallest backlog found by one of them, ns; VOQ_XCP_NONE = none */
	__u32 packets;		/* arrivals decided for this output in k */
	__u32 drops;		/* of which dropped */
};

struct tc_voq_xstats {
	struct tc_voq_port_stats port;
	struct tc_voq_node_stats node;
	struct tc_voq_xcp_slot xcp[VOQ_XCP_SLOTS];	/* this output's XCP ring, slot k & 3 */
};

#endif /* VOQ_H */
