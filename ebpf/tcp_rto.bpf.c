// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * tcp_rto: per-host TCP timers, maximum window and pacing for the congestion-control
 * profiles.
 *
 * A sock_ops program attached (with BPF_F_ALLOW_MULTI, through a bpf_link) to a
 * cgroup v2 that holds the emulation's processes. It acts only on sockets of ONE
 * network namespace, the host's, identified by its netns cookie (set by the
 * loader before load, tb_netns_cookie): cgroups are not network namespaces, so a
 * program per host with a cookie filter is how one host's settings stay its own.
 *
 *   BPF_SOCK_OPS_TIMEOUT_INIT       reply = tb_init_rto_jiffies (initial RTO of
 *                                   SYN and SYN-ACK; the kernel reads jiffies and
 *                                   clamps to TCP_RTO_MAX). Our congestion modules
 *                                   ask again from their .init (tcp_timeout_init(),
 *                                   kernel/tcp_paper_init.h) to time the first
 *                                   data segment with the same initial RTO.
 *   TCP_CONNECT / ACTIVE_ESTABLISHED / PASSIVE_ESTABLISHED
 *                                   bpf_setsockopt(TCP_BPF_RTO_MIN, tb_rto_min_us)
 *                                   bpf_setsockopt(TCP_BPF_DELACK_MAX, tb_delack_max_us)
 *   ACTIVE_ESTABLISHED / PASSIVE_ESTABLISHED
 *                                   bpf_setsockopt(TCP_BPF_SNDCWND_CLAMP, tb_sndcwnd_clamp):
 *                                   snd_cwnd_clamp = the maximum congestion window
 *                                   Wm in segments (cwnd never exceeds it: slow start,
 *                                   congestion avoidance, undo and the initial window
 *                                   all min() with it). The 6.1 kernel also sets
 *                                   snd_ssthresh = Wm there (net/core/filter.c), so the
 *                                   first slow start ends at Wm, where the clamp holds
 *                                   cwnd anyway. These callbacks run in
 *                                   tcp_init_transfer() after tcp_init_metrics() (which
 *                                   would apply a route `cwnd lock`, skipped with
 *                                   tcp_no_metrics_save) and before the congestion
 *                                   module's .init and the first data segment.
 *   ACTIVE_ESTABLISHED / PASSIVE_ESTABLISHED, when tb_pacing
 *                                   bpf_setsockopt(SOL_SOCKET, SO_MAX_PACING_RATE,
 *                                   TCP_RTO_MAX_PACING_RATE): any value but ~0U moves
 *                                   sk_pacing_status from NONE to NEEDED (6.1
 *                                   net/core/sock.c sk_setsockopt), which turns TCP's
 *                                   internal pacing on: each data skb is stamped with
 *                                   its earliest departure (EDT, tcp_wstamp_ns advanced
 *                                   by len / sk_pacing_rate in tcp_update_skb_after_send)
 *                                   and tcp_write_xmit holds the next one on an hrtimer
 *                                   until then (tcp_pacing_check); sk_pacing_rate stays
 *                                   the kernel's ratio x cwnd x mss / srtt
 *                                   (tcp_update_pacing_rate), the cap being far above
 *                                   it. No qdisc is needed (fq would set
 *                                   SK_PACING_FQ and pace instead). Not at TCP_CONNECT:
 *                                   these callbacks already come before the first data
 *                                   segment (and the kernel paces none of the first 10
 *                                   data segments anyway), and a passive socket has no
 *                                   earlier full socket (its SYN-ACK is sent from a
 *                                   request socket, where bpf_setsockopt refuses).
 * A zero rodata value leaves that setting at the kernel default. Always returns 1.
 *
 * The rodata names carry a tb_ prefix: vmlinux.h has clashing plain names.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "tcp_rto.h"

#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#ifndef SOL_SOCKET
#define SOL_SOCKET 1
#endif
#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif

const volatile __u64 tb_netns_cookie = 0;
const volatile __u32 tb_init_rto_jiffies = 0;
const volatile __u32 tb_rto_min_us = 0;
const volatile __u32 tb_delack_max_us = 0;
const volatile __u32 tb_sndcwnd_clamp = 0;
const volatile __u32 tb_pacing = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TCP_RTO_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tcp_rto_stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&tcp_rto_stats, &stat);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline void set_opt(struct bpf_sock_ops *skops, int level, int opt, __u32 value,
				    __u32 stat)
{
	int v = (int)value;

	if (!value)
		return;
	if (bpf_setsockopt(skops, level, opt, &v, sizeof(v)))
		count(TCP_RTO_STAT_SETSOCKOPT_ERR);
	else
		count(stat);
}

SEC("sockops")
int tcp_rto(struct bpf_sock_ops *skops)
{
	if (bpf_get_netns_cookie(skops) != tb_netns_cookie)
		return 1;

	switch (skops->op) {
	case BPF_SOCK_OPS_TIMEOUT_INIT:
		if (tb_init_rto_jiffies) {
			skops->reply = tb_init_rto_jiffies;
			count(TCP_RTO_STAT_TIMEOUT_INIT);
		}
		break;
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		set_opt(skops, SOL_TCP, TCP_BPF_RTO_MIN, tb_rto_min_us, TCP_RTO_STAT_RTO_MIN);
		set_opt(skops, SOL_TCP, TCP_BPF_DELACK_MAX, tb_delack_max_us, TCP_RTO_STAT_DELACK_MAX);
		if (skops->op == BPF_SOCK_OPS_TCP_CONNECT_CB)
			break;
		set_opt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, tb_sndcwnd_clamp,
			TCP_RTO_STAT_SNDCWND_CLAMP);
		if (tb_pacing)
			set_opt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, TCP_RTO_MAX_PACING_RATE,
				TCP_RTO_STAT_PACING);
		break;
	default:
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
