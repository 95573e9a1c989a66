/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared connection start of the paper's TCP variants (tcp_saw, tcp_sawl, tcp_sack,
 * tcp_msack): the first data segment is timed with the paper's initial RTO.
 *
 * Paper: A. Minakhmetov, C. Ware, L. Iannone, "TCP Congestion Control in Datacenter
 * Optical Packet Network on Hybrid Switches", section III: "an RTO T_1 of 1 ms is
 * taken as the initial value" (SAW, eq. 1-2); "As in TCP mAIMD, the initial RTO is
 * reduced to 1 ms" (SACK, mSACK), or the conventional 1 s for electronic switches.
 *
 * Why a module must do it: Linux takes an RTT sample from the handshake (the 74 B
 * SYN / SYN-ACK) and sets icsk_rto from it (about 3 x the SYN's RTT), so the first
 * 9 kB data segment, whose RTT is several times larger, would be timed with the
 * SYN's estimate instead of T_1. The congestion module's .init runs from
 * tcp_init_transfer() -> tcp_init_congestion_control(), after that sample was taken
 * and before the first data segment is sent (tcp_finish_connect() on the active side,
 * tcp_rcv_state_process(TCP_SYN_RECV) on the passive side), so it can put things
 * back as the paper (and RFC 6298 2.1-2.2) has them:
 *
 *  - icsk_rto = tcp_timeout_init(sk): the answer of the cgroup sock_ops program to
 *    BPF_SOCK_OPS_TIMEOUT_INIT, i.e. the host profile's initial RTO in jiffies (paper
 *    time x D, rounded up; TCP_TIMEOUT_INIT = 1 s without a program), clamped by the
 *    kernel to TCP_RTO_MAX (120 s). The first data segment's timer is armed with it
 *    (tcp_event_new_data_sent() -> tcp_rearm_rto() reads icsk_rto).
 *  - the handshake's RTT sample is forgotten (srtt_us = 0), so the first ACK of data
 *    initialises the kernel's estimator (SRTT = R, RTTVAR = R/2: RFC 6298 2.2). The
 *    SYN-ACK is therefore not an RTT sample of the paper's eq. (2) either.
 *
 * Not a module by itself (kernel/Makefile builds only tcp_*.c).
 */
#ifndef TCP_PAPER_INIT_H
#define TCP_PAPER_INIT_H

#include <linux/jiffies.h>
#include <net/tcp.h>

/*
 * Arm the paper's initial RTO for the first data segment and drop the handshake's
 * RTT sample. Returns the initial RTO in jiffies. Call from the module's .init only
 * (the socket is locked; tcp_init_transfer() runs it once per connection). A socket
 * that switches to the module after it sent data (setsockopt TCP_CONGESTION on an
 * established connection re-runs .init) keeps its estimator: the current RTO is
 * returned and nothing is changed.
 */
static inline u32 tcp_paper_init_rto(struct sock *sk)
{
	struct inet_connection_sock *icsk = inet_csk(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	u32 rto;

	if (tp->data_segs_out)
		return icsk->icsk_rto;
	rto = max_t(u32, tcp_timeout_init(sk), 1);	/* sock_ops TIMEOUT_INIT, <= TCP_RTO_MAX */
	/* As tcp_init_sock() leaves them before any sample: no SRTT, RTTVAR = RTO. */
	tp->srtt_us = 0;
	tp->mdev_us = jiffies_to_usecs(rto);
	tp->mdev_max_us = tp->mdev_us;
	tp->rttvar_us = tp->mdev_us;
	icsk->icsk_rto = rto;
	icsk->icsk_backoff = 0;
	return rto;
}

#endif /* TCP_PAPER_INIT_H */
