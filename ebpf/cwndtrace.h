/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * cwndtrace: shared definitions of the live TCP state tracer (cwndtrace.bpf.c), its
 * loader (cwndtrace.c) and its reader (testbed/cc/trace.py, which checks this layout
 * against the object's BTF: tests/unit/test_btf_layout.py).
 */
#ifndef CWNDTRACE_H
#define CWNDTRACE_H

/* What a record is (struct cwnd_event.type). 0-3 come from the kernel; the loader adds
 * READY (first record: every program attached), LOST (whenever the number of events the
 * ring buffer had no room for has grown: ts_ns holds that number, since the start) and
 * END (last record of a clean stop: ts_ns holds the final number). */
enum cwnd_event_type {
	CWND_EV_ACK = 0,	/* tcp:tcp_probe: a segment received in the established state,
				 * state before it is processed */
	CWND_EV_RETRANS = 1,	/* tcp:tcp_retransmit_skb: after the congestion state changed */
	CWND_EV_RTO = 2,	/* entry of tcp_retransmit_timer: an RTO fires */
	CWND_EV_ARM = 3,	/* entry of tcp_rearm_rto: the retransmission timer is (re)armed */
	CWND_EV_LOST = 0xFD,
	CWND_EV_READY = 0xFE,
	CWND_EV_END = 0xFF,
};

/* One observation of a socket. Host byte order; addresses as the kernel holds them
 * (network order in a __u32), ports host order. 88 bytes (8-byte aligned). */
struct cwnd_event {
	__u64 ts_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 netns;		/* sk->__sk_common.skc_net->ns.inum */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 type;		/* enum cwnd_event_type */
	__u8 ca_state;		/* icsk_ca_state: 0 open .. 4 loss */
	__u16 data_len;		/* the tracepoint's skb->len (ack events), else 0 */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 srtt_us;		/* tp->srtt_us >> 3 */
	__u32 rto_jiffies;	/* icsk_rto */
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u32 mss;		/* tp->mss_cache */
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 total_retrans;
	__u32 reordering;	/* tp->reordering (segments) */
	__u8 state;		/* skc_state: 1 established .. 11 closing */
	__u8 pad[7];
};

/* The ring buffer's size (bytes, a power of two of pages): ~95 000 events */
#define CWNDTRACE_RINGBUF_BYTES (8u << 20)
/* Sockets whose last state "changes only" mode remembers */
#define CWNDTRACE_SEEN_MAX 4096

#endif /* CWNDTRACE_H */
