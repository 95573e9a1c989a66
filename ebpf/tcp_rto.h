/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * tcp_rto: shared definitions of the per-host TCP timer sock_ops program
 * (tcp_rto.bpf.c) and its loader (sockops_load.c).
 */
#ifndef TCP_RTO_H
#define TCP_RTO_H

/* Indexes of the `tcp_rto_stats` array map: how often each action was taken. */
enum tcp_rto_stat {
	TCP_RTO_STAT_TIMEOUT_INIT = 0,	/* initial RTO answered (SYN / SYN-ACK, and the
					 * first data segment via our modules' .init) */
	TCP_RTO_STAT_RTO_MIN = 1,	/* TCP_BPF_RTO_MIN set on a socket */
	TCP_RTO_STAT_DELACK_MAX = 2,	/* TCP_BPF_DELACK_MAX set on a socket */
	TCP_RTO_STAT_SETSOCKOPT_ERR = 3,	/* bpf_setsockopt() refused a value */
	TCP_RTO_STAT_SNDCWND_CLAMP = 4,	/* TCP_BPF_SNDCWND_CLAMP set on a socket */
	TCP_RTO_STAT_PACING = 5,	/* SO_MAX_PACING_RATE set: TCP's internal pacing on */
	TCP_RTO_STAT_MAX = 6,
};

/* Largest values the 6.1 kernel accepts (TCP_RTO_MIN, TCP_DELACK_MAX: 200 ms). */
#define TCP_RTO_MIN_US_MAX	200000
#define TCP_DELACK_MAX_US_MAX	200000
/* Largest maximum congestion window (segments) the loader accepts; the profile option
 * max_window has the same bound (testbed/cc/profiles.py MAX_WINDOW_BOUNDS). */
#define TCP_SNDCWND_CLAMP_MAX	65535
/* SO_MAX_PACING_RATE (bytes/s) the program sets to turn TCP's internal pacing on: the
 * largest finite value bpf_setsockopt() can pass (an int; ~0U means "unlimited" and would
 * leave pacing off), 4 294 967 294 B/s = 34.4 Gbit/s, above every emulated link, so the
 * kernel's own rate (ratio x cwnd x mss / srtt) is never capped by it. The profile
 * records it (testbed/cc/profiles.py MAX_PACING_RATE_BYTES_PER_S). */
#define TCP_RTO_MAX_PACING_RATE	0xFFFFFFFEU

#endif /* TCP_RTO_H */
