// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * cwndtrace: live TCP state of sockets (cwnd, ssthresh, srtt, RTO, packets in flight,
 * congestion state, reordering degree) at four points of the stack, into a ring buffer
 * that the loader (cwndtrace.c) streams to testbed/cc/trace.py:
 *
 *   raw_tp/tcp_probe           every segment a socket receives in the established
 *                              state, before it is processed       -> CWND_EV_ACK
 *   raw_tp/tcp_retransmit_skb  every retransmission, after the congestion state was
 *                              updated                             -> CWND_EV_RETRANS
 *   kprobe/tcp_retransmit_timer  an RTO fires, state before the stack reacts
 *                                                                  -> CWND_EV_RTO
 *   kprobe/tcp_rearm_rto       the retransmission timer is (re)armed with icsk_rto
 *                              (loaded only when asked: tb_arm)    -> CWND_EV_ARM
 *
 * The raw tracepoints hand over the socket itself, so the RTO and the packets in flight
 * are read too (the tracepoints' own fields lack them). All reads are CO-RE
 * (vmlinux.h from the build host's BTF; relocated against the running kernel's at load),
 * so one object serves the host's kernel and the guest's Debian 6.1. The timer probes are
 * kprobes (a kernel without the kprobe PMU or tracefs, as this project's build host,
 * refuses to attach them: the tracer then does not start; fentry was refused there too).
 *
 * Filters (rodata, set by the loader before load): tb_netns, the inode of a network
 * namespace (0: all); tb_port, a local or remote TCP port (0: all); tb_changes: an ACK
 * event only when cwnd, ssthresh, the congestion state or the reordering degree differ
 * from the socket's previous one. Events the ring buffer has no room for are counted in
 * cwndtrace_lost (one slot per CPU).
 *
 * The rodata names carry a tb_ prefix: vmlinux.h has clashing plain names.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cwndtrace.h"

#ifndef AF_INET
#define AF_INET 2
#endif

const volatile __u32 tb_netns = 0;
const volatile __u16 tb_port = 0;
const volatile __u8 tb_changes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CWNDTRACE_RINGBUF_BYTES);
} cwndtrace_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cwndtrace_lost SEC(".maps");

/* The state a socket's previous ACK event carried (tb_changes) */
struct cwnd_seen {
	__u32 cwnd;
	__u32 ssthresh;
	__u32 reordering;
	__u8 ca_state;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CWNDTRACE_SEEN_MAX);
	__type(key, __u64);
	__type(value, struct cwnd_seen);
} cwndtrace_seen SEC(".maps");

/* Never written or read: they put struct cwnd_event and enum cwnd_event_type into the
 * object's BTF (a BPF object's BTF describes no local variable), where
 * tests/unit/test_btf_layout.py checks testbed/cc/trace.py's copy of the layout. */
struct cwnd_event cwndtrace_layout;
enum cwnd_event_type cwndtrace_types;

static __always_inline int emit(struct sock *sk, struct sk_buff *skb, __u8 type)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct cwnd_event e = {};
	__u16 sport, dport;
	__u32 netns;

	if (BPF_CORE_READ(sk, __sk_common.skc_family) != AF_INET)
		return 0;
	sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (tb_port && sport != tb_port && dport != tb_port)
		return 0;
	netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	if (tb_netns && netns != tb_netns)
		return 0;
	e.ts_ns = bpf_ktime_get_ns();
	e.netns = netns;
	e.saddr = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
	e.daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	e.sport = sport;
	e.dport = dport;
	e.type = type;
	e.ca_state = (__u8)BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	if (skb)
		e.data_len = (__u16)BPF_CORE_READ(skb, len);
	e.cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e.ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	e.srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	e.rto_jiffies = BPF_CORE_READ(icsk, icsk_rto);
	e.packets_out = BPF_CORE_READ(tp, packets_out);
	e.sacked_out = BPF_CORE_READ(tp, sacked_out);
	e.lost_out = BPF_CORE_READ(tp, lost_out);
	e.retrans_out = BPF_CORE_READ(tp, retrans_out);
	e.mss = BPF_CORE_READ(tp, mss_cache);
	e.snd_una = BPF_CORE_READ(tp, snd_una);
	e.snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	e.total_retrans = BPF_CORE_READ(tp, total_retrans);
	e.reordering = BPF_CORE_READ(tp, reordering);
	e.state = BPF_CORE_READ(sk, __sk_common.skc_state);
	if (tb_changes && type == CWND_EV_ACK) {
		__u64 key = (__u64)sk;
		struct cwnd_seen now = {.cwnd = e.cwnd, .ssthresh = e.ssthresh,
					.reordering = e.reordering, .ca_state = e.ca_state};
		struct cwnd_seen *old = bpf_map_lookup_elem(&cwndtrace_seen, &key);

		if (old && old->cwnd == now.cwnd && old->ssthresh == now.ssthresh &&
		    old->reordering == now.reordering && old->ca_state == now.ca_state)
			return 0;
		bpf_map_update_elem(&cwndtrace_seen, &key, &now, BPF_ANY);
	}
	if (bpf_ringbuf_output(&cwndtrace_events, &e, sizeof(e), 0)) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&cwndtrace_lost, &zero);

		if (lost)
			*lost += 1;
	}
	return 0;
}

SEC("raw_tp/tcp_probe")
int BPF_PROG(cwnd_ack, struct sock *sk, struct sk_buff *skb)
{
	return emit(sk, skb, CWND_EV_ACK);
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(cwnd_retrans, struct sock *sk, struct sk_buff *skb)
{
	return emit(sk, NULL, CWND_EV_RETRANS);
}

SEC("kprobe/tcp_retransmit_timer")
int BPF_KPROBE(cwnd_rto, struct sock *sk)
{
	return emit(sk, NULL, CWND_EV_RTO);
}

SEC("kprobe/tcp_rearm_rto")
int BPF_KPROBE(cwnd_arm, struct sock *sk)
{
	return emit(sk, NULL, CWND_EV_ARM);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
